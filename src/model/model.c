/* model.c - binding a checkpoint's decoder weights, sequence states, LoRA
 * attachment (include/lynn/model.h). Tensor names and shapes:
 * docs/reference/qwen35moe-architecture.md §2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/gguf.h"
#include "lynn/log.h"
#include "lynn/lora.h"
#include "lynn/util.h"
#include "model_int.h"

/* ===== binding helpers ===== */

struct binder {
	struct lynn_model *m;
	const char *path;
	struct lynn_err *err;
};

static const struct lynn_tensor *find(struct binder *b, const char *name)
{
	const struct lynn_tensor *t = lynn_ckpt_find_decoder(b->m->ckpt, name);
	if (!t)
		lynn_errf(b->err, -LYNN_ENOTFOUND, "model: '%s': missing tensor '%s'", b->path, name);
	return t;
}

/* Check a tensor's shape against n dims given as varargs-free array. */
static int check_shape(struct binder *b, const struct lynn_tensor *t, int nd, const int64_t *shape)
{
	bool ok = t->n_dims == nd;
	for (int i = 0; ok && i < nd; i++)
		ok = t->shape[i] == shape[i];
	if (!ok) {
		char want[96] = "", got[96] = "";
		for (int i = 0; i < nd; i++)
			snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld",
				 i ? "," : "", (long long)shape[i]);
		for (int i = 0; i < t->n_dims; i++)
			snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld",
				 i ? "," : "", (long long)t->shape[i]);
		return lynn_errf(b->err, -LYNN_EFORMAT,
				 "model: tensor '%s': shape [%s], expected [%s]", t->name, got, want);
	}
	if (!lynn_cpu_wdtype_ok(t->dtype))
		return lynn_errf(b->err, -LYNN_EUNSUPPORTED,
				 "model: tensor '%s': dtype %s not supported (BF16, F16, F32)", t->name,
				 lynn_dtype_name(t->dtype) ? lynn_dtype_name(t->dtype) : "?");
	return 0;
}

/* Rows [row0, row0 + rows) of expert e of a found NVFP4 linear as `l`. */
static int lin_nvfp4(struct binder *b, struct lin *l, enum lynn_nvfp4_format f,
		     const struct lynn_nvfp4_linear *L, int64_t e, int64_t row0, int64_t rows,
		     const char *name)
{
	int rc = lynn_nvfp4_view_init(&l->nv, f, L, e, b->err);
	if (rc)
		return rc;
	l->nv.packed += row0 * (L->k / 2);
	l->nv.scales += row0 * (L->k / 16);
	l->nv.n = rows;
	l->is_nv = true;
	l->dt = LYNN_DTYPE_U8;
	l->w = l->nv.packed;
	l->n_out = rows;
	l->n_in = L->k;
	l->name = strdup(name);
	if (!l->name)
		return lynn_errf(b->err, -LYNN_ENOMEM, "model: out of memory");
	return 0;
}

static int nvfp4_shape_error(struct binder *b, const struct lynn_nvfp4_linear *L, int64_t ne,
			     int64_t n, int64_t k)
{
	return lynn_errf(b->err, -LYNN_EFORMAT,
			 "model: nvfp4 '%s': [%lld, %lld, %lld] (experts, rows, unpacked columns), "
			 "expected [%lld, %lld, %lld]", L->base, (long long)L->n_experts,
			 (long long)L->n, (long long)L->k, (long long)ne, (long long)n, (long long)k);
}

/* An NVFP4 2-D linear "<module>.weight": *found false when it is not one. */
static int bind_nvfp4(struct binder *b, struct lin *l, const char *name, int64_t n_out,
		      int64_t n_in, bool *found)
{
	struct lynn_nvfp4_linear L;
	enum lynn_nvfp4_format f = lynn_nvfp4_find(b->m->ckpt, name, &L);
	*found = f != LYNN_NVFP4_NONE;
	if (!*found)
		return 0;
	if (L.n_experts || L.n != n_out || L.k != n_in)
		return nvfp4_shape_error(b, &L, 0, n_out, n_in);
	return lin_nvfp4(b, l, f, &L, 0, 0, n_out, name);
}

static int bind_lin(struct binder *b, struct lin *l, const char *name, int64_t n_out, int64_t n_in)
{
	bool nv;
	int rc = bind_nvfp4(b, l, name, n_out, n_in, &nv);
	if (rc || nv)
		return rc;
	const struct lynn_tensor *t = find(b, name);
	if (!t)
		return b->err ? b->err->code : -LYNN_ENOTFOUND;
	int64_t shape[2] = { n_out, n_in };
	rc = check_shape(b, t, 2, shape);
	if (rc)
		return rc;
	l->dt = t->dtype;
	l->w = t->data;
	l->n_out = n_out;
	l->n_in = n_in;
	l->name = strdup(name);
	if (!l->name)
		return lynn_errf(b->err, -LYNN_ENOMEM, "model: out of memory");
	return 0;
}

/* A small vector (any of nd dims totalling n) into f32; plus1 adds 1
 * (zero-centred RMSNorm weights, §3.1). */
static int bind_vec(struct binder *b, float **out, const char *name, int nd, const int64_t *shape,
		    bool plus1)
{
	const struct lynn_tensor *t = find(b, name);
	if (!t)
		return b->err ? b->err->code : -LYNN_ENOTFOUND;
	int rc = check_shape(b, t, nd, shape);
	if (rc)
		return rc;
	float *v = malloc((size_t)t->n_elems * sizeof *v);
	if (!v)
		return lynn_errf(b->err, -LYNN_ENOMEM, "model: out of memory");
	lynn_cpu_row_to_f32(t->dtype, t->data, 0, t->n_elems, v);
	if (plus1)
		for (int64_t i = 0; i < t->n_elems; i++)
			v[i] = 1.0f + v[i];
	*out = v;
	return 0;
}

#define NAME(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)

static int bind_experts(struct binder *b, struct layer *L, int li)
{
	struct lynn_model *m = b->m;
	char nm[160];
	int rc;
	L->eg = calloc((size_t)m->E, sizeof *L->eg);
	L->eu = calloc((size_t)m->E, sizeof *L->eu);
	L->ed = calloc((size_t)m->E, sizeof *L->ed);
	if (!L->eg || !L->eu || !L->ed)
		return lynn_errf(b->err, -LYNN_ENOMEM, "model: out of memory");
	struct lynn_nvfp4_linear G, D;
	enum lynn_nvfp4_format f = lynn_nvfp4_find(b->m->ckpt, NAME("layers.%d.mlp.experts.gate_up_proj.weight", li), &G);
	if (f != LYNN_NVFP4_NONE) { /* fused 3-D NVFP4: gate_up [E, 2I, H/2], down [E, H, I/2] */
		if (G.n_experts != m->E || G.n != 2 * (int64_t)m->I || G.k != m->H)
			return nvfp4_shape_error(b, &G, m->E, 2 * (int64_t)m->I, m->H);
		if (lynn_nvfp4_find(b->m->ckpt, NAME("layers.%d.mlp.experts.down_proj.weight", li), &D) != f)
			return lynn_errf(b->err, -LYNN_ENOTFOUND,
					 "model: '%s': missing the NVFP4 tensor '%s' (in the format of '%s')",
					 b->path, nm, G.base);
		if (D.n_experts != m->E || D.n != m->H || D.k != m->I)
			return nvfp4_shape_error(b, &D, m->E, m->H, m->I);
		for (int e = 0; e < m->E; e++) /* per-expert names, for LoRA lookup */
			if ((rc = lin_nvfp4(b, &L->eg[e], f, &G, e, 0, m->I,
					    NAME("layers.%d.mlp.experts.%d.gate_proj.weight", li, e))) ||
			    (rc = lin_nvfp4(b, &L->eu[e], f, &G, e, m->I, m->I,
					    NAME("layers.%d.mlp.experts.%d.up_proj.weight", li, e))) ||
			    (rc = lin_nvfp4(b, &L->ed[e], f, &D, e, 0, m->H,
					    NAME("layers.%d.mlp.experts.%d.down_proj.weight", li, e))))
				return rc;
		return 0;
	}
	const struct lynn_tensor *gu =
		lynn_ckpt_find_decoder(m->ckpt, NAME("layers.%d.mlp.experts.gate_up_proj", li));
	if (gu) { /* fused 3-D: gate_up [E, 2I, H], down [E, H, I] (§2.2) */
		int64_t s1[3] = { m->E, 2 * (int64_t)m->I, m->H };
		if ((rc = check_shape(b, gu, 3, s1)))
			return rc;
		const struct lynn_tensor *dn = find(b, NAME("layers.%d.mlp.experts.down_proj", li));
		if (!dn)
			return b->err ? b->err->code : -LYNN_ENOTFOUND;
		int64_t s2[3] = { m->E, m->H, m->I };
		if ((rc = check_shape(b, dn, 3, s2)))
			return rc;
		size_t gs = lynn_dtype_size(gu->dtype), ds = lynn_dtype_size(dn->dtype);
		for (int e = 0; e < m->E; e++) {
			const char *base = (const char *)gu->data + (size_t)e * 2 * m->I * m->H * gs;
			L->eg[e] = (struct lin){ .dt = gu->dtype, .w = base, .n_out = m->I, .n_in = m->H };
			L->eu[e] = (struct lin){ .dt = gu->dtype, .w = base + (size_t)m->I * m->H * gs,
						 .n_out = m->I, .n_in = m->H };
			L->ed[e] = (struct lin){ .dt = dn->dtype,
						 .w = (const char *)dn->data + (size_t)e * m->H * m->I * ds,
						 .n_out = m->H, .n_in = m->I };
			L->eg[e].name = strdup(NAME("layers.%d.mlp.experts.%d.gate_proj.weight", li, e));
			L->eu[e].name = strdup(NAME("layers.%d.mlp.experts.%d.up_proj.weight", li, e));
			L->ed[e].name = strdup(NAME("layers.%d.mlp.experts.%d.down_proj.weight", li, e));
			if (!L->eg[e].name || !L->eu[e].name || !L->ed[e].name)
				return lynn_errf(b->err, -LYNN_ENOMEM, "model: out of memory");
		}
		return 0;
	}
	for (int e = 0; e < m->E; e++) { /* per expert (§2.2) */
		if ((rc = bind_lin(b, &L->eg[e], NAME("layers.%d.mlp.experts.%d.gate_proj.weight", li, e),
				   m->I, m->H)) ||
		    (rc = bind_lin(b, &L->eu[e], NAME("layers.%d.mlp.experts.%d.up_proj.weight", li, e),
				   m->I, m->H)) ||
		    (rc = bind_lin(b, &L->ed[e], NAME("layers.%d.mlp.experts.%d.down_proj.weight", li, e),
				   m->H, m->I)))
			return rc;
	}
	return 0;
}

static int bind_layer(struct binder *b, int li)
{
	struct lynn_model *m = b->m;
	struct layer *L = &m->layers[li];
	char nm[160];
	int rc;
	int64_t sH[1] = { m->H };
	L->type = m->cfg.layer_types[li];
	if ((rc = bind_vec(b, &L->in_norm, NAME("layers.%d.input_layernorm.weight", li), 1, sH, true)) ||
	    (rc = bind_vec(b, &L->post_norm, NAME("layers.%d.post_attention_layernorm.weight", li), 1, sH,
			   true)))
		return rc;
	if (L->type == LYNN_LAYER_FULL) {
		int64_t shd[1] = { m->hd };
		if ((rc = bind_lin(b, &L->q, NAME("layers.%d.self_attn.q_proj.weight", li),
				   (int64_t)m->nh * m->hd * 2, m->H)) ||
		    (rc = bind_lin(b, &L->k, NAME("layers.%d.self_attn.k_proj.weight", li),
				   (int64_t)m->nkv * m->hd, m->H)) ||
		    (rc = bind_lin(b, &L->v, NAME("layers.%d.self_attn.v_proj.weight", li),
				   (int64_t)m->nkv * m->hd, m->H)) ||
		    (rc = bind_lin(b, &L->o, NAME("layers.%d.self_attn.o_proj.weight", li), m->H,
				   (int64_t)m->nh * m->hd)) ||
		    (rc = bind_vec(b, &L->q_norm, NAME("layers.%d.self_attn.q_norm.weight", li), 1, shd, true)) ||
		    (rc = bind_vec(b, &L->k_norm, NAME("layers.%d.self_attn.k_norm.weight", li), 1, shd, true)))
			return rc;
	} else {
		int64_t sv[1] = { m->Hv }, sdv[1] = { m->dv }, sc[3] = { m->conv_dim, 1, m->K };
		float *alog = NULL;
		if ((rc = bind_lin(b, &L->qkv, NAME("layers.%d.linear_attn.in_proj_qkv.weight", li),
				   m->conv_dim, m->H)) ||
		    (rc = bind_lin(b, &L->z, NAME("layers.%d.linear_attn.in_proj_z.weight", li),
				   (int64_t)m->Hv * m->dv, m->H)) ||
		    (rc = bind_lin(b, &L->b, NAME("layers.%d.linear_attn.in_proj_b.weight", li), m->Hv, m->H)) ||
		    (rc = bind_lin(b, &L->a, NAME("layers.%d.linear_attn.in_proj_a.weight", li), m->Hv, m->H)) ||
		    (rc = bind_lin(b, &L->out, NAME("layers.%d.linear_attn.out_proj.weight", li), m->H,
				   (int64_t)m->Hv * m->dv)) ||
		    (rc = bind_vec(b, &L->conv_w, NAME("layers.%d.linear_attn.conv1d.weight", li), 3, sc, false)) ||
		    (rc = bind_vec(b, &L->dt_bias, NAME("layers.%d.linear_attn.dt_bias", li), 1, sv, false)) ||
		    (rc = bind_vec(b, &alog, NAME("layers.%d.linear_attn.A_log", li), 1, sv, false)) ||
		    (rc = bind_vec(b, &L->gnorm, NAME("layers.%d.linear_attn.norm.weight", li), 1, sdv, false))) {
			free(alog);
			return rc;
		}
		for (int h = 0; h < m->Hv; h++) /* g = -exp(A_log) * softplus(..) (§3.4 step 4) */
			alog[h] = -expf(alog[h]);
		L->neg_a = alog;
	}
	if ((rc = bind_lin(b, &L->router, NAME("layers.%d.mlp.gate.weight", li), m->E, m->H)) ||
	    (rc = bind_experts(b, L, li)) ||
	    (rc = bind_lin(b, &L->sg, NAME("layers.%d.mlp.shared_expert.gate_proj.weight", li), m->Is, m->H)) ||
	    (rc = bind_lin(b, &L->su, NAME("layers.%d.mlp.shared_expert.up_proj.weight", li), m->Is, m->H)) ||
	    (rc = bind_lin(b, &L->sd, NAME("layers.%d.mlp.shared_expert.down_proj.weight", li), m->H, m->Is)) ||
	    (rc = bind_lin(b, &L->sgate, NAME("layers.%d.mlp.shared_expert_gate.weight", li), 1, m->H)))
		return rc;
	return 0;
}

/* ===== open / close ===== */

int lynn_model_setup(struct lynn_model *m, const char *path, const struct lynn_model_opts *opts,
		     struct lynn_err *err)
{
	const struct lynn_config *c = &m->cfg;
	m->H = c->hidden_size;
	m->V = c->vocab_size;
	m->hd = c->head_dim;
	m->nh = c->n_heads;
	m->nkv = c->n_kv_heads;
	m->Hk = c->lin_n_k_heads;
	m->Hv = c->lin_n_v_heads;
	m->dk = c->lin_k_dim;
	m->dv = c->lin_v_dim;
	m->K = c->lin_conv_kernel;
	m->conv_dim = 2 * m->Hk * m->dk + m->Hv * m->dv;
	m->E = c->n_experts;
	m->topk = c->n_experts_per_tok;
	m->I = c->moe_inter;
	m->Is = c->shared_inter;
	/* bounds that keep per-token scratch and stack arrays small */
	if (c->n_layers > 4096 || m->E > 4096 || m->H > (1 << 20) || m->V > (1 << 24) ||
	    m->hd > 4096 || m->dk > 4096 || m->dv > 4096 || m->K > 64)
		return lynn_errf(err, -LYNN_EUNSUPPORTED, "model: '%s': config sizes beyond the runner's "
				 "limits (layers %d, experts %d, hidden %d, vocab %d, head dims %d/%d/%d, "
				 "conv %d)", path, c->n_layers, m->E, m->H, m->V, m->hd, m->dk, m->dv, m->K);
	if (m->topk > m->E || m->K < 1 || c->rot_dim > m->hd || c->rot_dim % 2 || m->Hv % m->Hk ||
	    m->nh % m->nkv)
		return lynn_errf(err, -LYNN_EFORMAT, "model: '%s': inconsistent config (experts_per_tok, "
				 "conv kernel, rotary dim or head counts)", path);
	m->n_threads = opts && opts->n_threads > 0 ? opts->n_threads : lynn_ncpu();
	m->isa = opts ? opts->isa : LYNN_CPU_AUTO;
	if (m->isa == LYNN_CPU_AUTO || !lynn_cpu_has(m->isa))
		m->isa = lynn_cpu_best();
	m->lora_on = true;
	return 0;
}

int lynn_model_finish(struct lynn_model *m, int (*bind_layer)(void *ud, int li), void *ud,
		      struct lynn_err *err)
{
	const struct lynn_config *c = &m->cfg;
	m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
	if (!m->layers)
		return lynn_errf(err, -LYNN_ENOMEM, "model: out of memory");
	for (int li = 0; li < c->n_layers; li++) {
		int rc = bind_layer(ud, li);
		if (rc)
			return rc;
	}
	/* RoPE: inv_freq[i] = theta^(-2i/d_rot) in f32 (§1.4) */
	int nf = c->rot_dim / 2;
	m->inv_freq = malloc((size_t)(nf > 0 ? nf : 1) * sizeof *m->inv_freq);
	if (!m->inv_freq)
		return lynn_errf(err, -LYNN_ENOMEM, "model: out of memory");
	for (int i = 0; i < nf; i++) /* torch: 1 / theta ** (arange(0, d, 2).float() / d) */
		m->inv_freq[i] = (float)(1.0 / pow(c->rope_theta, (double)(float)(2.0f * i / c->rot_dim)));
	m->pool = lynn_pool_create(m->n_threads, err);
	return m->pool ? 0 : (err && err->code ? err->code : -LYNN_ENOMEM);
}

int lynn_device_parse(const char *s)
{
	return !strcmp(s, "cpu") ? LYNN_DEVICE_CPU : !strcmp(s, "cuda") ? LYNN_DEVICE_CUDA
	       : !strcmp(s, "auto") ? LYNN_DEVICE_AUTO : -1;
}

const char *lynn_model_device(const struct lynn_model *m) { return m->cuda ? "cuda" : "cpu"; }

int lynn_model_place(struct lynn_model *m, const struct lynn_model_opts *opts, const char *path,
		     struct lynn_err *err)
{
	enum lynn_device d = opts ? opts->device : LYNN_DEVICE_AUTO;
	const char *env = getenv("LYNN_DEVICE");
	if (d == LYNN_DEVICE_AUTO && env && *env) {
		int e = lynn_device_parse(env);
		if (e < 0)
			return lynn_errf(err, -LYNN_EINVAL, "model: LYNN_DEVICE=%s: cpu, cuda or auto", env);
		d = (enum lynn_device)e;
	}
	if (d == LYNN_DEVICE_CPU)
		return 0;
#ifdef LYNN_CUDA
	if (d == LYNN_DEVICE_AUTO && !lynn_cuda_usable())
		return 0;
	struct lynn_err why = { 0 };
	int rc = lynn_cuda_model_init(m, d == LYNN_DEVICE_CUDA ? err : &why);
	if (!rc) {
		lynn_log_info("model: '%s' runs on the CUDA device", path);
		return 0;
	}
	lynn_cuda_model_free(m);
	if (d == LYNN_DEVICE_CUDA)
		return rc;
	lynn_log_info("model: '%s' runs on the CPU (%s)", path, why.msg);
	return 0;
#else
	if (d == LYNN_DEVICE_CUDA)
		return lynn_errf(err, -LYNN_EUNSUPPORTED, "model: '%s': device cuda: this lynn was built "
				 "without CUDA", path);
	return 0;
#endif
}

static int bind_layer_cb(void *b, int li)
{
	return bind_layer(b, li);
}

struct lynn_model *lynn_model_open(const char *path, const struct lynn_model_opts *opts,
				   struct lynn_err *err)
{
	if (lynn_model_path_is_gguf(path))
		return lynn_model_open_gguf(path, opts, err);
	struct lynn_model *m = calloc(1, sizeof *m);
	struct binder b = { m, path, err };
	if (!m) {
		lynn_errf(err, -LYNN_ENOMEM, "model: out of memory");
		return NULL;
	}
	if (lynn_config_load(&m->cfg, path, err) || lynn_model_setup(m, path, opts, err))
		goto fail;
	const struct lynn_config *c = &m->cfg;
	m->ckpt = lynn_ckpt_open(path, err);
	if (!m->ckpt)
		goto fail;

	/* embeddings, final norm, lm_head */
	const struct lynn_tensor *emb = find(&b, "embed_tokens.weight");
	if (!emb)
		goto fail;
	int64_t se[2] = { m->V, m->H }, sH[1] = { m->H };
	if (check_shape(&b, emb, 2, se))
		goto fail;
	m->embed_dt = emb->dtype;
	m->embed = emb->data;
	if (bind_vec(&b, &m->final_norm, "norm.weight", 1, sH, true))
		goto fail;
	if (lynn_ckpt_find_decoder(m->ckpt, "lm_head.weight") || !c->tie_word_embeddings) {
		if (bind_lin(&b, &m->lm_head, "lm_head.weight", m->V, m->H))
			goto fail;
	} else {
		m->lm_head = (struct lin){ .dt = emb->dtype, .w = emb->data, .n_out = m->V, .n_in = m->H,
					   .name = strdup("lm_head.weight") };
	}
	if (lynn_model_finish(m, bind_layer_cb, &b, err) || lynn_model_place(m, opts, path, err))
		goto fail;
	return m;
fail:
	lynn_model_close(m);
	return NULL;
}

static void free_lin(struct lin *l)
{
	free(l->name);
}

void lynn_model_close(struct lynn_model *m)
{
	if (!m)
		return;
#ifdef LYNN_CUDA
	if (m->cuda) {
		lynn_model_lora_clear(m);
		lynn_cuda_model_free(m);
	}
#endif
	if (m->layers) {
		for (int li = 0; li < m->cfg.n_layers; li++) {
			struct layer *L = &m->layers[li];
			free(L->in_norm); free(L->post_norm); free(L->q_norm); free(L->k_norm);
			free(L->conv_w); free(L->neg_a); free(L->dt_bias); free(L->gnorm);
			struct lin *ls[] = { &L->q, &L->k, &L->v, &L->o, &L->qkv, &L->z, &L->b, &L->a,
					     &L->out, &L->router, &L->sg, &L->su, &L->sd, &L->sgate };
			for (size_t i = 0; i < LYNN_ARRAY_LEN(ls); i++)
				free_lin(ls[i]);
			for (int e = 0; e < m->E; e++) {
				if (L->eg) free_lin(&L->eg[e]);
				if (L->eu) free_lin(&L->eu[e]);
				if (L->ed) free_lin(&L->ed[e]);
			}
			free(L->eg); free(L->eu); free(L->ed);
		}
		free(m->layers);
	}
	free_lin(&m->lm_head);
	free(m->final_norm);
	free(m->inv_freq);
	free(m->arena);
	lynn_pool_free(m->pool);
	lynn_ckpt_close(m->ckpt);
	lynn_gguf_close(m->gguf);
	lynn_config_release(&m->cfg);
	free(m);
}

const struct lynn_config *lynn_model_config(const struct lynn_model *m) { return &m->cfg; }
const struct lynn_ckpt *lynn_model_ckpt(const struct lynn_model *m) { return m->ckpt; }
int lynn_model_n_vocab(const struct lynn_model *m) { return m->V; }
int lynn_model_n_threads(const struct lynn_model *m) { return m->n_threads; }

static uint64_t lin_bytes(const struct lin *l)
{
	if (l->is_nv)
		return (uint64_t)l->n_out * (uint64_t)l->n_in * 9 / 16;
	if (l->is_gg)
		return (uint64_t)l->n_out * l->gg.row_bytes;
	return (uint64_t)l->n_out * (uint64_t)l->n_in * lynn_dtype_size(l->dt);
}

void lynn_model_set_route_observer(struct lynn_model *m, lynn_route_fn fn, void *ud)
{
	m->route_fn = fn;
	m->route_ud = ud;
}

uint64_t lynn_model_active_bytes(const struct lynn_model *m)
{
	uint64_t s = (m->embed_is_gg ? m->embed_gg.row_bytes : (uint64_t)m->H * lynn_dtype_size(m->embed_dt)) +
		     lin_bytes(&m->lm_head);
	for (int li = 0; li < m->cfg.n_layers; li++) {
		const struct layer *L = &m->layers[li];
		if (L->type == LYNN_LAYER_FULL)
			s += lin_bytes(&L->q) + lin_bytes(&L->k) + lin_bytes(&L->v) + lin_bytes(&L->o);
		else
			s += lin_bytes(&L->qkv) + lin_bytes(&L->z) + lin_bytes(&L->b) + lin_bytes(&L->a) +
			     lin_bytes(&L->out);
		s += lin_bytes(&L->router) + lin_bytes(&L->sg) + lin_bytes(&L->su) + lin_bytes(&L->sd) +
		     lin_bytes(&L->sgate);
		s += (uint64_t)m->topk * (lin_bytes(&L->eg[0]) + lin_bytes(&L->eu[0]) + lin_bytes(&L->ed[0]));
	}
	return s;
}

/* ===== sequences ===== */

/* floats of a DeltaNet layer's conv state: the last K - 1 inputs */
static size_t conv_floats(const struct lynn_model *m) { return (size_t)(m->K > 1 ? m->K - 1 : 1) * m->conv_dim; }

struct lynn_seq *lynn_seq_create(const struct lynn_model *m, struct lynn_err *err)
{
	int nl = m->cfg.n_layers;
	struct lynn_seq *s = calloc(1, sizeof *s);
	if (!s)
		goto oom;
	s->m = m;
#ifdef LYNN_CUDA
	if (m->cuda) {
		int rc = lynn_cuda_seq_init(s, err);
		if (rc) {
			lynn_seq_free(s);
			return NULL;
		}
		return s;
	}
#endif
	s->kc = calloc((size_t)nl, sizeof *s->kc);
	s->vc = calloc((size_t)nl, sizeof *s->vc);
	s->conv = calloc((size_t)nl, sizeof *s->conv);
	s->rec = calloc((size_t)nl, sizeof *s->rec);
	if (!s->kc || !s->vc || !s->conv || !s->rec)
		goto oom;
	for (int li = 0; li < nl; li++) {
		if (m->layers[li].type != LYNN_LAYER_LINEAR)
			continue;
		s->conv[li] = calloc(conv_floats(m), sizeof(float));
		s->rec[li] = calloc((size_t)m->Hv * m->dk * m->dv, sizeof(float));
		if (!s->conv[li] || !s->rec[li])
			goto oom;
	}
	return s;
oom:
	lynn_seq_free(s);
	lynn_errf(err, -LYNN_ENOMEM, "model: out of memory for a sequence state");
	return NULL;
}

void lynn_seq_free(struct lynn_seq *s)
{
	if (!s)
		return;
	int nl = s->m->cfg.n_layers;
#ifdef LYNN_CUDA
	lynn_cuda_seq_free(s);
#endif
	for (int li = 0; li < nl; li++) {
		if (s->kc) free(s->kc[li]);
		if (s->vc) free(s->vc[li]);
		if (s->conv) free(s->conv[li]);
		if (s->rec) free(s->rec[li]);
	}
	free(s->kc); free(s->vc); free(s->conv); free(s->rec);
	free(s);
}

void lynn_seq_reset(struct lynn_seq *s)
{
	const struct lynn_model *m = s->m;
	s->pos = 0;
#ifdef LYNN_CUDA
	if (s->cuda) {
		lynn_cuda_seq_reset(s);
		return;
	}
#endif
	for (int li = 0; li < m->cfg.n_layers; li++) {
		if (s->conv[li])
			memset(s->conv[li], 0, conv_floats(m) * sizeof(float));
		if (s->rec[li])
			memset(s->rec[li], 0, (size_t)m->Hv * m->dk * m->dv * sizeof(float));
	}
}

int64_t lynn_seq_pos(const struct lynn_seq *s) { return s->pos; }

int lynn_seq_copy(struct lynn_seq *dst, const struct lynn_seq *src, bool exact, struct lynn_err *err)
{
	const struct lynn_model *m = src->m;
	if (dst->m != m)
		return lynn_errf(err, -LYNN_EINVAL, "model: a sequence state copied to another model's");
	if (dst == src)
		return 0;
	int rc;
#ifdef LYNN_CUDA
	if (src->cuda) {
		if ((rc = lynn_cuda_seq_copy(dst, src, exact, err)))
			return rc;
		dst->pos = src->pos;
		return 0;
	}
#endif
	if ((rc = lynn_seq_grow_kv(m, dst, src->pos, exact, err)))
		return rc;
	const size_t row = (size_t)m->nkv * m->hd * sizeof(float);
	for (int li = 0; li < m->cfg.n_layers; li++) {
		if (m->layers[li].type == LYNN_LAYER_FULL) {
			if (src->pos > 0) {
				memcpy(dst->kc[li], src->kc[li], (size_t)src->pos * row);
				memcpy(dst->vc[li], src->vc[li], (size_t)src->pos * row);
			}
		} else {
			memcpy(dst->conv[li], src->conv[li], conv_floats(m) * sizeof(float));
			memcpy(dst->rec[li], src->rec[li], (size_t)m->Hv * m->dk * m->dv * sizeof(float));
		}
	}
	dst->pos = src->pos;
	return 0;
}

size_t lynn_seq_bytes(const struct lynn_seq *s)
{
	const struct lynn_model *m = s->m;
	int64_t rows = s->cap;
#ifdef LYNN_CUDA
	if (s->cuda)
		rows = lynn_cuda_seq_rows(s);
#endif
	size_t b = sizeof *s;
	for (int li = 0; li < m->cfg.n_layers; li++)
		b += m->layers[li].type == LYNN_LAYER_FULL
			     ? 2 * (size_t)rows * (size_t)m->nkv * m->hd * sizeof(float)
			     : (conv_floats(m) + (size_t)m->Hv * m->dk * m->dv) * sizeof(float);
	return b;
}

/* ===== LoRA ===== */

static struct lin *lin_by_name(struct lynn_model *m, const char *name)
{
	if (m->lm_head.name && !strcmp(m->lm_head.name, name))
		return &m->lm_head;
	int li;
	if (sscanf(name, "layers.%d.", &li) != 1 || li < 0 || li >= m->cfg.n_layers)
		return NULL;
	struct layer *L = &m->layers[li];
	struct lin *ls[] = { &L->q, &L->k, &L->v, &L->o, &L->qkv, &L->z, &L->b, &L->a, &L->out,
			     &L->router, &L->sg, &L->su, &L->sd, &L->sgate };
	for (size_t i = 0; i < LYNN_ARRAY_LEN(ls); i++)
		if (ls[i]->name && !strcmp(ls[i]->name, name))
			return ls[i];
	for (int e = 0; e < m->E; e++) {
		if (!strcmp(L->eg[e].name, name)) return &L->eg[e];
		if (!strcmp(L->eu[e].name, name)) return &L->eu[e];
		if (!strcmp(L->ed[e].name, name)) return &L->ed[e];
	}
	return NULL;
}

int lynn_model_lora_set(struct lynn_model *m, const char *name, const struct lynn_lora_ref *lora,
			struct lynn_err *err)
{
	struct lin *l = lin_by_name(m, name);
	if (!l)
		return lynn_errf(err, -LYNN_ENOTFOUND, "model: no linear '%s' for a LoRA adapter", name);
	if (!lora || lora->rank <= 0 || !lora->a || !lora->b || !lynn_cpu_wdtype_ok(lora->dt))
		return lynn_errf(err, -LYNN_EINVAL, "model: bad LoRA adapter for '%s'", name);
	l->lora = *lora;
	l->has_lora = true;
	m->lora_gen++;
#ifdef LYNN_CUDA
	if (m->cuda) {
		int rc = lynn_cuda_lora_upload(l, err);
		if (rc) {
			l->has_lora = false;
			lynn_cuda_lora_drop(l);
			return rc;
		}
	}
#endif
	return 0;
}

int lynn_model_lora_attach(struct lynn_model *m, const struct lynn_lora *lora, struct lynn_err *err)
{
	for (int i = 0; i < lynn_lora_n_modules(lora); i++) {
		const struct lynn_lora_module *md = lynn_lora_module(lora, i);
		struct lin *l = lin_by_name(m, md->decoder_name);
		if (!l)
			return lynn_errf(err, -LYNN_ENOTFOUND, "model: adapter module '%s' ('%s') is not a "
					 "linear of the runner", md->module, md->decoder_name);
		if (md->a->dtype != md->b->dtype || !lynn_cpu_wdtype_ok(md->a->dtype))
			return lynn_errf(err, -LYNN_EUNSUPPORTED, "model: adapter module '%s': lora_A %s and "
					 "lora_B %s (same dtype, bf16/f16/f32 needed)", md->module,
					 lynn_dtype_name(md->a->dtype), lynn_dtype_name(md->b->dtype));
		if (md->in != l->n_in || md->out != l->n_out || md->r <= 0)
			return lynn_errf(err, -LYNN_EFORMAT, "model: adapter module '%s': %lldx%lld does not "
					 "fit '%s' %lldx%lld", md->module, (long long)md->out, (long long)md->in,
					 md->decoder_name, (long long)l->n_out, (long long)l->n_in);
		struct lynn_lora_ref ref = { md->a->dtype, md->a->data, md->b->data, md->r, md->scale };
		int rc = lynn_model_lora_set(m, md->decoder_name, &ref, err);
		if (rc)
			return rc;
	}
	return 0;
}

struct lynn_lora *lynn_model_lora_load(struct lynn_model *m, const char *dir, struct lynn_err *err)
{
	if (!m->ckpt) {
		lynn_errf(err, -LYNN_EUNSUPPORTED, "model: LoRA adapters need a safetensors model "
			  "folder, not a GGUF file");
		return NULL;
	}
	struct lynn_lora *l = lynn_lora_open(dir, err);
	if (!l)
		return NULL;
	if (lynn_lora_bind(l, m->ckpt, err) || lynn_model_lora_attach(m, l, err)) {
		lynn_model_lora_clear(m);
		lynn_lora_free(l);
		return NULL;
	}
	lynn_model_lora_enable(m, true);
	return l;
}

void lynn_model_lora_enable(struct lynn_model *m, bool on) { m->lora_on = on; }

static void clear_lin(struct lin *l, int *count, bool clear)
{
	if (l->has_lora)
		(*count)++;
	if (clear)
		l->has_lora = false;
#ifdef LYNN_CUDA
	if (clear && l->d_lora_a)
		lynn_cuda_lora_drop(l);
#endif
}

static int walk_lora(struct lynn_model *m, bool clear)
{
	int n = 0;
	clear_lin(&m->lm_head, &n, clear);
	for (int li = 0; li < m->cfg.n_layers; li++) {
		struct layer *L = &m->layers[li];
		struct lin *ls[] = { &L->q, &L->k, &L->v, &L->o, &L->qkv, &L->z, &L->b, &L->a, &L->out,
				     &L->router, &L->sg, &L->su, &L->sd, &L->sgate };
		for (size_t i = 0; i < LYNN_ARRAY_LEN(ls); i++)
			clear_lin(ls[i], &n, clear);
		for (int e = 0; e < m->E; e++) {
			clear_lin(&L->eg[e], &n, clear);
			clear_lin(&L->eu[e], &n, clear);
			clear_lin(&L->ed[e], &n, clear);
		}
	}
	return n;
}

int64_t lynn_kv_rows(int64_t cap, int64_t need)
{
	cap = cap ? cap : 64;
	while (cap < need)
		cap *= 2;
	return cap;
}

int lynn_model_lora_rank(const struct lynn_model *m)
{
	int r = m->lora_on && m->lm_head.has_lora ? m->lm_head.lora.rank : 0;
	for (int li = 0; m->lora_on && li < m->cfg.n_layers; li++) {
		const struct layer *L = &m->layers[li];
		const struct lin *ll[] = { &L->q, &L->k, &L->v, &L->o, &L->qkv, &L->z, &L->b, &L->a,
					   &L->out, &L->router, &L->sg, &L->su, &L->sd, &L->sgate };
		for (size_t j = 0; j < LYNN_ARRAY_LEN(ll); j++)
			r = ll[j]->has_lora && ll[j]->lora.rank > r ? ll[j]->lora.rank : r;
		for (int e = 0; e < m->E; e++) {
			const struct lin *el[3] = { &L->eg[e], &L->eu[e], &L->ed[e] };
			for (int j = 0; j < 3; j++)
				r = el[j]->has_lora && el[j]->lora.rank > r ? el[j]->lora.rank : r;
		}
	}
	return r;
}

void lynn_model_lora_clear(struct lynn_model *m)
{
	walk_lora(m, true);
	m->lora_gen++;
}
int lynn_model_lora_count(const struct lynn_model *m) { return walk_lora((struct lynn_model *)m, false); }
