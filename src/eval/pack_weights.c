/*
 * pack_weights.c - gate 3 of the ship gate (include/lynn/pack.h, SPEC §3).
 *
 * It lists every problem it finds (up to MAX_REASONS, then a count):
 * each shard is opened on its own so one bad file does not hide the others,
 * and the index is checked against the shards both ways. Tensor names and
 * shapes follow transformers' Qwen3.5-MoE modules (docs/reference
 * qwen35moe-architecture.md §2). NVFP4 linears (compressed-tensors and
 * ModelOpt, weight-formats.md §2.2) are checked by the rules of
 * include/lynn/nvfp4.h (lynn_nvfp4_scan); this file only matches them to the
 * config's shapes, and pack_qcfg.c matches how each linear is stored to
 * what the quantization config makes a loader build. Block FP8 follows §2.8.
 * Only headers and per-tensor scales are read, unless scan_scales asks for
 * every NVFP4 block scale.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/pack_internal.h"
#include "lynn/config.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/nvfp4.h"
#include "lynn/pack.h"
#include "lynn/st.h"
#include "lynn/util.h"

/* ===== gate 3: weights ===== */

struct wctx {
	struct pack_gate *g;
	struct lynn_st_file **files;
	int n_files;
	const char *pfx;
	bool scan;
	int64_t n_checked, n_plain, n_quant[3];
	struct lynn_nvfp4_scan nv; /* every NVFP4 linear, sorted by base */
	bool nv_ok;                /* the scan ran (no mixed conventions) */
	struct pack_qcfg *qc;      /* what the quantization config says of each linear */
};

static const struct lynn_tensor *wfind(const struct wctx *w, const char *name)
{
	for (int i = 0; i < w->n_files; i++) {
		const struct lynn_tensor *t = lynn_st_find(w->files[i], name);
		if (t)
			return t;
	}
	return NULL;
}

static void shape_str(int nd, const int64_t *s, char *buf, size_t cap)
{
	size_t o = (size_t)snprintf(buf, cap, "[");
	for (int d = 0; d < nd && o < cap; d++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)s[d]);
	if (o < cap)
		snprintf(buf + o, cap - o, "]");
}

static bool is_float(enum lynn_dtype dt)
{
	return dt == LYNN_DTYPE_BF16 || dt == LYNN_DTYPE_F16 || dt == LYNN_DTYPE_F32;
}

static bool same_shape(const struct lynn_tensor *t, int nd, const int64_t *s)
{
	if (t->n_dims != nd)
		return false;
	for (int d = 0; d < nd; d++)
		if (t->shape[d] != s[d])
			return false;
	return true;
}

static void bad_shape(struct wctx *w, const struct lynn_tensor *t, int nd, const int64_t *s,
		      const char *what)
{
	char a[96], b[96];
	shape_str(t->n_dims, t->shape, a, sizeof a);
	shape_str(nd, s, b, sizeof b);
	pack_reason(w->g, "'%s' (%s): shape %s %s, expected %s %s", t->name, lynn_path_base(t->file), a,
		    lynn_dtype_name(t->dtype), b, what);
}

/* A plain (unquantized) float tensor of the given shape. */
static void expect_plain(struct wctx *w, const char *name, int nd, int64_t d0, int64_t d1,
			 int64_t d2)
{
	int64_t s[3] = { d0, d1, d2 };
	const struct lynn_tensor *t = wfind(w, name);
	w->n_checked++;
	if (!t) {
		pack_reason(w->g, "missing tensor '%s'", name);
		return;
	}
	if (!is_float(t->dtype)) {
		pack_reason(w->g, "'%s': dtype %s, expected BF16, F16 or F32", name,
			    lynn_dtype_name(t->dtype));
		return;
	}
	if (!same_shape(t, nd, s))
		bad_shape(w, t, nd, s, "by config.json");
	w->n_plain++;
}

/* Every value of a small float scale tensor finite and positive. */
static void check_scale_values(struct wctx *w, const struct lynn_tensor *t)
{
	float buf[1024];
	for (int64_t i = 0; i < t->n_elems; i += 1024) {
		size_t n = (size_t)LYNN_MIN(1024, t->n_elems - i);
		lynn_convert_to_f32(t->dtype, (const uint8_t *)t->data + i * (int64_t)lynn_dtype_size(t->dtype),
				    buf, n, NULL);
		for (size_t k = 0; k < n; k++)
			if (!isfinite(buf[k]) || !(buf[k] > 0)) {
				pack_reason(w->g, "'%s'[%lld] = %g: scales must be finite and positive",
					    t->name, (long long)(i + (int64_t)k), (double)buf[k]);
				return;
			}
	}
}

static int cmp_linear(const void *a, const void *b)
{
	return strcmp(((const struct lynn_nvfp4_linear *)a)->base,
		      ((const struct lynn_nvfp4_linear *)b)->base);
}

static const struct lynn_nvfp4_linear *nv_find(const struct wctx *w, const char *base)
{
	struct lynn_nvfp4_linear k;
	if (!w->nv.n_linears || strlen(base) >= sizeof k.base)
		return NULL;
	strcpy(k.base, base);
	return bsearch(&k, w->nv.linears, (size_t)w->nv.n_linears, sizeof k, cmp_linear);
}

/* Run the NVFP4 rules over every tensor of every file; their problems
 * (companions, dtypes, scale shapes and values) become the gate's reasons. */
static void nv_scan(struct wctx *w)
{
	struct lynn_err err;
	const struct lynn_tensor **ts;
	int64_t n = 0;

	for (int i = 0; i < w->n_files; i++)
		n += lynn_st_n_tensors(w->files[i]);
	ts = calloc((size_t)n + 1, sizeof *ts);
	if (!ts) {
		pack_reason(w->g, "out of memory");
		return;
	}
	n = 0;
	for (int i = 0; i < w->n_files; i++)
		for (int64_t j = 0; j < lynn_st_n_tensors(w->files[i]); j++)
			ts[n++] = lynn_st_tensor(w->files[i], j);
	if (lynn_nvfp4_scan(ts, n, w->scan, &w->nv, &err) < 0) {
		pack_reason(w->g, "%s", err.msg);
	} else {
		int64_t shown = LYNN_MIN(w->nv.n_problems, (int64_t)(sizeof w->nv.problems /
								     sizeof w->nv.problems[0]));
		w->nv_ok = true;
		if (w->nv.n_linears)
			qsort(w->nv.linears, (size_t)w->nv.n_linears, sizeof *w->nv.linears,
			      cmp_linear);
		for (int64_t i = 0; i < shown; i++)
			pack_reason(w->g, "%s", w->nv.problems[i]);
		if (w->nv.n_problems > shown)
			pack_reason(w->g, "nvfp4: ... and %lld more NVFP4 problems",
				    (long long)(w->nv.n_problems - shown));
	}
	free(ts);
}

/* An NVFP4 linear against the config: [E,] N, K. Its own rules were checked
 * by nv_scan. */
static void expect_nvfp4(struct wctx *w, const struct lynn_nvfp4_linear *L, int64_t E,
			 int64_t N, int64_t K)
{
	int64_t s[3] = { E, N, K / 2 };
	const int nd = E ? 3 : 2;

	if (L->n_experts != E || L->n != N || L->k != K)
		bad_shape(w, L->weight, nd, E ? s : s + 1, "for packed 4-bit weights");
	w->n_quant[w->nv.format == LYNN_NVFP4_CT ? 0 : 1]++;
}

/* A linear layer's weight [N, K]: plain float, block FP8, or NVFP4 in either
 * producer's naming. `base` is the module path without ".weight". */
static void expect_linear(struct wctx *w, const char *base, int64_t N, int64_t K)
{
	char name[512];
	int64_t s[2] = { N, K };
	const struct lynn_tensor *t;
	const struct lynn_nvfp4_linear *L;

	/* (embed_tokens is an embedding, not a linear layer, to the config's
	 * "Linear" targets) */
	const bool linear = !lynn_str_ends_with(base, "embed_tokens");
	w->n_checked++;
	snprintf(name, sizeof name, "%s.weight", base);
	t = wfind(w, name);
	if (t && is_float(t->dtype)) {
		if (!same_shape(t, 2, s))
			bad_shape(w, t, 2, s, "by config.json");
		w->n_plain++;
		pack_qcfg_linear(w->qc, base, linear, PACK_Q_PLAIN);
		return;
	}
	if (t && t->dtype == LYNN_DTYPE_F8_E4M3) { /* block FP8 */
		const struct lynn_tensor *sc;
		if (!same_shape(t, 2, s))
			bad_shape(w, t, 2, s, "by config.json");
		snprintf(name, sizeof name, "%s.weight_scale_inv", base);
		sc = wfind(w, name);
		if (!sc) {
			snprintf(name, sizeof name, "%s.weight_scale", base);
			sc = wfind(w, name);
		}
		if (!sc) {
			pack_reason(w->g, "'%s' is FP8 but '%s.weight_scale_inv' is missing", t->name,
				    base);
			return;
		}
		if (!is_float(sc->dtype))
			pack_reason(w->g, "'%s': dtype %s, expected F32", sc->name,
				    lynn_dtype_name(sc->dtype));
		else if (sc->n_elems <= (1 << 22))
			check_scale_values(w, sc);
		w->n_quant[2]++;
		pack_qcfg_linear(w->qc, base, linear, PACK_Q_FP8);
		return;
	}
	if ((L = nv_find(w, base))) { /* NVFP4, either convention */
		expect_nvfp4(w, L, 0, N, K);
		pack_qcfg_linear(w->qc, base, linear,
				 w->nv.format == LYNN_NVFP4_CT ? PACK_Q_NVFP4_CT : PACK_Q_NVFP4_MODELOPT);
		return;
	}
	if (t && t->dtype == LYNN_DTYPE_U8) {
		if (w->nv_ok) /* otherwise the scan's error says why */
			pack_reason(w->g, "'%s': dtype U8 but no NVFP4 companions ('%s.weight_scale', '%s.weight_scale_2')",
				    t->name, base, base);
		return;
	}
	if (t) {
		pack_reason(w->g, "'%s': dtype %s is not a weight dtype lynn knows", t->name,
			    lynn_dtype_name(t->dtype));
		return;
	}
	snprintf(name, sizeof name, "%s.weight_packed", base);
	if (wfind(w, name)) /* not grouped: the scan's error says why */
		return;
	pack_reason(w->g, "missing tensor '%s.weight'", base);
}

static void expect_layer(struct wctx *w, const struct lynn_config *c, int i)
{
	char b[400], e[600];
	const int64_t H = c->hidden_size;
	const int64_t kd = (int64_t)c->lin_n_k_heads * c->lin_k_dim;
	const int64_t vd = (int64_t)c->lin_n_v_heads * c->lin_v_dim;
	const int64_t conv = 2 * kd + vd;
	const int64_t E = c->n_experts, I = c->moe_inter, SI = c->shared_inter;

	snprintf(b, sizeof b, "%slayers.%d.", w->pfx, i);
#define P(suffix) (snprintf(e, sizeof e, "%s%s", b, suffix), e)
	expect_plain(w, P("input_layernorm.weight"), 1, H, 0, 0);
	expect_plain(w, P("post_attention_layernorm.weight"), 1, H, 0, 0);
	if (c->layer_types[i] == LYNN_LAYER_LINEAR) {
		expect_linear(w, P("linear_attn.in_proj_qkv"), conv, H);
		expect_linear(w, P("linear_attn.in_proj_z"), vd, H);
		expect_linear(w, P("linear_attn.in_proj_b"), c->lin_n_v_heads, H);
		expect_linear(w, P("linear_attn.in_proj_a"), c->lin_n_v_heads, H);
		expect_plain(w, P("linear_attn.conv1d.weight"), 3, conv, 1, c->lin_conv_kernel);
		expect_plain(w, P("linear_attn.dt_bias"), 1, c->lin_n_v_heads, 0, 0);
		expect_plain(w, P("linear_attn.A_log"), 1, c->lin_n_v_heads, 0, 0);
		expect_plain(w, P("linear_attn.norm.weight"), 1, c->lin_v_dim, 0, 0);
		expect_linear(w, P("linear_attn.out_proj"), H, vd);
	} else {
		const int64_t q = (int64_t)c->n_heads * c->head_dim;
		const int64_t kv = (int64_t)c->n_kv_heads * c->head_dim;
		expect_linear(w, P("self_attn.q_proj"), 2 * q, H); /* query + gate per head */
		expect_linear(w, P("self_attn.k_proj"), kv, H);
		expect_linear(w, P("self_attn.v_proj"), kv, H);
		expect_linear(w, P("self_attn.o_proj"), H, q);
		expect_plain(w, P("self_attn.q_norm.weight"), 1, c->head_dim, 0, 0);
		expect_plain(w, P("self_attn.k_norm.weight"), 1, c->head_dim, 0, 0);
	}
	expect_linear(w, P("mlp.gate"), E, H);
	expect_linear(w, P("mlp.shared_expert.gate_proj"), SI, H);
	expect_linear(w, P("mlp.shared_expert.up_proj"), SI, H);
	expect_linear(w, P("mlp.shared_expert.down_proj"), H, SI);
	expect_linear(w, P("mlp.shared_expert_gate"), 1, H);
	if (wfind(w, P("mlp.experts.gate_up_proj"))) { /* fused 3-D, as released */
		expect_plain(w, P("mlp.experts.gate_up_proj"), 3, E, 2 * I, H);
		expect_plain(w, P("mlp.experts.down_proj"), 3, E, H, I);
		return;
	}
	if (nv_find(w, P("mlp.experts.gate_up_proj"))) { /* fused 3-D NVFP4 */
		const struct lynn_nvfp4_linear *L;
		w->n_checked += 2;
		expect_nvfp4(w, nv_find(w, P("mlp.experts.gate_up_proj")), E, 2 * I, H);
		if ((L = nv_find(w, P("mlp.experts.down_proj"))))
			expect_nvfp4(w, L, E, H, I);
		else
			pack_reason(w->g, "layer %d: fused NVFP4 experts without '%smlp.experts.down_proj'",
				    i, b);
		return;
	}
	if (wfind(w, P("mlp.experts.gate_up_proj_packed")) ||
	    wfind(w, P("mlp.experts.gate_up_proj.weight_packed"))) {
		pack_reason(w->g, "layer %d: fused quantized experts ('%smlp.experts.gate_up_proj*') are not supported by this check",
			    i, b);
		return;
	}
	{
		char x[64];
		int present = 0;
		for (int64_t k = 0; k < E && !present; k++) {
			snprintf(x, sizeof x, "mlp.experts.%lld.", (long long)k);
			snprintf(e, sizeof e, "%s%sgate_proj.weight", b, x);
			present |= wfind(w, e) != NULL;
			snprintf(e, sizeof e, "%s%sgate_proj.weight_packed", b, x);
			present |= wfind(w, e) != NULL;
		}
		if (!present) {
			pack_reason(w->g, "layer %d: no expert weights (neither fused '%smlp.experts.gate_up_proj' nor per-expert '%smlp.experts.0.gate_proj.weight')",
				    i, b, b);
			return;
		}
		for (int64_t k = 0; k < E; k++) {
			snprintf(x, sizeof x, "mlp.experts.%lld.gate_proj", (long long)k);
			expect_linear(w, P(x), I, H);
			snprintf(x, sizeof x, "mlp.experts.%lld.up_proj", (long long)k);
			expect_linear(w, P(x), I, H);
			snprintf(x, sizeof x, "mlp.experts.%lld.down_proj", (long long)k);
			expect_linear(w, P(x), H, I);
		}
	}
#undef P
}

static int cmp_cstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static const char *cstr_name_of(const void *ctx, int64_t i)
{
	return ((const char *const *)ctx)[i];
}

static void add_file(struct wctx *w, const char *dir, const char *name, bool report)
{
	struct lynn_err err;
	char *p = lynn_path_join(dir, name);
	struct lynn_st_file *f = p ? lynn_st_open(p, &err) : NULL;
	if (!f) {
		if (report)
			pack_reason(w->g, "%s", p ? err.msg : "out of memory");
		free(p);
		return;
	}
	free(p);
	w->files[w->n_files++] = f;
}

/* Index and shards, both ways; opens every shard that can be opened. */
static void check_index(struct wctx *w, const char *dir, const char *ip)
{
	struct lynn_err err;
	cJSON *root = lynn_json_load(ip, LYNN_JSON_MAX_SIZE, &err);
	const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL, *e;
	const char **keys = NULL, **shards = NULL;
	int64_t n_keys = 0, n_shards = 0;
	struct lynn_name_index kx = { 0 };

	if (!root) {
		pack_reason(w->g, "%s", err.msg);
		return;
	}
	if (!cJSON_IsObject(wm)) {
		pack_reason(w->g, "'%s': missing object field 'weight_map'", ip);
		goto out;
	}
	n_keys = cJSON_GetArraySize(wm);
	keys = calloc((size_t)n_keys + 1, sizeof *keys);
	shards = calloc((size_t)n_keys + 1, sizeof *shards);
	w->files = calloc((size_t)n_keys + 1, sizeof *w->files);
	if (!keys || !shards || !w->files ||
	    lynn_name_index_init(&kx, (size_t)n_keys, cstr_name_of, keys) < 0) {
		pack_reason(w->g, "out of memory");
		goto out;
	}
	n_keys = 0;
	cJSON_ArrayForEach(e, wm) {
		if (!cJSON_IsString(e)) {
			pack_reason(w->g, "'%s': weight_map entry '%s' is not a string", ip, e->string);
			continue;
		}
		keys[n_keys] = e->string;
		if (lynn_name_index_put(&kx, n_keys) >= 0)
			pack_reason(w->g, "'%s': weight_map names tensor '%s' twice", ip, e->string);
		n_keys++;
		shards[n_shards++] = e->valuestring;
	}
	qsort(shards, (size_t)n_shards, sizeof *shards, cmp_cstr);
	for (int64_t i = 0; i < n_shards; i++) {
		char *p;
		if (i && !strcmp(shards[i], shards[i - 1]))
			continue;
		if (!shards[i][0] || strchr(shards[i], '/') || !strcmp(shards[i], "..")) {
			pack_reason(w->g, "'%s': shard '%s' is not a file in the folder", ip, shards[i]);
			continue;
		}
		p = lynn_path_join(dir, shards[i]);
		if (p && !lynn_file_exists(p))
			pack_reason(w->g, "'%s': names shard '%s', which is missing", ip, shards[i]);
		else
			add_file(w, dir, shards[i], true);
		free(p);
	}
	/* index -> shards */
	cJSON_ArrayForEach(e, wm) {
		const struct lynn_tensor *t;
		bool shard_open = false;
		if (!cJSON_IsString(e))
			continue;
		for (int i = 0; i < w->n_files; i++)
			shard_open |= !strcmp(lynn_path_base(lynn_st_path(w->files[i])), e->valuestring);
		if (!shard_open)
			continue; /* reported above */
		t = wfind(w, e->string);
		if (!t)
			pack_reason(w->g, "'%s': tensor '%s' is mapped to '%s' but no shard has it", ip,
				    e->string, e->valuestring);
		else if (strcmp(lynn_path_base(t->file), e->valuestring))
			pack_reason(w->g, "'%s': tensor '%s' is mapped to '%s' but is in '%s'", ip,
				    e->string, e->valuestring, lynn_path_base(t->file));
	}
	/* shards -> index */
	for (int i = 0; i < w->n_files; i++)
		for (int64_t j = 0; j < lynn_st_n_tensors(w->files[i]); j++) {
			const struct lynn_tensor *t = lynn_st_tensor(w->files[i], j);
			if (lynn_name_index_get(&kx, t->name) < 0)
				pack_reason(w->g, "'%s': tensor '%s' of shard '%s' is not in the index",
					    ip, t->name, lynn_path_base(t->file));
		}
out:
	lynn_name_index_release(&kx);
	free(keys);
	free(shards);
	cJSON_Delete(root);
}

/* Every *.safetensors of a folder without model.safetensors or index. */
static void open_glob(struct wctx *w, const char *dir)
{
	struct lynn_err err;
	char **names;
	int n;
	if (lynn_ckpt_list_shards(dir, &names, &n, &err) < 0) {
		if (err.code == -LYNN_ENOMEM)
			pack_reason(w->g, "%s", err.msg);
		return; /* an unlistable folder: "no ... *.safetensors" below */
	}
	w->files = calloc((size_t)n + 1, sizeof *w->files);
	for (int i = 0; i < n && w->files; i++)
		add_file(w, dir, names[i], true);
	lynn_ckpt_shards_free(names, n);
}

/* No tensor in two files (index or not). */
static void check_unique(struct wctx *w)
{
	int64_t total = 0, k = 0;
	const struct lynn_tensor **all;
	const char **names;
	struct lynn_name_index ix = { 0 };

	for (int i = 0; i < w->n_files; i++)
		total += lynn_st_n_tensors(w->files[i]);
	all = calloc((size_t)total + 1, sizeof *all);
	names = calloc((size_t)total + 1, sizeof *names);
	if (!all || !names || lynn_name_index_init(&ix, (size_t)total, cstr_name_of, names) < 0) {
		pack_reason(w->g, "out of memory");
		goto out;
	}
	for (int i = 0; i < w->n_files; i++)
		for (int64_t j = 0; j < lynn_st_n_tensors(w->files[i]); j++, k++) {
			int64_t prev;
			all[k] = lynn_st_tensor(w->files[i], j);
			names[k] = all[k]->name;
			prev = lynn_name_index_put(&ix, k);
			if (prev >= 0)
				pack_reason(w->g, "tensor '%s' is in both '%s' and '%s'", all[k]->name,
					    lynn_path_base(all[prev]->file), lynn_path_base(all[k]->file));
		}
out:
	lynn_name_index_release(&ix);
	free(all);
	free(names);
}

bool lynn_pack_gate_weights(const char *dir, bool scan_scales, cJSON *gate)
{
	struct pack_gate g;
	struct wctx w = { .g = &g, .scan = scan_scales };
	struct lynn_config cfg;
	struct lynn_err err;
	char *single = lynn_path_join(dir, "model.safetensors");
	char *ip = lynn_path_join(dir, "model.safetensors.index.json");
	bool have_cfg = false, pass;
	int64_t n_tensors = 0;

	pack_gate_init(&g, gate);
	if (single && lynn_file_exists(single)) {
		w.files = calloc(1, sizeof *w.files);
		if (w.files)
			add_file(&w, dir, "model.safetensors", true);
		cJSON_AddStringToObject(gate, "layout", "model.safetensors");
	} else if (ip && lynn_file_exists(ip)) {
		check_index(&w, dir, ip);
		cJSON_AddStringToObject(gate, "layout", "index + shards");
	} else {
		open_glob(&w, dir);
		if (!w.n_files)
			pack_reason(&g, "'%s': no model.safetensors, index or *.safetensors", dir);
		cJSON_AddStringToObject(gate, "layout", w.n_files ? "shards without an index" : "none");
	}
	check_unique(&w);
	nv_scan(&w);
	for (int i = 0; i < w.n_files; i++)
		n_tensors += lynn_st_n_tensors(w.files[i]);

	if (lynn_config_load(&cfg, dir, &err) < 0) {
		pack_reason(&g, "cannot check tensors against the config: %s", err.msg);
	} else if (w.n_files) {
		have_cfg = true;
		w.qc = pack_qcfg_load(dir, &g);
		if (wfind(&w, "model.language_model.embed_tokens.weight") ||
		    wfind(&w, "model.language_model.layers.0.input_layernorm.weight"))
			w.pfx = "model.language_model.";
		else if (wfind(&w, "model.embed_tokens.weight") ||
			 wfind(&w, "model.layers.0.input_layernorm.weight"))
			w.pfx = "model.";
		if (!w.pfx) {
			pack_reason(&g, "no decoder weights: neither 'model.language_model.embed_tokens.weight' nor 'model.embed_tokens.weight'");
		} else {
			char name[256];
			snprintf(name, sizeof name, "%sembed_tokens", w.pfx);
			expect_linear(&w, name, cfg.vocab_size, cfg.hidden_size);
			for (int i = 0; i < cfg.n_layers; i++)
				expect_layer(&w, &cfg, i);
			snprintf(name, sizeof name, "%snorm.weight", w.pfx);
			expect_plain(&w, name, 1, cfg.hidden_size, 0, 0);
			/* lm_head at the top level (some exports: model.lm_head);
			 * optional when tied to the embeddings */
			const char *lm = "lm_head";
			bool top = wfind(&w, "lm_head.weight") || wfind(&w, "lm_head.weight_packed");
			if (!top && (wfind(&w, "model.lm_head.weight") ||
				     wfind(&w, "model.lm_head.weight_packed")))
				lm = "model.lm_head";
			if (!cfg.tie_word_embeddings || top || strcmp(lm, "lm_head"))
				expect_linear(&w, lm, cfg.vocab_size, cfg.hidden_size);
		}
	}
	cJSON_AddNumberToObject(gate, "n_files", w.n_files);
	cJSON_AddNumberToObject(gate, "n_tensors", (double)n_tensors);
	if (have_cfg) {
		cJSON *q = cJSON_AddObjectToObject(gate, "linear_formats");
		cJSON_AddNumberToObject(gate, "n_checked", (double)w.n_checked);
		cJSON_AddStringToObject(gate, "prefix", w.pfx ? w.pfx : "");
		cJSON_AddNumberToObject(q, "plain", (double)w.n_plain);
		cJSON_AddNumberToObject(q, "nvfp4_compressed_tensors", (double)w.n_quant[0]);
		cJSON_AddNumberToObject(q, "nvfp4_modelopt", (double)w.n_quant[1]);
		cJSON_AddNumberToObject(q, "fp8", (double)w.n_quant[2]);
		cJSON_AddBoolToObject(gate, "block_scales_scanned", scan_scales);
		pack_qcfg_finish(w.qc, &g, gate);
		lynn_config_release(&cfg);
	}
	pass = pack_gate_finish(&g);
	lynn_nvfp4_scan_free(&w.nv);
	for (int i = 0; i < w.n_files; i++)
		lynn_st_close(w.files[i]);
	free(w.files);
	free(single);
	free(ip);
	return pass;
}
