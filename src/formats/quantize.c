/*
 * quantize.c - RTN NVFP4 quantization of a checkpoint folder, streamed
 * tensor by tensor through the safetensors writer into an atomic output
 * folder (include/lynn/quantize.h, docs/lynn-quantize.md).
 *
 * Two passes over the source mmap: the first finds each fused group's
 * max |W| (q/k/v, gate/up: one global scale per group, weight-formats.md
 * §2.4), the second quantizes row by row and writes. Memory: one row of f32
 * plus one tensor's block scales (1/32 of its BF16 size).
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/quantize.h"
#include "lynn/st.h"
#include "lynn/util.h"
#include "lynn/version.h"

enum item_kind { COPY, QLIN };

/* One output unit: a tensor copied as it is, or one quantized linear (a 2-D
 * source, or one expert's slice of a fused 3-D source). */
struct item {
	enum item_kind kind;
	const struct lynn_tensor *t;
	char *base;          /* output module name (QLIN), heap */
	int64_t n, k;        /* rows, columns of the linear */
	int64_t off_rows;    /* first source row (of C = k elements) */
	int group;           /* index into the group amax table */
};

struct plan {
	struct item *it;
	int64_t n, cap;
	char **gkeys;        /* sorted unique group keys */
	int64_t n_groups;
	float *gamax;
};

/* ===== the recipe ===== */

static bool default_ignored(const char *module)
{
	static const char *const has[] = { "lm_head", "embed_tokens", "visual", "vision",
					   "shared_expert_gate", "conv1d", "router" };
	for (size_t i = 0; i < sizeof has / sizeof has[0]; i++)
		if (strstr(module, has[i]))
			return true;
	if (lynn_str_ends_with(module, "mlp.gate"))
		return true;
	if (!strncmp(module, "mtp.", 4) || strstr(module, ".mtp."))
		return true;
	return false;
}

/* The user's --ignore patterns compiled once: the "re:" ones (lynn_re:
 * matched from the start of the name, as compressed-tensors matches its
 * own lists), NULL entries for the fnmatch wildcards. A bad regex is
 * -LYNN_EINVAL naming it. */
static int ignore_compile(const struct lynn_quantize_opts *o, struct lynn_re ***out, struct lynn_err *err)
{
	*out = NULL;
	if (!o || !o->n_ignore)
		return 0;
	struct lynn_re **re = calloc((size_t)o->n_ignore, sizeof *re);
	if (!re)
		return lynn_errf(err, -LYNN_ENOMEM, "quantize: out of memory");
	*out = re;
	for (int i = 0; i < o->n_ignore; i++) {
		char msg[160];
		if (strncmp(o->ignore[i], "re:", 3))
			continue;
		if (!(re[i] = lynn_re_compile(o->ignore[i] + 3, msg, sizeof msg)))
			return lynn_errf(err, -LYNN_EINVAL, "quantize: --ignore '%s': bad regular expression (%s)",
					 o->ignore[i], msg);
	}
	return 0;
}

static void ignore_free(const struct lynn_quantize_opts *o, struct lynn_re **re)
{
	for (int i = 0; re && i < o->n_ignore; i++)
		lynn_re_free(re[i]);
	free(re);
}

/* The recipe's choice with the patterns compiled (re from ignore_compile) */
static bool wants(const char *module, const struct lynn_quantize_opts *o, struct lynn_re *const *re)
{
	if (default_ignored(module))
		return false;
	for (int i = 0; o && i < o->n_ignore; i++)
		if (strncmp(o->ignore[i], "re:", 3) ? !fnmatch(o->ignore[i], module, 0)
						    : re && re[i] && lynn_re_match(re[i], module))
			return false;
	return true;
}

/* (a pattern that does not compile ignores nothing here; the quantize run
 * refuses it) */
bool lynn_nvfp4_rtn_wants(const char *module, const struct lynn_quantize_opts *o)
{
	struct lynn_re **re = NULL;
	ignore_compile(o, &re, NULL);
	const bool r = wants(module, o, re);
	ignore_free(o, re);
	return r;
}

static bool float_dtype(enum lynn_dtype dt)
{
	return dt == LYNN_DTYPE_BF16 || dt == LYNN_DTYPE_F16 || dt == LYNN_DTYPE_F32;
}

/* Group key of a linear: q/k/v_proj share "<prefix>#qkv", gate/up_proj
 * "<prefix>#gate_up"; anything else its own name. Heap. */
static char *group_key(const char *base)
{
	static const char *const qkv[] = { "q_proj", "k_proj", "v_proj" };
	static const char *const gu[] = { "gate_proj", "up_proj" };
	const char *dot = strrchr(base, '.');
	const char *last = dot ? dot + 1 : base;
	size_t plen = (size_t)(last - base);
	const char *tag = NULL;
	char *k;
	for (int i = 0; i < 3; i++)
		if (!strcmp(last, qkv[i]))
			tag = "#qkv";
	for (int i = 0; i < 2; i++)
		if (!strcmp(last, gu[i]))
			tag = "#gate_up";
	if (!tag)
		return strdup(base);
	k = malloc(plen + strlen(tag) + 1);
	if (k) {
		memcpy(k, base, plen);
		strcpy(k + plen, tag);
	}
	return k;
}

static int add_item(struct plan *p, enum item_kind kind, const struct lynn_tensor *t,
		    const char *base, int64_t n, int64_t k, int64_t off_rows, struct lynn_err *err)
{
	struct item *it;
	if (p->n == p->cap) {
		int64_t nc = p->cap ? 2 * p->cap : 256;
		void *q = realloc(p->it, sizeof *p->it * (size_t)nc);
		if (!q)
			return lynn_errf(err, -LYNN_ENOMEM, "quantize: out of memory");
		p->it = q;
		p->cap = nc;
	}
	it = &p->it[p->n];
	memset(it, 0, sizeof *it);
	it->kind = kind;
	it->t = t;
	it->n = n;
	it->k = k;
	it->off_rows = off_rows;
	it->group = -1;
	if (base && !(it->base = strdup(base)))
		return lynn_errf(err, -LYNN_ENOMEM, "quantize: out of memory");
	p->n++;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int build_plan(struct plan *p, const struct lynn_ckpt *c, const struct lynn_quantize_opts *o,
		      struct lynn_re *const *re, struct lynn_err *err)
{
	int64_t nt = lynn_ckpt_n_tensors(c);
	char name[512];
	int rc;

	for (int64_t i = 0; i < nt; i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(c, i);
		size_t len = strlen(t->name);
		if (lynn_str_ends_with(t->name, ".weight_packed") || lynn_str_ends_with(t->name, ".weight_scale_2") ||
		    lynn_str_ends_with(t->name, ".weight_global_scale"))
			return lynn_errf(err, -LYNN_EUNSUPPORTED,
					 "quantize: '%s': the checkpoint is already quantized", t->name);
		if (len >= sizeof name - 64)
			return lynn_errf(err, -LYNN_EFORMAT, "quantize: '%s': name too long", t->name);
		/* fused 3-D experts -> per-expert linears */
		if (t->n_dims == 3 && float_dtype(t->dtype) && t->shape[2] % 16 == 0 &&
		    (lynn_str_ends_with(t->name, "mlp.experts.gate_up_proj") ||
		     lynn_str_ends_with(t->name, "mlp.experts.down_proj"))) {
			bool gate_up = lynn_str_ends_with(t->name, "gate_up_proj");
			size_t plen = len - strlen(gate_up ? "gate_up_proj" : "down_proj");
			int64_t E = t->shape[0], R = t->shape[1], C = t->shape[2];
			snprintf(name, sizeof name, "%.*s0.%s", (int)plen, t->name,
				 gate_up ? "gate_proj" : "down_proj");
			if ((!gate_up || R % 2 == 0) && wants(name, o, re)) {
				for (int64_t e = 0; e < E; e++) {
					if (gate_up) {
						snprintf(name, sizeof name, "%.*s%lld.gate_proj", (int)plen,
							 t->name, (long long)e);
						if ((rc = add_item(p, QLIN, t, name, R / 2, C, e * R, err)))
							return rc;
						snprintf(name, sizeof name, "%.*s%lld.up_proj", (int)plen,
							 t->name, (long long)e);
						if ((rc = add_item(p, QLIN, t, name, R / 2, C, e * R + R / 2,
								   err)))
							return rc;
					} else {
						snprintf(name, sizeof name, "%.*s%lld.down_proj", (int)plen,
							 t->name, (long long)e);
						if ((rc = add_item(p, QLIN, t, name, R, C, e * R, err)))
							return rc;
					}
				}
				continue;
			}
		}
		if (t->n_dims == 2 && float_dtype(t->dtype) && lynn_str_ends_with(t->name, ".weight") &&
		    t->shape[1] % 16 == 0 && t->shape[0] > 0 && t->shape[1] > 0) {
			snprintf(name, sizeof name, "%.*s", (int)(len - 7), t->name);
			if (wants(name, o, re)) {
				if ((rc = add_item(p, QLIN, t, name, t->shape[0], t->shape[1], 0, err)))
					return rc;
				continue;
			}
		}
		if ((rc = add_item(p, COPY, t, NULL, 0, 0, 0, err)))
			return rc;
	}
	/* groups: sorted unique keys, then each linear's index */
	p->gkeys = calloc((size_t)(p->n ? p->n : 1), sizeof *p->gkeys);
	if (!p->gkeys)
		return lynn_errf(err, -LYNN_ENOMEM, "quantize: out of memory");
	for (int64_t i = 0; i < p->n; i++)
		if (p->it[i].kind == QLIN) {
			if (!(p->gkeys[p->n_groups] = group_key(p->it[i].base)))
				return lynn_errf(err, -LYNN_ENOMEM, "quantize: out of memory");
			p->n_groups++;
		}
	qsort(p->gkeys, (size_t)p->n_groups, sizeof *p->gkeys, cmp_str);
	{
		int64_t u = 0;
		for (int64_t i = 0; i < p->n_groups; i++) {
			if (u && !strcmp(p->gkeys[u - 1], p->gkeys[i])) {
				free(p->gkeys[i]);
				continue;
			}
			p->gkeys[u++] = p->gkeys[i];
		}
		p->n_groups = u;
	}
	p->gamax = calloc((size_t)(p->n_groups ? p->n_groups : 1), sizeof *p->gamax);
	if (!p->gamax)
		return lynn_errf(err, -LYNN_ENOMEM, "quantize: out of memory");
	for (int64_t i = 0; i < p->n; i++)
		if (p->it[i].kind == QLIN) {
			char *k = group_key(p->it[i].base), **hit;
			if (!k)
				return lynn_errf(err, -LYNN_ENOMEM, "quantize: out of memory");
			hit = bsearch(&k, p->gkeys, (size_t)p->n_groups, sizeof *p->gkeys, cmp_str);
			free(k);
			LYNN_ASSERT(hit);
			p->it[i].group = (int)(hit - p->gkeys);
		}
	return 0;
}

static void plan_free(struct plan *p)
{
	for (int64_t i = 0; i < p->n; i++)
		free(p->it[i].base);
	free(p->it);
	for (int64_t i = 0; p->gkeys && i < p->n_groups; i++)
		free(p->gkeys[i]);
	free(p->gkeys);
	free(p->gamax);
}

/* Row r of a linear item, as f32. */
static int item_row(const struct item *it, int64_t r, float *row, struct lynn_err *err)
{
	size_t es = lynn_dtype_size(it->t->dtype);
	const uint8_t *src = (const uint8_t *)it->t->data + (size_t)((it->off_rows + r) * it->k) * es;
	return lynn_convert_to_f32(it->t->dtype, src, row, (size_t)it->k, err);
}

/* ===== config.json ===== */

static cJSON *ignore_list(const struct plan *p)
{
	cJSON *a = cJSON_CreateArray();
	for (int64_t i = 0; a && i < p->n; i++) {
		const struct lynn_tensor *t = p->it[i].t;
		if (p->it[i].kind != COPY || t->n_dims != 2 || !float_dtype(t->dtype) ||
		    !lynn_str_ends_with(t->name, ".weight"))
			continue;
		char *m = strndup(t->name, strlen(t->name) - 7);
		if (m)
			cJSON_AddItemToArray(a, cJSON_CreateString(m));
		free(m);
	}
	return a;
}

static cJSON *ct_config(const struct plan *p)
{
	cJSON *q = cJSON_CreateObject(), *groups, *g0, *w, *targets;
	cJSON_AddStringToObject(q, "quant_method", "compressed-tensors");
	cJSON_AddStringToObject(q, "format", "nvfp4-pack-quantized");
	cJSON_AddStringToObject(q, "quantization_status", "compressed");
	groups = cJSON_AddObjectToObject(q, "config_groups");
	g0 = cJSON_AddObjectToObject(groups, "group_0");
	targets = cJSON_AddArrayToObject(g0, "targets");
	cJSON_AddItemToArray(targets, cJSON_CreateString("Linear"));
	w = cJSON_AddObjectToObject(g0, "weights");
	cJSON_AddNumberToObject(w, "num_bits", 4);
	cJSON_AddStringToObject(w, "type", "float");
	cJSON_AddBoolToObject(w, "symmetric", 1);
	cJSON_AddNumberToObject(w, "group_size", 16);
	cJSON_AddStringToObject(w, "strategy", "tensor_group");
	cJSON_AddBoolToObject(w, "dynamic", 0);
	cJSON_AddNullToObject(w, "actorder");
	cJSON_AddStringToObject(w, "observer", "minmax");
	cJSON_AddStringToObject(w, "scale_dtype", "torch.float8_e4m3fn");
	cJSON_AddNullToObject(g0, "input_activations");
	cJSON_AddNullToObject(g0, "output_activations");
	cJSON_AddStringToObject(g0, "format", "nvfp4-pack-quantized");
	cJSON_AddItemToObject(q, "ignore", ignore_list(p));
	cJSON_AddNullToObject(q, "kv_cache_scheme");
	cJSON_AddNullToObject(q, "global_compression_ratio");
	cJSON_AddStringToObject(q, "producer", "lynn " LYNN_VERSION " quantize (RTN, W4A16)");
	return q;
}

static cJSON *modelopt_config(const struct plan *p, bool hf_file)
{
	cJSON *root = cJSON_CreateObject(), *prod, *q;
	if (hf_file) {
		prod = cJSON_AddObjectToObject(root, "producer");
		cJSON_AddStringToObject(prod, "name", "modelopt");
		cJSON_AddStringToObject(prod, "version", "lynn-" LYNN_VERSION);
		q = cJSON_AddObjectToObject(root, "quantization");
		cJSON_AddStringToObject(q, "quant_algo", "W4A16_NVFP4");
		cJSON_AddNullToObject(q, "kv_cache_quant_algo");
		cJSON_AddNumberToObject(q, "group_size", 16);
		cJSON_AddItemToObject(q, "exclude_modules", ignore_list(p));
		return root;
	}
	cJSON_AddStringToObject(root, "quant_method", "modelopt");
	cJSON_AddStringToObject(root, "quant_algo", "W4A16_NVFP4");
	cJSON_AddNumberToObject(root, "group_size", 16);
	cJSON_AddNullToObject(root, "kv_cache_quant_algo");
	cJSON_AddItemToObject(root, "exclude_modules", ignore_list(p));
	cJSON_AddItemToObject(root, "ignore", ignore_list(p));
	prod = cJSON_AddObjectToObject(root, "producer");
	cJSON_AddStringToObject(prod, "name", "modelopt");
	cJSON_AddStringToObject(prod, "version", "lynn-" LYNN_VERSION);
	return root;
}

static int write_configs(const char *src, const char *dir, const struct plan *p,
			 enum lynn_nvfp4_format f, struct lynn_err *err)
{
	char *in = lynn_path_join(src, "config.json"), *out = lynn_path_join(dir, "config.json");
	char *hf = lynn_path_join(dir, "hf_quant_config.json");
	cJSON *cfg = NULL, *hq = NULL;
	int rc = 0;

	if (!in || !out || !hf) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "quantize: out of memory");
		goto out;
	}
	if (!(cfg = lynn_json_load(in, 16u << 20, err))) {
		rc = err ? err->code : -LYNN_EIO;
		goto out;
	}
	if (!cJSON_IsObject(cfg)) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "quantize: '%s': not a JSON object", in);
		goto out;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(cfg, "quantization_config");
	cJSON_AddItemToObject(cfg, "quantization_config",
			      f == LYNN_NVFP4_CT ? ct_config(p) : modelopt_config(p, false));
	if ((rc = lynn_json_write(out, cfg, err)))
		goto out;
	if (f == LYNN_NVFP4_MODELOPT) {
		hq = modelopt_config(p, true);
		if ((rc = lynn_json_write(hf, hq, err)))
			goto out;
	}
out:
	cJSON_Delete(cfg);
	cJSON_Delete(hq);
	free(in);
	free(out);
	free(hf);
	return rc;
}

/* Tokenizer, chat template, generation and preprocessor configs (SPEC §3's
 * list, plus every tokenizer* file). */
static int copy_ship_files(const char *src, const char *dir, int *n, struct lynn_err *err)
{
	static const char *const names[] = { "chat_template.jinja", "chat_template.json",
					     "generation_config.json", "special_tokens_map.json",
					     "vocab.json", "merges.txt", "added_tokens.json",
					     "preprocessor_config.json",
					     "video_preprocessor_config.json" };
	DIR *d = opendir(src);
	struct dirent *de;
	int rc = 0;

	*n = 0;
	if (!d)
		return lynn_errf(err, -LYNN_EIO, "quantize: '%s': cannot list the folder", src);
	while (!rc && (de = readdir(d))) {
		bool want = !strncmp(de->d_name, "tokenizer", 9);
		for (size_t i = 0; !want && i < sizeof names / sizeof names[0]; i++)
			want = !strcmp(de->d_name, names[i]);
		if (!want)
			continue;
		char *a = lynn_path_join(src, de->d_name), *b = lynn_path_join(dir, de->d_name);
		if (!a || !b)
			rc = lynn_errf(err, -LYNN_ENOMEM, "quantize: out of memory");
		else if (lynn_file_exists(a) && !(rc = lynn_file_copy(a, b, err)))
			(*n)++;
		free(a);
		free(b);
	}
	closedir(d);
	return rc;
}

/* ===== the two passes ===== */

static int declare_all(struct lynn_st_writer *w, const struct plan *p, enum lynn_nvfp4_format f,
		       struct lynn_err *err)
{
	const struct lynn_nvfp4_suffixes *sx = lynn_nvfp4_suffixes(f);
	char name[600];
	int rc = 0;
	for (int64_t i = 0; !rc && i < p->n; i++) {
		const struct item *it = &p->it[i];
		if (it->kind == COPY) {
			rc = lynn_st_writer_declare(w, it->t->name, it->t->dtype, it->t->n_dims,
						    it->t->shape, err);
			continue;
		}
		int64_t sp[2] = { it->n, it->k / 2 }, ss[2] = { it->n, it->k / 16 }, sg[1] = { 1 };
		snprintf(name, sizeof name, "%s.%s", it->base, sx->weight);
		if ((rc = lynn_st_writer_declare(w, name, LYNN_DTYPE_U8, 2, sp, err)))
			break;
		snprintf(name, sizeof name, "%s.%s", it->base, sx->scale);
		if ((rc = lynn_st_writer_declare(w, name, LYNN_DTYPE_F8_E4M3, 2, ss, err)))
			break;
		snprintf(name, sizeof name, "%s.%s", it->base, sx->global);
		/* CT stores [1]; ModelOpt a 0-dim scalar */
		rc = lynn_st_writer_declare(w, name, LYNN_DTYPE_F32, f == LYNN_NVFP4_CT ? 1 : 0, sg,
					    err);
	}
	return rc;
}

static int quantize_item(struct lynn_st_writer *w, const struct item *it, float stored,
			 enum lynn_nvfp4_format f, float *row, float *deq, uint8_t *pbuf,
			 int64_t pbuf_rows, uint8_t *sbuf, double *se, double *ss,
			 struct lynn_err *err)
{
	int64_t filled = 0;
	int rc;
	for (int64_t r = 0; r < it->n; r++) {
		if ((rc = item_row(it, r, row, err)))
			return rc;
		for (int64_t j = 0; j < it->k; j++)
			if (!isfinite(row[j]))
				return lynn_errf(err, -LYNN_EFORMAT,
						 "quantize: '%s': row %lld has a non-finite value",
						 it->t->name, (long long)(it->off_rows + r));
		lynn_nvfp4_quantize_row(f, row, it->k, stored, pbuf + filled * (it->k / 2),
					sbuf + r * (it->k / 16));
		lynn_nvfp4_dequant_row(f, pbuf + filled * (it->k / 2), sbuf + r * (it->k / 16),
				       stored, it->k, deq);
		for (int64_t j = 0; j < it->k; j++) {
			double d = (double)deq[j] - row[j];
			*se += d * d;
			*ss += (double)row[j] * row[j];
		}
		if (++filled == pbuf_rows || r == it->n - 1) {
			if ((rc = lynn_st_writer_write(w, pbuf, (size_t)(filled * (it->k / 2)), err)))
				return rc;
			filled = 0;
		}
	}
	if ((rc = lynn_st_writer_write(w, sbuf, (size_t)(it->n * (it->k / 16)), err)))
		return rc;
	return lynn_st_writer_write(w, &stored, 4, err);
}

int lynn_nvfp4_quantize(const char *src, const char *out, const struct lynn_quantize_opts *o,
			struct lynn_quantize_stats *st, struct lynn_err *err)
{
	struct lynn_quantize_opts def = { 0 };
	struct plan p = { 0 };
	struct lynn_ckpt *c = NULL;
	struct lynn_tmpdir td = { 0 };
	struct lynn_st_writer *w = NULL;
	bool td_ok = false;
	float *row = NULL, *deq = NULL;
	uint8_t *pbuf = NULL, *sbuf = NULL;
	int64_t kmax = 16, nmax = 1, pbuf_rows = 64;
	uint64_t total = 0, done = 0;
	double se = 0, ss = 0;
	enum lynn_nvfp4_format f;
	struct lynn_re **re = NULL; /* the --ignore regexes */
	int rc = 0;

	if (!o)
		o = &def;
	f = o->format == LYNN_NVFP4_MODELOPT ? LYNN_NVFP4_MODELOPT : LYNN_NVFP4_CT;
	memset(st, 0, sizeof *st);
	if ((rc = ignore_compile(o, &re, err))) {
		ignore_free(o, re);
		return rc;
	}
	if (!(c = lynn_ckpt_open(src, err))) {
		ignore_free(o, re);
		return err ? err->code : -LYNN_EIO;
	}
	{
		char *cfgp = lynn_path_join(lynn_ckpt_dir(c), "config.json");
		cJSON *cfg = cfgp ? lynn_json_load(cfgp, 16u << 20, err) : NULL;
		bool quantized = cfg && cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config");
		free(cfgp);
		cJSON_Delete(cfg);
		if (!cfg) {
			rc = err && err->code ? err->code : -LYNN_ENOMEM;
			goto out;
		}
		if (quantized) {
			rc = lynn_errf(err, -LYNN_EUNSUPPORTED,
				       "quantize: '%s': config.json already has a quantization_config",
				       src);
			goto out;
		}
	}
	if ((rc = build_plan(&p, c, o, re, err)))
		goto out;
	for (int64_t i = 0; i < p.n; i++) {
		const struct item *it = &p.it[i];
		total += it->kind == COPY ? it->t->nbytes
					  : (uint64_t)(it->n * it->k) * lynn_dtype_size(it->t->dtype);
		if (it->kind == QLIN) {
			if (it->k > kmax)
				kmax = it->k;
			if (it->n > nmax)
				nmax = it->n;
		}
	}
	row = malloc(sizeof *row * (size_t)kmax);
	deq = malloc(sizeof *deq * (size_t)kmax);
	pbuf = malloc((size_t)(pbuf_rows * (kmax / 2)));
	sbuf = malloc((size_t)(nmax * (kmax / 16)));
	if (!row || !deq || !pbuf || !sbuf) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "quantize: out of memory");
		goto out;
	}
	/* pass 1: amax per fused group */
	for (int64_t i = 0; i < p.n; i++) {
		const struct item *it = &p.it[i];
		if (it->kind != QLIN)
			continue;
		float a = p.gamax[it->group];
		for (int64_t r = 0; r < it->n; r++) {
			if ((rc = item_row(it, r, row, err)))
				goto out;
			for (int64_t j = 0; j < it->k; j++)
				if (fabsf(row[j]) > a)
					a = fabsf(row[j]);
		}
		p.gamax[it->group] = a;
	}
	/* pass 2: write */
	if ((rc = lynn_tmpdir_create(&td, out, o->force, err)))
		goto out;
	td_ok = true;
	if (!(w = lynn_st_writer_create(td.path, o->max_shard_bytes ? o->max_shard_bytes
								       : 5000000000ull, err))) {
		rc = err ? err->code : -LYNN_EIO;
		goto out;
	}
	if ((rc = lynn_st_writer_set_metadata(w, "format", "pt", err)) ||
	    (rc = declare_all(w, &p, f, err)))
		goto out;
	for (int64_t i = 0; i < p.n; i++) {
		const struct item *it = &p.it[i];
		if (it->kind == COPY) {
			if ((rc = lynn_st_writer_write(w, it->t->data, (size_t)it->t->nbytes, err)))
				goto out;
			st->n_copied++;
			st->bytes_in += it->t->nbytes;
			st->bytes_out += it->t->nbytes;
			done += it->t->nbytes;
		} else {
			float stored = lynn_nvfp4_global_scale(f, p.gamax[it->group]);
			if ((rc = quantize_item(w, it, stored, f, row, deq, pbuf, pbuf_rows, sbuf, &se,
						&ss, err)))
				goto out;
			st->n_quantized++;
			if (it->t->n_dims == 3)
				st->n_split_experts++;
			st->bytes_in += (uint64_t)(it->n * it->k) * lynn_dtype_size(it->t->dtype);
			st->bytes_out += (uint64_t)(it->n * it->k / 2 + it->n * it->k / 16 + 4);
			done += (uint64_t)(it->n * it->k) * lynn_dtype_size(it->t->dtype);
		}
		if (o->progress)
			o->progress(o->progress_ud, done, total);
	}
	if ((rc = lynn_st_writer_finish(w, err)))
		goto out;
	if ((rc = write_configs(lynn_ckpt_dir(c), td.path, &p, f, err)) ||
	    (rc = copy_ship_files(lynn_ckpt_dir(c), td.path, &st->n_ship_files, err)))
		goto out;
	td_ok = false; /* commit releases td either way */
	if ((rc = lynn_tmpdir_commit(&td, err)))
		goto out;
	st->rel_rmse = ss > 0 ? sqrt(se / ss) : 0.0;
out:
	lynn_st_writer_free(w);
	if (td_ok)
		lynn_tmpdir_abort(&td);
	free(row);
	free(deq);
	free(pbuf);
	free(sbuf);
	plan_free(&p);
	lynn_ckpt_close(c);
	ignore_free(o, re);
	return rc;
}
