/*
 * config.c - Qwen3.5-MoE config.json (include/lynn/config.h).
 *
 * Field names and defaults follow transformers' configuration_qwen3_5_moe.py
 * (docs/reference qwen35moe-architecture.md §1): the multimodal wrapper
 * `qwen3_5_moe` keeps every decoder field under text_config; the text-only
 * `qwen3_5_moe_text` is that object flat. RoPE comes from rope_parameters
 * (transformers 5) or rope_scaling (older), falling back to the top-level
 * rope_theta / partial_rotary_factor. eos ids come from generation_config.json
 * when it has them (an int or a list), else from the config.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "lynn/config.h"
#include "lynn/fs.h"
#include "lynn/json.h"

/* Far above any real model; keeps a hostile config from huge allocations. */
#define MAX_FIELD (1 << 24)
#define MAX_LAYERS 4096

struct ctx {
	const char *path;       /* config.json */
	char what[320];         /* "'path'" or "'path' text_config" */
	struct lynn_err *err;
};

/* A required (or defaulted, when def >= 0) positive int field. */
static int get_pos(struct ctx *c, const cJSON *o, const char *key, int def, int *out)
{
	int64_t v = def;
	int rc = lynn_json_get_int(o, key, def < 0, &v, c->what, c->err);
	if (rc)
		return rc;
	if (v <= 0 || v > MAX_FIELD)
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: field '%s' = %lld must be between 1 and %d", c->what,
				 key, (long long)v, MAX_FIELD);
	*out = (int)v;
	return 0;
}

static void copy_str(char *dst, size_t cap, const char *s)
{
	snprintf(dst, cap, "%s", s ? s : "");
}

/* eos_token_id as an int or a list of ints; n left 0 when absent. */
static int get_ids(struct ctx *c, const cJSON *o, const char *key, const char *what,
		   int32_t *ids, int *n)
{
	const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
	const cJSON *e;

	*n = 0;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (cJSON_IsNumber(v)) {
		if (v->valuedouble < 0 || v->valuedouble > INT32_MAX ||
		    floor(v->valuedouble) != v->valuedouble)
			return lynn_errf(c->err, -LYNN_EFORMAT,
					 "config: %s: field '%s' must be a token id", what, key);
		ids[(*n)++] = (int32_t)v->valuedouble;
		return 0;
	}
	if (!cJSON_IsArray(v))
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: field '%s' must be an id or a list of ids", what, key);
	cJSON_ArrayForEach(e, v) {
		if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX ||
		    floor(e->valuedouble) != e->valuedouble)
			return lynn_errf(c->err, -LYNN_EFORMAT,
					 "config: %s: field '%s' must list token ids", what, key);
		if (*n == LYNN_MAX_EOS)
			return lynn_errf(c->err, -LYNN_EUNSUPPORTED,
					 "config: %s: field '%s' lists more than %d ids", what, key,
					 LYNN_MAX_EOS);
		ids[(*n)++] = (int32_t)e->valuedouble;
	}
	return 0;
}

static int get_id(struct ctx *c, const cJSON *o, const char *key, const char *what,
		  int32_t *out)
{
	int32_t ids[LYNN_MAX_EOS];
	int n = 0;
	int rc = get_ids(c, o, key, what, ids, &n);
	if (!rc && n)
		*out = ids[0];
	return rc;
}

/* An optional number of generation_config.json: *out unchanged when absent
 * or null; another type is an error naming the field. */
static int get_opt_num(struct ctx *c, const cJSON *o, const char *key, const char *what, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return lynn_errf(c->err, -LYNN_EFORMAT, "config: %s: field '%s' must be a number", what, key);
	*out = v->valuedouble;
	return 0;
}

static int get_layer_types(struct ctx *c, const cJSON *t, struct lynn_config *cfg)
{
	const cJSON *lt = cJSON_GetObjectItemCaseSensitive(t, "layer_types");
	const cJSON *e;
	int interval = 4, i = 0, rc;

	cfg->layer_types = calloc((size_t)cfg->n_layers, sizeof *cfg->layer_types);
	if (!cfg->layer_types)
		return lynn_errf(c->err, -LYNN_ENOMEM, "config: out of memory");
	if (lt && !cJSON_IsNull(lt)) {
		if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != cfg->n_layers)
			return lynn_errf(c->err, -LYNN_EFORMAT,
					 "config: %s: field 'layer_types' must list %d layer types",
					 c->what, cfg->n_layers);
		cJSON_ArrayForEach(e, lt) {
			if (cJSON_IsString(e) && !strcmp(e->valuestring, "linear_attention"))
				cfg->layer_types[i] = LYNN_LAYER_LINEAR;
			else if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention"))
				cfg->layer_types[i] = LYNN_LAYER_FULL;
			else
				return lynn_errf(c->err, -LYNN_EFORMAT,
						 "config: %s: field 'layer_types' entry %d is not 'linear_attention' or 'full_attention'",
						 c->what, i);
			i++;
		}
		return 0;
	}
	rc = get_pos(c, t, "full_attention_interval", 4, &interval);
	if (rc)
		return rc;
	/* HF-C: layer i is full attention iff (i + 1) % interval == 0 */
	for (i = 0; i < cfg->n_layers; i++)
		cfg->layer_types[i] = (i + 1) % interval ? LYNN_LAYER_LINEAR : LYNN_LAYER_FULL;
	return 0;
}

static int get_rope(struct ctx *c, const cJSON *t, struct lynn_config *cfg)
{
	const cJSON *rp = cJSON_GetObjectItemCaseSensitive(t, "rope_parameters");
	const cJSON *ms;
	bool have_ms = false;
	int rc;

	if (!cJSON_IsObject(rp))
		rp = cJSON_GetObjectItemCaseSensitive(t, "rope_scaling");
	if (!cJSON_IsObject(rp))
		rp = NULL;
	/* HF-C defaults: theta 1e7, partial_rotary_factor 0.25, mrope [11,11,10] */
	cfg->rope_theta = 10000000.0;
	cfg->partial_rotary = 0.25;
	cfg->mrope_section[0] = 11;
	cfg->mrope_section[1] = 11;
	cfg->mrope_section[2] = 10;
	if ((rc = lynn_json_get_double(t, "rope_theta", false, &cfg->rope_theta, c->what, c->err)) ||
	    (rc = lynn_json_get_double(t, "partial_rotary_factor", false, &cfg->partial_rotary,
				       c->what, c->err)))
		return rc;
	if (rp) {
		char what[360];
		snprintf(what, sizeof what, "%s rope_parameters", c->what);
		if ((rc = lynn_json_get_double(rp, "rope_theta", false, &cfg->rope_theta, what,
					       c->err)) ||
		    (rc = lynn_json_get_double(rp, "partial_rotary_factor", false,
					       &cfg->partial_rotary, what, c->err)))
			return rc;
		ms = cJSON_GetObjectItemCaseSensitive(rp, "mrope_section");
		if (ms && !cJSON_IsNull(ms)) {
			int i = 0;
			const cJSON *e;
			have_ms = true;
			if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) != 3)
				return lynn_errf(c->err, -LYNN_EFORMAT,
						 "config: %s: field 'mrope_section' must list 3 ints",
						 what);
			cJSON_ArrayForEach(e, ms) {
				if (!cJSON_IsNumber(e) || e->valuedouble < 0 ||
				    e->valuedouble > MAX_FIELD ||
				    floor(e->valuedouble) != e->valuedouble)
					return lynn_errf(c->err, -LYNN_EFORMAT,
							 "config: %s: field 'mrope_section' must list 3 ints",
							 what);
				cfg->mrope_section[i++] = (int)e->valuedouble;
			}
		}
	}
	if (!(cfg->rope_theta > 0) || !isfinite(cfg->rope_theta))
		return lynn_errf(c->err, -LYNN_EFORMAT, "config: %s: field 'rope_theta' must be > 0",
				 c->what);
	if (!(cfg->partial_rotary > 0 && cfg->partial_rotary <= 1))
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: field 'partial_rotary_factor' must be in (0, 1]", c->what);
	cfg->rot_dim = (int)(cfg->head_dim * cfg->partial_rotary);
	if (cfg->rot_dim <= 0 || cfg->rot_dim % 2)
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: head_dim %d x partial_rotary_factor %g gives rotary dim %d, which must be even and positive",
				 c->what, cfg->head_dim, cfg->partial_rotary, cfg->rot_dim);
	if (!have_ms && 2 * (11 + 11 + 10) != cfg->rot_dim) {
		/* no mrope_section and HF's default does not fit: text positions
		 * use all three rows alike, so one section is equivalent */
		cfg->mrope_section[0] = cfg->rot_dim / 2;
		cfg->mrope_section[1] = cfg->mrope_section[2] = 0;
	}
	if (2 * (cfg->mrope_section[0] + cfg->mrope_section[1] + cfg->mrope_section[2]) !=
	    cfg->rot_dim)
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: field 'mrope_section' [%d, %d, %d] must sum to rotary dim / 2 = %d",
				 c->what, cfg->mrope_section[0], cfg->mrope_section[1],
				 cfg->mrope_section[2], cfg->rot_dim / 2);
	return 0;
}

static int load_text(struct ctx *c, const cJSON *root, const cJSON *t, struct lynn_config *cfg)
{
	const char *s = NULL;
	const cJSON *q;
	int64_t mtp = 0;
	int rc;

	if ((rc = get_pos(c, t, "vocab_size", -1, &cfg->vocab_size)) ||
	    (rc = get_pos(c, t, "hidden_size", -1, &cfg->hidden_size)) ||
	    (rc = get_pos(c, t, "num_hidden_layers", -1, &cfg->n_layers)) ||
	    (rc = get_pos(c, t, "num_attention_heads", -1, &cfg->n_heads)) ||
	    (rc = get_pos(c, t, "num_key_value_heads", -1, &cfg->n_kv_heads)) ||
	    (rc = get_pos(c, t, "head_dim", cfg->hidden_size / cfg->n_heads, &cfg->head_dim)) ||
	    (rc = get_pos(c, t, "linear_num_key_heads", -1, &cfg->lin_n_k_heads)) ||
	    (rc = get_pos(c, t, "linear_num_value_heads", -1, &cfg->lin_n_v_heads)) ||
	    (rc = get_pos(c, t, "linear_key_head_dim", -1, &cfg->lin_k_dim)) ||
	    (rc = get_pos(c, t, "linear_value_head_dim", -1, &cfg->lin_v_dim)) ||
	    (rc = get_pos(c, t, "linear_conv_kernel_dim", 4, &cfg->lin_conv_kernel)) ||
	    (rc = get_pos(c, t, "num_experts", -1, &cfg->n_experts)) ||
	    (rc = get_pos(c, t, "num_experts_per_tok", -1, &cfg->n_experts_per_tok)) ||
	    (rc = get_pos(c, t, "moe_intermediate_size", -1, &cfg->moe_inter)) ||
	    (rc = get_pos(c, t, "shared_expert_intermediate_size", -1, &cfg->shared_inter)))
		return rc;
	if (cfg->n_layers > MAX_LAYERS)
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: field 'num_hidden_layers' = %d is above %d", c->what,
				 cfg->n_layers, MAX_LAYERS);
	if (cfg->n_heads % cfg->n_kv_heads)
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: field 'num_attention_heads' %d is not a multiple of 'num_key_value_heads' %d",
				 c->what, cfg->n_heads, cfg->n_kv_heads);
	if (cfg->lin_n_v_heads % cfg->lin_n_k_heads)
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: field 'linear_num_value_heads' %d is not a multiple of 'linear_num_key_heads' %d",
				 c->what, cfg->lin_n_v_heads, cfg->lin_n_k_heads);
	if (cfg->n_experts_per_tok > cfg->n_experts)
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: field 'num_experts_per_tok' %d exceeds 'num_experts' %d",
				 c->what, cfg->n_experts_per_tok, cfg->n_experts);
	cfg->rms_eps = 1e-6;
	if ((rc = lynn_json_get_double(t, "rms_norm_eps", false, &cfg->rms_eps, c->what, c->err)))
		return rc;
	if (!(cfg->rms_eps > 0 && cfg->rms_eps < 1))
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: field 'rms_norm_eps' must be in (0, 1)", c->what);
	if ((rc = get_rope(c, t, cfg)) || (rc = get_layer_types(c, t, cfg)))
		return rc;
	cfg->tie_word_embeddings = false;
	if ((rc = lynn_json_get_bool(root, "tie_word_embeddings", false, &cfg->tie_word_embeddings,
				     c->what, c->err)) ||
	    (rc = lynn_json_get_bool(t, "tie_word_embeddings", false, &cfg->tie_word_embeddings,
				     c->what, c->err)))
		return rc;
	if ((rc = lynn_json_get_int(t, "mtp_num_hidden_layers", false, &mtp, c->what, c->err)))
		return rc;
	if (mtp < 0 || mtp > MAX_LAYERS)
		return lynn_errf(c->err, -LYNN_EFORMAT,
				 "config: %s: field 'mtp_num_hidden_layers' out of range", c->what);
	cfg->mtp_layers = (int)mtp;
	/* dtype (transformers 5) or torch_dtype, text_config first */
	if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(t, "dtype")))
		s = cJSON_GetObjectItemCaseSensitive(t, "dtype")->valuestring;
	else if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(t, "torch_dtype")))
		s = cJSON_GetObjectItemCaseSensitive(t, "torch_dtype")->valuestring;
	else if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "dtype")))
		s = cJSON_GetObjectItemCaseSensitive(root, "dtype")->valuestring;
	else if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "torch_dtype")))
		s = cJSON_GetObjectItemCaseSensitive(root, "torch_dtype")->valuestring;
	copy_str(cfg->torch_dtype, sizeof cfg->torch_dtype, s);
	q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
	if (!cJSON_IsObject(q))
		q = cJSON_GetObjectItemCaseSensitive(t, "quantization_config");
	if (cJSON_IsObject(q)) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
		const cJSON *f = cJSON_GetObjectItemCaseSensitive(q, "format");
		if (!cJSON_IsString(f))
			f = cJSON_GetObjectItemCaseSensitive(q, "quant_algo");
		copy_str(cfg->quant_method, sizeof cfg->quant_method,
			 cJSON_IsString(m) ? m->valuestring : NULL);
		copy_str(cfg->quant_format, sizeof cfg->quant_format,
			 cJSON_IsString(f) ? f->valuestring : NULL);
	}
	return 0;
}

int lynn_config_load(struct lynn_config *cfg, const char *path, struct lynn_err *err)
{
	struct ctx c = { .err = err };
	char *cfg_path = NULL, *gen_path = NULL, *dir = NULL;
	cJSON *root = NULL, *gen = NULL;
	const cJSON *t, *arch;
	const char *mt = NULL;
	int rc = 0;

	memset(cfg, 0, sizeof *cfg);
	cfg->bos_id = cfg->pad_id = -1;
	cfg->gen_temperature = cfg->gen_top_p = cfg->gen_min_p = cfg->gen_repetition_penalty = NAN;
	cfg->gen_top_k = -1;
	if (lynn_dir_exists(path)) {
		cfg_path = lynn_path_join(path, "config.json");
		dir = strdup(path);
	} else {
		const char *sl = strrchr(path, '/');
		cfg_path = strdup(path);
		dir = sl ? strndup(path, (size_t)(sl - path) + (sl == path)) : strdup(".");
	}
	if (!cfg_path || !dir || !(gen_path = lynn_path_join(dir, "generation_config.json"))) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "config: out of memory");
		goto out;
	}
	c.path = cfg_path;
	snprintf(c.what, sizeof c.what, "'%s'", cfg_path);
	root = lynn_json_load(cfg_path, LYNN_JSON_MAX_SIZE, err);
	if (!root) {
		rc = err ? err->code : -LYNN_EFORMAT;
		goto out;
	}
	if (!cJSON_IsObject(root)) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "config: '%s': not a JSON object", cfg_path);
		goto out;
	}
	if ((rc = lynn_json_get_str(root, "model_type", true, &mt, c.what, err)))
		goto out;
	copy_str(cfg->model_type, sizeof cfg->model_type, mt);
	arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
	if (cJSON_IsArray(arch) && cJSON_IsString(cJSON_GetArrayItem(arch, 0)))
		copy_str(cfg->architecture, sizeof cfg->architecture,
			 cJSON_GetArrayItem(arch, 0)->valuestring);
	if (!strcmp(mt, "qwen3_5_moe")) {
		t = cJSON_GetObjectItemCaseSensitive(root, "text_config");
		if (!cJSON_IsObject(t)) {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "config: '%s': model_type 'qwen3_5_moe' needs an object field 'text_config'",
				       cfg_path);
			goto out;
		}
		cfg->multimodal = true;
		cfg->has_vision_config =
			cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "vision_config"));
		snprintf(c.what, sizeof c.what, "'%s' text_config", cfg_path);
	} else if (!strcmp(mt, "qwen3_5_moe_text")) {
		t = root;
	} else {
		rc = lynn_errf(err, -LYNN_EUNSUPPORTED,
			       "config: '%s': model_type '%s' is not supported (qwen3_5_moe or qwen3_5_moe_text)",
			       cfg_path, mt);
		goto out;
	}
	if ((rc = load_text(&c, root, t, cfg)))
		goto out;

	/* special ids: generation_config.json first, then text_config, then top level */
	if (lynn_file_exists(gen_path)) {
		char what[320];
		gen = lynn_json_load(gen_path, LYNN_JSON_MAX_SIZE, err);
		if (!gen) {
			rc = err ? err->code : -LYNN_EFORMAT;
			goto out;
		}
		snprintf(what, sizeof what, "'%s'", gen_path);
		double top_k = NAN;
		if ((rc = get_ids(&c, gen, "eos_token_id", what, cfg->eos_ids, &cfg->n_eos)) ||
		    (rc = get_id(&c, gen, "bos_token_id", what, &cfg->bos_id)) ||
		    (rc = get_id(&c, gen, "pad_token_id", what, &cfg->pad_id)) ||
		    (rc = get_opt_num(&c, gen, "temperature", what, &cfg->gen_temperature)) ||
		    (rc = get_opt_num(&c, gen, "top_p", what, &cfg->gen_top_p)) ||
		    (rc = get_opt_num(&c, gen, "min_p", what, &cfg->gen_min_p)) ||
		    (rc = get_opt_num(&c, gen, "repetition_penalty", what, &cfg->gen_repetition_penalty)) ||
		    (rc = get_opt_num(&c, gen, "top_k", what, &top_k)))
			goto out;
		if (!isnan(top_k) && (top_k != floor(top_k) || top_k < 0 || top_k > 1e9)) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "config: %s: field 'top_k' must be a whole number >= 0",
				       what);
			goto out;
		}
		cfg->gen_top_k = isnan(top_k) ? -1 : (int64_t)top_k;
	}
	if (!cfg->n_eos && (rc = get_ids(&c, t, "eos_token_id", c.what, cfg->eos_ids, &cfg->n_eos)))
		goto out;
	if (!cfg->n_eos && t != root &&
	    (rc = get_ids(&c, root, "eos_token_id", cfg_path, cfg->eos_ids, &cfg->n_eos)))
		goto out;
	if (cfg->bos_id < 0 && (rc = get_id(&c, t, "bos_token_id", c.what, &cfg->bos_id)))
		goto out;
	if (cfg->pad_id < 0 && (rc = get_id(&c, t, "pad_token_id", c.what, &cfg->pad_id)))
		goto out;
out:
	cJSON_Delete(root);
	cJSON_Delete(gen);
	free(cfg_path);
	free(gen_path);
	free(dir);
	if (rc)
		lynn_config_release(cfg);
	return rc;
}

void lynn_config_release(struct lynn_config *cfg)
{
	if (!cfg)
		return;
	free(cfg->layer_types);
	cfg->layer_types = NULL;
}
