/* forward.c - the Qwen3.5-MoE decoder forward pass on the CPU, step by step
 * as docs/reference/qwen35moe-architecture.md §3 (HF-M, in f32):
 *
 *   x0 = embed[id]; per layer: h = x + Mixer(ZCRMSNorm_in(x)),
 *   out = h + MoE(ZCRMSNorm_post(h)); logits = lm_head(ZCRMSNorm_final(x)).
 *
 * A call handles rows (sequence, token); the projections, the router and
 * the experts see all rows of a chunk at once (one pass over the weights),
 * while attention, the causal conv and the delta rule walk each sequence's
 * rows in order against its state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/util.h"
#include "model_int.h"

#define CHUNK_ROWS 512   /* rows per internal pass (bounds scratch memory) */

/* ===== scratch ===== */

struct scratch {
	float *x, *xn, *mix;             /* (n, H) */
	int64_t *pos;                    /* (n) */
	float *P, *Kx, *Vx, *O;          /* attention */
	float *scores;                   /* (n_threads, heads per KV head, T_max) */
	float *U, *C, *Z, *Bv, *Av, *O2; /* DeltaNet */
	float *R, *selw;                 /* router (n, E), weights (n * topk) */
	int *sele, *cnt, *off, *slot;    /* expert per slot, per-expert counts/offsets, slot -> gathered row */
	int *grow;                       /* gathered row -> source row */
	float *Xg, *Hg, *Yg;             /* gathered per-expert inputs / hidden / outputs */
	float *HS, *YS, *SG;             /* shared expert */
	float *lora;                     /* (n, max rank) */
};

/* Lay out the scratch for n rows; with a->base NULL only measures. */
static void layout(const struct lynn_model *m, struct lynn_arena *a, struct scratch *s, int64_t n,
		   int64_t t_max, int max_rank)
{
	size_t f = sizeof(float), nk = (size_t)n * m->topk;
	a->used = 0;
	s->x = lynn_carve(a, n * m->H * f);
	s->xn = lynn_carve(a, n * m->H * f);
	s->mix = lynn_carve(a, n * m->H * f);
	s->pos = lynn_carve(a, n * sizeof(int64_t));
	s->P = lynn_carve(a, n * m->nh * 2 * m->hd * f);
	s->Kx = lynn_carve(a, n * m->nkv * m->hd * f);
	s->Vx = lynn_carve(a, n * m->nkv * m->hd * f);
	s->O = lynn_carve(a, n * m->nh * m->hd * f);
	s->scores = lynn_carve(a, (size_t)m->n_threads * (m->nh / m->nkv) * t_max * f);
	s->U = lynn_carve(a, n * m->conv_dim * f);
	s->C = lynn_carve(a, n * m->conv_dim * f);
	s->Z = lynn_carve(a, n * m->Hv * m->dv * f);
	s->Bv = lynn_carve(a, n * m->Hv * f);
	s->Av = lynn_carve(a, n * m->Hv * f);
	s->O2 = lynn_carve(a, n * m->Hv * m->dv * f);
	s->R = lynn_carve(a, n * m->E * f);
	s->selw = lynn_carve(a, nk * f);
	s->sele = lynn_carve(a, nk * sizeof(int));
	s->cnt = lynn_carve(a, m->E * sizeof(int));
	s->off = lynn_carve(a, (m->E + 1) * sizeof(int));
	s->slot = lynn_carve(a, nk * sizeof(int));
	s->grow = lynn_carve(a, nk * sizeof(int));
	s->Xg = lynn_carve(a, nk * m->H * f);
	s->Hg = lynn_carve(a, nk * 2 * m->I * f);
	s->Yg = lynn_carve(a, nk * m->H * f);
	s->HS = lynn_carve(a, n * 2 * m->Is * f);
	s->YS = lynn_carve(a, n * m->H * f);
	s->SG = lynn_carve(a, n * f);
	s->lora = lynn_carve(a, n * (size_t)(max_rank > 0 ? max_rank : 1) * f);
}

/* ===== small math ===== */

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float siluf(float x) { return x / (1.0f + expf(-x)); }
/* torch softplus (beta 1, threshold 20) */
static inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* y = x * rsqrt(mean(x^2) + eps) * w  (w already 1 + weight for the
 * zero-centred norm, §3.1). In place allowed. */
static void rmsnorm(const float *x, const float *w, int n, float eps, float *y)
{
	float ss = 0.0f;
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	float r = 1.0f / sqrtf(ss / (float)n + eps);
	for (int i = 0; i < n; i++)
		y[i] = x[i] * r * w[i];
}

/* NeoX rotate-half RoPE on the first rot dims (§1.4, §3.3 step 3). */
static void rope(float *x, int rot, const float *inv_freq, int64_t pos)
{
	int half = rot / 2;
	for (int i = 0; i < half; i++) {
		float ang = (float)pos * inv_freq[i];
		float c = cosf(ang), s = sinf(ang);
		float a = x[i], b = x[i + half];
		x[i] = a * c - b * s;
		x[i + half] = b * c + a * s;
	}
}

/* ===== linears (+ LoRA) ===== */

static struct lynn_mm mmj(const struct lin *l, const float *x, int64_t ldx, float *y, int64_t ldy,
			  int64_t n_tok)
{
	return (struct lynn_mm){ .wdt = l->dt, .w = l->w, .n_out = l->n_out, .n_in = l->n_in,
				 .x = x, .ldx = ldx, .y = y, .ldy = ldy, .n_tok = n_tok,
				 .nv = l->is_nv ? &l->nv : NULL, .gg = l->is_gg ? &l->gg : NULL };
}

/* Run the products; then for each linear with an enabled adapter add
 * scale * B (A x) (A: (r, n_in), B: (n_out, r)). */
static void run_lins(struct lynn_model *m, struct scratch *s, const struct lin *const *ls,
		     struct lynn_mm *jobs, int n)
{
	lynn_cpu_matmul_many(m->pool, jobs, n, m->isa);
	if (!m->lora_on)
		return;
	for (int j = 0; j < n; j++) {
		const struct lin *l = ls[j];
		if (!l->has_lora || jobs[j].n_tok == 0)
			continue;
		const struct lynn_lora_ref *lr = &l->lora;
		struct lynn_mm a = { .wdt = lr->dt, .w = lr->a, .n_out = lr->rank, .n_in = l->n_in,
				     .x = jobs[j].x, .ldx = jobs[j].ldx, .y = s->lora, .ldy = lr->rank,
				     .n_tok = jobs[j].n_tok };
		lynn_cpu_matmul(m->pool, &a, m->isa);
		for (int64_t i = 0; i < jobs[j].n_tok * lr->rank; i++)
			s->lora[i] *= lr->scale;
		struct lynn_mm b = { .wdt = lr->dt, .w = lr->b, .n_out = l->n_out, .n_in = lr->rank,
				     .x = s->lora, .ldx = lr->rank, .y = jobs[j].y, .ldy = jobs[j].ldy,
				     .n_tok = jobs[j].n_tok, .accumulate = true };
		lynn_cpu_matmul(m->pool, &b, m->isa);
	}
}

static void run_one(struct lynn_model *m, struct scratch *s, const struct lin *l, const float *x,
		    int64_t ldx, float *y, int64_t ldy, int64_t n_tok)
{
	struct lynn_mm j = mmj(l, x, ldx, y, ldy, n_tok);
	run_lins(m, s, &l, &j, 1);
}

/* ===== gated full attention (§3.3) ===== */

struct attn_ctx {
	const struct lynn_model *m;
	struct scratch *s;
	struct lynn_seq *const *seqs;
	int li;
	int64_t t_max;
};

/* One row's query heads that share KV head g (repeat_kv: head h uses kv h
 * / group), each KV row read once for them, then the output gate. */
static void attn_task(void *ud, int64_t task, int tid)
{
	const struct attn_ctx *c = ud;
	const struct lynn_model *m = c->m;
	struct scratch *s = c->s;
	const int64_t i = task / m->nkv;
	const int g = (int)(task % m->nkv), G = m->nh / m->nkv, hd = m->hd, kvw = m->nkv * hd;
	const float *q = s->P + i * m->nh * 2 * hd + (int64_t)g * G * 2 * hd; /* [q | gate] per head */
	float *o = s->O + i * m->nh * hd + (int64_t)g * G * hd;
	lynn_cpu_attend(q, 2 * hd, G, c->seqs[i]->kc[c->li] + g * hd, c->seqs[i]->vc[c->li] + g * hd, kvw,
			s->pos[i] + 1, hd, 1.0f / sqrtf((float)hd), s->scores + (int64_t)tid * G * c->t_max, o, hd,
			m->isa);
	for (int h = 0; h < G; h++) /* output gate, same head order (§3.3 step 6) */
		for (int j = 0; j < hd; j++)
			o[h * hd + j] *= sigmoidf(q[h * 2 * hd + hd + j]);
}

static void full_attention(struct lynn_model *m, struct scratch *s, int li, int64_t n,
			   struct lynn_seq *const *seqs, int64_t t_max)
{
	const struct layer *L = &m->layers[li];
	int hd = m->hd, qw = m->nh * 2 * hd, kvw = m->nkv * hd;
	float eps = (float)m->cfg.rms_eps;
	const struct lin *ls[3] = { &L->q, &L->k, &L->v };
	struct lynn_mm jobs[3] = { mmj(&L->q, s->xn, m->H, s->P, qw, n),
				   mmj(&L->k, s->xn, m->H, s->Kx, kvw, n),
				   mmj(&L->v, s->xn, m->H, s->Vx, kvw, n) };
	run_lins(m, s, ls, jobs, 3);
	for (int64_t i = 0; i < n; i++) {
		for (int h = 0; h < m->nh; h++) {
			float *q = s->P + i * qw + (int64_t)h * 2 * hd;
			rmsnorm(q, L->q_norm, hd, eps, q);
			rope(q, m->cfg.rot_dim, m->inv_freq, s->pos[i]);
		}
		float *kd = seqs[i]->kc[li] + s->pos[i] * kvw, *vd = seqs[i]->vc[li] + s->pos[i] * kvw;
		for (int g = 0; g < m->nkv; g++) {
			float *k = s->Kx + i * kvw + g * hd;
			rmsnorm(k, L->k_norm, hd, eps, k);
			rope(k, m->cfg.rot_dim, m->inv_freq, s->pos[i]);
		}
		memcpy(kd, s->Kx + i * kvw, (size_t)kvw * sizeof(float));
		memcpy(vd, s->Vx + i * kvw, (size_t)kvw * sizeof(float));
	}
	struct attn_ctx c = { m, s, seqs, li, t_max };
	lynn_pool_run(m->pool, n * m->nkv, attn_task, &c);
	run_one(m, s, &L->o, s->O, (int64_t)m->nh * hd, s->mix, m->H, n);
}

/* ===== Gated DeltaNet (§3.4) ===== */

struct dn_ctx {
	const struct lynn_model *m;
	struct scratch *s;
	struct lynn_seq *const *seqs;
	int li;
	int64_t n;
};

#define CONV_BLOCK 256

/* Causal depthwise conv over the pre-activation qkv, with the state, then
 * SiLU (step 2). One task per channel block; rows in order. */
static void conv_task(void *ud, int64_t task, int tid)
{
	const struct dn_ctx *c = ud;
	const struct lynn_model *m = c->m;
	const float *W = m->layers[c->li].conv_w;
	int K = m->K, cd = m->conv_dim;
	int c0 = (int)task * CONV_BLOCK, c1 = LYNN_MIN(cd, c0 + CONV_BLOCK);
	(void)tid;
	for (int64_t i = 0; i < c->n; i++) {
		float *st = c->seqs[i]->conv[c->li];
		const float *u = c->s->U + i * cd;
		float *out = c->s->C + i * cd;
		for (int ch = c0; ch < c1; ch++) {
			const float *w = W + (int64_t)ch * K;
			float acc = 0.0f;
			for (int j = 0; j < K - 1; j++)
				acc += w[j] * st[(int64_t)j * cd + ch];
			acc += w[K - 1] * u[ch];
			for (int j = 0; j + 1 < K - 1; j++)
				st[(int64_t)j * cd + ch] = st[(int64_t)(j + 1) * cd + ch];
			if (K > 1)
				st[(int64_t)(K - 2) * cd + ch] = u[ch];
			out[ch] = siluf(acc);
		}
	}
}

/* Delta rule for one v-head over all rows in order (steps 4-8). */
static void delta_task(void *ud, int64_t h, int tid)
{
	const struct dn_ctx *c = ud;
	const struct lynn_model *m = c->m;
	const struct layer *L = &m->layers[c->li];
	struct scratch *s = c->s;
	int dk = m->dk, dv = m->dv, cd = m->conv_dim;
	int kh = m->v_tiled ? (int)h % m->Hk : (int)h / (m->Hv / m->Hk); /* tiled: GGUF (§2.4) */
	float qn[dk], kn[dk];
	float eps = (float)m->cfg.rms_eps, qscale = 1.0f / sqrtf((float)dk);
	(void)tid;
	for (int64_t i = 0; i < c->n; i++) {
		const float *cv = s->C + i * cd;
		const float *q = cv + (int64_t)kh * dk, *k = cv + (int64_t)m->Hk * dk + (int64_t)kh * dk;
		const float *v = cv + 2 * (int64_t)m->Hk * dk + h * dv;
		float sq = 0.0f, sk = 0.0f;
		for (int j = 0; j < dk; j++) {
			sq += q[j] * q[j];
			sk += k[j] * k[j];
		}
		float rq = 1.0f / sqrtf(sq + 1e-6f), rk = 1.0f / sqrtf(sk + 1e-6f);
		for (int j = 0; j < dk; j++) {
			qn[j] = q[j] * rq * qscale;
			kn[j] = k[j] * rk;
		}
		float beta = sigmoidf(s->Bv[i * m->Hv + h]);
		float g = L->neg_a[h] * softplusf(s->Av[i * m->Hv + h] + L->dt_bias[h]);
		float decay = expf(g);
		float *S = c->seqs[i]->rec[c->li] + h * dk * dv;
		float *o = s->O2 + i * (int64_t)m->Hv * dv + h * dv;
		lynn_cpu_delta_step(S, dk, dv, kn, qn, v, beta, decay, o, m->isa);
		/* gated RMSNorm: norm, plain weight, * silu(z) (§3.1) */
		const float *z = s->Z + i * (int64_t)m->Hv * dv + h * dv;
		float ss = 0.0f;
		for (int j = 0; j < dv; j++)
			ss += o[j] * o[j];
		float r = 1.0f / sqrtf(ss / (float)dv + eps);
		for (int j = 0; j < dv; j++)
			o[j] = L->gnorm[j] * (o[j] * r) * siluf(z[j]);
	}
}

static void deltanet(struct lynn_model *m, struct scratch *s, int li, int64_t n,
		     struct lynn_seq *const *seqs)
{
	const struct layer *L = &m->layers[li];
	int vw = m->Hv * m->dv;
	const struct lin *ls[4] = { &L->qkv, &L->z, &L->b, &L->a };
	struct lynn_mm jobs[4] = { mmj(&L->qkv, s->xn, m->H, s->U, m->conv_dim, n),
				   mmj(&L->z, s->xn, m->H, s->Z, vw, n),
				   mmj(&L->b, s->xn, m->H, s->Bv, m->Hv, n),
				   mmj(&L->a, s->xn, m->H, s->Av, m->Hv, n) };
	run_lins(m, s, ls, jobs, 4);
	struct dn_ctx c = { m, s, seqs, li, n };
	lynn_pool_run(m->pool, (m->conv_dim + CONV_BLOCK - 1) / CONV_BLOCK, conv_task, &c);
	lynn_pool_run(m->pool, m->Hv, delta_task, &c);
	run_one(m, s, &L->out, s->O2, vw, s->mix, m->H, n);
}

/* ===== sparse MoE (§3.5) ===== */

static void moe(struct lynn_model *m, struct scratch *s, int li, int64_t n)
{
	const struct layer *L = &m->layers[li];
	int E = m->E, k = m->topk, H = m->H, I = m->I, Is = m->Is;
	run_one(m, s, &L->router, s->xn, H, s->R, E, n);
	/* softmax over all experts, top-k (descending, lower index first on
	 * ties, like torch.topk), renormalise */
	memset(s->cnt, 0, (size_t)E * sizeof(int));
	for (int64_t i = 0; i < n; i++) {
		float *r = s->R + i * E;
		lynn_cpu_softmax(r, E);
		int *se = s->sele + i * k;
		float *sw = s->selw + i * k, tot = 0.0f;
		for (int j = 0; j < k; j++) {
			int best = -1;
			for (int e = 0; e < E; e++) {
				bool taken = false;
				for (int q = 0; q < j && !taken; q++)
					taken = se[q] == e;
				if (!taken && (best < 0 || r[e] > r[best]))
					best = e;
			}
			se[j] = best;
			sw[j] = r[best];
			tot += r[best];
			s->cnt[best]++;
		}
		if (m->route_fn)
			m->route_fn(m->route_ud, li, k, se, sw);
		for (int j = 0; j < k; j++)
			sw[j] /= tot;
	}
	/* group rows by expert: gathered row g -> (source row), slot -> g */
	s->off[0] = 0;
	for (int e = 0; e < E; e++)
		s->off[e + 1] = s->off[e] + s->cnt[e];
	int fill[E];
	memcpy(fill, s->off, (size_t)E * sizeof(int));
	for (int64_t i = 0; i < n; i++)
		for (int j = 0; j < k; j++) {
			int g = fill[s->sele[i * k + j]]++;
			s->grow[g] = (int)i;
			s->slot[i * k + j] = g;
			memcpy(s->Xg + (int64_t)g * H, s->xn + i * H, (size_t)H * sizeof(float));
		}
	/* gate/up of every active expert, shared gate/up and the shared gate */
	int na = 0;
	for (int e = 0; e < E; e++)
		na += s->cnt[e] > 0;
	struct lynn_mm jobs[2 * na + 3];
	const struct lin *ls[2 * na + 3];
	int nj = 0;
	for (int e = 0; e < E; e++) {
		if (!s->cnt[e])
			continue;
		const float *x = s->Xg + (int64_t)s->off[e] * H;
		float *h = s->Hg + (int64_t)s->off[e] * 2 * I;
		ls[nj] = &L->eg[e];
		jobs[nj++] = mmj(&L->eg[e], x, H, h, 2 * I, s->cnt[e]);
		ls[nj] = &L->eu[e];
		jobs[nj++] = mmj(&L->eu[e], x, H, h + I, 2 * I, s->cnt[e]);
	}
	ls[nj] = &L->sg;
	jobs[nj++] = mmj(&L->sg, s->xn, H, s->HS, 2 * Is, n);
	ls[nj] = &L->su;
	jobs[nj++] = mmj(&L->su, s->xn, H, s->HS + Is, 2 * Is, n);
	ls[nj] = &L->sgate;
	jobs[nj++] = mmj(&L->sgate, s->xn, H, s->SG, 1, n);
	run_lins(m, s, ls, jobs, nj);
	/* SwiGLU in place: h[:I] = silu(gate) * up */
	int64_t ng = (int64_t)n * k;
	for (int64_t g = 0; g < ng; g++) {
		float *h = s->Hg + g * 2 * I;
		for (int j = 0; j < I; j++)
			h[j] = siluf(h[j]) * h[I + j];
	}
	for (int64_t i = 0; i < n; i++) {
		float *h = s->HS + i * 2 * Is;
		for (int j = 0; j < Is; j++)
			h[j] = siluf(h[j]) * h[Is + j];
	}
	nj = 0;
	for (int e = 0; e < E; e++) {
		if (!s->cnt[e])
			continue;
		ls[nj] = &L->ed[e];
		jobs[nj++] = mmj(&L->ed[e], s->Hg + (int64_t)s->off[e] * 2 * I, 2 * I,
				 s->Yg + (int64_t)s->off[e] * H, H, s->cnt[e]);
	}
	ls[nj] = &L->sd;
	jobs[nj++] = mmj(&L->sd, s->HS, 2 * Is, s->YS, H, n);
	run_lins(m, s, ls, jobs, nj);
	/* routed sum in expert order (HF index_add_), then the gated shared expert */
	for (int64_t i = 0; i < n; i++) {
		float *y = s->mix + i * H;
		memset(y, 0, (size_t)H * sizeof *y);
		int order[k];
		for (int j = 0; j < k; j++)
			order[j] = j;
		for (int a = 1; a < k; a++) /* sort slots by expert id */
			for (int b = a; b > 0 && s->sele[i * k + order[b]] < s->sele[i * k + order[b - 1]]; b--) {
				int t = order[b]; order[b] = order[b - 1]; order[b - 1] = t;
			}
		for (int j = 0; j < k; j++) {
			int sl = (int)i * k + order[j];
			const float *ye = s->Yg + (int64_t)s->slot[sl] * H;
			float w = s->selw[sl];
			for (int d = 0; d < H; d++)
				y[d] += ye[d] * w;
		}
		float sg = sigmoidf(s->SG[i]);
		const float *ys = s->YS + i * H;
		for (int d = 0; d < H; d++)
			y[d] += sg * ys[d];
	}
}

/* ===== the pass ===== */

int lynn_seq_grow_kv(const struct lynn_model *m, struct lynn_seq *sq, int64_t need, bool exact,
		     struct lynn_err *err)
{
	if (need <= sq->cap)
		return 0;
	int64_t cap = exact ? need : lynn_kv_rows(sq->cap, need);
	size_t row = (size_t)m->nkv * m->hd * sizeof(float);
	for (int li = 0; li < m->cfg.n_layers; li++) {
		if (m->layers[li].type != LYNN_LAYER_FULL)
			continue;
		float *k = realloc(sq->kc[li], (size_t)cap * row);
		if (k)
			sq->kc[li] = k;
		float *v = k ? realloc(sq->vc[li], (size_t)cap * row) : NULL;
		if (v)
			sq->vc[li] = v;
		if (!k || !v)
			return lynn_errf(err, -LYNN_ENOMEM, "model: out of memory for a KV cache of %lld tokens",
					 (long long)cap);
	}
	sq->cap = cap;
	return 0;
}

static int forward_chunk(struct lynn_model *m, struct lynn_arena *ar, int64_t n, struct lynn_seq *const *seqs,
			 const int32_t *ids, const bool *want, float *logits, int64_t *n_out,
			 struct lynn_err *err)
{
	struct scratch s;
	int max_rank = lynn_model_lora_rank(m), rc;
	const struct lynn_config *c = &m->cfg;
	int64_t t_max = 1;
	/* longest context: each row sits after the earlier rows of its sequence */
	struct lynn_arena probe = { NULL, 0, 0 };
	for (int64_t i = 0; i < n; i++) {
		int64_t p = seqs[i]->pos++;
		if (p + 1 > t_max)
			t_max = p + 1;
	}
	for (int64_t i = 0; i < n; i++)
		seqs[i]->pos--;
	layout(m, &probe, &s, n, t_max, max_rank);
	if (probe.used > ar->cap) {
		free(ar->base);
		ar->base = malloc(probe.used);
		ar->cap = ar->base ? probe.used : 0;
		if (!ar->base)
			return lynn_errf(err, -LYNN_ENOMEM, "model: out of memory for %lld rows", (long long)n);
	}
	layout(m, ar, &s, n, t_max, max_rank);
	for (int64_t i = 0; i < n; i++)
		s.pos[i] = seqs[i]->pos++;
	for (int64_t i = 0; i < n; i++)
		seqs[i]->pos--;
	for (int64_t i = 0; i < n; i++)
		if ((rc = lynn_seq_grow_kv(m, seqs[i], s.pos[i] + 1, false, err)))
			return rc;

	float eps = (float)c->rms_eps;
	for (int64_t i = 0; i < n; i++)
		if (m->embed_is_gg)
			lynn_ggml_dequant(m->embed_gg.type, m->embed_gg.data + ids[i] * m->embed_gg.row_bytes,
					  m->H, s.x + i * m->H);
		else
			lynn_cpu_row_to_f32(m->embed_dt, m->embed, ids[i], m->H, s.x + i * m->H);
	for (int li = 0; li < c->n_layers; li++) {
		const struct layer *L = &m->layers[li];
		for (int64_t i = 0; i < n; i++)
			rmsnorm(s.x + i * m->H, L->in_norm, m->H, eps, s.xn + i * m->H);
		if (L->type == LYNN_LAYER_FULL)
			full_attention(m, &s, li, n, seqs, t_max);
		else
			deltanet(m, &s, li, n, seqs);
		for (int64_t i = 0; i < n * m->H; i++)
			s.x[i] += s.mix[i];
		for (int64_t i = 0; i < n; i++)
			rmsnorm(s.x + i * m->H, L->post_norm, m->H, eps, s.xn + i * m->H);
		moe(m, &s, li, n);
		for (int64_t i = 0; i < n * m->H; i++)
			s.x[i] += s.mix[i];
	}
	/* positions advance */
	for (int64_t i = 0; i < n; i++)
		seqs[i]->pos = s.pos[i] + 1;
	/* final norm + lm_head for the wanted rows (gathered into xn) */
	int64_t nw = 0;
	for (int64_t i = 0; i < n; i++) {
		if (want && !want[i])
			continue;
		rmsnorm(s.x + i * m->H, m->final_norm, m->H, eps, s.xn + nw * m->H);
		nw++;
	}
	if (nw > 0 && logits)
		run_one(m, &s, &m->lm_head, s.xn, m->H, logits, m->V, nw);
	*n_out = nw;
	return 0;
}

/* the rows' ids and sequences before a pass changes anything */
static int check_rows(const struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
		      const int32_t *ids, struct lynn_err *err)
{
	for (int64_t i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= m->V)
			return lynn_errf(err, -LYNN_EINVAL, "model: token id %d at position %lld outside the "
					 "vocabulary (0..%d)", ids[i], (long long)i, m->V - 1);
		if (!seqs[i] || seqs[i]->m != m)
			return lynn_errf(err, -LYNN_EINVAL, "model: row %lld: sequence of another model",
					 (long long)i);
	}
	return 0;
}

bool lynn_model_picks_on_device(const struct lynn_model *m)
{
	return m->cuda != NULL;
}

int lynn_model_forward_picks(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
			     const int32_t *ids, const bool *want, const struct lynn_row_picks *pk,
			     struct lynn_err *err)
{
	int rc = check_rows(m, n, seqs, ids, err);
	if (rc)
		return rc;
	for (int64_t i = 0, w = 0; pk->top_k && i < n; i++) {
		if (want && !want[i])
			continue;
		if (pk->top_k[w] < 0 || pk->top_k[w] > LYNN_DEVICE_TOP_K ||
		    (pk->top_k[w] > 0 && !(pk->temperature[w] > 0.0f && pk->temperature[w] < INFINITY)))
			return lynn_errf(err, -LYNN_EINVAL, "model: wanted row %lld: top_k %d (0..%d) with "
					 "temperature %g", (long long)w, pk->top_k[w], LYNN_DEVICE_TOP_K,
					 pk->temperature[w]);
		w++;
	}
#ifdef LYNN_CUDA
	if (m->cuda)
		return lynn_cuda_forward_picks(m, n, seqs, ids, want, pk, err);
#endif
	(void)want;
	return lynn_errf(err, -LYNN_EUNSUPPORTED, "model: picks on the device need the CUDA runner");
}

int lynn_model_forward(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
		       const int32_t *ids, const bool *want, float *logits, struct lynn_err *err)
{
	int rc = check_rows(m, n, seqs, ids, err);
	if (rc)
		return rc;
#ifdef LYNN_CUDA
	if (m->cuda)
		return lynn_cuda_forward(m, n, seqs, ids, want, logits, err);
#endif
	struct lynn_arena ar = { m->arena, m->arena_cap, 0 };
	for (int64_t r0 = 0; r0 < n; r0 += CHUNK_ROWS) {
		int64_t nc = LYNN_MIN(CHUNK_ROWS, n - r0), nw = 0;
		rc = forward_chunk(m, &ar, nc, seqs + r0, ids + r0, want ? want + r0 : NULL, logits, &nw, err);
		if (rc)
			break;
		if (logits)
			logits += nw * m->V;
	}
	m->arena = ar.base;
	m->arena_cap = ar.cap;
	return rc;
}

int lynn_model_prefill(struct lynn_model *m, struct lynn_seq *s, const int32_t *ids, int64_t n,
		       bool all_logits, float *logits, struct lynn_err *err)
{
	if (n <= 0)
		return lynn_errf(err, -LYNN_EINVAL, "model: empty prefill");
	struct lynn_seq **seqs = malloc((size_t)n * sizeof *seqs);
	bool *want = malloc((size_t)n * sizeof *want);
	int rc;
	if (!seqs || !want) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "model: out of memory");
		goto out;
	}
	for (int64_t i = 0; i < n; i++) {
		seqs[i] = s;
		want[i] = all_logits || i == n - 1;
	}
	rc = lynn_model_forward(m, n, seqs, ids, want, logits, err);
out:
	free(seqs);
	free(want);
	return rc;
}

int lynn_model_decode(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
		      const int32_t *ids, float *logits, struct lynn_err *err)
{
	return lynn_model_forward(m, n, seqs, ids, NULL, logits, err);
}
