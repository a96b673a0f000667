/*
 * inspect.c - `lynn inspect PATH [--json] [--tensors]` (SPEC §2,
 * docs/lynn-inspect.md): what a checkpoint holds, from its headers only.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "cmd.h"
#include "lynn/config.h"
#include "lynn/fs.h"
#include "lynn/gguf.h"
#include "lynn/json.h"
#include "lynn/st.h"
#include "lynn/util.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: lynn inspect PATH [--json] [--tensors]\n\n"
		   "Describe a checkpoint (a model folder, a .safetensors or a .gguf file) from its\n"
		   "headers: architecture, layer types, parameters (total and active per\n"
		   "token), dtypes, quantization format, files and sizes.\n\n"
		   "  --json      print one JSON object instead of text\n"
		   "  --tensors   list every tensor: name, dtype, shape, file\n"
		   "  -q, -v      quieter / more verbose logs\n");
}

/* ===== gathering ===== */

struct dstat {
	int64_t tensors, params;
	uint64_t bytes;
};

struct info {
	struct lynn_ckpt *ck;
	bool have_cfg;
	struct lynn_config cfg;
	char arch[64], model_type[32];
	int64_t n_params, n_active, n_routed, n_vision, n_mtp, n_mtp_routed, n_active_text;
	uint64_t data_bytes, file_bytes;
	struct dstat dt[LYNN_DTYPE_COUNT];
	unsigned quant;
	int64_t quant_counts[3];
	char quant_name[96];
};

static bool has_prefix(const char *s, const char *p)
{
	return !strncmp(s, p, strlen(p));
}

static bool is_vision(const char *n)
{
	return has_prefix(n, "model.visual.") || has_prefix(n, "visual.");
}

static bool is_mtp(const char *n)
{
	return has_prefix(n, "mtp.") || has_prefix(n, "model.mtp.");
}

/* config.json beside the weights: our own loader for Qwen3.5-MoE, and just
 * architectures[0] / model_type for anything else. */
static int load_config(struct info *in, const char *dir, struct lynn_err *err)
{
	char *p = lynn_path_join(dir, "config.json");
	cJSON *j;
	int rc = 0;

	if (!p)
		return lynn_errf(err, -LYNN_ENOMEM, "inspect: out of memory");
	if (!lynn_file_exists(p))
		goto out;
	rc = lynn_config_load(&in->cfg, p, err);
	if (!rc) {
		in->have_cfg = true;
		snprintf(in->arch, sizeof in->arch, "%s", in->cfg.architecture);
		snprintf(in->model_type, sizeof in->model_type, "%s", in->cfg.model_type);
		goto out;
	}
	if (rc != -LYNN_EUNSUPPORTED)
		goto out;
	rc = 0;
	j = lynn_json_load(p, LYNN_JSON_MAX_SIZE, err);
	if (!j) {
		rc = err->code;
		goto out;
	}
	{
		const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "architectures");
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model_type");
		if (cJSON_IsArray(a) && cJSON_IsString(cJSON_GetArrayItem(a, 0)))
			snprintf(in->arch, sizeof in->arch, "%s",
				 cJSON_GetArrayItem(a, 0)->valuestring);
		if (cJSON_IsString(m))
			snprintf(in->model_type, sizeof in->model_type, "%s", m->valuestring);
	}
	cJSON_Delete(j);
out:
	free(p);
	return rc;
}

/* n * k / d without overflow (exact when d divides n) */
static int64_t share(int64_t n, int64_t k, int64_t d)
{
	return n / d * k + n % d * k / d;
}

static void gather(struct info *in)
{
	const struct lynn_ckpt *c = in->ck;
	int64_t routed_active;

	for (int64_t i = 0; i < lynn_ckpt_n_tensors(c); i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(c, i);
		int64_t p = lynn_ckpt_tensor_params(c, t);
		in->n_params += p;
		if (lynn_tensor_is_routed_expert(t->name))
			in->n_routed += p;
		if (is_vision(t->name))
			in->n_vision += p;
		if (is_mtp(t->name)) {
			in->n_mtp += p;
			if (lynn_tensor_is_routed_expert(t->name))
				in->n_mtp_routed += p;
		}
		in->data_bytes += t->nbytes;
		in->dt[t->dtype].tensors++;
		in->dt[t->dtype].params += p;
		in->dt[t->dtype].bytes += t->nbytes;
	}
	for (int i = 0; i < lynn_ckpt_n_files(c); i++)
		in->file_bytes += lynn_st_file_size(lynn_ckpt_st(c, i));
	/* active per token: every parameter except the routed experts, plus
	 * top_k / n_experts of them (docs/lynn-inspect.md); the text figure
	 * also leaves out the vision tower and the MTP head */
	in->n_active = in->n_params;
	in->n_active_text = in->n_params - in->n_vision - in->n_mtp;
	if (in->have_cfg && in->n_routed) {
		routed_active = share(in->n_routed, in->cfg.n_experts_per_tok, in->cfg.n_experts);
		in->n_active = in->n_params - in->n_routed + routed_active;
		in->n_active_text = in->n_active - in->n_vision -
				    (in->n_mtp - in->n_mtp_routed +
				     share(in->n_mtp_routed, in->cfg.n_experts_per_tok,
					   in->cfg.n_experts));
	}
	in->quant = lynn_ckpt_quant_formats(c, in->quant_counts);
	in->quant_name[0] = 0;
	if (in->quant) {
		static const char *const names[] = { "nvfp4 compressed-tensors", "nvfp4 modelopt",
						     "fp8" };
		for (int k = 0; k < 3; k++)
			if (in->quant & (1u << k)) {
				size_t l = strlen(in->quant_name);
				snprintf(in->quant_name + l, sizeof in->quant_name - l, "%s%s",
					 l ? " + " : "", names[k]);
			}
	} else {
		/* unquantized: the float dtype holding most parameters */
		static const struct {
			enum lynn_dtype dt;
			const char *name;
		} fl[] = { { LYNN_DTYPE_BF16, "bf16" }, { LYNN_DTYPE_F16, "f16" },
			   { LYNN_DTYPE_F32, "f32" }, { LYNN_DTYPE_F64, "f64" } };
		int64_t best = -1;
		snprintf(in->quant_name, sizeof in->quant_name, "none");
		for (size_t k = 0; k < sizeof fl / sizeof fl[0]; k++)
			if (in->dt[fl[k].dt].params > best && in->dt[fl[k].dt].params > 0) {
				best = in->dt[fl[k].dt].params;
				snprintf(in->quant_name, sizeof in->quant_name, "%s", fl[k].name);
			}
	}
}

/* ===== printing ===== */

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static void human_bytes(uint64_t b, char *buf, size_t cap)
{
	if (b >= 1000000000ull)
		snprintf(buf, cap, "%.2f GB", (double)b / 1e9);
	else if (b >= 1000000ull)
		snprintf(buf, cap, "%.2f MB", (double)b / 1e6);
	else if (b >= 1000ull)
		snprintf(buf, cap, "%.2f kB", (double)b / 1e3);
	else
		snprintf(buf, cap, "%llu B", (unsigned long long)b);
}

static void human_count(int64_t n, char *buf, size_t cap)
{
	if (n >= 1000000000)
		snprintf(buf, cap, "%.2fB", (double)n / 1e9);
	else if (n >= 1000000)
		snprintf(buf, cap, "%.2fM", (double)n / 1e6);
	else if (n >= 1000)
		snprintf(buf, cap, "%.2fK", (double)n / 1e3);
	else
		snprintf(buf, cap, "%lld", (long long)n);
}

static void shape_text(const struct lynn_tensor *t, char *buf, size_t cap)
{
	size_t o = (size_t)snprintf(buf, cap, "[");
	for (int d = 0; d < t->n_dims && o < cap; d++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "",
				      (long long)t->shape[d]);
	if (o < cap)
		snprintf(buf + o, cap - o, "]");
}

static void print_text(const struct info *in, const char *path, bool tensors)
{
	const struct lynn_ckpt *c = in->ck;
	char a[32], b[32];

	printf("path:          %s\n", path);
	printf("format:        safetensors, %d file%s%s%s\n", lynn_ckpt_n_files(c),
	       lynn_ckpt_n_files(c) == 1 ? "" : "s",
	       lynn_ckpt_index_path(c) ? " + " : "",
	       lynn_ckpt_index_path(c) ? base_name(lynn_ckpt_index_path(c)) : "");
	printf("architecture:  %s", in->arch[0] ? in->arch : "unknown (no config.json)");
	if (in->model_type[0])
		printf(" (model_type %s)", in->model_type);
	printf("\n");
	if (in->have_cfg) {
		const struct lynn_config *g = &in->cfg;
		int n_full = 0;
		for (int i = 0; i < g->n_layers; i++)
			n_full += g->layer_types[i] == LYNN_LAYER_FULL;
		printf("layers:        %d: %d linear_attention (Gated DeltaNet) + %d full_attention at",
		       g->n_layers, g->n_layers - n_full, n_full);
		for (int i = 0, k = 0; i < g->n_layers; i++)
			if (g->layer_types[i] == LYNN_LAYER_FULL)
				printf("%s%d", k++ ? "," : " ", i);
		printf("\n");
		printf("dims:          hidden %d, vocab %d, attention %d heads / %d kv x %d (rotary %d), "
		       "deltanet %d k / %d v heads x %d\n",
		       g->hidden_size, g->vocab_size, g->n_heads, g->n_kv_heads, g->head_dim,
		       g->rot_dim, g->lin_n_k_heads, g->lin_n_v_heads, g->lin_k_dim);
		printf("experts:       %d routed (%d per token, intermediate %d) + shared (intermediate %d)\n",
		       g->n_experts, g->n_experts_per_tok, g->moe_inter, g->shared_inter);
		if (g->mtp_layers || g->has_vision_config)
			printf("extras:        %s%s%d MTP layer%s\n",
			       g->has_vision_config ? "vision tower, " : "", "", g->mtp_layers,
			       g->mtp_layers == 1 ? "" : "s");
	}
	human_count(in->n_params, a, sizeof a);
	human_count(in->n_active, b, sizeof b);
	printf("parameters:    %s total (%lld), %s active per token (%lld)\n", a,
	       (long long)in->n_params, b, (long long)in->n_active);
	if (in->n_routed || in->n_vision || in->n_mtp) {
		char r[32], v[32], m[32];
		human_count(in->n_routed, r, sizeof r);
		human_count(in->n_vision, v, sizeof v);
		human_count(in->n_mtp, m, sizeof m);
		printf("               of which routed experts %s, vision %s, mtp %s\n", r, v, m);
		human_count(in->n_active_text, r, sizeof r);
		printf("               active per token in the text decoder alone: %s (%lld)\n", r,
		       (long long)in->n_active_text);
	}
	printf("quantization:  %s", in->quant_name);
	if (in->quant)
		printf(" (%lld quantized weights)",
		       (long long)(in->quant_counts[0] + in->quant_counts[1] + in->quant_counts[2]));
	if (in->have_cfg && in->cfg.quant_method[0])
		printf("; config: %s%s%s", in->cfg.quant_method, in->cfg.quant_format[0] ? " " : "",
		       in->cfg.quant_format);
	printf("\n");
	printf("dtypes:       ");
	for (int d = 0; d < LYNN_DTYPE_COUNT; d++)
		if (in->dt[d].tensors) {
			human_bytes(in->dt[d].bytes, a, sizeof a);
			printf(" %s %lld tensors %s;", lynn_dtype_name((enum lynn_dtype)d),
			       (long long)in->dt[d].tensors, a);
		}
	printf("\n");
	human_bytes(in->file_bytes, a, sizeof a);
	printf("tensors:       %lld\n", (long long)lynn_ckpt_n_tensors(c));
	printf("files:         %s in %d file%s (tensor data %llu bytes)\n", a, lynn_ckpt_n_files(c),
	       lynn_ckpt_n_files(c) == 1 ? "" : "s", (unsigned long long)in->data_bytes);
	for (int i = 0; i < lynn_ckpt_n_files(c); i++) {
		const struct lynn_st_file *f = lynn_ckpt_st(c, i);
		human_bytes(lynn_st_file_size(f), a, sizeof a);
		printf("  %-40s %10s  %6lld tensors\n", base_name(lynn_st_path(f)), a,
		       (long long)lynn_st_n_tensors(f));
	}
	if (tensors) {
		printf("\n%-64s %-8s %-24s %s\n", "name", "dtype", "shape", "file");
		for (int64_t i = 0; i < lynn_ckpt_n_tensors(c); i++) {
			const struct lynn_tensor *t = lynn_ckpt_tensor(c, i);
			char s[160];
			shape_text(t, s, sizeof s);
			printf("%-64s %-8s %-24s %s\n", t->name, lynn_dtype_name(t->dtype), s,
			       base_name(t->file));
		}
	}
}

static cJSON *build_json(const struct info *in, const char *path, bool tensors)
{
	const struct lynn_ckpt *c = in->ck;
	cJSON *o = cJSON_CreateObject(), *a, *x;

	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "format", "safetensors");
	cJSON_AddStringToObject(o, "path", path);
	if (in->arch[0])
		cJSON_AddStringToObject(o, "architecture", in->arch);
	else
		cJSON_AddNullToObject(o, "architecture");
	if (in->model_type[0])
		cJSON_AddStringToObject(o, "model_type", in->model_type);
	cJSON_AddNumberToObject(o, "n_tensors", (double)lynn_ckpt_n_tensors(c));
	cJSON_AddNumberToObject(o, "n_params", (double)in->n_params);
	cJSON_AddNumberToObject(o, "n_params_active", (double)in->n_active);
	cJSON_AddNumberToObject(o, "n_params_active_text", (double)in->n_active_text);
	cJSON_AddNumberToObject(o, "n_params_routed_experts", (double)in->n_routed);
	cJSON_AddNumberToObject(o, "n_params_vision", (double)in->n_vision);
	cJSON_AddNumberToObject(o, "n_params_mtp", (double)in->n_mtp);
	cJSON_AddStringToObject(o, "quantization", in->quant_name);
	if (in->have_cfg) {
		const struct lynn_config *g = &in->cfg;
		cJSON_AddNumberToObject(o, "n_layers", g->n_layers);
		a = cJSON_AddArrayToObject(o, "layer_types");
		for (int i = 0; a && i < g->n_layers; i++)
			cJSON_AddItemToArray(a, cJSON_CreateString(g->layer_types[i] == LYNN_LAYER_FULL
									   ? "full_attention"
									   : "linear_attention"));
		cJSON_AddNumberToObject(o, "n_experts", g->n_experts);
		cJSON_AddNumberToObject(o, "n_experts_per_tok", g->n_experts_per_tok);
		cJSON_AddNumberToObject(o, "mtp_layers", g->mtp_layers);
		cJSON_AddBoolToObject(o, "multimodal", g->multimodal);
		if (g->quant_method[0])
			cJSON_AddStringToObject(o, "quant_method", g->quant_method);
	}
	x = cJSON_AddObjectToObject(o, "dtypes");
	for (int d = 0; x && d < LYNN_DTYPE_COUNT; d++)
		if (in->dt[d].tensors) {
			cJSON *e = cJSON_AddObjectToObject(x, lynn_dtype_name((enum lynn_dtype)d));
			cJSON_AddNumberToObject(e, "tensors", (double)in->dt[d].tensors);
			cJSON_AddNumberToObject(e, "params", (double)in->dt[d].params);
			cJSON_AddNumberToObject(e, "bytes", (double)in->dt[d].bytes);
		}
	cJSON_AddNumberToObject(o, "total_bytes", (double)in->file_bytes);
	if (lynn_ckpt_index_path(c))
		cJSON_AddStringToObject(o, "index", base_name(lynn_ckpt_index_path(c)));
	a = cJSON_AddArrayToObject(o, "files");
	for (int i = 0; a && i < lynn_ckpt_n_files(c); i++) {
		const struct lynn_st_file *f = lynn_ckpt_st(c, i);
		cJSON *e = cJSON_CreateObject();
		cJSON_AddStringToObject(e, "name", base_name(lynn_st_path(f)));
		cJSON_AddNumberToObject(e, "bytes", (double)lynn_st_file_size(f));
		cJSON_AddNumberToObject(e, "header_bytes", (double)lynn_st_header_size(f));
		cJSON_AddNumberToObject(e, "n_tensors", (double)lynn_st_n_tensors(f));
		cJSON_AddItemToArray(a, e);
	}
	if (tensors) {
		a = cJSON_AddArrayToObject(o, "tensors");
		for (int64_t i = 0; a && i < lynn_ckpt_n_tensors(c); i++) {
			const struct lynn_tensor *t = lynn_ckpt_tensor(c, i);
			cJSON *e = cJSON_CreateObject(), *s;
			cJSON_AddStringToObject(e, "name", t->name);
			cJSON_AddStringToObject(e, "dtype", lynn_dtype_name(t->dtype));
			s = cJSON_AddArrayToObject(e, "shape");
			for (int d = 0; s && d < t->n_dims; d++)
				cJSON_AddItemToArray(s, cJSON_CreateNumber((double)t->shape[d]));
			cJSON_AddStringToObject(e, "file", base_name(t->file));
			cJSON_AddItemToArray(a, e);
		}
	}
	return o;
}

/* ===== GGUF ===== */

#define N_GGML_TYPES 64

/* n * k / d without overflow (exact when d divides n) */
static int64_t share(int64_t n, int64_t k, int64_t d);

static int64_t gguf_key_int(const struct lynn_gguf *g, const char *arch, const char *key)
{
	char k[160];
	int64_t v = -1;
	snprintf(k, sizeof k, "%s.%s", arch, key);
	if (lynn_gguf_get_int(g, k, false, &v, NULL))
		return -1;
	return v;
}

static bool gguf_is_scale(const char *name)
{
	size_t n = strlen(name);
	return (n >= 6 && !strcmp(name + n - 6, ".scale")) ||
	       (n >= 12 && !strcmp(name + n - 12, ".input_scale"));
}

static int inspect_gguf(const char *path, bool json, bool tensors)
{
	struct lynn_err err = { 0 };
	struct lynn_gguf *g = lynn_gguf_open(path, &err);
	char arch[64] = "", mix[256] = "gguf";
	const char *s = NULL;
	size_t len = 0;
	int64_t n_params = 0, n_routed = 0, n_active, n_layers, n_exp, n_used, interval;
	int64_t t_count[N_GGML_TYPES + 1] = { 0 }, t_params[N_GGML_TYPES + 1] = { 0 };
	uint64_t t_bytes[N_GGML_TYPES + 1] = { 0 }, data_bytes = 0;
	int64_t fsize;
	bool used[N_GGML_TYPES + 1] = { false };

	if (!g)
		return cmd_fail(&err);
	fsize = lynn_file_size(path, NULL);
	if (lynn_gguf_get_str(g, "general.architecture", false, &s, &len, NULL) == 0 && s)
		snprintf(arch, sizeof arch, "%.*s", (int)LYNN_MIN(len, sizeof arch - 1), s);
	n_layers = gguf_key_int(g, arch, "block_count");
	n_exp = gguf_key_int(g, arch, "expert_count");
	n_used = gguf_key_int(g, arch, "expert_used_count");
	interval = gguf_key_int(g, arch, "full_attention_interval");
	for (size_t i = 0; i < lynn_gguf_n_tensors(g); i++) {
		const struct lynn_gguf_tensor *t = lynn_gguf_tensor(g, i);
		int64_t n = 1;
		uint32_t ty = t->type < N_GGML_TYPES ? t->type : N_GGML_TYPES;
		for (uint32_t d = 0; d < t->n_dims; d++)
			n *= (int64_t)t->ne[d];
		if (gguf_is_scale(t->name))
			n = 0;
		n_params += n;
		if (strstr(t->name, "_exps"))
			n_routed += n;
		t_count[ty]++;
		t_params[ty] += n;
		t_bytes[ty] += t->size;
		used[ty] = true;
		data_bytes += t->size;
	}
	n_active = n_params;
	if (n_exp > 0 && n_used > 0 && n_used <= n_exp)
		n_active = n_params - n_routed + share(n_routed, n_used, n_exp);
	/* the type mix, largest share of bytes first */
	for (;;) {
		int best = -1;
		for (int ty = 0; ty <= N_GGML_TYPES; ty++)
			if (used[ty] && (best < 0 || t_bytes[ty] > t_bytes[best]))
				best = ty;
		if (best < 0)
			break;
		used[best] = false;
		{
			size_t l = strlen(mix);
			const char *nm = best < N_GGML_TYPES ? lynn_gguf_type_name((uint32_t)best) : NULL;
			snprintf(mix + l, sizeof mix - l, "%s%s", l > 4 ? " + " : " ", nm ? nm : "other");
		}
	}
	for (int ty = 0; ty <= N_GGML_TYPES; ty++)
		used[ty] = t_count[ty] > 0;
	if (json) {
		cJSON *o = cJSON_CreateObject(), *x, *a;
		char *out;
		cJSON_AddStringToObject(o, "format", "gguf");
		cJSON_AddStringToObject(o, "path", path);
		if (arch[0])
			cJSON_AddStringToObject(o, "architecture", arch);
		else
			cJSON_AddNullToObject(o, "architecture");
		cJSON_AddNumberToObject(o, "gguf_version", lynn_gguf_version(g));
		cJSON_AddNumberToObject(o, "n_tensors", (double)lynn_gguf_n_tensors(g));
		cJSON_AddNumberToObject(o, "n_params", (double)n_params);
		cJSON_AddNumberToObject(o, "n_params_active", (double)n_active);
		cJSON_AddNumberToObject(o, "n_params_routed_experts", (double)n_routed);
		cJSON_AddStringToObject(o, "quantization", mix);
		if (n_layers > 0)
			cJSON_AddNumberToObject(o, "n_layers", (double)n_layers);
		if (n_layers > 0 && n_layers <= 4096 && interval > 0) {
			a = cJSON_AddArrayToObject(o, "layer_types");
			for (int64_t i = 0; a && i < n_layers; i++)
				cJSON_AddItemToArray(a, cJSON_CreateString((i + 1) % interval
										   ? "linear_attention"
										   : "full_attention"));
		}
		if (n_exp > 0)
			cJSON_AddNumberToObject(o, "n_experts", (double)n_exp);
		if (n_used > 0)
			cJSON_AddNumberToObject(o, "n_experts_per_tok", (double)n_used);
		x = cJSON_AddObjectToObject(o, "dtypes");
		for (int ty = 0; x && ty <= N_GGML_TYPES; ty++)
			if (used[ty]) {
				const char *nm = ty < N_GGML_TYPES ? lynn_gguf_type_name((uint32_t)ty) : NULL;
				cJSON *e = cJSON_AddObjectToObject(x, nm ? nm : "other");
				cJSON_AddNumberToObject(e, "tensors", (double)t_count[ty]);
				cJSON_AddNumberToObject(e, "params", (double)t_params[ty]);
				cJSON_AddNumberToObject(e, "bytes", (double)t_bytes[ty]);
			}
		cJSON_AddNumberToObject(o, "total_bytes", (double)fsize);
		a = cJSON_AddArrayToObject(o, "files");
		{
			cJSON *e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "name", base_name(path));
			cJSON_AddNumberToObject(e, "bytes", (double)fsize);
			cJSON_AddNumberToObject(e, "n_tensors", (double)lynn_gguf_n_tensors(g));
			cJSON_AddItemToArray(a, e);
		}
		if (tensors) {
			a = cJSON_AddArrayToObject(o, "tensors");
			for (size_t i = 0; a && i < lynn_gguf_n_tensors(g); i++) {
				const struct lynn_gguf_tensor *t = lynn_gguf_tensor(g, i);
				const char *nm = lynn_gguf_type_name(t->type);
				cJSON *e = cJSON_CreateObject(), *sh;
				cJSON_AddStringToObject(e, "name", t->name);
				cJSON_AddStringToObject(e, "dtype", nm ? nm : "other");
				sh = cJSON_AddArrayToObject(e, "shape"); /* PyTorch order: ne reversed */
				for (uint32_t d = t->n_dims; sh && d > 0; d--)
					cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->ne[d - 1]));
				cJSON_AddStringToObject(e, "file", base_name(path));
				cJSON_AddItemToArray(a, e);
			}
		}
		out = lynn_json_print_pretty(o);
		cJSON_Delete(o);
		if (out)
			fputs(out, stdout);
		free(out);
	} else {
		char a[32], b[32];
		printf("path:          %s\n", path);
		printf("format:        gguf v%u, 1 file\n", lynn_gguf_version(g));
		printf("architecture:  %s\n", arch[0] ? arch : "unknown (no general.architecture)");
		if (n_layers > 0) {
			printf("layers:        %lld", (long long)n_layers);
			if (interval > 0)
				printf(" (full attention every %lld)", (long long)interval);
			printf("\n");
		}
		if (n_exp > 0)
			printf("experts:       %lld routed (%lld per token)\n", (long long)n_exp,
			       (long long)n_used);
		human_count(n_params, a, sizeof a);
		human_count(n_active, b, sizeof b);
		printf("parameters:    %s total (%lld), %s active per token (%lld)\n", a,
		       (long long)n_params, b, (long long)n_active);
		printf("quantization:  %s\n", mix);
		printf("dtypes:       ");
		for (int ty = 0; ty <= N_GGML_TYPES; ty++)
			if (used[ty]) {
				const char *nm = ty < N_GGML_TYPES ? lynn_gguf_type_name((uint32_t)ty) : NULL;
				human_bytes(t_bytes[ty], a, sizeof a);
				printf(" %s %lld tensors %s;", nm ? nm : "other", (long long)t_count[ty], a);
			}
		printf("\n");
		printf("tensors:       %zu\n", lynn_gguf_n_tensors(g));
		human_bytes((uint64_t)(fsize > 0 ? fsize : 0), a, sizeof a);
		printf("files:         %s in 1 file (tensor data %llu bytes)\n", a,
		       (unsigned long long)data_bytes);
		if (tensors) {
			printf("\n%-64s %-8s %-24s %s\n", "name", "dtype", "shape", "file");
			for (size_t i = 0; i < lynn_gguf_n_tensors(g); i++) {
				const struct lynn_gguf_tensor *t = lynn_gguf_tensor(g, i);
				const char *nm = lynn_gguf_type_name(t->type);
				char sh[160];
				size_t o = (size_t)snprintf(sh, sizeof sh, "[");
				for (uint32_t d = t->n_dims; d > 0 && o < sizeof sh; d--)
					o += (size_t)snprintf(sh + o, sizeof sh - o, "%s%llu",
							      d < t->n_dims ? ", " : "",
							      (unsigned long long)t->ne[d - 1]);
				if (o < sizeof sh)
					snprintf(sh + o, sizeof sh - o, "]");
				printf("%-64s %-8s %-24s %s\n", t->name, nm ? nm : "other", sh,
				       base_name(path));
			}
		}
	}
	lynn_gguf_close(g);
	if (fflush(stdout)) {
		lynn_errf(&err, -LYNN_EIO, "inspect: writing to stdout failed");
		return cmd_fail(&err);
	}
	return 0;
}

/* ===== the command ===== */

static bool ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

int cmd_inspect(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "tensors", no_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct info in;
	struct lynn_err err = { 0 };
	bool json = false, tensors = false;
	const char *path;
	int opt, rc = 0;

	memset(&in, 0, sizeof in);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
		if (cmd_common_opt(opt))
			continue;
		switch (opt) {
		case 'j':
			json = true;
			break;
		case 't':
			tensors = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cmd_usage_error("inspect", "unknown option");
		}
	}
	if (optind != argc - 1)
		return cmd_usage_error("inspect", "expected one PATH (a model folder or a .safetensors file)");
	path = argv[optind];
	if (ends_with(path, ".gguf") && !lynn_dir_exists(path))
		return inspect_gguf(path, json, tensors);
	in.ck = lynn_ckpt_open(path, &err);
	if (!in.ck)
		return cmd_fail(&err);
	rc = load_config(&in, lynn_ckpt_dir(in.ck), &err);
	if (rc) {
		rc = cmd_fail(&err);
		goto out;
	}
	gather(&in);
	if (json) {
		cJSON *o = build_json(&in, path, tensors);
		char *s = o ? lynn_json_print_pretty(o) : NULL;
		cJSON_Delete(o);
		if (!s) {
			lynn_errf(&err, -LYNN_ENOMEM, "inspect: out of memory");
			rc = cmd_fail(&err);
			goto out;
		}
		fputs(s, stdout);
		free(s);
	} else {
		print_text(&in, path, tensors);
	}
	if (fflush(stdout)) {
		lynn_errf(&err, -LYNN_EIO, "inspect: writing to stdout failed");
		rc = cmd_fail(&err);
	}
out:
	if (in.have_cfg)
		lynn_config_release(&in.cfg);
	lynn_ckpt_close(in.ck);
	return rc;
}
