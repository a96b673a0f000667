/* model_gguf.c - binding a llama.cpp `qwen35moe` GGUF file's weights to the
 * runner (include/lynn/model.h, lynn_model_open on a .gguf path).
 *
 * Names, shapes and the converter's transforms: weight-formats.md §4.5 and
 * qwen35moe-architecture.md §2.4. The binding runs them natively instead of
 * undoing them:
 *   - ne[] is the PyTorch shape reversed: a matrix [n_out, n_in] has
 *     ne = {n_in, n_out}; stacked experts ne = {n_in, n_out, E};
 *   - norms already carry the +1 (not added again; ssm_norm has none);
 *   - ssm_a is -exp(A_log) already; ssm_conv1d is [C, K] (same bytes as
 *     HF's [C, 1, K]);
 *   - the DeltaNet v-heads are in ggml's tiled order (v-head h uses k-head
 *     h % Hk, not h / (Hv / Hk)): every v-side tensor is permuted alike, so
 *     the forward only changes that mapping (m->v_tiled).
 * Matrices stay in the file's mmap in their ggml type: F32/F16/BF16 go to the
 * usual kernels, quantized ones (include/lynn/ggml_quants.h) are dequantized
 * a row chunk at a time inside the product. Small vectors become f32.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lynn/gguf.h"
#include "lynn/util.h"
#include "model_int.h"

#define ARCH "qwen35moe"

struct gb {
	struct lynn_model *m;
	const char *path;
	struct lynn_err *err;
};

bool lynn_model_path_is_gguf(const char *path)
{
	size_t n = path ? strlen(path) : 0;
	return n >= 5 && !strcasecmp(path + n - 5, ".gguf");
}

/* ===== config from metadata ===== */

static int kv_pos(struct gb *b, const char *key, bool required, int def, int *out)
{
	char k[96];
	int64_t v = def;
	snprintf(k, sizeof k, ARCH ".%s", key);
	int rc = lynn_gguf_get_int(b->m->gguf, k, required, &v, b->err);
	if (rc)
		return lynn_errf(b->err, rc, "model: '%s': %s", b->path, b->err ? b->err->msg : k);
	if (v <= 0 || v > (1 << 24))
		return lynn_errf(b->err, -LYNN_EFORMAT, "model: '%s': key '%s' = %lld must be between 1 "
				 "and %d", b->path, k, (long long)v, 1 << 24);
	*out = (int)v;
	return 0;
}

static int kv_float(struct gb *b, const char *key, double def, double *out)
{
	char k[96];
	double v = def;
	snprintf(k, sizeof k, ARCH ".%s", key);
	int rc = lynn_gguf_get_float(b->m->gguf, k, false, &v, b->err);
	if (rc)
		return lynn_errf(b->err, rc, "model: '%s': %s", b->path, b->err ? b->err->msg : k);
	if (!(v > 0.0))
		return lynn_errf(b->err, -LYNN_EFORMAT, "model: '%s': key '%s' must be positive",
				 b->path, k);
	*out = v;
	return 0;
}

static int opt_id(struct gb *b, const char *key, int32_t *out)
{
	int64_t v = -1;
	int rc = lynn_gguf_get_int(b->m->gguf, key, false, &v, b->err);
	if (rc)
		return lynn_errf(b->err, rc, "model: '%s': %s", b->path, b->err ? b->err->msg : key);
	*out = v >= 0 && v < INT32_MAX ? (int32_t)v : -1;
	return 0;
}

/* An optional number of the metadata, of a float or an integer type (as
 * llama.cpp reads it): *out unchanged when absent. */
static int opt_num(struct gb *b, const char *key, double *out)
{
	int64_t i;
	int rc = lynn_gguf_get_float(b->m->gguf, key, false, out, NULL);
	if (rc == -LYNN_EFORMAT && !(rc = lynn_gguf_get_int(b->m->gguf, key, false, &i, NULL)))
		*out = (double)i;
	if (rc)
		return lynn_errf(b->err, rc, "model: '%s': key '%s' is not a number", b->path, key);
	return 0;
}

/* The model maker's sampling, general.sampling.* (llama.cpp's converter
 * copies generation_config.json's there and llama-server reads it): NAN /
 * -1 when absent, as config.c leaves generation_config.json's. */
static int load_sampling(struct gb *b)
{
	struct lynn_config *c = &b->m->cfg;
	double top_k = NAN;
	int rc;
	c->gen_temperature = c->gen_top_p = c->gen_min_p = c->gen_repetition_penalty = NAN;
	if ((rc = opt_num(b, "general.sampling.temp", &c->gen_temperature)) ||
	    (rc = opt_num(b, "general.sampling.top_p", &c->gen_top_p)) ||
	    (rc = opt_num(b, "general.sampling.min_p", &c->gen_min_p)) ||
	    (rc = opt_num(b, "general.sampling.top_k", &top_k)))
		return rc;
	if (!isnan(top_k) && (top_k != floor(top_k) || top_k < 0 || top_k > 1e9))
		return lynn_errf(b->err, -LYNN_EFORMAT, "model: '%s': key 'general.sampling.top_k' must be a "
				 "whole number >= 0", b->path);
	c->gen_top_k = isnan(top_k) ? -1 : (int64_t)top_k;
	return 0;
}

static int load_config(struct gb *b)
{
	struct lynn_config *c = &b->m->cfg;
	const struct lynn_gguf *g = b->m->gguf;
	const char *arch = NULL;
	size_t al = 0;
	int rc, kl = 0, vl = 0, inner = 0, interval = 4;

	if ((rc = lynn_gguf_get_str(g, "general.architecture", true, &arch, &al, b->err)))
		return lynn_errf(b->err, rc, "model: '%s': %s", b->path, b->err ? b->err->msg : "");
	if (al != strlen(ARCH) || memcmp(arch, ARCH, al))
		return lynn_errf(b->err, -LYNN_EUNSUPPORTED, "model: '%s': general.architecture '%.*s' "
				 "is not supported (only " ARCH ")", b->path, (int)(al > 64 ? 64 : al), arch);
	snprintf(c->model_type, sizeof c->model_type, "qwen3_5_moe_text");
	snprintf(c->architecture, sizeof c->architecture, "gguf:" ARCH);
	if ((rc = kv_pos(b, "block_count", true, 0, &c->n_layers)) ||
	    (rc = kv_pos(b, "embedding_length", true, 0, &c->hidden_size)) ||
	    (rc = kv_pos(b, "attention.head_count", true, 0, &c->n_heads)) ||
	    (rc = kv_pos(b, "attention.head_count_kv", true, 0, &c->n_kv_heads)) ||
	    (rc = kv_pos(b, "attention.key_length", true, 0, &kl)) ||
	    (rc = kv_pos(b, "attention.value_length", false, kl, &vl)) ||
	    (rc = kv_pos(b, "expert_count", true, 0, &c->n_experts)) ||
	    (rc = kv_pos(b, "expert_used_count", true, 0, &c->n_experts_per_tok)) ||
	    (rc = kv_pos(b, "expert_feed_forward_length", true, 0, &c->moe_inter)) ||
	    (rc = kv_pos(b, "expert_shared_feed_forward_length", true, 0, &c->shared_inter)) ||
	    (rc = kv_pos(b, "rope.dimension_count", true, 0, &c->rot_dim)) ||
	    (rc = kv_pos(b, "ssm.conv_kernel", true, 0, &c->lin_conv_kernel)) ||
	    (rc = kv_pos(b, "ssm.state_size", true, 0, &c->lin_k_dim)) ||
	    (rc = kv_pos(b, "ssm.group_count", true, 0, &c->lin_n_k_heads)) ||
	    (rc = kv_pos(b, "ssm.time_step_rank", true, 0, &c->lin_n_v_heads)) ||
	    (rc = kv_pos(b, "ssm.inner_size", true, 0, &inner)) ||
	    (rc = kv_float(b, "attention.layer_norm_rms_epsilon", 1e-6, &c->rms_eps)) ||
	    (rc = kv_float(b, "rope.freq_base", 1e7, &c->rope_theta)))
		return rc;
	if (kl != vl || inner % c->lin_n_v_heads || c->n_layers > 4096)
		return lynn_errf(b->err, -LYNN_EFORMAT, "model: '%s': " ARCH ".attention.key_length %d / "
				 "value_length %d differ, ssm.inner_size %d is not a multiple of "
				 "ssm.time_step_rank %d, or block_count %d is over 4096", b->path, kl, vl,
				 inner, c->lin_n_v_heads, c->n_layers);
	c->head_dim = kl;
	c->lin_v_dim = inner / c->lin_n_v_heads;
	c->partial_rotary = (double)c->rot_dim / c->head_dim;
	c->mrope_section[0] = c->mrope_section[1] = c->mrope_section[2] = 0;

	/* layer types: attention.recurrent_layers (bools), else full_attention_interval */
	c->layer_types = calloc((size_t)c->n_layers, sizeof *c->layer_types);
	if (!c->layer_types)
		return lynn_errf(b->err, -LYNN_ENOMEM, "model: out of memory");
	struct lynn_gguf_arr rl = { 0 };
	if ((rc = lynn_gguf_get_arr(g, ARCH ".attention.recurrent_layers", false, &rl, b->err)))
		return lynn_errf(b->err, rc, "model: '%s': %s", b->path, b->err ? b->err->msg : "");
	if (rl.data) {
		if (rl.n != (uint64_t)c->n_layers ||
		    (rl.type != LYNN_GGUF_BOOL && rl.type != LYNN_GGUF_UINT8 && rl.type != LYNN_GGUF_INT8 &&
		     rl.type != LYNN_GGUF_INT32 && rl.type != LYNN_GGUF_UINT32))
			return lynn_errf(b->err, -LYNN_EFORMAT, "model: '%s': " ARCH ".attention."
					 "recurrent_layers must be %d bools", b->path, c->n_layers);
		for (int i = 0; i < c->n_layers; i++)
			c->layer_types[i] = lynn_gguf_arr_int(&rl, (uint64_t)i) ? LYNN_LAYER_LINEAR
										 : LYNN_LAYER_FULL;
	} else {
		if ((rc = kv_pos(b, "full_attention_interval", false, 4, &interval)))
			return rc;
		for (int i = 0; i < c->n_layers; i++)
			c->layer_types[i] = (i + 1) % interval ? LYNN_LAYER_LINEAR : LYNN_LAYER_FULL;
	}

	/* vocabulary: the embedding's rows (vocab_size and the tokenizer may be absent) */
	const struct lynn_gguf_tensor *emb = lynn_gguf_find_tensor(g, "token_embd.weight");
	if (!emb)
		return lynn_errf(b->err, -LYNN_ENOTFOUND, "model: '%s': missing tensor "
				 "'token_embd.weight'", b->path);
	if (emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > (1 << 24))
		return lynn_errf(b->err, -LYNN_EFORMAT, "model: '%s': tensor 'token_embd.weight' must be "
				 "2-D with 1..2^24 rows", b->path);
	c->vocab_size = (int)emb->ne[1];
	c->tie_word_embeddings = !lynn_gguf_find_tensor(g, "output.weight");
	c->bos_id = c->pad_id = -1;
	int32_t eos = -1, eot = -1;
	if ((rc = load_sampling(b)) || (rc = opt_id(b, "tokenizer.ggml.eos_token_id", &eos)) ||
	    (rc = opt_id(b, "tokenizer.ggml.eot_token_id", &eot)) ||
	    (rc = opt_id(b, "tokenizer.ggml.bos_token_id", &c->bos_id)) ||
	    (rc = opt_id(b, "tokenizer.ggml.padding_token_id", &c->pad_id)))
		return rc;
	c->n_eos = 0;
	if (eos >= 0)
		c->eos_ids[c->n_eos++] = eos;
	if (eot >= 0 && eot != eos)
		c->eos_ids[c->n_eos++] = eot;
	snprintf(c->quant_method, sizeof c->quant_method, "gguf");
	return 0;
}

/* ===== tensors ===== */

static const struct lynn_gguf_tensor *find(struct gb *b, const char *name)
{
	const struct lynn_gguf_tensor *t = lynn_gguf_find_tensor(b->m->gguf, name);
	if (!t)
		lynn_errf(b->err, -LYNN_ENOTFOUND, "model: '%s': missing tensor '%s'", b->path, name);
	return t;
}

/* Shape (ggml order, n dims; trailing 1s in the file are allowed) and type. */
static int check(struct gb *b, const struct lynn_gguf_tensor *t, int nd, const int64_t *ne)
{
	bool ok = t->n_dims >= (uint32_t)nd;
	for (uint32_t i = 0; ok && i < t->n_dims; i++)
		ok = (int64_t)t->ne[i] == (i < (uint32_t)nd ? ne[i] : 1);
	if (!ok) {
		char want[96] = "", got[96] = "";
		for (int i = 0; i < nd; i++)
			snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "," : "",
				 (long long)ne[i]);
		for (uint32_t i = 0; i < t->n_dims && i < 4; i++)
			snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? "," : "",
				 (unsigned long long)t->ne[i]);
		return lynn_errf(b->err, -LYNN_EFORMAT, "model: '%s': tensor '%s': ne [%s], expected [%s]",
				 b->path, t->name, got, want);
	}
	if (!lynn_ggml_type_ok(t->type) || !lynn_ggml_row_bytes(t->type, ne[0])) {
		const char *tn = lynn_gguf_type_name(t->type);
		return lynn_errf(b->err, -LYNN_EUNSUPPORTED, "model: '%s': tensor '%s': ggml type %s (%u) "
				 "not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, "
				 "Q6_K)", b->path, t->name, tn ? tn : "unknown", t->type);
	}
	return 0;
}

/* A matrix starting at `data` (n_out rows of n_in) of ggml type `type`. */
static int set_lin(struct gb *b, struct lin *l, uint32_t type, const void *data, int64_t n_out,
		   int64_t n_in, const char *hf_name)
{
	memset(l, 0, sizeof *l);
	l->n_out = n_out;
	l->n_in = n_in;
	switch (type) {
	case LYNN_GGML_F32: l->dt = LYNN_DTYPE_F32; l->w = data; break;
	case LYNN_GGML_F16: l->dt = LYNN_DTYPE_F16; l->w = data; break;
	case LYNN_GGML_BF16: l->dt = LYNN_DTYPE_BF16; l->w = data; break;
	default:
		l->is_gg = true;
		l->dt = LYNN_DTYPE_U8;
		l->gg = (struct lynn_ggml_view){ type, data, n_out, n_in, lynn_ggml_row_bytes(type, n_in) };
		break;
	}
	l->name = strdup(hf_name);
	if (!l->name)
		return lynn_errf(b->err, -LYNN_ENOMEM, "model: out of memory");
	return 0;
}

static int bind_lin(struct gb *b, struct lin *l, const char *name, int64_t n_out, int64_t n_in,
		    const char *hf_name)
{
	const struct lynn_gguf_tensor *t = find(b, name);
	if (!t)
		return -LYNN_ENOTFOUND;
	int64_t ne[2] = { n_in, n_out };
	int rc = check(b, t, n_out == 1 ? 1 : 2, ne);
	return rc ? rc : set_lin(b, l, t->type, t->data, n_out, n_in, hf_name);
}

/* A vector of n values (ggml shape ne, nd dims) into f32. */
static int bind_vec(struct gb *b, float **out, const char *name, int nd, const int64_t *ne)
{
	const struct lynn_gguf_tensor *t = find(b, name);
	if (!t)
		return -LYNN_ENOTFOUND;
	int rc = check(b, t, nd, ne);
	if (rc)
		return rc;
	int64_t n = 1;
	for (int i = 0; i < nd; i++)
		n *= ne[i];
	float *v = malloc((size_t)n * sizeof *v);
	if (!v)
		return lynn_errf(b->err, -LYNN_ENOMEM, "model: out of memory");
	lynn_ggml_dequant(t->type, t->data, n, v);
	*out = v;
	return 0;
}

#define NAME(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)
#define HF(...) (snprintf(hf, sizeof hf, __VA_ARGS__), hf)

/* Routed experts: ffn_{gate,up}_exps (or fused ffn_gate_up_exps: gate rows
 * first) ne {H, I, E} and ffn_down_exps ne {I, H, E}; expert e is the e-th
 * slab of n_out rows. */
static int bind_experts(struct gb *b, struct layer *L, int li)
{
	struct lynn_model *m = b->m;
	char nm[96], hf[128];
	int rc;
	const struct lynn_gguf_tensor *gt, *ut, *dt, *gu;
	L->eg = calloc((size_t)m->E, sizeof *L->eg);
	L->eu = calloc((size_t)m->E, sizeof *L->eu);
	L->ed = calloc((size_t)m->E, sizeof *L->ed);
	if (!L->eg || !L->eu || !L->ed)
		return lynn_errf(b->err, -LYNN_ENOMEM, "model: out of memory");
	int64_t sg[3] = { m->H, m->I, m->E }, s2[3] = { m->H, 2 * (int64_t)m->I, m->E },
		sd[3] = { m->I, m->H, m->E };
	gu = lynn_gguf_find_tensor(m->gguf, NAME("blk.%d.ffn_gate_up_exps.weight", li));
	if (gu) {
		if ((rc = check(b, gu, 3, s2)))
			return rc;
		gt = ut = gu;
	} else {
		if (!(gt = find(b, NAME("blk.%d.ffn_gate_exps.weight", li))) || (rc = check(b, gt, 3, sg)))
			return gt ? rc : -LYNN_ENOTFOUND;
		if (!(ut = find(b, NAME("blk.%d.ffn_up_exps.weight", li))) || (rc = check(b, ut, 3, sg)))
			return ut ? rc : -LYNN_ENOTFOUND;
	}
	if (!(dt = find(b, NAME("blk.%d.ffn_down_exps.weight", li))) || (rc = check(b, dt, 3, sd)))
		return dt ? rc : -LYNN_ENOTFOUND;
	size_t gr = lynn_ggml_row_bytes(gt->type, m->H), ur = lynn_ggml_row_bytes(ut->type, m->H),
	       dr = lynn_ggml_row_bytes(dt->type, m->I);
	for (int e = 0; e < m->E; e++) {
		const uint8_t *g0 = (const uint8_t *)gt->data + (size_t)e * (gu ? 2 : 1) * m->I * gr;
		const uint8_t *u0 = gu ? g0 + (size_t)m->I * gr : (const uint8_t *)ut->data + (size_t)e * m->I * ur;
		if ((rc = set_lin(b, &L->eg[e], gt->type, g0, m->I, m->H,
				  HF("layers.%d.mlp.experts.%d.gate_proj.weight", li, e))) ||
		    (rc = set_lin(b, &L->eu[e], ut->type, u0, m->I, m->H,
				  HF("layers.%d.mlp.experts.%d.up_proj.weight", li, e))) ||
		    (rc = set_lin(b, &L->ed[e], dt->type, (const uint8_t *)dt->data + (size_t)e * m->H * dr,
				  m->H, m->I, HF("layers.%d.mlp.experts.%d.down_proj.weight", li, e))))
			return rc;
	}
	return 0;
}

static int bind_layer(struct gb *b, int li)
{
	struct lynn_model *m = b->m;
	struct layer *L = &m->layers[li];
	char nm[96], hf[128];
	int rc;
	int64_t sH[1] = { m->H };
	L->type = m->cfg.layer_types[li];
	if ((rc = bind_vec(b, &L->in_norm, NAME("blk.%d.attn_norm.weight", li), 1, sH)) ||
	    (rc = bind_vec(b, &L->post_norm, NAME("blk.%d.post_attention_norm.weight", li), 1, sH)))
		return rc;
	if (L->type == LYNN_LAYER_FULL) {
		int64_t shd[1] = { m->hd }, qo = (int64_t)m->nh * m->hd, kv = (int64_t)m->nkv * m->hd;
		if ((rc = bind_lin(b, &L->q, NAME("blk.%d.attn_q.weight", li), 2 * qo, m->H,
				   HF("layers.%d.self_attn.q_proj.weight", li))) ||
		    (rc = bind_lin(b, &L->k, NAME("blk.%d.attn_k.weight", li), kv, m->H,
				   HF("layers.%d.self_attn.k_proj.weight", li))) ||
		    (rc = bind_lin(b, &L->v, NAME("blk.%d.attn_v.weight", li), kv, m->H,
				   HF("layers.%d.self_attn.v_proj.weight", li))) ||
		    (rc = bind_lin(b, &L->o, NAME("blk.%d.attn_output.weight", li), m->H, qo,
				   HF("layers.%d.self_attn.o_proj.weight", li))) ||
		    (rc = bind_vec(b, &L->q_norm, NAME("blk.%d.attn_q_norm.weight", li), 1, shd)) ||
		    (rc = bind_vec(b, &L->k_norm, NAME("blk.%d.attn_k_norm.weight", li), 1, shd)))
			return rc;
	} else {
		int64_t sv[1] = { m->Hv }, sdv[1] = { m->dv }, sc[2] = { m->K, m->conv_dim },
			vw = (int64_t)m->Hv * m->dv;
		if ((rc = bind_lin(b, &L->qkv, NAME("blk.%d.attn_qkv.weight", li), m->conv_dim, m->H,
				   HF("layers.%d.linear_attn.in_proj_qkv.weight", li))) ||
		    (rc = bind_lin(b, &L->z, NAME("blk.%d.attn_gate.weight", li), vw, m->H,
				   HF("layers.%d.linear_attn.in_proj_z.weight", li))) ||
		    (rc = bind_lin(b, &L->b, NAME("blk.%d.ssm_beta.weight", li), m->Hv, m->H,
				   HF("layers.%d.linear_attn.in_proj_b.weight", li))) ||
		    (rc = bind_lin(b, &L->a, NAME("blk.%d.ssm_alpha.weight", li), m->Hv, m->H,
				   HF("layers.%d.linear_attn.in_proj_a.weight", li))) ||
		    (rc = bind_lin(b, &L->out, NAME("blk.%d.ssm_out.weight", li), m->H, vw,
				   HF("layers.%d.linear_attn.out_proj.weight", li))) ||
		    (rc = bind_vec(b, &L->conv_w, NAME("blk.%d.ssm_conv1d.weight", li), 2, sc)) ||
		    (rc = bind_vec(b, &L->dt_bias, NAME("blk.%d.ssm_dt.bias", li), 1, sv)) ||
		    (rc = bind_vec(b, &L->neg_a, NAME("blk.%d.ssm_a", li), 1, sv)) ||
		    (rc = bind_vec(b, &L->gnorm, NAME("blk.%d.ssm_norm.weight", li), 1, sdv)))
			return rc;
	}
	if ((rc = bind_lin(b, &L->router, NAME("blk.%d.ffn_gate_inp.weight", li), m->E, m->H,
			   HF("layers.%d.mlp.gate.weight", li))) ||
	    (rc = bind_experts(b, L, li)) ||
	    (rc = bind_lin(b, &L->sg, NAME("blk.%d.ffn_gate_shexp.weight", li), m->Is, m->H,
			   HF("layers.%d.mlp.shared_expert.gate_proj.weight", li))) ||
	    (rc = bind_lin(b, &L->su, NAME("blk.%d.ffn_up_shexp.weight", li), m->Is, m->H,
			   HF("layers.%d.mlp.shared_expert.up_proj.weight", li))) ||
	    (rc = bind_lin(b, &L->sd, NAME("blk.%d.ffn_down_shexp.weight", li), m->H, m->Is,
			   HF("layers.%d.mlp.shared_expert.down_proj.weight", li))) ||
	    (rc = bind_lin(b, &L->sgate, NAME("blk.%d.ffn_gate_inp_shexp.weight", li), 1, m->H,
			   HF("layers.%d.mlp.shared_expert_gate.weight", li))))
		return rc;
	return 0;
}

static int bind_layer_cb(void *b, int li)
{
	return bind_layer(b, li);
}

struct lynn_model *lynn_model_open_gguf(const char *path, const struct lynn_model_opts *opts,
					struct lynn_err *err)
{
	struct lynn_model *m = calloc(1, sizeof *m);
	struct gb b = { m, path, err };
	if (!m) {
		lynn_errf(err, -LYNN_ENOMEM, "model: out of memory");
		return NULL;
	}
	m->gguf = lynn_gguf_open(path, err);
	if (!m->gguf || load_config(&b) || lynn_model_setup(m, path, opts, err))
		goto fail;
	m->v_tiled = true;
	const struct lynn_config *c = &m->cfg;
	int64_t sH[1] = { m->H };

	const struct lynn_gguf_tensor *emb = find(&b, "token_embd.weight");
	int64_t se[2] = { m->H, m->V };
	if (!emb || check(&b, emb, 2, se))
		goto fail;
	switch (emb->type) {
	case LYNN_GGML_F32: m->embed_dt = LYNN_DTYPE_F32; m->embed = emb->data; break;
	case LYNN_GGML_F16: m->embed_dt = LYNN_DTYPE_F16; m->embed = emb->data; break;
	case LYNN_GGML_BF16: m->embed_dt = LYNN_DTYPE_BF16; m->embed = emb->data; break;
	default:
		m->embed_is_gg = true;
		m->embed_dt = LYNN_DTYPE_U8;
		m->embed = emb->data;
		m->embed_gg = (struct lynn_ggml_view){ emb->type, emb->data, m->V, m->H,
						       lynn_ggml_row_bytes(emb->type, m->H) };
		break;
	}
	if (bind_vec(&b, &m->final_norm, "output_norm.weight", 1, sH))
		goto fail;
	if (!c->tie_word_embeddings) {
		if (bind_lin(&b, &m->lm_head, "output.weight", m->V, m->H, "lm_head.weight"))
			goto fail;
	} else if (set_lin(&b, &m->lm_head, emb->type, emb->data, m->V, m->H, "lm_head.weight")) {
		goto fail;
	}
	if (lynn_model_finish(m, bind_layer_cb, &b, err) || lynn_model_place(m, opts, path, err))
		goto fail;
	return m;
fail:
	lynn_model_close(m);
	return NULL;
}
