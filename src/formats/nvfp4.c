/*
 * nvfp4.c - NVFP4 elements, scales, row dequant/quantize and the checkpoint
 * rules (include/lynn/nvfp4.h; docs/reference weight-formats.md §2).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/nvfp4.h"

/* ===== E2M1 ===== */

static const float e2m1_grid[8] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f };

float lynn_e2m1_to_f32(uint8_t nibble)
{
	float v = e2m1_grid[nibble & 7];
	return (nibble & 8) ? -v : v;
}

uint8_t lynn_f32_to_e2m1(float x)
{
	uint8_t sign = signbit(x) ? 8 : 0;
	float a = fabsf(x);
	uint8_t i;

	if (isnan(x))
		return 0;
	/* Midpoints between grid points; at a tie take the even code (even
	 * mantissa bit), which is the lower index for odd-lower pairs. */
	if (a <= 0.25f)
		i = 0;               /* tie 0.25 -> 0 (code 0 even) */
	else if (a < 0.75f)
		i = 1;
	else if (a <= 1.25f)
		i = 2;               /* 0.75 -> 1, 1.25 -> 1 */
	else if (a < 1.75f)
		i = 3;
	else if (a <= 2.5f)
		i = 4;               /* 1.75 -> 2, 2.5 -> 2 */
	else if (a < 3.5f)
		i = 5;
	else if (a <= 5.0f)
		i = 6;               /* 3.5 -> 4, 5 -> 4 */
	else
		i = 7;               /* > 5 -> 6 (saturating) */
	return sign | i;
}

/* ===== FP8 E4M3 (fn): bias 7, no Inf, 0x7f/0xff NaN, max 448 =====
 * Decoding is st.h's lynn_e4m3_to_f32 (src/formats/dtype.c). */

uint8_t lynn_f32_to_e4m3(float x)
{
	uint8_t sign = signbit(x) ? 0x80 : 0;
	float a = fabsf(x);
	int lo = 0, hi = 0x7e;

	if (isnan(x))
		return 0x7f;
	if (a >= LYNN_E4M3_MAX)
		return sign | 0x7e;
	/* Codes 0..0x7e are monotonic in value: binary search for the last code
	 * whose value is <= a, then round between it and the next one. */
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (lynn_e4m3_to_f32((uint8_t)mid) <= a)
			lo = mid;
		else
			hi = mid - 1;
	}
	if (lo < 0x7e) {
		float v0 = lynn_e4m3_to_f32((uint8_t)lo);
		float v1 = lynn_e4m3_to_f32((uint8_t)(lo + 1));
		/* The midpoint of two adjacent E4M3 values is exact in f32. */
		float mid = v0 + (v1 - v0) * 0.5f;
		if (a > mid || (a == mid && (lo & 1)))
			lo++;
	}
	return sign | (uint8_t)lo;
}

/* ===== conventions ===== */

const char *lynn_nvfp4_format_name(enum lynn_nvfp4_format f)
{
	switch (f) {
	case LYNN_NVFP4_CT: return "compressed-tensors";
	case LYNN_NVFP4_MODELOPT: return "modelopt";
	default: return "none";
	}
}

float lynn_nvfp4_tensor_mult(enum lynn_nvfp4_format f, float stored)
{
	return f == LYNN_NVFP4_CT ? 1.0f / stored : stored;
}

float lynn_nvfp4_global_scale(enum lynn_nvfp4_format f, float amax)
{
	if (!(amax > 0.0f) || !isfinite(amax))
		return 1.0f;
	if (f == LYNN_NVFP4_CT) {
		float g = LYNN_E4M3_MAX * LYNN_E2M1_MAX / amax;
		return isfinite(g) ? g : 1.0f;
	}
	return amax / (LYNN_E4M3_MAX * LYNN_E2M1_MAX);
}

void lynn_nvfp4_dequant_row(enum lynn_nvfp4_format f, const uint8_t *packed,
			    const uint8_t *scales, float stored, int64_t k, float *out)
{
	for (int64_t b = 0; b < k / LYNN_NVFP4_BLOCK; b++) {
		float s = lynn_e4m3_to_f32(scales[b]);
		for (int j = 0; j < LYNN_NVFP4_BLOCK / 2; j++) {
			uint8_t byte = packed[b * 8 + j];
			float q0 = lynn_e2m1_to_f32(byte & 15), q1 = lynn_e2m1_to_f32(byte >> 4);
			float *o = out + b * LYNN_NVFP4_BLOCK + 2 * j;
			if (f == LYNN_NVFP4_CT) {
				o[0] = q0 * s / stored;
				o[1] = q1 * s / stored;
			} else {
				o[0] = q0 * s * stored;
				o[1] = q1 * s * stored;
			}
		}
	}
}

void lynn_nvfp4_quantize_row(enum lynn_nvfp4_format f, const float *x, int64_t k,
			     float stored, uint8_t *packed, uint8_t *scales)
{
	for (int64_t b = 0; b < k / LYNN_NVFP4_BLOCK; b++) {
		const float *xb = x + b * LYNN_NVFP4_BLOCK;
		float amax = 0.0f, want, s, eff;
		uint8_t sc;

		for (int j = 0; j < LYNN_NVFP4_BLOCK; j++)
			if (fabsf(xb[j]) > amax)
				amax = fabsf(xb[j]);
		if (f == LYNN_NVFP4_CT)
			want = stored * amax / LYNN_E2M1_MAX;
		else
			want = amax / (LYNN_E2M1_MAX * stored);
		if (!(want <= LYNN_E4M3_MAX))
			want = LYNN_E4M3_MAX;
		sc = lynn_f32_to_e4m3(want);
		if ((sc & 0x7f) == 0)
			sc = lynn_f32_to_e4m3(f == LYNN_NVFP4_CT ? 0.125f : 1.0f);
		scales[b] = sc;
		s = lynn_e4m3_to_f32(sc);
		eff = f == LYNN_NVFP4_CT ? s / stored : s * stored;
		for (int j = 0; j < LYNN_NVFP4_BLOCK / 2; j++) {
			float v0 = xb[2 * j], v1 = xb[2 * j + 1];
			uint8_t q0 = isfinite(v0) && eff > 0 ? lynn_f32_to_e2m1(v0 / eff) : 0;
			uint8_t q1 = isfinite(v1) && eff > 0 ? lynn_f32_to_e2m1(v1 / eff) : 0;
			packed[b * 8 + j] = (uint8_t)(q0 | (q1 << 4));
		}
	}
}

/* ===== checkpoint rules ===== */

static const struct lynn_nvfp4_suffixes ct_suffixes = {
	"weight_packed", "weight_scale", "weight_global_scale", "input_global_scale"
};
static const struct lynn_nvfp4_suffixes mo_suffixes = {
	"weight", "weight_scale", "weight_scale_2", "input_scale"
};

const struct lynn_nvfp4_suffixes *lynn_nvfp4_suffixes(enum lynn_nvfp4_format f)
{
	if (f == LYNN_NVFP4_CT)
		return &ct_suffixes;
	if (f == LYNN_NVFP4_MODELOPT)
		return &mo_suffixes;
	return NULL;
}

static bool ends_with_suffix(const char *name, const char *suffix, size_t *base_len)
{
	size_t n = strlen(name), s = strlen(suffix);
	if (n <= s + 1 || name[n - s - 1] != '.' || strcmp(name + n - s, suffix))
		return false;
	*base_len = n - s - 1;
	return true;
}

bool lynn_nvfp4_is_companion(enum lynn_nvfp4_format f, const char *name, size_t *base_len)
{
	const struct lynn_nvfp4_suffixes *sx = lynn_nvfp4_suffixes(f);
	size_t bl;
	if (!sx)
		return false;
	if (ends_with_suffix(name, sx->weight, &bl) || ends_with_suffix(name, sx->scale, &bl) ||
	    ends_with_suffix(name, sx->global, &bl) || ends_with_suffix(name, sx->input, &bl)) {
		if (base_len)
			*base_len = bl;
		return true;
	}
	return false;
}

enum lynn_nvfp4_format lynn_nvfp4_format_from_config(const char *quant_method,
						    const char *format,
						    const char *quant_algo)
{
	if (quant_method && !strcmp(quant_method, "compressed-tensors"))
		return format && !strcmp(format, "nvfp4-pack-quantized") ? LYNN_NVFP4_CT
									 : LYNN_NVFP4_NONE;
	if (quant_method && (!strcmp(quant_method, "modelopt") ||
			     !strcmp(quant_method, "modelopt_fp4")))
		return !quant_algo || strstr(quant_algo, "FP4") ? LYNN_NVFP4_MODELOPT
							      : LYNN_NVFP4_NONE;
	if (quant_algo && strstr(quant_algo, "FP4"))
		return LYNN_NVFP4_MODELOPT;
	return LYNN_NVFP4_NONE;
}

/* --- scan --- */

struct name_ix {
	const char *name;
	const struct lynn_tensor *t;
};

static int cmp_name_ix(const void *a, const void *b)
{
	return strcmp(((const struct name_ix *)a)->name, ((const struct name_ix *)b)->name);
}

static const struct lynn_tensor *lookup(const struct name_ix *ix, int64_t n, const char *base,
					size_t base_len, const char *suffix)
{
	char key[512];
	struct name_ix k, *hit;
	if (base_len + 1 + strlen(suffix) + 1 > sizeof key)
		return NULL;
	memcpy(key, base, base_len);
	key[base_len] = '.';
	strcpy(key + base_len + 1, suffix);
	k.name = key;
	hit = bsearch(&k, ix, (size_t)n, sizeof *ix, cmp_name_ix);
	return hit ? hit->t : NULL;
}

static void problem(struct lynn_nvfp4_scan *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void problem(struct lynn_nvfp4_scan *s, const char *fmt, ...)
{
	if (s->n_problems < 8) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(s->problems[s->n_problems], sizeof s->problems[0], fmt, ap);
		va_end(ap);
	}
	s->n_problems++;
}

/* Is a per-tensor scale shaped as one value (2-D linear) or one per expert? */
static bool scalar_shape(const struct lynn_tensor *t, int64_t n_experts)
{
	if (!n_experts)
		return t->n_elems == 1 && t->n_dims <= 1;
	return t->n_elems == n_experts && (t->n_dims == 1 || (t->n_dims == 2 && t->shape[1] == 1));
}

static void check_f32_scale(struct lynn_nvfp4_scan *s, const char *base,
			    const struct lynn_tensor *t, int64_t n_experts, bool check_data)
{
	if (t->dtype != LYNN_DTYPE_F32) {
		problem(s, "nvfp4: '%s': dtype %s, expected F32", t->name, lynn_dtype_name(t->dtype));
		return;
	}
	if (!scalar_shape(t, n_experts)) {
		problem(s, "nvfp4: '%s': %lld values, expected %lld", t->name,
			(long long)t->n_elems, (long long)(n_experts ? n_experts : 1));
		return;
	}
	if (!check_data)
		return;
	for (int64_t i = 0; i < t->n_elems; i++) {
		float v;
		memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
		if (!isfinite(v) || !(v > 0.0f)) {
			problem(s, "nvfp4: '%s': scale %g is not finite and > 0", t->name, (double)v);
			return;
		}
	}
	(void)base;
}

static void check_linear(struct lynn_nvfp4_scan *s, struct lynn_nvfp4_linear *L,
			 bool check_data)
{
	const struct lynn_tensor *w = L->weight, *sc = L->scale;
	int64_t e = 0, n, kp;

	if (w->dtype != LYNN_DTYPE_U8)
		problem(s, "nvfp4: '%s': dtype %s, expected U8", w->name, lynn_dtype_name(w->dtype));
	if (w->n_dims == 3)
		e = w->shape[0];
	else if (w->n_dims != 2) {
		problem(s, "nvfp4: '%s': %d dims, expected 2 or 3", w->name, w->n_dims);
		return;
	}
	n = w->shape[w->n_dims - 2];
	kp = w->shape[w->n_dims - 1];
	L->n_experts = e;
	L->n = n;
	L->k = kp * 2;
	if (L->k % LYNN_NVFP4_BLOCK)
		problem(s, "nvfp4: '%s': K %lld is not a multiple of 16", w->name, (long long)L->k);
	if (!sc) {
		problem(s, "nvfp4: '%s': missing block scale '%s.weight_scale'", L->base, L->base);
	} else {
		if (sc->dtype != LYNN_DTYPE_F8_E4M3)
			problem(s, "nvfp4: '%s': dtype %s, expected F8_E4M3", sc->name,
				lynn_dtype_name(sc->dtype));
		else if (sc->n_dims != w->n_dims || (e && sc->shape[0] != e) ||
			 sc->shape[sc->n_dims - 2] != n ||
			 sc->shape[sc->n_dims - 1] != L->k / LYNN_NVFP4_BLOCK)
			problem(s, "nvfp4: '%s': shape does not match %s [(E,)N,K/16] = [%lld,%lld]",
				sc->name, w->name, (long long)n, (long long)(L->k / LYNN_NVFP4_BLOCK));
		else if (check_data) {
			const uint8_t *p = sc->data;
			for (uint64_t i = 0; i < sc->nbytes; i++)
				if ((p[i] & 0x7f) == 0x7f) {
					problem(s, "nvfp4: '%s': block scale %llu is NaN (0x%02x)",
						sc->name, (unsigned long long)i, p[i]);
					break;
				}
		}
	}
	if (!L->global)
		problem(s, "nvfp4: '%s': missing tensor scale '%s.%s'", L->base, L->base,
			lynn_nvfp4_suffixes(s->format)->global);
	else
		check_f32_scale(s, L->base, L->global, e, check_data);
	if (L->input)
		check_f32_scale(s, L->base, L->input, e, check_data);
}

int lynn_nvfp4_scan(const struct lynn_tensor *const *ts, int64_t n, bool check_data,
		    struct lynn_nvfp4_scan *out, struct lynn_err *err)
{
	struct name_ix *ix = NULL;
	bool *used = NULL;
	int64_t n_ct = 0, n_mo = 0, cap = 0, n_in = 0;
	int rc = 0;
	const struct lynn_nvfp4_suffixes *sx;

	memset(out, 0, sizeof *out);
	ix = malloc(sizeof *ix * (size_t)(n ? n : 1));
	used = calloc((size_t)(n ? n : 1), sizeof *used);
	if (!ix || !used) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "nvfp4: out of memory");
		goto out;
	}
	for (int64_t i = 0; i < n; i++) {
		size_t bl;
		ix[i].name = ts[i]->name;
		ix[i].t = ts[i];
		if (ends_with_suffix(ts[i]->name, "weight_packed", &bl))
			n_ct++;
		else if (ends_with_suffix(ts[i]->name, "weight_scale_2", &bl))
			n_mo++;
	}
	qsort(ix, (size_t)n, sizeof *ix, cmp_name_ix);
	/* A ModelOpt checkpoint may also lack weight_scale_2 on a broken linear:
	 * a U8 `.weight` beside an F8 `.weight_scale` marks it too. */
	if (!n_mo)
		for (int64_t i = 0; i < n; i++) {
			size_t bl;
			if (ts[i]->dtype == LYNN_DTYPE_U8 &&
			    ends_with_suffix(ts[i]->name, "weight", &bl) &&
			    lookup(ix, n, ts[i]->name, bl, "weight_scale"))
				n_mo++;
		}
	if (n_ct && n_mo) {
		rc = lynn_errf(err, -LYNN_EFORMAT,
			       "nvfp4: checkpoint mixes compressed-tensors (%lld weight_packed) and "
			       "modelopt (%lld weight_scale_2) tensors",
			       (long long)n_ct, (long long)n_mo);
		goto out;
	}
	out->format = n_ct ? LYNN_NVFP4_CT : n_mo ? LYNN_NVFP4_MODELOPT : LYNN_NVFP4_NONE;
	sx = lynn_nvfp4_suffixes(out->format);
	for (int64_t i = 0; sx && i < n; i++) {
		const struct lynn_tensor *t = ix[i].t;
		struct lynn_nvfp4_linear *L;
		size_t bl;

		if (!ends_with_suffix(t->name, sx->weight, &bl))
			continue;
		if (out->format == LYNN_NVFP4_MODELOPT && t->dtype != LYNN_DTYPE_U8)
			continue; /* an unquantized `.weight` */
		if (out->n_linears == cap) {
			int64_t nc = cap ? 2 * cap : 64;
			void *p = realloc(out->linears, sizeof *out->linears * (size_t)nc);
			if (!p) {
				rc = lynn_errf(err, -LYNN_ENOMEM, "nvfp4: out of memory");
				goto out;
			}
			out->linears = p;
			cap = nc;
		}
		L = &out->linears[out->n_linears++];
		memset(L, 0, sizeof *L);
		if (bl >= sizeof L->base)
			bl = sizeof L->base - 1;
		memcpy(L->base, t->name, bl);
		L->weight = t;
		L->scale = lookup(ix, n, t->name, bl, sx->scale);
		L->global = lookup(ix, n, t->name, bl, sx->global);
		L->input = lookup(ix, n, t->name, bl, sx->input);
		check_linear(out, L, check_data);
		if (strstr(L->base, ".experts."))
			out->n_expert_linears += L->n_experts ? L->n_experts : 1;
		if (L->input)
			n_in++;
	}
	/* Orphan companions: a scale without its weight. */
	for (int64_t i = 0; sx && i < n; i++) {
		size_t bl;
		const char *nm = ix[i].name;
		if (ends_with_suffix(nm, sx->weight, &bl))
			continue;
		if ((ends_with_suffix(nm, sx->scale, &bl) || ends_with_suffix(nm, sx->global, &bl) ||
		     ends_with_suffix(nm, sx->input, &bl)) &&
		    !lookup(ix, n, nm, bl, sx->weight))
			problem(out, "nvfp4: '%s': companion tensor without its '%.*s.%s'", nm,
				(int)bl, nm, sx->weight);
	}
	for (int64_t l = 0; l < out->n_linears; l++) {
		const struct lynn_nvfp4_linear *L = &out->linears[l];
		const struct lynn_tensor *c[4] = { L->weight, L->scale, L->global, L->input };
		for (int j = 0; j < 4; j++)
			if (c[j]) {
				struct name_ix k = { c[j]->name, NULL }, *hit;
				hit = bsearch(&k, ix, (size_t)n, sizeof *ix, cmp_name_ix);
				if (hit)
					used[hit - ix] = true;
			}
	}
	for (int64_t i = 0; i < n; i++) {
		if (used[i]) {
			out->n_quant_tensors++;
			out->quant_bytes += ix[i].t->nbytes;
		} else {
			out->n_other_tensors++;
			out->other_bytes += ix[i].t->nbytes;
		}
	}
	out->w4a4 = out->n_linears > 0 && n_in == out->n_linears;
	if (n_in && n_in != out->n_linears)
		problem(out, "nvfp4: activation scales on %lld of %lld quantized linears (all or none)",
			(long long)n_in, (long long)out->n_linears);
out:
	free(ix);
	free(used);
	if (rc)
		lynn_nvfp4_scan_free(out);
	return rc;
}

void lynn_nvfp4_scan_free(struct lynn_nvfp4_scan *s)
{
	if (!s)
		return;
	free(s->linears);
	s->linears = NULL;
	s->n_linears = 0;
}
