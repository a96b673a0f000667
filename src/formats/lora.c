/*
 * lora.c - PEFT LoRA adapters: load, bind to a base checkpoint, merge
 * (include/lynn/lora.h).
 *
 * Reference: peft's LoraConfig / LoraLayer (scaling = lora_alpha / r, or
 * lora_alpha / sqrt(r) with use_rslora; rank_pattern and alpha_pattern keys
 * matched against the module path as `(.*\.)?(KEY)$`) and merge_and_unload
 * (W += transpose(B @ A, fan_in_fan_out) * scaling).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "lynn/lora.h"

#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/cpu.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/nvfp4.h"
#include "lynn/pool.h"

struct lynn_lora {
	char *dir;
	struct lynn_st_file *st;
	cJSON *config;
	int r_default;
	double alpha_default;
	bool rslora;
	bool fan_in_fan_out;
	struct lynn_lora_module *mods;
	int n_mods;
};

static const char PEFT_PREFIX[] = "base_model.model.";

/* ===== config ===== */

/* First key of `pattern` (a JSON object) that matches `module` the way peft
 * does: re.match(r"(.*\.)?(KEY)$", module). NULL when none. */
static const cJSON *pattern_match(const cJSON *pattern, const char *module)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, pattern) {
		struct lynn_buf re = LYNN_BUF_INIT;
		pcre2_code *code;
		pcre2_match_data *md;
		int errcode, rc;
		PCRE2_SIZE erroff;

		if (lynn_buf_printf(&re, "^(?:.*\\.)?(?:%s)$", it->string))
			continue;
		code = pcre2_compile((PCRE2_SPTR)re.data, re.len, PCRE2_UTF, &errcode, &erroff, NULL);
		lynn_buf_release(&re);
		if (!code)
			continue;
		md = pcre2_match_data_create_from_pattern(code, NULL);
		rc = md ? pcre2_match(code, (PCRE2_SPTR)module, strlen(module), 0, 0, md, NULL) : -1;
		pcre2_match_data_free(md);
		pcre2_code_free(code);
		if (rc >= 0)
			return it;
	}
	return NULL;
}

static int load_config(struct lynn_lora *l, const char *path, struct lynn_err *err)
{
	char what[600];
	const char *s = NULL;
	bool b = false;
	int64_t r = 0;
	double alpha = 0;
	int rc;

	snprintf(what, sizeof what, "'%s'", path);
	l->config = lynn_json_load(path, LYNN_JSON_MAX_SIZE, err);
	if (!l->config)
		return err ? err->code : -LYNN_EFORMAT;
	if (!cJSON_IsObject(l->config))
		return lynn_errf(err, -LYNN_EFORMAT, "lora: %s: not a JSON object", what);
	if ((rc = lynn_json_get_str(l->config, "peft_type", false, &s, what, err)))
		return rc;
	if (s && strcmp(s, "LORA"))
		return lynn_errf(err, -LYNN_EUNSUPPORTED,
				 "lora: %s: peft_type '%s' is not supported (only LORA)", what, s);
	if ((rc = lynn_json_get_bool(l->config, "use_dora", false, &b, what, err)))
		return rc;
	if (b)
		return lynn_errf(err, -LYNN_EUNSUPPORTED,
				 "lora: %s: use_dora is true: DoRA adapters are not supported", what);
	if ((rc = lynn_json_get_str(l->config, "bias", false, &s, what, err)))
		return rc;
	if (s && strcmp(s, "none"))
		return lynn_errf(err, -LYNN_EUNSUPPORTED,
				 "lora: %s: bias '%s' is not supported (only \"none\")", what, s);
	if ((rc = lynn_json_get_int(l->config, "r", true, &r, what, err)))
		return rc;
	if ((rc = lynn_json_get_double(l->config, "lora_alpha", true, &alpha, what, err)))
		return rc;
	if (r <= 0 || r > 65536 || !(alpha > 0) || !isfinite(alpha))
		return lynn_errf(err, -LYNN_EFORMAT, "lora: %s: r %lld and lora_alpha %g must be positive",
				 what, (long long)r, alpha);
	l->r_default = (int)r;
	l->alpha_default = alpha;
	if ((rc = lynn_json_get_bool(l->config, "use_rslora", false, &l->rslora, what, err)) ||
	    (rc = lynn_json_get_bool(l->config, "fan_in_fan_out", false, &l->fan_in_fan_out, what, err)))
		return rc;
	return 0;
}

/* ===== adapter tensors ===== */

static struct lynn_lora_module *module_get(struct lynn_lora *l, const char *module, size_t len)
{
	for (int i = 0; i < l->n_mods; i++)
		if (strlen(l->mods[i].module) == len && !strncmp(l->mods[i].module, module, len))
			return &l->mods[i];
	return NULL;
}

/* Text-model name of a module's weight: strip the multimodal or text-only
 * prefix ("model.language_model.X" / "model.X" -> "X.weight"). */
static char *decoder_name_of(const char *module)
{
	const char *rest = module;
	char *out;
	if (!strncmp(rest, "model.language_model.", 21))
		rest += 21;
	else if (!strncmp(rest, "model.", 6))
		rest += 6;
	if (asprintf(&out, "%s.weight", rest) < 0)
		return NULL;
	return out;
}

static int collect_modules(struct lynn_lora *l, const char *path, struct lynn_err *err)
{
	int64_t n = lynn_st_n_tensors(l->st);
	const cJSON *rp = cJSON_GetObjectItemCaseSensitive(l->config, "rank_pattern");
	const cJSON *ap = cJSON_GetObjectItemCaseSensitive(l->config, "alpha_pattern");

	l->mods = calloc((size_t)(n > 0 ? n : 1), sizeof *l->mods);
	if (!l->mods)
		return lynn_errf(err, -LYNN_ENOMEM, "lora: out of memory");
	for (int64_t i = 0; i < n; i++) {
		const struct lynn_tensor *t = lynn_st_tensor(l->st, i);
		const char *name = t->name, *suffix;
		struct lynn_lora_module *m;
		bool is_a;
		size_t len;

		if (strstr(name, "lora_magnitude_vector"))
			return lynn_errf(err, -LYNN_EUNSUPPORTED,
					 "lora: '%s': tensor '%s' is a DoRA magnitude: DoRA is not supported",
					 path, name);
		if (strstr(name, "lora_embedding_"))
			return lynn_errf(err, -LYNN_EUNSUPPORTED,
					 "lora: '%s': tensor '%s': LoRA on embeddings is not supported", path, name);
		if (!strncmp(name, PEFT_PREFIX, sizeof PEFT_PREFIX - 1))
			name += sizeof PEFT_PREFIX - 1;
		len = strlen(name);
		if (len > 14 && !strcmp(name + len - 14, ".lora_A.weight"))
			is_a = true;
		else if (len > 14 && !strcmp(name + len - 14, ".lora_B.weight"))
			is_a = false;
		else
			return lynn_errf(err, -LYNN_EUNSUPPORTED,
					 "lora: '%s': tensor '%s' is neither lora_A nor lora_B "
					 "(modules_to_save and biases are not supported)", path, t->name);
		suffix = name + len - 14;
		if (t->n_dims != 2 || (t->dtype != LYNN_DTYPE_F32 && t->dtype != LYNN_DTYPE_BF16 &&
				       t->dtype != LYNN_DTYPE_F16))
			return lynn_errf(err, -LYNN_EFORMAT,
					 "lora: '%s': tensor '%s' must be a 2-D f32/bf16/f16 matrix", path, t->name);
		m = module_get(l, name, (size_t)(suffix - name));
		if (!m) {
			m = &l->mods[l->n_mods++];
			m->module = strndup(name, (size_t)(suffix - name));
			m->decoder_name = m->module ? decoder_name_of(m->module) : NULL;
			if (!m->module || !m->decoder_name)
				return lynn_errf(err, -LYNN_ENOMEM, "lora: out of memory");
		}
		if (is_a)
			m->a = t;
		else
			m->b = t;
	}
	for (int i = 0; i < l->n_mods; i++) {
		struct lynn_lora_module *m = &l->mods[i];
		const cJSON *pr, *pa;
		int r_expect = l->r_default;

		if (!m->a || !m->b)
			return lynn_errf(err, -LYNN_EFORMAT, "lora: '%s': module '%s' lacks its lora_%s tensor",
					 path, m->module, m->a ? "B" : "A");
		m->r = (int)m->a->shape[0];
		m->in = m->a->shape[1];
		m->out = m->b->shape[0];
		if (m->b->shape[1] != m->r)
			return lynn_errf(err, -LYNN_EFORMAT,
					 "lora: '%s': module '%s': lora_A is [%d, %lld] but lora_B is [%lld, %lld]",
					 path, m->module, m->r, (long long)m->in, (long long)m->b->shape[0],
					 (long long)m->b->shape[1]);
		pr = pattern_match(rp, m->module);
		if (pr && cJSON_IsNumber(pr))
			r_expect = (int)pr->valuedouble;
		if (r_expect != m->r)
			return lynn_errf(err, -LYNN_EFORMAT,
					 "lora: '%s': module '%s' has rank %d but the config says %d",
					 path, m->module, m->r, r_expect);
		m->alpha = l->alpha_default;
		pa = pattern_match(ap, m->module);
		if (pa && cJSON_IsNumber(pa))
			m->alpha = pa->valuedouble;
		m->scale = (float)(l->rslora ? m->alpha / sqrt((double)m->r) : m->alpha / m->r);
	}
	return 0;
}

struct lynn_lora *lynn_lora_open(const char *dir, struct lynn_err *err)
{
	struct lynn_lora *l = calloc(1, sizeof *l);
	char *cfg = NULL, *st = NULL;
	int rc = 0;

	if (!l) {
		lynn_errf(err, -LYNN_ENOMEM, "lora: out of memory");
		return NULL;
	}
	l->dir = strdup(dir);
	cfg = lynn_path_join(dir, "adapter_config.json");
	st = lynn_path_join(dir, "adapter_model.safetensors");
	if (!l->dir || !cfg || !st) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "lora: out of memory");
		goto out;
	}
	if (!lynn_dir_exists(dir)) {
		rc = lynn_errf(err, -LYNN_ENOTFOUND, "lora: '%s': no such adapter folder", dir);
		goto out;
	}
	if (!lynn_file_exists(cfg)) {
		rc = lynn_errf(err, -LYNN_ENOTFOUND, "lora: '%s': missing adapter_config.json", dir);
		goto out;
	}
	if ((rc = load_config(l, cfg, err)))
		goto out;
	if (!lynn_file_exists(st)) {
		char *bin = lynn_path_join(dir, "adapter_model.bin");
		bool has_bin = bin && lynn_file_exists(bin);
		free(bin);
		rc = lynn_errf(err, has_bin ? -LYNN_EUNSUPPORTED : -LYNN_ENOTFOUND,
			       has_bin ? "lora: '%s': adapter_model.bin (pickle) is not supported; "
					 "save the adapter with safetensors"
				       : "lora: '%s': missing adapter_model.safetensors", dir);
		goto out;
	}
	l->st = lynn_st_open(st, err);
	if (!l->st) {
		rc = err ? err->code : -LYNN_EFORMAT;
		goto out;
	}
	if ((rc = collect_modules(l, st, err)))
		goto out;
	if (l->n_mods == 0)
		rc = lynn_errf(err, -LYNN_EFORMAT, "lora: '%s': the adapter has no lora_A/lora_B tensors", st);
out:
	free(cfg);
	free(st);
	if (rc) {
		lynn_lora_free(l);
		return NULL;
	}
	return l;
}

void lynn_lora_free(struct lynn_lora *l)
{
	if (!l)
		return;
	for (int i = 0; i < l->n_mods; i++) {
		free(l->mods[i].module);
		free(l->mods[i].decoder_name);
	}
	free(l->mods);
	lynn_st_close(l->st);
	cJSON_Delete(l->config);
	free(l->dir);
	free(l);
}

int lynn_lora_n_modules(const struct lynn_lora *l) { return l->n_mods; }
const struct lynn_lora_module *lynn_lora_module(const struct lynn_lora *l, int i) { return &l->mods[i]; }
const char *lynn_lora_dir(const struct lynn_lora *l) { return l->dir; }

const struct lynn_lora_module *lynn_lora_find(const struct lynn_lora *l, const char *decoder_name)
{
	for (int i = 0; i < l->n_mods; i++)
		if (!strcmp(l->mods[i].decoder_name, decoder_name))
			return &l->mods[i];
	return NULL;
}

/* ===== binding ===== */

int lynn_lora_bind(struct lynn_lora *l, const struct lynn_ckpt *base, struct lynn_err *err)
{
	struct lynn_buf bad = LYNN_BUF_INIT;
	int n_bad = 0, rc = 0;

	for (int i = 0; i < l->n_mods; i++) {
		struct lynn_lora_module *m = &l->mods[i];
		const struct lynn_tensor *w = lynn_ckpt_find_decoder(base, m->decoder_name);
		struct lynn_nvfp4_linear nv; /* a 2-D NVFP4 linear with its block scales */
		const bool q = lynn_nvfp4_find(base, m->decoder_name, &nv) != LYNN_NVFP4_NONE &&
			       nv.weight->dtype == LYNN_DTYPE_U8 && nv.weight->n_dims == 2 && nv.scale;
		int64_t wout, win;

		m->base = NULL;
		m->packed = q;
		if (q) {
			w = nv.weight;
			wout = nv.n;
			win = nv.k;
		}
		if (!w) {
			if (n_bad++ < 6)
				lynn_buf_printf(&bad, "%s'%s' (no base weight)", n_bad > 1 ? ", " : "", m->module);
			continue;
		}
		if (!q) {
			wout = w->n_dims == 2 ? w->shape[l->fan_in_fan_out ? 1 : 0] : -1;
			win = w->n_dims == 2 ? w->shape[l->fan_in_fan_out ? 0 : 1] : -1;
		}
		if (wout != m->out || win != m->in) {
			if (n_bad++ < 6)
				lynn_buf_printf(&bad, "%s'%s' (adapter %lldx%lld, base '%s' %lldx%lld)",
						n_bad > 1 ? ", " : "", m->module, (long long)m->out,
						(long long)m->in, w->name, (long long)wout, (long long)win);
			continue;
		}
		if (!q && w->dtype != LYNN_DTYPE_F32 && w->dtype != LYNN_DTYPE_BF16 && w->dtype != LYNN_DTYPE_F16) {
			rc = lynn_errf(err, -LYNN_EUNSUPPORTED,
				       "lora: base weight '%s' is %s: adapters apply to f32/bf16/f16 weights only",
				       w->name, lynn_dtype_name(w->dtype));
			goto out;
		}
		m->base = w;
	}
	if (n_bad)
		rc = lynn_errf(err, -LYNN_EFORMAT,
			       "lora: '%s': %d of %d adapter modules match no base weight: %s%s "
			       "(was the adapter trained on another model, or the base loaded without its "
			       "language tower?)",
			       l->dir, n_bad, l->n_mods, bad.data ? bad.data : "", n_bad > 6 ? ", ..." : "");
out:
	lynn_buf_release(&bad);
	return rc;
}

/* ===== merge ===== */

static float *to_f32(const struct lynn_tensor *t, struct lynn_err *err)
{
	float *v = malloc((size_t)t->n_elems * sizeof *v);
	if (!v) {
		lynn_errf(err, -LYNN_ENOMEM, "lora: out of memory for '%s'", t->name);
		return NULL;
	}
	if (lynn_convert_to_f32(t->dtype, t->data, v, (size_t)t->n_elems, err)) {
		free(v);
		return NULL;
	}
	return v;
}

static bool is_float(enum lynn_dtype dt)
{
	return dt == LYNN_DTYPE_F32 || dt == LYNN_DTYPE_BF16 || dt == LYNN_DTYPE_F16;
}

/* Round n f32 values into dtype (RNE). */
static void store_as(void *dst, const float *v, size_t n, enum lynn_dtype dt)
{
	if (dt == LYNN_DTYPE_F32)
		memcpy(dst, v, n * sizeof *v);
	else if (dt == LYNN_DTYPE_BF16)
		for (size_t j = 0; j < n; j++)
			((uint16_t *)dst)[j] = lynn_f32_to_bf16(v[j]);
	else
		for (size_t j = 0; j < n; j++)
			((uint16_t *)dst)[j] = lynn_f32_to_f16(v[j]);
}

/* One stored tensor re-encoded (and, when targeted, merged) row by row. */
struct row_job {
	const struct lynn_tensor *t;
	const struct lynn_lora_module *m; /* NULL: conversion only */
	bool fan_in_fan_out;
	const float *a, *b;               /* lora_A [r][in], lora_B [out][r] in f32 */
	int64_t rows, cols;               /* of the stored tensor */
	enum lynn_dtype dt;
	uint8_t *out;
	float *scratch;                   /* cols floats per thread */
	int rc;
};

static void row_merge(void *ud, int64_t row, int tid)
{
	struct row_job *j = ud;
	float *w = j->scratch + (size_t)tid * (size_t)j->cols;
	size_t esz = lynn_dtype_size(j->t->dtype);
	const struct lynn_lora_module *m = j->m;

	if (lynn_convert_to_f32(j->t->dtype, (const uint8_t *)j->t->data + (size_t)row * j->cols * esz,
				w, (size_t)j->cols, NULL)) {
		j->rc = -LYNN_EFORMAT;
		return;
	}
	if (m && !j->fan_in_fan_out) {
		/* W[o][:] += s * sum_k B[o][k] A[k][:] */
		for (int k = 0; k < m->r; k++) {
			float s = m->scale * j->b[row * m->r + k];
			const float *ar = j->a + (int64_t)k * m->in;
			for (int64_t i = 0; i < j->cols; i++)
				w[i] += s * ar[i];
		}
	} else if (m) {
		/* stored transposed: W[i][o] += s * sum_k B[o][k] A[k][i] */
		for (int64_t o = 0; o < j->cols; o++) {
			float acc = 0;
			for (int k = 0; k < m->r; k++)
				acc += j->b[o * m->r + k] * j->a[(int64_t)k * m->in + row];
			w[o] += m->scale * acc;
		}
	}
	store_as(j->out + (size_t)row * j->cols * lynn_dtype_size(j->dt), w, (size_t)j->cols, j->dt);
}

static void row_store(void *ud, int64_t row, int tid)
{
	struct row_job *j = ud;
	(void)tid;
	store_as(j->out + (size_t)row * j->cols * lynn_dtype_size(j->dt),
		 j->scratch + (size_t)row * j->cols, (size_t)j->cols, j->dt);
}

static int merge_matmul(struct lynn_pool *pool, struct row_job *j, struct lynn_err *err)
{
	const struct lynn_lora_module *m = j->m;
	float *y = malloc((size_t)j->t->n_elems * sizeof *y);
	float *x = malloc((size_t)(m->out * m->r) * sizeof *x);
	float *at = malloc((size_t)(m->in * m->r) * sizeof *at);
	float *saved = j->scratch;
	int rc = 0;

	if (!y || !x || !at) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "lora: out of memory for '%s'", j->t->name);
		goto out;
	}
	if ((rc = lynn_convert_to_f32(j->t->dtype, j->t->data, y, (size_t)j->t->n_elems, err)))
		goto out;
	for (int64_t o = 0; o < m->out * m->r; o++)
		x[o] = m->scale * j->b[o];
	for (int k = 0; k < m->r; k++)
		for (int64_t i = 0; i < m->in; i++)
			at[i * m->r + k] = j->a[(int64_t)k * m->in + i];
	struct lynn_mm mm = { .wdt = LYNN_DTYPE_F32, .w = at, .n_out = m->in, .n_in = m->r,
			      .x = x, .ldx = m->r, .y = y, .ldy = m->in, .n_tok = m->out,
			      .accumulate = true };
	lynn_cpu_matmul(pool, &mm, lynn_cpu_best());
	j->scratch = y;
	lynn_pool_run(pool, j->rows, row_store, j);
	j->scratch = saved;
out:
	free(y);
	free(x);
	free(at);
	return rc;
}

/* Merge or convert tensor t into dt and write it. */
static int write_converted(struct lynn_pool *pool, const struct lynn_lora *l,
			   const struct lynn_tensor *t, const struct lynn_lora_module *m,
			   enum lynn_dtype dt, struct lynn_st_writer *w, struct lynn_err *err)
{
	struct row_job j = { .t = t, .m = m, .fan_in_fan_out = l->fan_in_fan_out, .dt = dt };
	float *a = NULL, *b = NULL;
	int rc;

	j.cols = t->n_dims ? t->shape[t->n_dims - 1] : 1;
	j.rows = j.cols ? t->n_elems / j.cols : 0;
	if (m && (!(a = to_f32(m->a, err)) || !(b = to_f32(m->b, err)))) {
		free(a);
		return err ? err->code : -LYNN_ENOMEM;
	}
	j.a = a;
	j.b = b;
	j.out = malloc((size_t)t->n_elems * lynn_dtype_size(dt) + 1);
	j.scratch = malloc((size_t)lynn_pool_size(pool) * (size_t)(j.cols + 1) * sizeof(float));
	if (!j.out || !j.scratch) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "lora: out of memory for '%s'", t->name);
		goto out;
	}
	if (m && !l->fan_in_fan_out) {
		/* W += (s·B) · A on the CPU kernels: y = x·Wk^T with x = s·B [out][r]
		 * (rows = tokens), Wk = A^T [in][r], y preloaded with W in f32 */
		rc = merge_matmul(pool, &j, err);
		if (rc)
			goto out;
	} else {
		lynn_pool_run(pool, j.rows, row_merge, &j);
	}
	if (j.rc) {
		rc = lynn_errf(err, j.rc, "lora: '%s': cannot convert %s", t->name, lynn_dtype_name(t->dtype));
		goto out;
	}
	rc = lynn_st_writer_write(w, j.out, (size_t)t->n_elems * lynn_dtype_size(dt), err);
out:
	free(j.out);
	free(j.scratch);
	free(a);
	free(b);
	return rc;
}

int lynn_lora_merge(const struct lynn_lora *l, const struct lynn_ckpt *base, const char *out_dir,
		    const struct lynn_merge_opts *opts, struct lynn_err *err)
{
	struct lynn_st_writer *w = NULL;
	struct lynn_pool *pool = NULL;
	int64_t n = lynn_ckpt_n_tensors(base);
	uint64_t total = 0, done = 0;
	int rc = 0;

	for (int i = 0; i < l->n_mods; i++) {
		if (!l->mods[i].base)
			return lynn_errf(err, -LYNN_EINVAL, "lora: merge needs a bound adapter");
		if (l->mods[i].packed)
			return lynn_errf(err, -LYNN_EUNSUPPORTED,
					 "lora: base weight '%s' is NVFP4: merge into the bf16 base, then quantize "
					 "(lynn quantize --nvfp4)", l->mods[i].base->name);
	}
	pool = lynn_pool_create(opts->n_threads, err);
	if (!pool)
		return err ? err->code : -LYNN_ENOMEM;
	w = lynn_st_writer_create(out_dir, opts->shard_size, err);
	if (!w) {
		rc = err ? err->code : -LYNN_EIO;
		goto out;
	}
	for (int64_t i = 0; i < n; i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(base, i);
		enum lynn_dtype dt = t->dtype;
		if (opts->dtype >= 0 && is_float(t->dtype))
			dt = (enum lynn_dtype)opts->dtype;
		total += (uint64_t)t->n_elems * lynn_dtype_size(dt);
		if ((rc = lynn_st_writer_declare(w, t->name, dt, t->n_dims, t->shape, err)))
			goto out;
	}
	for (int64_t i = 0; i < n; i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(base, i);
		const struct lynn_lora_module *m = NULL;
		enum lynn_dtype dt = t->dtype;

		for (int k = 0; k < l->n_mods && !m; k++)
			if (l->mods[k].base == t)
				m = &l->mods[k];
		if (opts->dtype >= 0 && is_float(t->dtype))
			dt = (enum lynn_dtype)opts->dtype;
		lynn_mem_sequential(t->data, (size_t)t->nbytes);
		if (!m && dt == t->dtype) /* untargeted: byte for byte */
			rc = lynn_st_writer_write(w, t->data, (size_t)t->nbytes, err);
		else
			rc = write_converted(pool, l, t, m, dt, w, err);
		if (rc)
			goto out;
		lynn_mem_drop(t->data, (size_t)t->nbytes);
		done += (uint64_t)t->n_elems * lynn_dtype_size(dt);
		if (opts->progress)
			opts->progress(opts->progress_ud, done, total);
	}
	rc = lynn_st_writer_finish(w, err);
out:
	lynn_st_writer_free(w);
	lynn_pool_free(pool);
	return rc;
}
