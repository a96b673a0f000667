/*
 * runner.cu - the Qwen3.5-MoE decoder on one CUDA device: the same forward
 * pass as src/model/forward.c (docs/reference/qwen35moe-architecture.md §3),
 * with the weights, KV caches and DeltaNet states in device memory.
 *
 * Numerics: the residual stream, norms, attention, the causal conv, the
 * delta rule, the router and every sum are f32, as on the CPU. Dense
 * (BF16/F16/F32) weights are multiplied with f32 activations (f32
 * accumulation), so a dense checkpoint gives the CPU runner's logits up to
 * summation order. NVFP4 linears run the sm_90 kernels of nvfp4_gemm.cu
 * (W4A16: the activation rounded to BF16, f32 output); on compute
 * capability >= 10 they do the same (the native W4A4 path is the
 * linear-level API's, not used here).
 *
 * Rows are (sequence, token) pairs as in forward.c: the projections, router
 * and experts take every row of a chunk at once, while attention, the conv
 * and the delta rule walk each sequence's rows in order against its state.
 * Everything runs on the model's stream; a forward pass ends with one
 * synchronisation (the logits' copy back). Passes of up to GRAPH_MAX_ROWS
 * rows (decode steps) replay a CUDA graph of their launches (run_pass).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"
#include "lynn_cuda.h"

extern "C" {
#include "lynn/util.h"
#include "model/model_int.h"
}

/* The code of an error already filled in (err may be NULL). */
#define ERRC(err) ((err) && (err)->code ? (err)->code : -LYNN_ECUDA)

#define CHUNK_ROWS 256     /* rows per internal pass (bounds scratch memory) */
#define MAX_TOPK 32        /* experts per token the route kernel keeps */
#define ATT_WARPS 8        /* warps splitting one head's positions */
#define MAX_HD 512         /* attention head dim (multiple of 32) */

/* ===== launches =====
 * A decode step's kernels (passes of at most GRAPH_MAX_ROWS rows; see
 * forward_chunk) are launched with programmatic stream serialization
 * (unless LYNN_CUDA_NO_PDL is set at open): each may be scheduled as soon
 * as the kernel before it on the stream has started, and waits for that
 * kernel's end (griddepcontrol.wait, which returns at once for a kernel
 * launched plainly) before it reads or writes anything, so the step's
 * short kernels do not each pay a launch after the one before has ended. */
static __device__ __forceinline__ void pdl_wait(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }

static __device__ __forceinline__ void pdl_enter(void)
{
	lynn_pdl_trigger();
	pdl_wait();
}

template <typename... KP, typename... AP>
static void launch(bool pdl, void (*k)(KP...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
		   AP... args)
{
	cudaLaunchAttribute at;
	at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at.val.programmaticStreamSerializationAllowed = 1;
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	cfg.attrs = &at;
	cfg.numAttrs = pdl ? 1 : 0;
	cudaLaunchKernelEx(&cfg, k, args...); /* errors: launch_check's cudaGetLastError */
}

/* ===== the model on the device ===== */

struct dlin {                      /* one linear */
	bool nv;                   /* NVFP4: q; else dense dt/w */
	enum lynn_dtype dt;
	const void *w;             /* (n, k) */
	int64_t n, k;
	struct lynn_cuda_nvfp4_weight q;
	const struct lin *host;    /* for its LoRA adapter */
};

struct dbank {                     /* one projection of every expert, expert-major */
	bool nv;
	enum lynn_dtype dt;
	const void *w;             /* (E, n, k) */
	int64_t n, k;
	struct lynn_cuda_nvfp4_weight q; /* n_experts = E */
};

/* Linears that read the same input, stored one after another so that one
 * product runs them all (group_run): a DeltaNet layer's qkv, z, b and a, an
 * attention layer's q, k and v, the router and the shared expert's gate,
 * the shared expert's gate and up. */
#define GROUP_MAX 4

struct dgroup {
	int np;
	struct dlin *part[GROUP_MAX];
	int64_t n, k;              /* the parts' rows together; their columns */
	bool dense;                /* dense parts of one dtype: w is their rows stacked */
	enum lynn_dtype dt;
	const void *w;
	bool nv;                   /* NVFP4 parts: q is a bank of chunks of 32 (or 16) rows
				    * (lynn_cuda_nvfp4_stacked_gemm) */
	struct lynn_cuda_nvfp4_weight q;
};

struct dlayer {
	enum lynn_layer_type type;
	float *in_norm, *post_norm, *q_norm, *k_norm, *conv_w, *neg_a, *dt_bias, *gnorm;
	struct dlin q, k, v, o, qkv, z, b, a, out, router, sg, su, sd, sgate;
	struct dgroup in;          /* qkv, z, b, a (DeltaNet) or q, k, v (attention) */
	struct dgroup route;       /* router, sgate */
	struct dgroup sgu;         /* sg, su (not stacked with shx: they are the banks' expert E) */
	struct dbank eg, eu, ed;
	struct dbank egu;          /* NVFP4 gate and up as one [E, 2I, H] bank (up_experts), eg/eu then unset */
	bool shx;                  /* the shared expert is expert E of egu and ed (sg, su, sd point there) */
	bool elora;                /* adapters on some routed experts (note_expert_lora) */
};

struct dmap {                      /* host buffer -> its device copy */
	const void *host;
	size_t bytes;
	void *dev;
};

#define MAX_GRAPHS 16
#define GRAPH_MAX_ROWS 16

struct graph_key {
	int64_t n, ns, nw;
	const void *scratch;
	int64_t lora_on, lora_gen, picks; /* picks: 0 logits, 1 greedy, 2 and top-k */
};

struct lynn_cuda_model {
	cudaStream_t st;
	struct dlayer *L;
	enum lynn_dtype embed_dt;
	const void *embed;
	float *final_norm, *inv_freq;
	struct dlin lm_head;
	struct dmap *map;          /* every device allocation of the weights */
	int n_map, cap_map;
	char *scratch;             /* device scratch of a chunk */
	size_t scratch_cap;
	char *stage;               /* pinned host staging of a chunk's small arrays */
	size_t stage_cap;
	struct {
		struct graph_key key;
		cudaGraphExec_t exec;
	} graphs[MAX_GRAPHS];      /* record() captured, most recent last */
	int n_graphs;
	bool graphs_off;           /* LYNN_CUDA_NO_GRAPHS set at open */
	bool fused_mlp_off;        /* LYNN_CUDA_NO_FUSED_MLP set at open: gate and up as two banks */
	bool shared_bank_off;      /* LYNN_CUDA_NO_SHARED_BANK set at open: the shared expert on its own */
	bool pdl_off;              /* LYNN_CUDA_NO_PDL set at open: plain launches (launch) */
	bool stack_off;            /* LYNN_CUDA_NO_STACK set at open: a group's linears apart (up_group) */
	int sms;                   /* the device's multiprocessors */
	bool tiles_off;            /* LYNN_CUDA_NO_EXPERT_TILES set at open: a prefill's expert products
				    * a slot at a time, as a decode step's (moe) */
	bool elora_any, elora_known; /* dlayer.elora as of adapters generation elora_gen */
	unsigned elora_gen;
};

struct lynn_cuda_seq {
	int64_t cap;               /* KV rows allocated */
	float **kc, **vc, **conv, **rec; /* per layer, device pointers (host array) */
	float **d_kc, **d_vc, **d_conv, **d_rec; /* the same tables on the device */
};

static void graphs_clear(struct lynn_cuda_model *c)
{
	for (int i = 0; i < c->n_graphs; i++)
		cudaGraphExecDestroy(c->graphs[i].exec);
	c->n_graphs = 0;
}

static void *dev_alloc(struct lynn_cuda_model *c, const void *host, size_t bytes, struct lynn_err *err)
{
	for (int i = 0; i < c->n_map; i++)
		if (host && c->map[i].host == host && c->map[i].bytes == bytes)
			return c->map[i].dev;
	if (c->n_map == c->cap_map) {
		int cap = c->cap_map ? 2 * c->cap_map : 256;
		struct dmap *nm = (struct dmap *)realloc(c->map, (size_t)cap * sizeof *nm);
		if (!nm) {
			lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory");
			return NULL;
		}
		c->map = nm;
		c->cap_map = cap;
	}
	void *d = NULL;
	cudaError_t e = cudaMalloc(&d, bytes ? bytes : 1);
	if (e == cudaSuccess && host)
		e = cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
	if (e != cudaSuccess) {
		cudaFree(d);
		lynn_errf(err, -LYNN_ECUDA, "cuda: %zu bytes of weights: %s", bytes, cudaGetErrorString(e));
		return NULL;
	}
	c->map[c->n_map++] = (struct dmap){ host, bytes, d };
	return d;
}

static size_t dense_bytes(enum lynn_dtype dt, int64_t n, int64_t k)
{
	return (size_t)n * (size_t)k * lynn_dtype_size(dt);
}

static float *dev_vec(struct lynn_cuda_model *c, const float *v, int64_t n, struct lynn_err *err)
{
	return v ? (float *)dev_alloc(c, v, (size_t)n * sizeof(float), err) : NULL;
}

static int up_lin(struct lynn_cuda_model *c, struct dlin *d, const struct lin *l, struct lynn_err *err)
{
	memset(d, 0, sizeof *d);
	d->host = l;
	d->n = l->n_out;
	d->k = l->n_in;
	if (l->is_gg)
		return lynn_errf(err, -LYNN_EUNSUPPORTED, "cuda: '%s': GGUF quantized weights run on the "
				 "CPU only (--device cpu)", l->name ? l->name : "linear");
	if (!l->is_nv) {
		d->dt = l->dt;
		d->w = dev_alloc(c, l->w, dense_bytes(l->dt, l->n_out, l->n_in), err);
		return d->w ? 0 : ERRC(err);
	}
	if (l->n_in % 32)
		return lynn_errf(err, -LYNN_EUNSUPPORTED, "cuda: '%s': NVFP4 with %lld columns (the kernels "
				 "need a multiple of 32)", l->name, (long long)l->n_in);
	d->nv = true;
	d->q.n = l->n_out;
	d->q.k = l->n_in;
	d->q.d_packed = (const uint8_t *)dev_alloc(c, l->nv.packed, (size_t)l->n_out * l->n_in / 2, err);
	d->q.d_scales = d->q.d_packed ? (const uint8_t *)dev_alloc(c, l->nv.scales,
								   (size_t)l->n_out * l->n_in / 16, err) : NULL;
	d->q.d_alpha = d->q.d_scales ? (const float *)dev_alloc(c, &l->nv.alpha, sizeof(float), err) : NULL;
	return d->q.d_alpha ? 0 : ERRC(err);
}

/* The group's parts (np linears l with the same columns) on the device,
 * stacked when they allow it: dense parts of one dtype as one (n, k)
 * array, NVFP4 parts with K % 128 == 0 as one bank of chunks of 32 rows
 * (in_proj_qkv's tuned block, docs/benchmarks.md), or 16 where a part's
 * rows need it, each chunk one block of the tc3 kernel with its part's
 * tensor multiplier; each part's dlin points into the stack. Otherwise
 * each part is uploaded on its own and the group runs them one by one. */
static int up_group(struct lynn_cuda_model *c, struct dgroup *G, struct dlin *const *d,
		    const struct lin *const *l, int np, struct lynn_err *err)
{
	memset(G, 0, sizeof *G);
	G->np = np;
	G->k = l[0]->n_in;
	bool dense = !c->stack_off, nv = !c->stack_off && G->k % 128 == 0;
	int64_t rows = 32; /* of a chunk */
	for (int i = 0; i < np; i++) {
		G->part[i] = d[i];
		G->n += l[i]->n_out;
		dense &= !l[i]->is_nv && !l[i]->is_gg && l[i]->dt == l[0]->dt && l[i]->n_in == G->k;
		nv &= l[i]->is_nv && l[i]->n_in == G->k && l[i]->n_out % 16 == 0;
		if (l[i]->n_out % 32)
			rows = 16;
	}
	nv &= G->k / 128 >= 128 / rows; /* a span for each of the block's K groups */
	if (!dense && !nv) {
		for (int i = 0; i < np; i++) {
			int rc = up_lin(c, d[i], l[i], err);
			if (rc)
				return rc;
		}
		return 0;
	}
	int64_t row = 0, chunks = G->n / rows;
	char *w = NULL;
	uint8_t *pk = NULL, *sc = NULL;
	float *al = NULL, *alpha = NULL;
	if (dense) {
		G->dense = true;
		G->dt = l[0]->dt;
		if (!(w = (char *)dev_alloc(c, NULL, dense_bytes(G->dt, G->n, G->k), err)))
			return ERRC(err);
		G->w = w;
	} else {
		G->nv = true;
		pk = (uint8_t *)dev_alloc(c, NULL, (size_t)G->n * G->k / 2, err);
		sc = pk ? (uint8_t *)dev_alloc(c, NULL, (size_t)G->n * G->k / 16, err) : NULL;
		al = sc ? (float *)dev_alloc(c, NULL, sizeof(float) * (size_t)chunks, err) : NULL;
		if (!al)
			return ERRC(err);
		if (!(alpha = (float *)malloc(sizeof(float) * (size_t)chunks)))
			return lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory");
		G->q = (struct lynn_cuda_nvfp4_weight){ pk, sc, al, rows, G->k, chunks };
	}
	int rc = 0;
	for (int i = 0; i < np && !rc; i++) {
		struct dlin *p = d[i];
		const int64_t n = l[i]->n_out;
		memset(p, 0, sizeof *p);
		p->host = l[i];
		p->n = n;
		p->k = G->k;
		if (dense) {
			p->dt = G->dt;
			p->w = w + dense_bytes(G->dt, row, G->k);
			if (cudaMemcpy((void *)p->w, l[i]->w, dense_bytes(G->dt, n, G->k), cudaMemcpyHostToDevice))
				rc = lynn_errf(err, -LYNN_ECUDA, "cuda: copying '%s' failed", l[i]->name);
		} else {
			p->nv = true;
			p->q = (struct lynn_cuda_nvfp4_weight){ pk + row * (G->k / 2), sc + row * (G->k / 16),
								al + row / rows, n, G->k, 0 };
			for (int64_t j = 0; j < n / rows; j++)
				alpha[row / rows + j] = l[i]->nv.alpha;
			if (cudaMemcpy((void *)p->q.d_packed, l[i]->nv.packed, (size_t)n * G->k / 2,
				       cudaMemcpyHostToDevice) ||
			    cudaMemcpy((void *)p->q.d_scales, l[i]->nv.scales, (size_t)n * G->k / 16,
				       cudaMemcpyHostToDevice))
				rc = lynn_errf(err, -LYNN_ECUDA, "cuda: copying '%s' failed", l[i]->name);
		}
		row += n;
	}
	if (!rc && nv && cudaMemcpy(al, alpha, sizeof(float) * (size_t)chunks, cudaMemcpyHostToDevice))
		rc = lynn_errf(err, -LYNN_ECUDA, "cuda: copying the scales of '%s' failed", l[0]->name);
	free(alpha);
	return rc;
}

/* One bank for all E experts: expert e's rows are its parts' rows stacked,
 * parts[0][e] then parts[1][e] ... (np 1: one projection; np 2: [gate; up]
 * as one NVFP4 bank, which takes part 0's tensor multiplier: the caller has
 * checked that the parts share it). With `extra` (np linears of the
 * experts' shapes: the shared expert) the bank has E + 1 experts, extra
 * the last. */
static int up_bank(struct lynn_cuda_model *c, struct dbank *b, const struct lin *const *parts, int np,
		   int E, const struct lin *const *extra, struct lynn_err *err)
{
	const struct lin *l0 = &parts[0][0];
	const int En = E + (extra != NULL); /* the bank's experts */
#define PART(h, e) ((e) < E ? &parts[h][e] : extra[h])
	memset(b, 0, sizeof *b);
	b->n = np * l0->n_out;
	b->k = l0->n_in;
	b->nv = l0->is_nv;
	b->dt = l0->dt;
	for (int h = 0; h < np; h++)
		for (int e = 0; e < En; e++) {
			const struct lin *l = PART(h, e);
			if (l->is_gg || l->is_nv != b->nv || (!b->nv && l->dt != b->dt))
				return lynn_errf(err, -LYNN_EUNSUPPORTED, "cuda: '%s': experts of mixed or GGUF "
						 "formats run on the CPU only (--device cpu)", l->name);
		}
	if (!b->nv) {
		size_t pb = dense_bytes(b->dt, l0->n_out, b->k); /* one part */
		char *d = (char *)dev_alloc(c, NULL, pb * np * En, err);
		if (!d)
			return ERRC(err);
		for (int e = 0; e < En; e++)
			for (int h = 0; h < np; h++)
				LYNN_CUDA_TRY(cudaMemcpy(d + pb * (np * e + h), PART(h, e)->w, pb,
							 cudaMemcpyHostToDevice));
		b->w = d;
		return 0;
	}
	if (b->k % 32)
		return lynn_errf(err, -LYNN_EUNSUPPORTED, "cuda: '%s': NVFP4 with %lld columns (the kernels "
				 "need a multiple of 32)", l0->name, (long long)b->k);
	size_t pb = (size_t)l0->n_out * b->k / 2, sb = (size_t)l0->n_out * b->k / 16; /* one part */
	uint8_t *p = (uint8_t *)dev_alloc(c, NULL, pb * np * En, err);
	uint8_t *s = p ? (uint8_t *)dev_alloc(c, NULL, sb * np * En, err) : NULL;
	float *a = s ? (float *)dev_alloc(c, NULL, sizeof(float) * En, err) : NULL;
	if (!a)
		return ERRC(err);
	float *alpha = (float *)malloc(sizeof(float) * En);
	if (!alpha)
		return lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory");
	int rc = 0;
	for (int e = 0; e < En && !rc; e++) {
		alpha[e] = PART(0, e)->nv.alpha;
		for (int h = 0; h < np && !rc; h++) {
			const struct lin *l = PART(h, e);
			size_t at = (size_t)(np * e + h);
			if (cudaMemcpy(p + pb * at, l->nv.packed, pb, cudaMemcpyHostToDevice) != cudaSuccess ||
			    cudaMemcpy(s + sb * at, l->nv.scales, sb, cudaMemcpyHostToDevice) != cudaSuccess)
				rc = lynn_errf(err, -LYNN_ECUDA, "cuda: copying the experts of '%s' failed", l->name);
		}
	}
	if (!rc && cudaMemcpy(a, alpha, sizeof(float) * En, cudaMemcpyHostToDevice) != cudaSuccess)
		rc = lynn_errf(err, -LYNN_ECUDA, "cuda: copying the experts' scales failed");
	free(alpha);
	b->q = (struct lynn_cuda_nvfp4_weight){ p, s, a, b->n, b->k, En };
	return rc;
#undef PART
}

/* d: part h (of np) of expert e of NVFP4 bank b, in place (no copy) */
static void bank_lin(struct dlin *d, const struct dbank *b, int e, int h, int np, const struct lin *host)
{
	const int64_t rows = b->n / np, at = (int64_t)np * e + h;
	memset(d, 0, sizeof *d);
	d->host = host;
	d->nv = true;
	d->n = d->q.n = rows;
	d->k = d->q.k = b->k;
	d->q.d_packed = b->q.d_packed + at * rows * (b->k / 2);
	d->q.d_scales = b->q.d_scales + at * rows * (b->k / 16);
	d->q.d_alpha = b->q.d_alpha + e;
}

/* Whether an expert's (or the shared expert's) gate g, up u and down d fit
 * the expert MLP call: NVFP4, gate and up with one tensor multiplier, the
 * shapes of expert 0 (g0, d0) with H and I multiples of 128. */
static bool mlp_fits(const struct lin *g, const struct lin *u, const struct lin *d, const struct lin *g0,
		     const struct lin *d0)
{
	return g->is_nv && u->is_nv && d->is_nv && g->nv.alpha == u->nv.alpha && g0->n_in % 128 == 0 &&
	       g0->n_out % 128 == 0 && g->n_out == g0->n_out && u->n_out == g0->n_out &&
	       g->n_in == g0->n_in && u->n_in == g0->n_in && d->n_out == d0->n_out && d->n_in == d0->n_in;
}

/* The experts' MLPs: gate and up as one bank of [gate; up] per expert when
 * every expert fits the expert MLP call (lynn_cuda_nvfp4_moe_mlp: gate/up,
 * SwiGLU and down in two launches; quantize --nvfp4 shares the global scale
 * of fused groups, so its checkpoints qualify), and then the shared expert
 * too as expert E of the banks when it fits, so that one call runs it with
 * the routed ones (D->shx; not with LYNN_CUDA_NO_SHARED_BANK set); else two
 * banks (and with LYNN_CUDA_NO_FUSED_MLP set). */
static int up_experts(struct lynn_cuda_model *c, struct dlayer *D, const struct layer *L, int E,
		      struct lynn_err *err)
{
	bool fuse = !c->fused_mlp_off;
	for (int e = 0; e < E && fuse; e++)
		fuse = mlp_fits(&L->eg[e], &L->eu[e], &L->ed[e], &L->eg[0], &L->ed[0]);
	D->shx = fuse && !c->shared_bank_off && mlp_fits(&L->sg, &L->su, &L->sd, &L->eg[0], &L->ed[0]);
	const struct lin *parts[3] = { L->eg, L->eu, L->ed }, *sgu[2] = { &L->sg, &L->su }, *sd[1] = { &L->sd };
	int rc = up_bank(c, &D->ed, parts + 2, 1, E, D->shx ? sd : NULL, err);
	if (rc)
		return rc;
	if (!fuse) {
		rc = up_bank(c, &D->eg, parts, 1, E, NULL, err);
		return rc ? rc : up_bank(c, &D->eu, parts + 1, 1, E, NULL, err);
	}
	if ((rc = up_bank(c, &D->egu, parts, 2, E, D->shx ? sgu : NULL, err)))
		return rc;
	if (!D->shx)
		return 0;
	bank_lin(&D->sg, &D->egu, E, 0, 2, &L->sg);
	bank_lin(&D->su, &D->egu, E, 1, 2, &L->su);
	bank_lin(&D->sd, &D->ed, E, 0, 1, &L->sd);
	D->sgu = (struct dgroup){ .np = 2, .part = { &D->sg, &D->su }, .n = 2 * D->sg.n, .k = D->sg.k };
	return 0;
}

extern "C" bool lynn_cuda_usable(void)
{
	int n = 0;
	return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

extern "C" void lynn_cuda_model_free(struct lynn_model *m)
{
	struct lynn_cuda_model *c = m->cuda;
	if (!c)
		return;
	for (int i = 0; i < c->n_map; i++)
		cudaFree(c->map[i].dev);
	free(c->map);
	free(c->L);
	graphs_clear(c);
	cudaFree(c->scratch);
	cudaFreeHost(c->stage);
	if (c->st)
		cudaStreamDestroy(c->st);
	free(c);
	m->cuda = NULL;
}

extern "C" int lynn_cuda_model_init(struct lynn_model *m, struct lynn_err *err)
{
	if (m->gguf)
		return lynn_errf(err, -LYNN_EUNSUPPORTED, "cuda: GGUF models run on the CPU only (--device cpu)");
	if (m->topk > MAX_TOPK || m->hd % 32 || m->hd > MAX_HD || m->dv > 1024 || m->dk > 1024)
		return lynn_errf(err, -LYNN_EUNSUPPORTED, "cuda: experts per token %d (max %d), head dim %d "
				 "(a multiple of 32 up to %d) or DeltaNet dims %d/%d (max 1024) beyond the CUDA "
				 "runner", m->topk, MAX_TOPK, m->hd, MAX_HD, m->dk, m->dv);
	if (!lynn_cuda_usable())
		return lynn_errf(err, -LYNN_ECUDA, "cuda: no CUDA device");
	struct lynn_cuda_model *c = (struct lynn_cuda_model *)calloc(1, sizeof *c);
	if (!c)
		return lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory");
	m->cuda = c;
	c->graphs_off = getenv("LYNN_CUDA_NO_GRAPHS") != NULL;
	c->fused_mlp_off = getenv("LYNN_CUDA_NO_FUSED_MLP") != NULL;
	c->shared_bank_off = getenv("LYNN_CUDA_NO_SHARED_BANK") != NULL;
	c->pdl_off = getenv("LYNN_CUDA_NO_PDL") != NULL;
	c->stack_off = getenv("LYNN_CUDA_NO_STACK") != NULL;
	c->tiles_off = getenv("LYNN_CUDA_NO_EXPERT_TILES") != NULL;
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || c->sms < 1)
		c->sms = 132;
	int rc = 0, nl = m->cfg.n_layers;
	LYNN_CUDA_TRY(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking));
	c->L = (struct dlayer *)calloc((size_t)nl, sizeof *c->L);
	if (!c->L)
		return lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory");
	c->embed_dt = m->embed_dt;
	c->embed = dev_alloc(c, m->embed, dense_bytes(m->embed_dt, m->V, m->H), err);
	c->final_norm = dev_vec(c, m->final_norm, m->H, err);
	c->inv_freq = m->cfg.rot_dim >= 2 ? dev_vec(c, m->inv_freq, m->cfg.rot_dim / 2, err)
					  : (float *)dev_alloc(c, NULL, sizeof(float), err);
	if (!c->embed || !c->final_norm || !c->inv_freq)
		return ERRC(err);
	if ((rc = up_lin(c, &c->lm_head, &m->lm_head, err)))
		return rc;
	for (int li = 0; li < nl; li++) {
		const struct layer *L = &m->layers[li];
		struct dlayer *D = &c->L[li];
		D->type = L->type;
		if (!(D->in_norm = dev_vec(c, L->in_norm, m->H, err)) ||
		    !(D->post_norm = dev_vec(c, L->post_norm, m->H, err)))
			return ERRC(err);
		if (L->type == LYNN_LAYER_FULL) {
			struct dlin *d[3] = { &D->q, &D->k, &D->v };
			const struct lin *l[3] = { &L->q, &L->k, &L->v };
			if ((rc = up_group(c, &D->in, d, l, 3, err)) || (rc = up_lin(c, &D->o, &L->o, err)))
				return rc;
			if (!(D->q_norm = dev_vec(c, L->q_norm, m->hd, err)) ||
			    !(D->k_norm = dev_vec(c, L->k_norm, m->hd, err)))
				return ERRC(err);
		} else {
			struct dlin *d[4] = { &D->qkv, &D->z, &D->b, &D->a };
			const struct lin *l[4] = { &L->qkv, &L->z, &L->b, &L->a };
			if ((rc = up_group(c, &D->in, d, l, 4, err)) || (rc = up_lin(c, &D->out, &L->out, err)))
				return rc;
			if (!(D->conv_w = dev_vec(c, L->conv_w, (int64_t)m->conv_dim * m->K, err)) ||
			    !(D->neg_a = dev_vec(c, L->neg_a, m->Hv, err)) ||
			    !(D->dt_bias = dev_vec(c, L->dt_bias, m->Hv, err)) ||
			    !(D->gnorm = dev_vec(c, L->gnorm, m->dv, err)))
				return ERRC(err);
		}
		struct dlin *dr[2] = { &D->router, &D->sgate };
		const struct lin *lr[2] = { &L->router, &L->sgate };
		if ((rc = up_group(c, &D->route, dr, lr, 2, err)) || (rc = up_experts(c, D, L, m->E, err)))
			return rc;
		struct dlin *ds[2] = { &D->sg, &D->su };
		const struct lin *ls[2] = { &L->sg, &L->su };
		if (!D->shx && ((rc = up_group(c, &D->sgu, ds, ls, 2, err)) || (rc = up_lin(c, &D->sd, &L->sd, err))))
			return rc;
	}
	LYNN_CUDA_TRY(cudaDeviceSynchronize());
	return 0;
}

/* An adapter's A and B on the device (replacing earlier copies). */
extern "C" void lynn_cuda_lora_drop(struct lin *l)
{
	cudaFree(l->d_lora_a);
	cudaFree(l->d_lora_b);
	l->d_lora_a = l->d_lora_b = NULL;
}

extern "C" int lynn_cuda_lora_upload(struct lin *l, struct lynn_err *err)
{
	const struct lynn_lora_ref *r = &l->lora;
	size_t ab = dense_bytes(r->dt, r->rank, l->n_in), bb = dense_bytes(r->dt, l->n_out, r->rank);
	lynn_cuda_lora_drop(l);
	LYNN_CUDA_TRY(cudaMalloc(&l->d_lora_a, ab));
	LYNN_CUDA_TRY(cudaMalloc(&l->d_lora_b, bb));
	LYNN_CUDA_TRY(cudaMemcpy(l->d_lora_a, r->a, ab, cudaMemcpyHostToDevice));
	LYNN_CUDA_TRY(cudaMemcpy(l->d_lora_b, r->b, bb, cudaMemcpyHostToDevice));
	LYNN_CUDA_TRY(cudaDeviceSynchronize()); /* done before the model's stream reads them */
	return 0;
}

/* ===== sequence state ===== */

static size_t conv_bytes(const struct lynn_model *m)
{
	return (size_t)(m->K > 1 ? m->K - 1 : 1) * m->conv_dim * sizeof(float);
}

static size_t rec_bytes(const struct lynn_model *m)
{
	return (size_t)m->Hv * m->dk * m->dv * sizeof(float);
}

extern "C" void lynn_cuda_seq_free(struct lynn_seq *s)
{
	struct lynn_cuda_seq *d = s->cuda;
	if (!d)
		return;
	int nl = s->m->cfg.n_layers;
	for (int li = 0; li < nl; li++) {
		if (d->kc) cudaFree(d->kc[li]);
		if (d->vc) cudaFree(d->vc[li]);
		if (d->conv) cudaFree(d->conv[li]);
		if (d->rec) cudaFree(d->rec[li]);
	}
	free(d->kc); free(d->vc); free(d->conv); free(d->rec);
	cudaFree(d->d_kc); cudaFree(d->d_vc); cudaFree(d->d_conv); cudaFree(d->d_rec);
	free(d);
	s->cuda = NULL;
}

/* The state tables to the device. The copies and memsets of sequence set-up
 * run on the legacy stream, which the model's (non-blocking) stream does not
 * wait for: each set-up step ends with a device synchronisation. */
static int push_tables(struct lynn_cuda_seq *d, int nl, struct lynn_err *err)
{
	size_t b = (size_t)nl * sizeof(float *);
	LYNN_CUDA_TRY(cudaMemcpy(d->d_kc, d->kc, b, cudaMemcpyHostToDevice));
	LYNN_CUDA_TRY(cudaMemcpy(d->d_vc, d->vc, b, cudaMemcpyHostToDevice));
	LYNN_CUDA_TRY(cudaMemcpy(d->d_conv, d->conv, b, cudaMemcpyHostToDevice));
	LYNN_CUDA_TRY(cudaMemcpy(d->d_rec, d->rec, b, cudaMemcpyHostToDevice));
	LYNN_CUDA_TRY(cudaDeviceSynchronize());
	return 0;
}

extern "C" int lynn_cuda_seq_init(struct lynn_seq *s, struct lynn_err *err)
{
	const struct lynn_model *m = s->m;
	int nl = m->cfg.n_layers;
	struct lynn_cuda_seq *d = (struct lynn_cuda_seq *)calloc(1, sizeof *d);
	if (!d)
		return lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory for a sequence state");
	s->cuda = d;
	d->kc = (float **)calloc((size_t)nl, sizeof(float *));
	d->vc = (float **)calloc((size_t)nl, sizeof(float *));
	d->conv = (float **)calloc((size_t)nl, sizeof(float *));
	d->rec = (float **)calloc((size_t)nl, sizeof(float *));
	if (!d->kc || !d->vc || !d->conv || !d->rec)
		return lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory for a sequence state");
	size_t b = (size_t)nl * sizeof(float *);
	LYNN_CUDA_TRY(cudaMalloc(&d->d_kc, b));
	LYNN_CUDA_TRY(cudaMalloc(&d->d_vc, b));
	LYNN_CUDA_TRY(cudaMalloc(&d->d_conv, b));
	LYNN_CUDA_TRY(cudaMalloc(&d->d_rec, b));
	for (int li = 0; li < nl; li++) {
		if (m->layers[li].type != LYNN_LAYER_LINEAR)
			continue;
		LYNN_CUDA_TRY(cudaMalloc(&d->conv[li], conv_bytes(m)));
		LYNN_CUDA_TRY(cudaMalloc(&d->rec[li], rec_bytes(m)));
		LYNN_CUDA_TRY(cudaMemset(d->conv[li], 0, conv_bytes(m)));
		LYNN_CUDA_TRY(cudaMemset(d->rec[li], 0, rec_bytes(m)));
	}
	return push_tables(d, nl, err);
}

extern "C" void lynn_cuda_seq_reset(struct lynn_seq *s)
{
	const struct lynn_model *m = s->m;
	struct lynn_cuda_seq *d = s->cuda;
	for (int li = 0; li < m->cfg.n_layers; li++)
		if (d->conv[li]) {
			cudaMemset(d->conv[li], 0, conv_bytes(m));
			cudaMemset(d->rec[li], 0, rec_bytes(m));
		}
	cudaDeviceSynchronize();
}

/* KV rows for `need` positions: doubled as on the CPU (or exactly `need`:
 * a kept copy), the old rows copied. */
static int grow_kv(const struct lynn_model *m, struct lynn_seq *s, int64_t need, bool exact, struct lynn_err *err)
{
	struct lynn_cuda_seq *d = s->cuda;
	if (need <= d->cap)
		return 0;
	int64_t cap = exact ? need : lynn_kv_rows(d->cap, need);
	size_t row = (size_t)m->nkv * m->hd * sizeof(float);
	for (int li = 0; li < m->cfg.n_layers; li++) {
		if (m->layers[li].type != LYNN_LAYER_FULL)
			continue;
		float **tabs[2] = { d->kc, d->vc };
		for (int t = 0; t < 2; t++) {
			float *nb = NULL;
			if (cudaMalloc(&nb, (size_t)cap * row) != cudaSuccess)
				return lynn_errf(err, -LYNN_ENOMEM, "cuda: out of device memory for a KV cache "
						 "of %lld tokens", (long long)cap);
			if (tabs[t][li]) {
				LYNN_CUDA_TRY(cudaMemcpy(nb, tabs[t][li], (size_t)d->cap * row,
							 cudaMemcpyDeviceToDevice));
				LYNN_CUDA_TRY(cudaDeviceSynchronize());
			}
			cudaFree(tabs[t][li]);
			tabs[t][li] = nb;
		}
	}
	d->cap = cap;
	return push_tables(d, m->cfg.n_layers, err);
}

extern "C" int64_t lynn_cuda_seq_rows(const struct lynn_seq *s) { return s->cuda->cap; }

/* A kept state and the sequence that starts from it: the source's
 * positions, conv and recurrent states, device to device once the model's
 * stream is done with them (set-up copies run on the legacy stream). */
extern "C" int lynn_cuda_seq_copy(struct lynn_seq *dst, const struct lynn_seq *src, bool exact,
				  struct lynn_err *err)
{
	const struct lynn_model *m = src->m;
	const struct lynn_cuda_seq *a = src->cuda;
	struct lynn_cuda_seq *b = dst->cuda;
	int rc;
	LYNN_CUDA_TRY(cudaDeviceSynchronize());
	if ((rc = grow_kv(m, dst, src->pos, exact, err)))
		return rc;
	const size_t row = (size_t)m->nkv * m->hd * sizeof(float);
	for (int li = 0; li < m->cfg.n_layers; li++) {
		if (m->layers[li].type == LYNN_LAYER_FULL) {
			if (src->pos > 0) {
				LYNN_CUDA_TRY(cudaMemcpy(b->kc[li], a->kc[li], (size_t)src->pos * row,
							 cudaMemcpyDeviceToDevice));
				LYNN_CUDA_TRY(cudaMemcpy(b->vc[li], a->vc[li], (size_t)src->pos * row,
							 cudaMemcpyDeviceToDevice));
			}
		} else {
			LYNN_CUDA_TRY(cudaMemcpy(b->conv[li], a->conv[li], conv_bytes(m), cudaMemcpyDeviceToDevice));
			LYNN_CUDA_TRY(cudaMemcpy(b->rec[li], a->rec[li], rec_bytes(m), cudaMemcpyDeviceToDevice));
		}
	}
	LYNN_CUDA_TRY(cudaDeviceSynchronize());
	return 0;
}

/* ===== kernels ===== */

__device__ __forceinline__ float sigmoid_d(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_d(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus_d(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* Sum over the block; every thread gets the result. `red` holds 33 floats. */
__device__ float block_sum(float v, float *red)
{
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0)
		red[w] = v;
	__syncthreads();
	if (w == 0) {
		float t = lane < nw ? red[lane] : 0.0f;
		t = warp_sum(t);
		if (lane == 0)
			red[32] = t;
	}
	__syncthreads();
	return red[32];
}

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

#define GEMV_T 4   /* tokens per pass over a weight row */
#define GEMV_U 4   /* 16-byte weight loads a lane keeps in flight */

/* a[t] += the 16 bytes of weights `raw` (columns k0..) times token t0 + t's x. */
template <typename T>
__device__ __forceinline__ void gemv_acc(uint4 raw, const float *x, int64_t ldx, int t0, int nt, int64_t k0,
					 float *a)
{
	constexpr int V = 16 / sizeof(T);
	union { uint4 u; T e[V]; } wv;
	wv.u = raw;
	float wf[V];
#pragma unroll
	for (int j = 0; j < V; j++)
		wf[j] = to_f(wv.e[j]);
#pragma unroll
	for (int t = 0; t < GEMV_T; t++) {
		if (t >= nt)
			break;
		const float4 *xp = (const float4 *)(x + (int64_t)(t0 + t) * ldx + k0);
		float s = 0.0f;
#pragma unroll
		for (int j = 0; j < V / 4; j++) {
			float4 xv = __ldg(xp + j);
			s += wf[4 * j] * xv.x + wf[4 * j + 1] * xv.y + wf[4 * j + 2] * xv.z + wf[4 * j + 3] * xv.w;
		}
		a[t] += s;
	}
}

/* Dense product, one warp per output row: for each group g (an expert
 * slot, or the one group of a plain linear) Y_g[t][r] (=, or += with acc)
 * scale * sum_k W_e[r][k] X_g[t][k] with e = ids ? ids[g] : 0, X_g = X +
 * (g / x_div) * x_gstride, Y_g = Y + g * y_gstride; rows of tokens ldx/ldy
 * apart; the tokens from tz * blockIdx.z, tz of them (grid.z splits M
 * where the rows are too few to fill the GPU: a prefill's router). ONE
 * (M = 1): a lane keeps GEMV_U weight loads in flight (lm_head
 * of a one-sequence decode step 8% faster on the H200; with several tokens
 * the unrolled loop cost 4-5%, docs/benchmarks.md). */
template <typename T, bool ONE>
__global__ void k_gemv(const T *__restrict__ W, int64_t w_estride, const int *__restrict__ ids,
		       int x_div, const float *__restrict__ X, int64_t ldx, int64_t x_gstride, int M,
		       int64_t N, int64_t K, float *Y, int64_t ldy, int64_t y_gstride, float scale,
		       int acc, int tz)
{
	lynn_pdl_trigger();
	int lane = threadIdx.x & 31;
	int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	int g = blockIdx.y;
	/* a decode step's plain linear: its weight row into L2 while the
	 * kernel before ends (the weights are constant; the slots' experts are
	 * known only after the wait), for grids of about a wave */
	if (!ids && r < N && M <= GRAPH_MAX_ROWS && gridDim.x <= 2048)
		for (int64_t b = (int64_t)lane * 128; b < K * (int64_t)sizeof(T); b += 32 * 128)
			asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)(W + r * K) + b));
	pdl_wait();
	if (r >= N || (ids && ids[g] < 0)) /* (a negative id: a group with no work) */
		return;
	const T *w = W + (ids ? (int64_t)ids[g] : 0) * w_estride + r * K;
	const float *x = X + (int64_t)(g / x_div) * x_gstride;
	float *y = Y + (int64_t)g * y_gstride;
	constexpr int V = 16 / sizeof(T);
	bool vec = K % V == 0 && ((uintptr_t)w & 15) == 0 && ldx % 4 == 0 &&
		   ((uintptr_t)x & 15) == 0;
	const int t_end = M < (int)(blockIdx.z + 1) * tz ? M : (int)(blockIdx.z + 1) * tz;
	for (int t0 = blockIdx.z * tz; t0 < t_end; t0 += GEMV_T) {
		float a[GEMV_T] = { 0 };
		int nt = t_end - t0 < GEMV_T ? t_end - t0 : GEMV_T;
		if (vec && ONE) {
			for (int64_t k0 = (int64_t)lane * V; k0 < K; k0 += 32 * V * GEMV_U) {
				uint4 raw[GEMV_U];
#pragma unroll
				for (int u = 0; u < GEMV_U; u++)
					if (k0 + u * 32 * V < K)
						raw[u] = __ldg((const uint4 *)(w + k0 + u * 32 * V));
#pragma unroll
				for (int u = 0; u < GEMV_U; u++)
					if (k0 + u * 32 * V < K)
						gemv_acc<T>(raw[u], x, ldx, 0, 1, k0 + u * 32 * V, a);
			}
		} else if (vec) {
			for (int64_t k0 = (int64_t)lane * V; k0 < K; k0 += 32 * V)
				gemv_acc<T>(__ldg((const uint4 *)(w + k0)), x, ldx, t0, nt, k0, a);
		} else {
			for (int64_t k = lane; k < K; k += 32) {
				float wf = to_f(w[k]);
				for (int t = 0; t < nt; t++)
					a[t] += wf * x[(int64_t)(t0 + t) * ldx + k];
			}
		}
		for (int t = 0; t < nt; t++) {
			float s = warp_sum(a[t]);
			if (lane == 0) {
				float *yp = y + (int64_t)(t0 + t) * ldy + r;
				*yp = acc ? *yp + scale * s : scale * s;
			}
		}
	}
}

/* Embedding rows (BF16/F16/F32) to f32. */
template <typename T>
__global__ void k_embed(const T *E, const int *ids, int64_t H, float *x)
{
	pdl_enter();
	int i = blockIdx.x;
	const T *row = E + (int64_t)ids[i] * H;
	for (int64_t d = threadIdx.x; d < H; d += blockDim.x)
		x[(int64_t)i * H + d] = to_f(row[d]);
}

/* y = x * rsqrt(mean(x^2) + eps) * w for row rows ? rows[i] : i; also bf16.
 * With add (same rows as x), x += add first (the residual sum before the
 * norm). A row of up to RMS_R * blockDim.x values stays in registers, so
 * x is read once and its loads are all in flight together. */
#define RMS_R 8

__global__ void k_rmsnorm(float *x, const float *add, const int *rows, const float *w, int H, float eps,
			  float *y, __nv_bfloat16 *yb)
{
	pdl_enter();
	__shared__ float red[33];
	int i = blockIdx.x, t = threadIdx.x, bd = blockDim.x;
	float *xr = x + (int64_t)(rows ? rows[i] : i) * H;
	const float *ar = add ? add + (int64_t)(rows ? rows[i] : i) * H : NULL;
	float ss = 0.0f;
	if (H <= RMS_R * bd) {
		float v[RMS_R];
#pragma unroll
		for (int r = 0; r < RMS_R; r++) {
			int d = t + r * bd;
			v[r] = d < H ? xr[d] : 0.0f;
		}
		if (ar)
#pragma unroll
			for (int r = 0; r < RMS_R; r++) {
				int d = t + r * bd;
				if (d < H) {
					v[r] += ar[d];
					xr[d] = v[r];
				}
			}
#pragma unroll
		for (int r = 0; r < RMS_R; r++)
			ss += v[r] * v[r];
		ss = block_sum(ss, red);
		float rs = 1.0f / sqrtf(ss / (float)H + eps);
#pragma unroll
		for (int r = 0; r < RMS_R; r++) {
			int d = t + r * bd;
			if (d < H) {
				float o = v[r] * rs * w[d];
				y[(int64_t)i * H + d] = o;
				yb[(int64_t)i * H + d] = __float2bfloat16(o);
			}
		}
		return;
	}
	for (int d = t; d < H; d += bd) {
		float v = xr[d];
		if (ar)
			xr[d] = v += ar[d];
		ss += v * v;
	}
	ss = block_sum(ss, red);
	float rs = 1.0f / sqrtf(ss / (float)H + eps);
	for (int d = t; d < H; d += bd) {
		float v = xr[d] * rs * w[d];
		y[(int64_t)i * H + d] = v;
		yb[(int64_t)i * H + d] = __float2bfloat16(v);
	}
}

/* threads for k_rmsnorm over rows of H: 256, or up to 1024 to keep a row in registers */
static unsigned rms_threads(int64_t H)
{
	int64_t t = (H + RMS_R - 1) / RMS_R;
	t = (t + 31) / 32 * 32;
	return (unsigned)(t < 256 ? 256 : t > 1024 ? 1024 : t);
}

/* Attention inputs, one block per (row, head): heads 0..nh-1 are the query
 * heads of P (RMSNorm + RoPE in place), nh..nh+nkv-1 the key heads (norm +
 * RoPE, then written with the value head into the row's cache slot). Rows
 * of P lie ldp apart, of Kx and Vx ldkv (group_run's outputs). */
__global__ void k_qk_prep(float *P, int64_t ldp, const float *Kx, const float *Vx, int64_t ldkv,
			  const int64_t *pos, float *const *const *row_kc, float *const *const *row_vc, int li,
			  const float *q_norm, const float *k_norm, const float *inv_freq, int nh, int nkv,
			  int hd, int rot, float eps)
{
	pdl_enter();
	__shared__ float red[33];
	__shared__ float v[MAX_HD];
	int i = blockIdx.x, h = blockIdx.y, kvw = nkv * hd;
	bool isq = h < nh;
	const float *src = isq ? P + (int64_t)i * ldp + (int64_t)h * 2 * hd : Kx + (int64_t)i * ldkv + (h - nh) * hd;
	const float *w = isq ? q_norm : k_norm;
	float ss = 0.0f;
	for (int j = threadIdx.x; j < hd; j += blockDim.x)
		ss += src[j] * src[j];
	ss = block_sum(ss, red);
	float r = 1.0f / sqrtf(ss / (float)hd + eps);
	for (int j = threadIdx.x; j < hd; j += blockDim.x)
		v[j] = src[j] * r * w[j];
	__syncthreads();
	int half = rot / 2;
	for (int j = threadIdx.x; j < half; j += blockDim.x) {
		float ang = (float)pos[i] * inv_freq[j];
		float cs = cosf(ang), sn = sinf(ang), a = v[j], b = v[j + half];
		v[j] = a * cs - b * sn;
		v[j + half] = b * cs + a * sn;
	}
	__syncthreads();
	if (isq) {
		float *dst = P + (int64_t)i * ldp + (int64_t)h * 2 * hd;
		for (int j = threadIdx.x; j < hd; j += blockDim.x)
			dst[j] = v[j];
		return;
	}
	int g = h - nh;
	float *kd = row_kc[i][li] + pos[i] * kvw + g * hd, *vd = row_vc[i][li] + pos[i] * kvw + g * hd;
	const float *vs = Vx + (int64_t)i * ldkv + g * hd;
	for (int j = threadIdx.x; j < hd; j += blockDim.x) {
		kd[j] = v[j];
		vd[j] = vs[j];
	}
}

/* Gated attention, one block of ATT_WARPS warps per (row, head): each warp
 * runs an online softmax over every ATT_WARPS-th position up to the row's
 * own, the warps are merged, then the output gate (§3.3 steps 4-6). A lane
 * keeps hd / 32 <= NC output elements in registers. */
template <int NC>
__global__ void k_attn(const float *P, int64_t ldp, const int64_t *pos, float *const *const *row_kc,
		       float *const *const *row_vc, int li, int nh, int nkv, int hd, float *O,
		       __nv_bfloat16 *Ob)
{
	pdl_enter();
	__shared__ float q[MAX_HD];
	__shared__ float wm[ATT_WARPS], wl[ATT_WARPS];
	__shared__ float wo[ATT_WARPS][MAX_HD];
	int i = blockIdx.x, h = blockIdx.y, g = h / (nh / nkv), kvw = nkv * hd;
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nc = hd / 32;
	const float *qs = P + (int64_t)i * ldp + (int64_t)h * 2 * hd;
	for (int j = threadIdx.x; j < hd; j += blockDim.x)
		q[j] = qs[j];
	__syncthreads();
	const float *kc = row_kc[i][li] + g * hd, *vc = row_vc[i][li] + g * hd;
	float scale = 1.0f / sqrtf((float)hd), mx = -INFINITY, l = 0.0f, o[NC];
#pragma unroll
	for (int c = 0; c < NC; c++)
		o[c] = 0.0f;
	for (int64_t t = w; t <= pos[i]; t += ATT_WARPS) {
		const float *k = kc + t * kvw, *v = vc + t * kvw;
		float d = 0.0f;
#pragma unroll
		for (int c = 0; c < NC; c++)
			if (c < nc)
				d += q[lane + 32 * c] * k[lane + 32 * c];
		float s = warp_sum(d) * scale;
		if (s > mx) {
			float corr = expf(mx - s);
			l = l * corr + 1.0f;
#pragma unroll
			for (int c = 0; c < NC; c++)
				if (c < nc)
					o[c] = o[c] * corr + v[lane + 32 * c];
			mx = s;
		} else {
			float p = expf(s - mx);
			l += p;
#pragma unroll
			for (int c = 0; c < NC; c++)
				if (c < nc)
					o[c] += p * v[lane + 32 * c];
		}
	}
	if (lane == 0) {
		wm[w] = mx;
		wl[w] = l;
	}
#pragma unroll
	for (int c = 0; c < NC; c++)
		if (c < nc)
			wo[w][lane + 32 * c] = o[c];
	__syncthreads();
	float M = -INFINITY, L = 0.0f;
	for (int u = 0; u < ATT_WARPS; u++)
		M = fmaxf(M, wm[u]);
	for (int u = 0; u < ATT_WARPS; u++)
		L += wm[u] == -INFINITY ? 0.0f : wl[u] * expf(wm[u] - M);
	const float *gate = qs + hd;
	for (int j = threadIdx.x; j < hd; j += blockDim.x) {
		float acc = 0.0f;
		for (int u = 0; u < ATT_WARPS; u++)
			if (wm[u] != -INFINITY)
				acc += wo[u][j] * expf(wm[u] - M);
		const float v = acc / L * sigmoid_d(gate[j]);
		O[((int64_t)i * nh + h) * hd + j] = v;
		Ob[((int64_t)i * nh + h) * hd + j] = __float2bfloat16(v);
	}
}

/* Causal depthwise conv + SiLU over each sequence's rows in order (§3.4
 * step 2): block (sequence, channel block); rows of U lie ldu apart. A
 * channel's last K - 1 inputs and its K taps stay in registers across the
 * rows (K <= CONV_REG_K; longer kernels work on the state in place). */
#define CONV_REG_K 8

__global__ void k_conv(const float *__restrict__ U, int64_t ldu, float *__restrict__ C, const int *seq_rows,
		       const int *seq_start, float *const *const *seq_conv, int li, const float *W, int K, int cd)
{
	pdl_enter();
	int s = blockIdx.x, ch = blockIdx.y * blockDim.x + threadIdx.x;
	if (ch >= cd)
		return;
	float *st = seq_conv[s][li];
	const float *w = W + (int64_t)ch * K;
	if (K <= CONV_REG_K) {
		float r[CONV_REG_K - 1], wr[CONV_REG_K - 1];
		const float wl = w[K - 1];
#pragma unroll
		for (int j = 0; j < CONV_REG_K - 1; j++) {
			wr[j] = j < K - 1 ? w[j] : 0.0f;
			r[j] = j < K - 1 ? st[(int64_t)j * cd + ch] : 0.0f;
		}
#pragma unroll 4
		for (int e = seq_start[s]; e < seq_start[s + 1]; e++) {
			const int i = seq_rows[e];
			const float u = U[(int64_t)i * ldu + ch];
			float acc = 0.0f;
#pragma unroll
			for (int j = 0; j < CONV_REG_K - 1; j++)
				if (j < K - 1)
					acc += wr[j] * r[j];
			acc += wl * u;
#pragma unroll
			for (int j = 0; j < CONV_REG_K - 2; j++)
				if (j + 1 < K - 1)
					r[j] = r[j + 1];
#pragma unroll
			for (int j = 0; j < CONV_REG_K - 1; j++)
				if (j == K - 2)
					r[j] = u;
			C[(int64_t)i * cd + ch] = silu_d(acc);
		}
#pragma unroll
		for (int j = 0; j < CONV_REG_K - 1; j++)
			if (j < K - 1)
				st[(int64_t)j * cd + ch] = r[j];
		return;
	}
	for (int e = seq_start[s]; e < seq_start[s + 1]; e++) {
		int i = seq_rows[e];
		float u = U[(int64_t)i * ldu + ch], acc = 0.0f;
		for (int j = 0; j < K - 1; j++)
			acc += w[j] * st[(int64_t)j * cd + ch];
		acc += w[K - 1] * u;
		for (int j = 0; j + 1 < K - 1; j++)
			st[(int64_t)j * cd + ch] = st[(int64_t)(j + 1) * cd + ch];
		if (K > 1)
			st[(int64_t)(K - 2) * cd + ch] = u;
		C[(int64_t)i * cd + ch] = silu_d(acc);
	}
}

/* The delta rule and the gated RMSNorm for one v-head over one sequence's
 * rows in order (§3.4 steps 3-8): block (sequence, v-head), a thread per
 * state column j < dv. With DK = dk the column stays in registers across
 * the rows (read and written once); DK = 0 works on the state in place.
 * Rows of Z lie ldz apart, of Bv and Av ldba. */
/* Threads per state column of k_delta<DK>: two for large key dims, so that a
 * thread's share of the column fits in registers. */
template <int DK> struct delta_split { static const int P = DK > 64 ? 2 : 1; };

/* A row's q and k L2-normalised (q times 1/sqrt(dk)) into qn and kn, the
 * block's threads sharing the dk values (§3.4 step 3) */
static __device__ __forceinline__ void delta_qk(const float *q, const float *k, int dk, float *red, float *qn,
						 float *kn)
{
	float sq = 0.0f, sk = 0.0f;
	for (int a = threadIdx.x; a < dk; a += blockDim.x) {
		sq += q[a] * q[a];
		sk += k[a] * k[a];
	}
	sq = block_sum(sq, red);
	sk = block_sum(sk, red);
	const float rq = 1.0f / sqrtf(sq + 1e-6f), rk = 1.0f / sqrtf(sk + 1e-6f), qscale = 1.0f / sqrtf((float)dk);
	for (int a = threadIdx.x; a < dk; a += blockDim.x) {
		qn[a] = q[a] * rq * qscale;
		kn[a] = k[a] * rk;
	}
}

/* One row's delta rule on state column j (dk values dv apart, in global
 * memory: any key dim): decayed, corrected toward v, read out with q; o */
static __device__ __forceinline__ float delta_col(float *S, int dk, int dv, int j, const float *qn, const float *kn,
						  float v, float beta, float decay)
{
	float o = 0.0f, mv = 0.0f;
	for (int a = 0; a < dk; a++) {
		const float x = S[(int64_t)a * dv + j] * decay;
		S[(int64_t)a * dv + j] = x;
		mv += x * kn[a];
	}
	const float delta = (v - mv) * beta;
	for (int a = 0; a < dk; a++) {
		const float x = S[(int64_t)a * dv + j] + kn[a] * delta;
		S[(int64_t)a * dv + j] = x;
		o += x * qn[a];
	}
	return o;
}

/* A v-head's decay from its row's a (§3.4 step 4) */
static __device__ __forceinline__ float delta_decay(float a, float neg_a, float dt_bias)
{
	return expf(neg_a * softplus_d(a + dt_bias));
}

template <int DK>
__global__ void k_delta(const float *C, const float *Z, int64_t ldz, const float *Bv, const float *Av,
			int64_t ldba, const int *seq_rows, const int *seq_start, float *const *const *seq_rec, int li,
			const float *neg_a, const float *dt_bias, const float *gnorm, int Hk, int Hv,
			int dk, int dv, int cd, float eps, float *O2, __nv_bfloat16 *O2b)
{
	pdl_enter();
	constexpr int P = delta_split<DK>::P, SL = DK > 0 ? DK / P : 1;
	extern __shared__ float sh[]; /* qn[dk], kn[dk] */
	__shared__ float red[33];
	float *qn = sh, *kn = sh + dk;
	int s = blockIdx.x, h = blockIdx.y, j = threadIdx.x / P, a0 = (threadIdx.x % P) * SL;
	int kh = h / (Hv / Hk);
	bool own = j < dv, lead = own && threadIdx.x % P == 0;
	float *S = seq_rec[s][li] + (int64_t)h * dk * dv;
	float col[SL];
	if (DK > 0 && own) {
#pragma unroll
		for (int a = 0; a < SL; a++)
			col[a] = S[(int64_t)(a0 + a) * dv + j];
	}
	for (int e = seq_start[s]; e < seq_start[s + 1]; e++) {
		int i = seq_rows[e];
		const float *cv = C + (int64_t)i * cd;
		delta_qk(cv + (int64_t)kh * dk, cv + (int64_t)Hk * dk + (int64_t)kh * dk, dk, red, qn, kn);
		__syncthreads();
		float beta = sigmoid_d(Bv[(int64_t)i * ldba + h]);
		float decay = delta_decay(Av[(int64_t)i * ldba + h], neg_a[h], dt_bias[h]);
		float v = own ? cv[2 * (int64_t)Hk * dk + (int64_t)h * dv + j] : 0.0f;
		float o = 0.0f, mv = 0.0f;
		if (DK > 0) { /* S^T k over the thread's share, then over the column's P threads */
#pragma unroll
			for (int a = 0; a < SL; a++) {
				col[a] *= decay;
				mv += col[a] * kn[a0 + a];
			}
			if (P == 2)
				mv += __shfl_xor_sync(0xffffffffu, mv, 1);
			float delta = (v - mv) * beta;
#pragma unroll
			for (int a = 0; a < SL; a++) {
				col[a] += kn[a0 + a] * delta;
				o += col[a] * qn[a0 + a];
			}
			if (P == 2)
				o += __shfl_xor_sync(0xffffffffu, o, 1);
		} else if (own) {
			o = delta_col(S, dk, dv, j, qn, kn, v, beta, decay);
		}
		float ss = block_sum(lead ? o * o : 0.0f, red);
		float r = 1.0f / sqrtf(ss / (float)dv + eps);
		if (lead) {
			float z = Z[(int64_t)i * ldz + (int64_t)h * dv + j];
			const float v = gnorm[j] * (o * r) * silu_d(z);
			O2[(int64_t)i * Hv * dv + (int64_t)h * dv + j] = v;
			O2b[(int64_t)i * Hv * dv + (int64_t)h * dv + j] = __float2bfloat16(v);
		}
		__syncthreads(); /* qn/kn of the next row */
	}
	if (DK > 0 && own) {
#pragma unroll
		for (int a = 0; a < SL; a++)
			S[(int64_t)(a0 + a) * dv + j] = col[a];
	}
}

/* A prefill pass runs the delta rule in three launches, so that the part
 * that must follow the rows in order has no block-wide reduction in it
 * (k_delta has three a row: the q and k norms and the output norm):
 *  - k_delta_prep, a block a (row, k-head): q and k L2-normalised (q times
 *    1/sqrt(dk)) into QK[row][kh] = (q[dk], k[dk]), and each of the k-head's
 *    v-heads' beta and decay into BD[row][h] = (beta, decay);
 *  - k_delta_scan<DK>, a block a (sequence, v-head, 32 state columns): the
 *    recurrence over the sequence's rows, each thread (P per column) on its
 *    own share of a column, o into O2;
 *  - k_delta_norm, a block a (row, v-head): the gated RMSNorm of o, into O2
 *    and O2b.
 * Each step is k_delta's arithmetic; the scan's sums over a column's
 * values run in another order (P threads, two partial sums each). */
__global__ void k_delta_prep(const float *C, const float *Bv, const float *Av, int64_t ldba, const float *neg_a,
			     const float *dt_bias, int Hk, int Hv, int dk, int cd, float *QK, float *BD)
{
	pdl_enter();
	__shared__ float red[33];
	const int i = blockIdx.x, kh = blockIdx.y, hpk = Hv / Hk;
	const float *q = C + (int64_t)i * cd + (int64_t)kh * dk;
	float *o = QK + ((int64_t)i * Hk + kh) * 2 * dk;
	delta_qk(q, q + (int64_t)Hk * dk, dk, red, o, o + dk);
	if (threadIdx.x < hpk) {
		const int h = kh * hpk + threadIdx.x;
		BD[((int64_t)i * Hv + h) * 2] = sigmoid_d(Bv[(int64_t)i * ldba + h]);
		BD[((int64_t)i * Hv + h) * 2 + 1] = delta_decay(Av[(int64_t)i * ldba + h], neg_a[h], dt_bias[h]);
	}
}

/* k_delta_scan<DK> (DK = dk; 0: any dk, the state worked on in place): P
 * threads a column, each with SL of its values in registers and two partial
 * sums. The rows' normalised q and k, beta, decay and the block's 32 values
 * of v come into shared memory SCAN_TB rows at a time, the next batch's
 * copies (cp.async) in flight while a batch is worked through; a row's q and
 * k are kept in 32-float segments 36 apart, so the P threads' reads of
 * their segments fall in different banks. */
template <int DK> struct scan_split { static const int P = DK > 64 ? 4 : 1; };
#define SCAN_TB 8
#define SCAN_SEG 36

static __device__ __forceinline__ void scan_cp(void *dst, const void *src, int bytes, bool valid)
{
	const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
	if (bytes == 16)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
	else
		asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}

template <int DK>
__global__ void k_delta_scan(const float *C, const float *QK, const float *BD, const int *seq_rows,
			     const int *seq_start, float *const *const *seq_rec, int li, int Hk, int Hv, int dk, int dv,
			     int cd, float *O2)
{
	pdl_enter();
	constexpr int P = scan_split<DK>::P, SL = DK > 0 ? DK / P : 1, KSEG = (DK + 31) / 32 * SCAN_SEG;
	constexpr int QW = DK > 0 ? 2 * KSEG : 1;
	const int s = blockIdx.x, h = blockIdx.y, c0 = blockIdx.z * 32, j = c0 + threadIdx.x / P;
	const int a0 = (threadIdx.x % P) * SL, kh = h / (Hv / Hk);
	const bool own = j < dv;
	float *S = seq_rec[s][li] + (int64_t)h * dk * dv;
	const int e0 = seq_start[s], e1 = seq_start[s + 1];
	if (DK == 0) {
		for (int e = e0; e < e1 && own; e++) {
			const int i = seq_rows[e];
			const float *qn = QK + ((int64_t)i * Hk + kh) * 2 * dk, *kn = qn + dk;
			const float beta = BD[((int64_t)i * Hv + h) * 2], decay = BD[((int64_t)i * Hv + h) * 2 + 1];
			const float v = C[(int64_t)i * cd + 2 * (int64_t)Hk * dk + (int64_t)h * dv + j];
			O2[(int64_t)i * Hv * dv + (int64_t)h * dv + j] = delta_col(S, dk, dv, j, qn, kn, v, beta, decay);
		}
		return;
	}
	__shared__ __align__(16) float qk[2][SCAN_TB][QW];
	__shared__ float vb[2][SCAN_TB][32], bd[2][SCAN_TB][2];
	__shared__ int rows[2][SCAN_TB];
	/* rows eb.. of the sequence into buffer b: per row DK / 2 16-byte pieces
	 * of q and k, 32 values of v (zeros past dv), beta and decay */
	auto stage = [&](int b, int eb) {
		constexpr int PER = DK / 2 + 32 + 2;
		for (int x = threadIdx.x; x < SCAN_TB * PER; x += blockDim.x) {
			const int t = x / PER, c = x % PER, e = eb + t;
			if (e >= e1)
				continue;
			const int i = seq_rows[e];
			if (c == 0)
				rows[b][t] = i;
			if (c < DK / 2) { /* floats f = 4c.. of (q, k); k's segments after q's */
				const int f = 4 * c, g = f < DK ? f : f - DK, base = f < DK ? 0 : KSEG;
				scan_cp(&qk[b][t][base + (g / 32) * SCAN_SEG + g % 32],
					QK + ((int64_t)i * Hk + kh) * 2 * DK + f, 16, true);
			} else if (c < DK / 2 + 32) {
				const int col = c0 + c - DK / 2;
				scan_cp(&vb[b][t][c - DK / 2],
					C + (int64_t)i * cd + 2 * (int64_t)Hk * DK + (int64_t)h * dv + (col < dv ? col : 0), 4,
					col < dv);
			} else {
				scan_cp(&bd[b][t][c - DK / 2 - 32], BD + ((int64_t)i * Hv + h) * 2 + (c - DK / 2 - 32), 4,
					true);
			}
		}
		asm volatile("cp.async.commit_group;" ::: "memory");
	};
	float col[SL];
#pragma unroll
	for (int a = 0; a < SL; a++)
		col[a] = own ? S[(int64_t)(a0 + a) * dv + j] : 0.0f;
	/* this thread's segment of q and k in a staged row: a0 / 32 of q's, then of k's */
	const int qo = (a0 / 32) * SCAN_SEG + a0 % 32, ko = qo + KSEG;
	int b = 0;
	if (e0 < e1)
		stage(0, e0);
	for (int eb = e0; eb < e1; eb += SCAN_TB, b ^= 1) {
		if (eb + SCAN_TB < e1)
			stage(b ^ 1, eb + SCAN_TB);
		else
			asm volatile("cp.async.commit_group;" ::: "memory");
		asm volatile("cp.async.wait_group 1;" ::: "memory");
		__syncthreads();
		const int nt = e1 - eb < SCAN_TB ? e1 - eb : SCAN_TB;
		for (int t = 0; t < nt; t++) {
			const float *qn = &qk[b][t][qo], *kn = &qk[b][t][ko];
			const float beta = bd[b][t][0], decay = bd[b][t][1], v = vb[b][t][threadIdx.x / P];
			float m0 = 0.0f, m1 = 0.0f;
#pragma unroll
			for (int a = 0; a < SL; a += 2) {
				col[a] *= decay;
				col[a + 1] *= decay;
				m0 += col[a] * kn[a];
				m1 += col[a + 1] * kn[a + 1];
			}
			float mv = m0 + m1;
#pragma unroll
			for (int o = 1; o < P; o <<= 1)
				mv += __shfl_xor_sync(0xffffffffu, mv, o);
			const float delta = (v - mv) * beta;
			float o0 = 0.0f, o1 = 0.0f;
#pragma unroll
			for (int a = 0; a < SL; a += 2) {
				col[a] += kn[a] * delta;
				col[a + 1] += kn[a + 1] * delta;
				o0 += col[a] * qn[a];
				o1 += col[a + 1] * qn[a + 1];
			}
			float o = o0 + o1;
#pragma unroll
			for (int q = 1; q < P; q <<= 1)
				o += __shfl_xor_sync(0xffffffffu, o, q);
			if (own && threadIdx.x % P == 0)
				O2[(int64_t)rows[b][t] * Hv * dv + (int64_t)h * dv + j] = o;
		}
		__syncthreads(); /* buffer b is staged again two batches on */
	}
	if (own) {
#pragma unroll
		for (int a = 0; a < SL; a++)
			S[(int64_t)(a0 + a) * dv + j] = col[a];
	}
}

__global__ void k_delta_norm(const float *Z, int64_t ldz, const float *gnorm, int Hv, int dv, float eps, float *O2,
			     __nv_bfloat16 *O2b)
{
	pdl_enter();
	__shared__ float red[33];
	const int i = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
	const int64_t at = (int64_t)i * Hv * dv + (int64_t)h * dv + j;
	const float o = j < dv ? O2[at] : 0.0f;
	const float r = 1.0f / sqrtf(block_sum(o * o, red) / (float)dv + eps);
	if (j < dv) {
		const float v = gnorm[j] * (o * r) * silu_d(Z[(int64_t)i * ldz + (int64_t)h * dv + j]);
		O2[at] = v;
		O2b[at] = __float2bfloat16(v);
	}
}

/* Router: softmax over all E experts, top-k (descending, lower index first
 * on ties, as torch.topk), the k probabilities renormalised; `ord` lists a
 * row's slots by ascending expert id (the order HF's index_add_ sums in).
 * With shared >= 0 (the shared expert in the banks), row i's slot after the
 * rows' routed ones, sele[rows * k + i], is that expert. Rows of the
 * router's logits R lie ldr apart.
 * One warp a row (launch with 32 threads): lane l owns experts l, l + 32,
 * ... in shared memory, so the k rounds of the top-k need no barrier. */
__global__ void k_route(const float *R, int64_t ldr, int E, int k, int shared, int *sele, float *selp,
			float *selw, int *ord)
{
	pdl_enter();
	extern __shared__ float p[];
	__shared__ int se[MAX_TOPK];
	__shared__ float sp[MAX_TOPK];
	int i = blockIdx.x, lane = threadIdx.x;
	if (shared >= 0 && lane == 0)
		sele[gridDim.x * k + i] = shared;
	const float *r = R + (int64_t)i * ldr;
	float mx = -INFINITY;
	for (int e = lane; e < E; e += 32) {
		p[e] = r[e];
		mx = fmaxf(mx, p[e]);
	}
	for (int o = 16; o > 0; o >>= 1)
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
	float sum = 0.0f;
	for (int e = lane; e < E; e += 32) {
		p[e] = expf(p[e] - mx);
		sum += p[e];
	}
	sum = warp_sum(sum);
	for (int e = lane; e < E; e += 32)
		p[e] /= sum;
	for (int j = 0; j < k; j++) {
		float bv = -1.0f;
		int be = E;
		for (int e = lane; e < E; e += 32)
			if (p[e] > bv) {
				bv = p[e];
				be = e;
			}
		for (int o = 16; o > 0; o >>= 1) {
			float ov = __shfl_xor_sync(0xffffffffu, bv, o);
			int oe = __shfl_xor_sync(0xffffffffu, be, o);
			if (ov > bv || (ov == bv && oe < be)) {
				bv = ov;
				be = oe;
			}
		}
		if (lane == 0) {
			se[j] = be;
			sp[j] = bv;
		}
		if (be < E && be % 32 == lane)
			p[be] = -2.0f; /* taken (be is E only if NaNs beat nothing) */
	}
	__syncwarp();
	/* lane j < k writes slot j: its weight (the k summed in order, in every
	 * lane alike) and its place in expert order (stable, so a permutation
	 * even if NaN logits left the same sentinel in several slots) */
	if (lane < k) {
		float tot = 0.0f;
		int rank = 0;
		for (int j = 0; j < k; j++) {
			tot += sp[j];
			rank += se[j] < se[lane] || (se[j] == se[lane] && j < lane);
		}
		sele[i * k + lane] = se[lane];
		selp[i * k + lane] = sp[lane];
		selw[i * k + lane] = sp[lane] / tot;
		ord[i * k + rank] = lane;
	}
}

/* Each slot's row of x (bf16), for the grouped NVFP4 products: the nk
 * routed slots (k a row), then one a row for the shared expert. */
__global__ void k_gather_bf16(const __nv_bfloat16 *x, int k, int nk, int64_t H, __nv_bfloat16 *xg)
{
	pdl_enter();
	const int g = blockIdx.x, row = g < nk ? g / k : g - nk;
	for (int64_t d = threadIdx.x; d < H; d += blockDim.x)
		xg[(int64_t)g * H + d] = x[(int64_t)row * H + d];
}

/* A prefill pass groups the expert slots by expert (moe), so an expert's
 * weights are read once per MOE_TILE of its slots rather than once per
 * slot: slot g's row of the products is yrow[g] = MOE_TILE * tile + j, its
 * expert's tiles holding its slots (in no set order: a row's products do
 * not depend on the other rows of its tile); tile_e[t] is tile t's expert,
 * -1 past the last tile (the products skip those groups), and
 * tile_slot[MOE_TILE * t + j] the slot of row j, -1 for a tile's unused
 * rows. One block; dynamic shared memory 2 * ne ints. Experts are 0..ne-1
 * (an id out of range, which only NaN logits leave, counts as expert 0). */
#define MOE_TILE 8

static __host__ __device__ int moe_tiles_max(int slots, int ne)
{
	return (slots + MOE_TILE - 1) / MOE_TILE + (ne < slots ? ne : slots);
}

__global__ void k_moe_tiles(const int *sele, int G, int ne, int *tile_e, int *tile_slot, int *yrow)
{
	pdl_enter();
	extern __shared__ int mt[];
	int *cnt = mt, *first = mt + ne; /* slots an expert has (then has placed); its first row */
	const int ntmax = moe_tiles_max(G, ne);
	for (int e = threadIdx.x; e < ne; e += blockDim.x)
		cnt[e] = 0;
	for (int r = threadIdx.x; r < ntmax * MOE_TILE; r += blockDim.x)
		tile_slot[r] = -1;
	__syncthreads();
	for (int g = threadIdx.x; g < G; g += blockDim.x) {
		const int e = sele[g];
		atomicAdd(&cnt[e >= 0 && e < ne ? e : 0], 1);
	}
	__syncthreads();
	__shared__ int rows_used;
	if (threadIdx.x == 0) {
		int t = 0;
		for (int e = 0; e < ne; e++) {
			first[e] = t * MOE_TILE;
			t += (cnt[e] + MOE_TILE - 1) / MOE_TILE;
			cnt[e] = 0;
		}
		rows_used = t * MOE_TILE;
	}
	__syncthreads();
	for (int u = threadIdx.x; u < ntmax; u += blockDim.x) { /* a tile's expert: the last to start by it */
		int lo = 0, hi = ne - 1;
		while (lo < hi) {
			const int mid = (lo + hi + 1) / 2;
			if (first[mid] <= u * MOE_TILE)
				lo = mid;
			else
				hi = mid - 1;
		}
		tile_e[u] = u * MOE_TILE < rows_used ? lo : -1;
	}
	for (int g = threadIdx.x; g < G; g += blockDim.x) {
		int e = sele[g];
		e = e >= 0 && e < ne ? e : 0;
		const int row = first[e] + atomicAdd(&cnt[e], 1);
		tile_slot[row] = g;
		yrow[g] = row;
	}
}

/* The tiles' rows of the expert input (f32 into Xf and/or bf16 into Xb):
 * row r is its slot's token row (the nk routed slots, k a token, then one
 * a token for the shared expert); a tile's unused rows repeat its first,
 * so every row is a finite input. Grid: a block a row. */
__global__ void k_gather_tiles(const float *xf, const __nv_bfloat16 *xb, const int *tile_slot, int k, int nk,
			       int64_t H, float *Xf, __nv_bfloat16 *Xb)
{
	pdl_enter();
	const int r = blockIdx.x;
	int g = tile_slot[r];
	if (g < 0)
		g = tile_slot[r - r % MOE_TILE];
	if (g < 0)
		return; /* a tile past the last */
	const int64_t row = g < nk ? g / k : g - nk;
	for (int64_t d = threadIdx.x; d < H; d += blockDim.x) {
		if (Xf)
			Xf[(int64_t)r * H + d] = xf[row * H + d];
		if (Xb)
			Xb[(int64_t)r * H + d] = xb[row * H + d];
	}
}

/* act = silu(gate) * up over n values in rows of `cols` (f32 and bf16,
 * contiguous); gate and up rows lie ld apart. */
__global__ void k_swiglu(const float *G, const float *U, int64_t ld, int64_t cols, int64_t n, float *A,
			 __nv_bfloat16 *Ab)
{
	pdl_enter();
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		int64_t at = i / cols * ld + i % cols;
		float a = silu_d(G[at]) * U[at];
		A[i] = a;
		Ab[i] = __float2bfloat16(a);
	}
}

/* x += (routed sum in expert order) + sigmoid(shared gate) * shared (§3.5);
 * grid (rows, H / blockDim), one element a thread, its k slot loads in
 * flight together (the sum keeps expert order). Rows of SG lie ldsg apart.
 * Yg's row for slot sl is yrow[sl] and YS's for row i ysrow[i] (NULL: sl and
 * i; a prefill pass's expert tiles, k_moe_tiles).
 * (Fused into the next layer's norm, one block a row, a decode step was
 * 6-10% slower on the H200: docs/benchmarks.md.) */
#define MOE_MAXK 16

__global__ void k_moe_sum(float *x, const float *Yg, const int *yrow, const float *selw, const int *ord,
			  const float *SG, int64_t ldsg, const float *YS, const int *ysrow, int k, int64_t H)
{
	pdl_enter();
	int i = blockIdx.x;
	int64_t d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
	if (d >= H)
		return;
	float y = 0.0f;
	for (int j0 = 0; j0 < k; j0 += MOE_MAXK) {
		float v[MOE_MAXK], wt[MOE_MAXK];
#pragma unroll
		for (int j = 0; j < MOE_MAXK; j++) {
			v[j] = wt[j] = 0.0f;
			if (j0 + j < k) {
				int sl = i * k + ord[i * k + j0 + j];
				v[j] = Yg[(int64_t)(yrow ? yrow[sl] : sl) * H + d];
				wt[j] = selw[sl];
			}
		}
#pragma unroll
		for (int j = 0; j < MOE_MAXK; j++)
			if (j0 + j < k)
				y += v[j] * wt[j];
	}
	y += sigmoid_d(SG[(int64_t)i * ldsg]) * YS[(int64_t)(ysrow ? ysrow[i] : i) * H + d];
	x[(int64_t)i * H + d] += y;
}

/* ===== greedy picks on the device =====
 * For each wanted row, the token lynn_sample_greedy picks from its logits
 * (the largest, the lowest id on ties; NaNs never win, but a NaN at id 0 is
 * picked, since nothing beats it) and whether every logit is finite (the
 * engine's check), so that a greedy step brings back 8 bytes a row instead
 * of the vocabulary's logits. GREEDY_BLOCKS blocks share a row and leave
 * their best (value, id) and finiteness; k_greedy_end reduces them. */
#define GREEDY_BLOCKS 64

/* (v, i) replaces (bv, bi) if larger, or equal with a lower id */
__device__ __forceinline__ void greedy_take(float &bv, int &bi, float v, int i)
{
	if (v > bv || (v == bv && i < bi)) {
		bv = v;
		bi = i;
	}
}

/* the best (value, id) of a warp, in every lane */
__device__ __forceinline__ void greedy_warp(float &bv, int &bi)
{
	for (int o = 16; o; o >>= 1)
		greedy_take(bv, bi, __shfl_xor_sync(0xffffffffu, bv, o), __shfl_xor_sync(0xffffffffu, bi, o));
}

/* the best (value, id) of the block's (at most 256) threads, in every
 * thread; wv, wi: 8 in shared memory, free again when it returns */
__device__ __forceinline__ void block_best(float &bv, int &bi, float *wv, int *wi)
{
	greedy_warp(bv, bi);
	const int w = threadIdx.x >> 5;
	__syncthreads(); /* an earlier call has read wv, wi */
	if ((threadIdx.x & 31) == 0) {
		wv[w] = bv;
		wi[w] = bi;
	}
	__syncthreads();
	for (int j = 0; j < (int)(blockDim.x >> 5); j++)
		greedy_take(bv, bi, wv[j], wi[j]);
}

/* grid (GREEDY_BLOCKS, rows), 256 threads; part: [row][block] values, ids
 * (INT_MAX: none but NaNs) and finiteness */
__global__ void k_greedy_part(const float *logits, int V, float *pv, int *pi, int *pf)
{
	pdl_enter();
	__shared__ float wv[8];
	__shared__ int wi[8];
	const float *l = logits + (int64_t)blockIdx.y * V;
	const int per = (V + GREEDY_BLOCKS - 1) / GREEDY_BLOCKS, lo = blockIdx.x * per;
	const int hi = lo + per < V ? lo + per : V, t = threadIdx.x;
	float bv = -INFINITY;
	int bi = INT_MAX, bad = 0;
	for (int i = lo + t; i < hi; i += blockDim.x) { /* ids rise: strict > keeps the first */
		const float v = l[i];
		bad |= !(fabsf(v) <= FLT_MAX);
		greedy_take(bv, bi, v, i);
	}
	block_best(bv, bi, wv, wi);
	bad = __syncthreads_or(bad);
	if (t == 0) {
		const int o = blockIdx.y * GREEDY_BLOCKS + blockIdx.x;
		pv[o] = bv;
		pi[o] = bi;
		pf[o] = !bad;
	}
}

/* one warp a row: out[rec row] the id, out[rec row + 1] 1 if all finite */
__global__ void k_greedy_end(const float *logits, int V, const float *pv, const int *pi,
			     const int *pf, int *out, int rec)
{
	pdl_enter();
	const int r = blockIdx.x, t = threadIdx.x;
	float bv = -INFINITY;
	int bi = INT_MAX, fin = 1;
	for (int j = t; j < GREEDY_BLOCKS; j += 32) {
		greedy_take(bv, bi, pv[r * GREEDY_BLOCKS + j], pi[r * GREEDY_BLOCKS + j]);
		fin &= pf[r * GREEDY_BLOCKS + j];
	}
	greedy_warp(bv, bi);
	fin = __all_sync(0xffffffffu, fin);
	if (t == 0) {
		out[(int64_t)rec * r] = isnan(logits[(int64_t)r * V]) || bi == INT_MAX ? 0 : bi;
		out[(int64_t)rec * r + 1] = fin;
	}
}

/* ===== top-k candidates on the device =====
 * For each wanted row r with top_k[r] = k > 0: the k largest logits by
 * logit / temperature[r] (the float division lynn_sampler_sample makes),
 * descending, the lower id first on ties, -inf and NaN never among them:
 * what lynn_sampler_sample_top draws from, so that a sampled step brings
 * back 8 bytes a candidate instead of the logits. TOPK_BLOCKS blocks share
 * a row: each stages its slice's keys in shared memory and takes its k
 * best in k rounds of a block argmax, each round's among those after the
 * round before's in that order; k_topk_end (one warp a row, one block's
 * sorted list a lane) merges them. The global k best are among the
 * blocks' k best. A row's record in out (PICK_REC ints, after
 * k_greedy_end's two): the count, the ids, the logits' bits. */
#define TOPK_BLOCKS 32
#define PICK_REC (3 + 2 * LYNN_DEVICE_TOP_K)

/* grid (TOPK_BLOCKS, rows), 256 threads, the slice's keys in dynamic shared
 * memory; part: [row][block][LYNN_DEVICE_TOP_K] keys and ids, [row][block]
 * counts */
__global__ void k_topk_part(const float *logits, int V, const int *topk, const float *temp, float *pv,
			    int *pi, int *pn)
{
	pdl_enter();
	extern __shared__ float tk_key[];
	__shared__ float wv[8];
	__shared__ int wi[8];
	const int r = blockIdx.y, k = min(topk[r], LYNN_DEVICE_TOP_K), t = threadIdx.x;
	const int per = (V + TOPK_BLOCKS - 1) / TOPK_BLOCKS, lo = blockIdx.x * per;
	const int n = V - lo < per ? (V - lo > 0 ? V - lo : 0) : per;
	const int64_t o = (int64_t)r * TOPK_BLOCKS + blockIdx.x;
	if (k <= 0) /* a greedy row */
		return;
	const float tr = temp[r], *l = logits + (int64_t)r * V + lo;
	for (int j = t; j < n; j += blockDim.x) /* NaN: not a candidate */
		tk_key[j] = l[j] > -INFINITY ? __fdiv_rn(l[j], tr) : NAN;
	__syncthreads();
	float pvv = INFINITY; /* the last pick; (+inf, -1) comes before everything */
	int pii = -1, got = 0;
	for (; got < k; got++) {
		float bv = -INFINITY;
		int bi = INT_MAX; /* (-inf, INT_MAX): none, after everything */
		for (int j = t; j < n; j += blockDim.x) {
			const float v = tk_key[j];
			const int id = lo + j;
			if (v == v && (pvv > v || (pvv == v && pii < id)))
				greedy_take(bv, bi, v, id);
		}
		block_best(bv, bi, wv, wi);
		if (bi == INT_MAX)
			break;
		if (t == 0) {
			pv[o * LYNN_DEVICE_TOP_K + got] = bv;
			pi[o * LYNN_DEVICE_TOP_K + got] = bi;
		}
		pvv = bv;
		pii = bi;
	}
	if (t == 0)
		pn[o] = got;
}

/* one warp a row (TOPK_BLOCKS == 32 lists, one a lane): the k best of the
 * blocks' sorted lists into out[PICK_REC row + 2 ...] */
__global__ void k_topk_end(const float *logits, int V, const int *topk, const float *pv, const int *pi,
			   const int *pn, int *out)
{
	pdl_enter();
	const int r = blockIdx.x, lane = threadIdx.x, k = min(topk[r], LYNN_DEVICE_TOP_K);
	int *rec = out + (int64_t)PICK_REC * r;
	const int64_t o = (int64_t)r * TOPK_BLOCKS + lane;
	const int cnt = k > 0 ? pn[o] : 0;
	const float *lv = pv + o * LYNN_DEVICE_TOP_K;
	const int *li = pi + o * LYNN_DEVICE_TOP_K;
	int h = 0, got = 0;
	for (; got < k; got++) {
		float bv = h < cnt ? lv[h] : -INFINITY;
		int bi = h < cnt ? li[h] : INT_MAX;
		greedy_warp(bv, bi);
		if (bi == INT_MAX)
			break;
		if (lane == 0) {
			rec[3 + got] = bi;
			rec[3 + LYNN_DEVICE_TOP_K + got] = __float_as_int(logits[(int64_t)r * V + bi]);
		}
		h += h < cnt && li[h] == bi; /* ids are the blocks' own: one lane advances */
	}
	if (lane == 0)
		rec[2] = got;
}

/* The device memory of pick_rows for `rows` rows: the blocks' parts
 * (greedy: gv, gi, gf; top-k: tv, ti, tn) and the records (out, 2 or
 * PICK_REC ints a row); top-k's inputs (topk: NULL for greedy picks only,
 * temp) are the caller's. */
struct pick_mem {
	float *gv, *tv, *temp;
	int *gi, *gf, *ti, *tn, *topk, *out;
};

/* pick_mem's buffers carved from a (for rows rows; top-k ones too with topk) */
static void carve_picks(struct lynn_arena *a, struct pick_mem *pm, int64_t rows, bool topk)
{
	const size_t ng = (size_t)rows * GREEDY_BLOCKS, nt = topk ? (size_t)rows * TOPK_BLOCKS : 0;
	pm->gv = (float *)lynn_carve(a, ng * sizeof(float));
	pm->gi = (int *)lynn_carve(a, ng * sizeof(int));
	pm->gf = (int *)lynn_carve(a, ng * sizeof(int));
	pm->out = (int *)lynn_carve(a, (size_t)rows * (topk ? PICK_REC : 2) * sizeof(int));
	pm->tv = (float *)lynn_carve(a, nt * LYNN_DEVICE_TOP_K * sizeof(float));
	pm->ti = (int *)lynn_carve(a, nt * LYNN_DEVICE_TOP_K * sizeof(int));
	pm->tn = (int *)lynn_carve(a, nt * sizeof(int));
}

/* the picks of rows logits (on the device, [rows][V]) into pm->out on
 * stream st: the greedy ones, and with pm->topk the top-k candidates */
static void pick_rows(const float *logits, int64_t rows, int V, const struct pick_mem *pm, cudaStream_t st,
		      bool pdl)
{
	const int rec = pm->topk ? PICK_REC : 2;
	launch(pdl, k_greedy_part, dim3(GREEDY_BLOCKS, (unsigned)rows), 256, 0, st, logits, V, pm->gv, pm->gi,
	       pm->gf);
	launch(pdl, k_greedy_end, (unsigned)rows, 32, 0, st, logits, V, pm->gv, pm->gi, pm->gf, pm->out, rec);
	if (!pm->topk)
		return;
	const size_t sh = (size_t)(V + TOPK_BLOCKS - 1) / TOPK_BLOCKS * sizeof(float);
	if (sh > 48 * 1024) /* vocabularies past 393,216 ids */
		cudaFuncSetAttribute(k_topk_part, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh);
	launch(pdl, k_topk_part, dim3(TOPK_BLOCKS, (unsigned)rows), 256, sh, st, logits, V, pm->topk, pm->temp,
	       pm->tv, pm->ti, pm->tn);
	launch(pdl, k_topk_end, (unsigned)rows, 32, 0, st, logits, V, pm->topk, pm->tv, pm->ti, pm->tn, pm->out);
}

/* ===== the pass ===== */

struct scratch {
	float *x, *xn, *mix, *IN, *O, *C, *O2, *RS, *selp, *selw;
	float *Gg, *Ug, *act, *Yg, *HSgu, *HSa, *YS, *lora, *logits;
	__nv_bfloat16 *xnb, *Ob, *O2b, *Xg, *actb, *HSab;
	int *sele, *ord;
	float *Xgf;                /* a prefill pass's expert tiles (k_moe_tiles): their f32 input */
	float *QK, *BD;            /* a prefill pass's delta rule (k_delta_prep) */
	int *tile_e, *tile_slot, *yrow;
	struct pick_mem pm;        /* the wanted rows' picks (pick_rows); its topk and temp
				    * staged: a wanted row's top-k (0: greedy) and temperature */
	/* staged from the host */
	int *ids, *seq_rows, *seq_start, *want_rows;
	int64_t *pos;
	float *const *const *row_kc, *const *const *row_vc, *const *const *seq_conv, *const *const *seq_rec;
};

static void layout(const struct lynn_model *m, struct lynn_arena *a, struct scratch *s, int64_t n,
		   int64_t nw, int max_rank, bool topk)
{
	/* nk routed slots; the shared expert's rows after them (D->shx); the
	 * expert products' rows: a row per slot, or a prefill pass's tiles */
	size_t f = sizeof(float), b = sizeof(__nv_bfloat16), nk = (size_t)n * m->topk, nks = nk + n;
	size_t np = n > GRAPH_MAX_ROWS ? (size_t)n : 0; /* a prefill pass's rows (its own buffers) */
	size_t nt = np ? (size_t)moe_tiles_max((int)nks, (int)m->E + 1) : 0;
	size_t rs = LYNN_MAX(nks, nt * MOE_TILE);
	size_t big = LYNN_MAX((size_t)m->nh * m->hd, (size_t)m->Hv * m->dv);
	a->used = 0;
	s->x = (float *)lynn_carve(a, n * m->H * f);
	s->xn = (float *)lynn_carve(a, n * m->H * f);
	s->mix = (float *)lynn_carve(a, n * m->H * f);
	/* a layer's input projections (group_run): q, k, v or qkv, z, b, a */
	size_t att_in = (size_t)m->nh * 2 * m->hd + 2 * (size_t)m->nkv * m->hd;
	size_t delta_in = (size_t)m->conv_dim + (size_t)m->Hv * m->dv + 2 * (size_t)m->Hv;
	s->IN = (float *)lynn_carve(a, n * LYNN_MAX(att_in, delta_in) * f);
	s->O = (float *)lynn_carve(a, n * m->nh * m->hd * f);
	s->C = (float *)lynn_carve(a, n * m->conv_dim * f);
	s->O2 = (float *)lynn_carve(a, n * m->Hv * m->dv * f);
	s->RS = (float *)lynn_carve(a, n * (m->E + 1) * f); /* router and shared gate */
	s->selp = (float *)lynn_carve(a, nk * f);
	s->selw = (float *)lynn_carve(a, nk * f);
	s->Gg = (float *)lynn_carve(a, rs * 2 * m->I * f); /* [row][gate; up] for a fused bank */
	s->Ug = (float *)lynn_carve(a, rs * m->I * f);
	s->act = (float *)lynn_carve(a, rs * m->I * f);
	s->Yg = (float *)lynn_carve(a, rs * m->H * f);
	s->Xgf = (float *)lynn_carve(a, nt * MOE_TILE * m->H * f);
	s->QK = (float *)lynn_carve(a, np * m->Hk * 2 * m->dk * f);
	s->BD = (float *)lynn_carve(a, np * m->Hv * 2 * f);
	s->HSgu = (float *)lynn_carve(a, 2 * n * m->Is * f); /* the shared expert's gate and up */
	s->HSa = (float *)lynn_carve(a, n * m->Is * f);
	s->YS = (float *)lynn_carve(a, n * m->H * f);
	s->lora = (float *)lynn_carve(a, n * (size_t)(max_rank > 0 ? max_rank : 1) * f);
	s->logits = (float *)lynn_carve(a, (size_t)(nw > 0 ? nw : 1) * m->V * f);
	s->xnb = (__nv_bfloat16 *)lynn_carve(a, n * m->H * b);
	s->Ob = (__nv_bfloat16 *)lynn_carve(a, n * big * b);
	s->O2b = s->Ob;
	s->Xg = (__nv_bfloat16 *)lynn_carve(a, rs * m->H * b);
	s->actb = (__nv_bfloat16 *)lynn_carve(a, rs * m->I * b);
	s->HSab = (__nv_bfloat16 *)lynn_carve(a, n * m->Is * b);
	s->sele = (int *)lynn_carve(a, nks * sizeof(int));
	s->ord = (int *)lynn_carve(a, nk * sizeof(int));
	s->tile_e = (int *)lynn_carve(a, nt * sizeof(int));
	s->tile_slot = (int *)lynn_carve(a, nt * MOE_TILE * sizeof(int));
	s->yrow = (int *)lynn_carve(a, nks * sizeof(int));
	carve_picks(a, &s->pm, nw > 0 ? nw : 1, topk);
}

/* The chunk's small host arrays, staged in one pinned buffer. */
struct staged {
	int *ids, *seq_rows, *seq_start, *want_rows, *topk;
	float *temp;
	int64_t *pos;
	float ***row_kc, ***row_vc, ***seq_conv, ***seq_rec;
};

static size_t stage_layout(struct lynn_arena *a, struct staged *h, int64_t n)
{
	size_t p = sizeof(void *);
	a->used = 0;
	h->pos = (int64_t *)lynn_carve(a, n * sizeof(int64_t));
	h->row_kc = (float ***)lynn_carve(a, n * p);
	h->row_vc = (float ***)lynn_carve(a, n * p);
	h->seq_conv = (float ***)lynn_carve(a, n * p);
	h->seq_rec = (float ***)lynn_carve(a, n * p);
	h->ids = (int *)lynn_carve(a, n * sizeof(int));
	h->seq_rows = (int *)lynn_carve(a, n * sizeof(int));
	h->seq_start = (int *)lynn_carve(a, (n + 1) * sizeof(int));
	h->want_rows = (int *)lynn_carve(a, n * sizeof(int));
	h->topk = (int *)lynn_carve(a, n * sizeof(int));
	h->temp = (float *)lynn_carve(a, n * sizeof(float));
	return a->used;
}

struct pass {
	struct lynn_model *m;
	struct lynn_cuda_model *c;
	struct scratch s;
	cudaStream_t st;
	struct lynn_err *err;
	bool picks;                /* the wanted rows' greedy picks after the logits */
	bool topk;                 /* and their top-k candidates (pick_rows) */
	bool pdl;                  /* launches with programmatic stream serialization (launch) */
};

static int launch_check(struct pass *p, const char *what)
{
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return lynn_errf(p->err, -LYNN_ECUDA, "cuda: %s: %s", what, cudaGetErrorString(e));
	return 0;
}

static int grid_for(int64_t n, int block)
{
	int64_t g = (n + block - 1) / block;
	return (int)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

/* k_gemv for weight type T, its M = 1 variant for one token */
template <typename T>
static void gemv_t(struct pass *p, dim3 grid, const void *w, int64_t w_estride, const int *ids, int x_div,
		   const float *x, int64_t ldx, int64_t x_gstride, int m, int64_t n, int64_t k, float *y,
		   int64_t ldy, int64_t y_gstride, float scale, bool acc)
{
	/* token slices of GEMV_T-multiples where the grid is under two blocks a
	 * multiprocessor */
	int slices = 1, tz = m;
	const int64_t blocks = (int64_t)grid.x * grid.y, want = 2 * (int64_t)p->c->sms;
	if (m > GEMV_T && blocks < want) {
		const int steps = (m + GEMV_T - 1) / GEMV_T;
		slices = (int)LYNN_MIN((int64_t)steps, (want + blocks - 1) / blocks);
		tz = (steps + slices - 1) / slices * GEMV_T;
		slices = (m + tz - 1) / tz;
	}
	grid.z = (unsigned)slices;
	launch(p->pdl, m == 1 ? k_gemv<T, true> : k_gemv<T, false>, grid, 256, 0, p->st, (const T *)w, w_estride,
	       ids, x_div, x, ldx, x_gstride, m, n, k, y, ldy, y_gstride, scale, (int)acc, tz);
}

/* The dense product of k_gemv for weight dtype dt. */
static int gemv(struct pass *p, enum lynn_dtype dt, const void *w, int64_t w_estride, const int *ids,
		int groups, int x_div, const float *x, int64_t ldx, int64_t x_gstride, int m, int64_t n,
		int64_t k, float *y, int64_t ldy, int64_t y_gstride, float scale, bool acc)
{
	dim3 grid((unsigned)((n + 7) / 8), (unsigned)groups);
	if (m <= 0 || groups <= 0)
		return 0;
	switch (dt) {
	case LYNN_DTYPE_BF16:
		gemv_t<__nv_bfloat16>(p, grid, w, w_estride, ids, x_div, x, ldx, x_gstride, m, n, k, y, ldy,
				      y_gstride, scale, acc);
		break;
	case LYNN_DTYPE_F16:
		gemv_t<__half>(p, grid, w, w_estride, ids, x_div, x, ldx, x_gstride, m, n, k, y, ldy, y_gstride,
			       scale, acc);
		break;
	case LYNN_DTYPE_F32:
		gemv_t<float>(p, grid, w, w_estride, ids, x_div, x, ldx, x_gstride, m, n, k, y, ldy, y_gstride,
			      scale, acc);
		break;
	default:
		return lynn_errf(p->err, -LYNN_EUNSUPPORTED, "cuda: weight dtype %s", lynn_dtype_name(dt));
	}
	return launch_check(p, "dense product");
}

/* y (M rows, ld ldy) += scale * B (A x) for the adapter on l (x: M rows of
 * l->n_in, ld ldx, f32), through the pass's rank-sized scratch. */
static int lora_add(struct pass *p, const struct lin *l, const float *x, int64_t ldx, int M, float *y,
		    int64_t ldy)
{
	const struct lynn_lora_ref *r = &l->lora;
	int rc = gemv(p, r->dt, l->d_lora_a, 0, NULL, 1, 1, x, ldx, 0, M, r->rank, l->n_in, p->s.lora, r->rank, 0,
		      r->scale, false);
	return rc ? rc : gemv(p, r->dt, l->d_lora_b, 0, NULL, 1, 1, p->s.lora, r->rank, 0, M, l->n_out, r->rank,
			      y, ldy, 0, 1.0f, true);
}

/* y (M x n, ld n) = W x, x f32 (ld k) and its bf16 copy xb (NVFP4 only);
 * then scale * B (A x) added when the linear has an enabled adapter. */
static int lin_run(struct pass *p, const struct dlin *l, const float *x, const __nv_bfloat16 *xb, int M,
		   float *y)
{
	int rc;
	if (M <= 0)
		return 0;
	if (l->nv) {
		if ((rc = lynn_cuda_nvfp4_gemm(&l->q, xb, M, y, LYNN_CUDA_OUT_F32, p->st, p->err)))
			return rc;
	} else if ((rc = gemv(p, l->dt, l->w, 0, NULL, 1, 1, x, l->k, 0, M, l->n, l->k, y, l->n, 0, 1.0f,
			      false))) {
		return rc;
	}
	if (!p->m->lora_on || !l->host->has_lora)
		return 0;
	return lora_add(p, l->host, x, l->k, M, y, l->n);
}

/* The group's products over M rows of x into F, which has room for M rows
 * of every part: part i's output at out[i], rows ld[i] apart. A stacked
 * group runs as one product (NVFP4: for M up to 16, the decode sizes; a
 * prefill chunk runs its parts apart, on the kernels for many rows), its
 * outputs side by side in rows of G->n; else part i fills its own M x n
 * block of F. Enabled adapters are added to their part's columns. */
static int group_run(struct pass *p, const struct dgroup *G, const float *x, const __nv_bfloat16 *xb, int M,
		     float *F, float **out, int64_t *ld)
{
	const bool one = G->dense || (G->nv && M <= GRAPH_MAX_ROWS);
	int rc = 0;
	if (M <= 0)
		return 0;
	if (G->dense)
		rc = gemv(p, G->dt, G->w, 0, NULL, 1, 1, x, G->k, 0, M, G->n, G->k, F, G->n, 0, 1.0f, false);
	else if (one)
		rc = lynn_cuda_nvfp4_stacked_gemm(&G->q, xb, M, F, LYNN_CUDA_OUT_F32, p->st, p->err);
	int64_t off = 0;
	for (int i = 0; i < G->np && !rc; i++) {
		const struct dlin *l = G->part[i];
		if (!one) {
			out[i] = F + (int64_t)M * off;
			ld[i] = l->n;
			rc = lin_run(p, l, x, xb, M, out[i]);
		} else {
			out[i] = F + off;
			ld[i] = G->n;
			if (p->m->lora_on && l->host->has_lora)
				rc = lora_add(p, l->host, x, l->k, M, out[i], ld[i]);
		}
		off += l->n;
	}
	return rc;
}

/* Expert products over groups of `rows` tokens (a slot, or a prefill's
 * expert tile): Y[g] = W_{ids[g]} X_{g / x_div}, rows after rows. NVFP4
 * reads group g's bf16 rows at xb + g * xb_stride (0: one row for all). */
static int bank_run(struct pass *p, const struct dbank *b, const int *ids, int groups, int rows, int x_div,
		    const float *x, const __nv_bfloat16 *xb, int64_t xb_stride, float *y)
{
	if (b->nv)
		return lynn_cuda_nvfp4_moe_gemm(&b->q, ids, groups, xb, xb_stride, rows, y, LYNN_CUDA_OUT_F32,
						LYNN_CUDA_PATH_AUTO, p->st, p->err);
	return gemv(p, b->dt, b->w, b->n * b->k, ids, groups, x_div, x, b->k, rows * b->k, rows, b->n, b->k, y,
		    b->n, rows * b->n, 1.0f, false);
}

/* Adapters on routed experts: the slots' experts are read back and each
 * slot whose expert has an enabled adapter gets scale * B (A x) added to
 * its row of y (x: the slot's input row; f32). */
static int slot_lora(struct pass *p, const struct lin *ls, const int *sele, int groups, int x_div,
		     const float *x, int64_t ldx, float *y, int64_t ldy)
{
	int rc;
	for (int g = 0; g < groups; g++) {
		const struct lin *l = &ls[sele[g]];
		if (!l->has_lora)
			continue;
		if ((rc = lora_add(p, l, x + (int64_t)(g / x_div) * ldx, ldx, 1, y + (int64_t)g * ldy, ldy)))
			return rc;
	}
	return 0;
}

/* Which layers have adapters on routed experts: the walk over the experts
 * runs when the adapters change (lora_gen), not on every pass. */
static void note_expert_lora(struct lynn_cuda_model *c, const struct lynn_model *m)
{
	if (c->elora_known && c->elora_gen == m->lora_gen)
		return;
	c->elora_any = false;
	for (int li = 0; li < m->cfg.n_layers; li++) {
		const struct layer *L = &m->layers[li];
		bool on = false;
		for (int e = 0; e < m->E && !on; e++)
			on = L->eg[e].has_lora || L->eu[e].has_lora || L->ed[e].has_lora;
		c->L[li].elora = on;
		c->elora_any |= on;
	}
	c->elora_gen = m->lora_gen;
	c->elora_known = true;
}

static int attention(struct pass *p, int li, int64_t n)
{
	struct lynn_model *m = p->m;
	const struct dlayer *D = &p->c->L[li];
	struct scratch *s = &p->s;
	float *in[3]; /* q (with the gate), k, v; k and v rows equally far apart */
	int64_t ld[3];
	int rc = group_run(p, &D->in, s->xn, s->xnb, (int)n, s->IN, in, ld);
	if (rc)
		return rc;
	int bt = LYNN_MIN(256, LYNN_MAX(32, m->hd));
	launch(p->pdl, k_qk_prep, dim3((unsigned)n, (unsigned)(m->nh + m->nkv)), bt, 0, p->st, in[0], ld[0],
	       in[1], in[2], ld[1], s->pos, s->row_kc, s->row_vc, li, D->q_norm, D->k_norm, p->c->inv_freq,
	       m->nh, m->nkv, m->hd, m->cfg.rot_dim, (float)m->cfg.rms_eps);
	dim3 ag((unsigned)n, (unsigned)m->nh);
	int nc = m->hd / 32;
#define ATTN(NC) launch(p->pdl, k_attn<NC>, ag, 32 * ATT_WARPS, 0, p->st, in[0], ld[0], s->pos, s->row_kc, \
			 s->row_vc, li, m->nh, m->nkv, m->hd, s->O, s->Ob)
	if (nc <= 1)
		ATTN(1);
	else if (nc <= 2)
		ATTN(2);
	else if (nc <= 4)
		ATTN(4);
	else if (nc <= 8)
		ATTN(8);
	else
		ATTN(MAX_HD / 32);
#undef ATTN
	if ((rc = launch_check(p, "attention")))
		return rc;
	return lin_run(p, &D->o, s->O, s->Ob, (int)n, s->mix);
}

/* The delta rule and the gated RMSNorm of a DeltaNet layer over the pass's
 * rows (in: the conv's input projections, z, b and a; C: the conv output):
 * k_delta, or for a prefill pass its three launches (k_delta_prep). DK is
 * the key dim with the state column in registers, 0 for any. */
template <int DK>
static void delta_rule(struct pass *p, int li, int64_t n, int ns, float *const *in, const int64_t *ld)
{
	struct lynn_model *m = p->m;
	const struct dlayer *D = &p->c->L[li];
	struct scratch *s = &p->s;
	if (n <= GRAPH_MAX_ROWS) {
		const int bt = (m->dv * delta_split<DK>::P + 31) / 32 * 32;
		launch(p->pdl, k_delta<DK>, dim3((unsigned)ns, (unsigned)m->Hv), bt, 2 * m->dk * sizeof(float), p->st,
		       (const float *)s->C, (const float *)in[1], ld[1], (const float *)in[2], (const float *)in[3],
		       ld[2], (const int *)s->seq_rows, (const int *)s->seq_start, s->seq_rec, li,
		       (const float *)D->neg_a, (const float *)D->dt_bias, (const float *)D->gnorm, m->Hk, m->Hv, m->dk,
		       m->dv, m->conv_dim, (float)m->cfg.rms_eps, s->O2, s->O2b);
		return;
	}
	launch(p->pdl, k_delta_prep, dim3((unsigned)n, (unsigned)m->Hk), (m->dk + 31) / 32 * 32, 0, p->st,
	       (const float *)s->C, (const float *)in[2], (const float *)in[3], ld[2], (const float *)D->neg_a,
	       (const float *)D->dt_bias, m->Hk, m->Hv, m->dk, m->conv_dim, s->QK, s->BD);
	launch(p->pdl, k_delta_scan<DK>, dim3((unsigned)ns, (unsigned)m->Hv, (unsigned)((m->dv + 31) / 32)),
	       32 * scan_split<DK>::P, 0, p->st, (const float *)s->C, (const float *)s->QK, (const float *)s->BD,
	       (const int *)s->seq_rows, (const int *)s->seq_start, s->seq_rec, li, m->Hk, m->Hv, m->dk, m->dv,
	       m->conv_dim, s->O2);
	launch(p->pdl, k_delta_norm, dim3((unsigned)n, (unsigned)m->Hv), (m->dv + 31) / 32 * 32, 0, p->st,
	       (const float *)in[1], ld[1], (const float *)D->gnorm, m->Hv, m->dv, (float)m->cfg.rms_eps, s->O2,
	       s->O2b);
}

static int deltanet(struct pass *p, int li, int64_t n, int ns)
{
	struct lynn_model *m = p->m;
	const struct dlayer *D = &p->c->L[li];
	struct scratch *s = &p->s;
	float *in[4]; /* qkv, z, b, a; b and a rows equally far apart */
	int64_t ld[4];
	int rc = group_run(p, &D->in, s->xn, s->xnb, (int)n, s->IN, in, ld);
	if (rc)
		return rc;
	launch(p->pdl, k_conv, dim3((unsigned)ns, (unsigned)((m->conv_dim + 127) / 128)), 128, 0, p->st, in[0],
	       ld[0], s->C, s->seq_rows, s->seq_start, s->seq_conv, li, D->conv_w, m->K, m->conv_dim);
	/* the model's key dim 128 with its column in registers (two threads a
	 * column need dv <= 512), the test models' 16, else any */
	if (m->dk == 16)
		delta_rule<16>(p, li, n, ns, in, ld);
	else if (m->dk == 128 && m->dv * delta_split<128>::P <= 1024)
		delta_rule<128>(p, li, n, ns, in, ld);
	else
		delta_rule<0>(p, li, n, ns, in, ld);
	if ((rc = launch_check(p, "deltanet")))
		return rc;
	return lin_run(p, &D->out, s->O2, s->O2b, (int)n, s->mix);
}

static int moe(struct pass *p, int li, int64_t n)
{
	struct lynn_model *m = p->m;
	const struct dlayer *D = &p->c->L[li];
	struct scratch *s = &p->s;
	int k = m->topk, G = (int)n * k, rc;
	const struct layer *L = &m->layers[li];
	bool elora = m->lora_on && D->elora, fused = D->egu.nv;
	/* the shared expert as one more slot a row of the expert MLP call */
	bool shx = D->shx && !elora &&
		   !(m->lora_on && (L->sg.has_lora || L->su.has_lora || L->sd.has_lora));
	int Gs = G + (shx ? (int)n : 0);
	float *rs[2]; /* the router's logits and the shared expert's gate */
	int64_t ld[2];
	if ((rc = group_run(p, &D->route, s->xn, s->xnb, (int)n, s->RS, rs, ld)))
		return rc;
	launch(p->pdl, k_route, (unsigned)n, 32, (size_t)m->E * sizeof(float), p->st, rs[0], ld[0], m->E, k,
	       shx ? m->E : -1, s->sele, s->selp, s->selw, s->ord);
	if ((rc = launch_check(p, "router")))
		return rc;
	int *se = NULL;
	float *sp = NULL;
	if (m->route_fn || elora) { /* the choices on the host */
		se = (int *)malloc((size_t)G * sizeof(int));
		sp = (float *)malloc((size_t)G * sizeof(float));
		if (!se || !sp ||
		    cudaMemcpyAsync(se, s->sele, (size_t)G * sizeof(int), cudaMemcpyDeviceToHost, p->st) ||
		    cudaMemcpyAsync(sp, s->selp, (size_t)G * sizeof(float), cudaMemcpyDeviceToHost, p->st) ||
		    cudaStreamSynchronize(p->st)) {
			free(se);
			free(sp);
			return lynn_errf(p->err, -LYNN_ECUDA, "cuda: reading the router's choices failed");
		}
		for (int64_t i = 0; m->route_fn && i < n; i++)
			m->route_fn(m->route_ud, li, k, se + i * k, sp + i * k);
	}
	/* The expert products' groups: a slot each (`rows` 1), or, in a
	 * prefill pass, the slots grouped by expert in tiles of MOE_TILE
	 * (k_moe_tiles), so an expert's weights are read once a tile rather
	 * than once a slot. Adapters on routed experts (added a slot at a
	 * time) and NVFP4 experts outside the expert MLP call keep a group a
	 * slot. */
	const bool tiled = n > GRAPH_MAX_ROWS && !elora && !p->c->tiles_off &&
			   (fused || (!D->eg.nv && !D->eu.nv && !D->ed.nv));
	const int *ids = s->sele, *yrow = NULL;
	int groups = fused && !elora ? Gs : G, rows = 1, x_div = k;
	/* the NVFP4 banks' bf16 input, a row per group row (one row serves
	 * every slot of a one-row pass); the dense banks' f32 input */
	const __nv_bfloat16 *xg = n == 1 ? s->xnb : s->Xg;
	int64_t xg_stride = n == 1 ? 0 : m->H;
	const float *xe = s->xn;
	if (tiled) {
		const int ne = shx ? m->E + 1 : m->E;
		groups = moe_tiles_max(groups, ne);
		rows = MOE_TILE;
		x_div = 1;
		xg_stride = (int64_t)MOE_TILE * m->H;
		xe = s->Xgf;
		ids = s->tile_e;
		yrow = s->yrow;
		launch(p->pdl, k_moe_tiles, 1, 1024, 2 * (size_t)ne * sizeof(int), p->st, (const int *)s->sele,
		       fused ? Gs : G, ne, s->tile_e, s->tile_slot, s->yrow);
		launch(p->pdl, k_gather_tiles, (unsigned)(groups * MOE_TILE), 256, 0, p->st,
		       (const float *)(fused ? NULL : s->xn), (const __nv_bfloat16 *)(fused ? s->xnb : NULL),
		       (const int *)s->tile_slot, k, G, m->H, fused ? NULL : s->Xgf, fused ? s->Xg : NULL);
	} else if ((fused || D->eg.nv || D->eu.nv) && n > 1) {
		launch(p->pdl, k_gather_bf16, (unsigned)Gs, 256, 0, p->st, s->xnb, k, G, m->H, s->Xg);
	}
	int64_t na = (int64_t)groups * rows * m->I;
	if (fused && !elora) {
		rc = lynn_cuda_nvfp4_moe_mlp(&D->egu.q, &D->ed.q, ids, groups, xg, xg_stride, rows, s->actb, s->Yg,
					     LYNN_CUDA_OUT_F32, p->st, p->err);
	} else {
		/* gate and up: a row's [gate; up] from a fused bank, else two arrays */
		float *gate = s->Gg, *up = fused ? s->Gg + m->I : s->Ug;
		int64_t ld = fused ? 2 * m->I : m->I;
		if (fused)
			rc = bank_run(p, &D->egu, ids, groups, rows, x_div, xe, xg, xg_stride, s->Gg);
		else if (!(rc = bank_run(p, &D->eg, ids, groups, rows, x_div, xe, xg, xg_stride, gate)))
			rc = bank_run(p, &D->eu, ids, groups, rows, x_div, xe, xg, xg_stride, up);
		if (!rc && elora && !(rc = slot_lora(p, L->eg, se, G, k, s->xn, m->H, gate, ld)))
			rc = slot_lora(p, L->eu, se, G, k, s->xn, m->H, up, ld);
		if (!rc) {
			launch(p->pdl, k_swiglu, grid_for(na, 256), 256, 0, p->st, gate, up, ld, m->I, na, s->act,
			       s->actb);
			if (!(rc = bank_run(p, &D->ed, ids, groups, rows, 1, s->act, s->actb, rows * m->I, s->Yg)) &&
			    elora)
				rc = slot_lora(p, L->ed, se, G, 1, s->act, m->I, s->Yg, m->H);
		}
	}
	free(se);
	free(sp);
	if (rc)
		return rc;
	/* the shared expert's rows (shx): after the routed slots', or in the tiles */
	const float *ys = yrow ? s->Yg : s->Yg + (int64_t)G * m->H;
	const int *ysrow = yrow ? yrow + G : NULL;
	if (!shx) {
		int64_t ns = n * m->Is;
		float *gu[2]; /* gate and up, rows equally far apart */
		int64_t gl[2];
		if ((rc = group_run(p, &D->sgu, s->xn, s->xnb, (int)n, s->HSgu, gu, gl)))
			return rc;
		launch(p->pdl, k_swiglu, grid_for(ns, 256), 256, 0, p->st, gu[0], gu[1], gl[0], m->Is, ns,
		       s->HSa, s->HSab);
		if ((rc = lin_run(p, &D->sd, s->HSa, s->HSab, (int)n, s->YS)))
			return rc;
		ys = s->YS;
		ysrow = NULL;
	}
	launch(p->pdl, k_moe_sum, dim3((unsigned)n, (unsigned)((m->H + 255) / 256)), 256, 0, p->st, s->x,
	       (const float *)s->Yg, yrow, (const float *)s->selw, (const int *)s->ord, (const float *)rs[1],
	       ld[1], ys, ysrow, k, m->H);
	return launch_check(p, "moe");
}

/* Every launch of one pass over the chunk's n rows (ns sequences), the
 * final norm and lm_head for its nw wanted rows. */
static int record(struct pass *p, int64_t n, int ns, int64_t nw)
{
	struct lynn_model *m = p->m;
	struct lynn_cuda_model *c = p->c;
	struct scratch *s = &p->s;
	float eps = (float)m->cfg.rms_eps;
	int rc;
	switch (c->embed_dt) {
	case LYNN_DTYPE_BF16:
		launch(p->pdl, k_embed<__nv_bfloat16>, (unsigned)n, 256, 0, p->st,
		       (const __nv_bfloat16 *)c->embed, s->ids, m->H, s->x);
		break;
	case LYNN_DTYPE_F16:
		launch(p->pdl, k_embed<__half>, (unsigned)n, 256, 0, p->st, (const __half *)c->embed, s->ids,
		       m->H, s->x);
		break;
	default:
		launch(p->pdl, k_embed<float>, (unsigned)n, 256, 0, p->st, (const float *)c->embed, s->ids,
		       m->H, s->x);
	}
	unsigned rt = rms_threads(m->H);
	for (int li = 0; li < m->cfg.n_layers; li++) {
		const struct dlayer *D = &c->L[li];
		launch(p->pdl, k_rmsnorm, (unsigned)n, rt, 0, p->st, s->x, nullptr, nullptr, D->in_norm, m->H,
		       eps, s->xn, s->xnb);
		rc = D->type == LYNN_LAYER_FULL ? attention(p, li, n) : deltanet(p, li, n, ns);
		if (rc)
			return rc;
		/* x += the mixer's output, then the post-attention norm */
		launch(p->pdl, k_rmsnorm, (unsigned)n, rt, 0, p->st, s->x, s->mix, nullptr, D->post_norm, m->H,
		       eps, s->xn, s->xnb);
		if ((rc = moe(p, li, n)))
			return rc;
	}
	if (nw > 0) {
		launch(p->pdl, k_rmsnorm, (unsigned)nw, rt, 0, p->st, s->x, nullptr, s->want_rows,
		       c->final_norm, m->H, eps, s->xn, s->xnb);
		if ((rc = lin_run(p, &c->lm_head, s->xn, s->xnb, (int)nw, s->logits)))
			return rc;
		if (p->picks)
			pick_rows(s->logits, nw, m->V, &s->pm, p->st, p->pdl);
	}
	return launch_check(p, "forward");
}

/* Small passes (decode steps) replay a CUDA graph of record()'s launches,
 * one per shape: what the launches depend on is the shape (rows, sequences,
 * wanted rows), the scratch buffer's place and the adapters' state; the
 * staged arrays (ids, positions, state tables) are read on the device. A
 * pass that reads the router's choices back on the host (the route
 * observer, adapters on experts) cannot be captured and runs directly. */
static bool graph_ok(const struct lynn_model *m, int64_t n)
{
	return n <= GRAPH_MAX_ROWS && !m->route_fn && !(m->lora_on && m->cuda->elora_any) &&
	       !m->cuda->graphs_off;
}

static int run_pass(struct pass *p, int64_t n, int ns, int64_t nw)
{
	struct lynn_model *m = p->m;
	struct lynn_cuda_model *c = p->c;
	struct lynn_err *err = p->err;
	if (!graph_ok(m, n))
		return record(p, n, ns, nw);
	struct graph_key k = { n, ns, nw, c->scratch, m->lora_on, m->lora_gen, p->picks + p->topk };
	for (int i = 0; i < c->n_graphs; i++)
		if (!memcmp(&c->graphs[i].key, &k, sizeof k)) {
			LYNN_CUDA_TRY(cudaGraphLaunch(c->graphs[i].exec, p->st));
			return 0;
		}
	cudaGraph_t g = NULL;
	cudaGraphExec_t x = NULL;
	LYNN_CUDA_TRY(cudaStreamBeginCapture(p->st, cudaStreamCaptureModeThreadLocal));
	int rc = record(p, n, ns, nw);
	cudaError_t e = cudaStreamEndCapture(p->st, &g);
	if (rc) {
		if (g)
			cudaGraphDestroy(g);
		return rc;
	}
	if (e == cudaSuccess)
		e = cudaGraphInstantiate(&x, g, 0);
	if (g)
		cudaGraphDestroy(g);
	if (e != cudaSuccess)
		return lynn_errf(p->err, -LYNN_ECUDA, "cuda: capturing a pass: %s", cudaGetErrorString(e));
	if (c->n_graphs == MAX_GRAPHS) { /* the oldest goes */
		cudaGraphExecDestroy(c->graphs[0].exec);
		memmove(c->graphs, c->graphs + 1, (MAX_GRAPHS - 1) * sizeof c->graphs[0]);
		c->n_graphs--;
	}
	c->graphs[c->n_graphs].key = k;
	c->graphs[c->n_graphs++].exec = x;
	LYNN_CUDA_TRY(cudaGraphLaunch(x, p->st));
	return 0;
}

/* Wanted row w's record from pick_rows (2 or PICK_REC ints) into pk. */
static void unpack_picks(const int *r, bool topk, const struct lynn_row_picks *pk, int64_t w)
{
	pk->greedy[w] = r[0];
	pk->finite[w] = r[1] != 0;
	if (!topk)
		return;
	pk->n_cand[w] = r[2];
	for (int i = 0; i < r[2]; i++) {
		pk->cand_id[w * LYNN_DEVICE_TOP_K + i] = r[3 + i];
		memcpy(&pk->cand_x[w * LYNN_DEVICE_TOP_K + i], &r[3 + LYNN_DEVICE_TOP_K + i], sizeof(float));
	}
}

/* What a pass brings back for its wanted rows: their logits, or (picks)
 * their picks (pick_rows). */
struct pass_out {
	float *logits;
	struct lynn_row_picks pk; /* the next chunk's rows: the pointers moved on (not pk.logits) */
	bool picks;
	int64_t w0; /* the wanted rows of the chunks before */
};

static int forward_chunk(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs, const int32_t *ids,
			 const bool *want, struct pass_out *o, int64_t *n_out, struct lynn_err *err)
{
	struct lynn_cuda_model *c = m->cuda;
	/* programmatic launches for decode-sized passes, where the launches'
	 * latency is the cost; a prefill chunk's kernels run plainly (the
	 * mid-size bf16 prefill of 128 tokens was 3% slower with them, h200
	 * run 31, docs/benchmarks.md "CUDA runner") */
	struct pass p = { m, c, {}, c->st, err, o->picks, o->picks && o->pk.top_k,
			  !c->pdl_off && n <= GRAPH_MAX_ROWS };
	struct scratch *s = &p.s;
	int rc;
	int64_t nw = 0;
	for (int64_t i = 0; i < n; i++)
		nw += !want || want[i];
	/* host side: positions, KV room, rows grouped by sequence (in order) */
	struct lynn_arena sa = { NULL, 0, 0 };
	struct staged h;
	size_t sbytes = stage_layout(&sa, &h, n);
	if (sbytes > c->stage_cap) {
		cudaFreeHost(c->stage);
		c->stage = NULL;
		c->stage_cap = 0;
		LYNN_CUDA_TRY(cudaMallocHost(&c->stage, sbytes));
		c->stage_cap = sbytes;
	}
	sa.base = c->stage;
	stage_layout(&sa, &h, n);
	for (int64_t i = 0; i < n; i++) {
		h.pos[i] = seqs[i]->pos++;
		h.ids[i] = ids[i];
	}
	for (int64_t i = 0; i < n; i++)
		seqs[i]->pos--;
	for (int64_t i = 0; i < n; i++) {
		if ((rc = grow_kv(m, seqs[i], h.pos[i] + 1, false, err)))
			return rc;
		h.row_kc[i] = seqs[i]->cuda->d_kc;
		h.row_vc[i] = seqs[i]->cuda->d_vc;
	}
	int ns = 0, ne = 0;
	for (int64_t i = 0; i < n; i++) {
		bool seen = false;
		for (int64_t j = 0; j < i && !seen; j++)
			seen = seqs[j] == seqs[i];
		if (seen)
			continue;
		h.seq_conv[ns] = seqs[i]->cuda->d_conv;
		h.seq_rec[ns] = seqs[i]->cuda->d_rec;
		h.seq_start[ns++] = ne;
		for (int64_t j = i; j < n; j++)
			if (seqs[j] == seqs[i])
				h.seq_rows[ne++] = (int)j;
	}
	h.seq_start[ns] = ne;
	for (int64_t i = 0, w = 0; i < n; i++)
		if (!want || want[i]) {
			h.topk[w] = p.topk ? o->pk.top_k[w] : 0;
			h.temp[w] = p.topk ? o->pk.temperature[w] : 0.0f;
			h.want_rows[w++] = (int)i;
		}
	/* device scratch */
	int mr = lynn_model_lora_rank(m);
	struct lynn_arena da = { NULL, 0, 0 };
	layout(m, &da, s, n, nw, mr, p.topk);
	size_t need = da.used + sbytes + 256;
	if (need > c->scratch_cap) {
		graphs_clear(c);
		cudaFree(c->scratch);
		c->scratch = NULL;
		c->scratch_cap = 0;
		if (cudaMalloc(&c->scratch, need) != cudaSuccess)
			return lynn_errf(err, -LYNN_ENOMEM, "cuda: out of device memory for %lld rows",
					 (long long)n);
		c->scratch_cap = need;
	}
	da.base = c->scratch;
	layout(m, &da, s, n, nw, mr, p.topk);
	char *dstage = (char *)lynn_carve(&da, sbytes);
	LYNN_CUDA_TRY(cudaMemcpyAsync(dstage, c->stage, sbytes, cudaMemcpyHostToDevice, p.st));
	ptrdiff_t off = dstage - c->stage;
	s->pos = (int64_t *)((char *)h.pos + off);
	s->ids = (int *)((char *)h.ids + off);
	s->seq_rows = (int *)((char *)h.seq_rows + off);
	s->seq_start = (int *)((char *)h.seq_start + off);
	s->want_rows = (int *)((char *)h.want_rows + off);
	s->pm.topk = p.topk ? (int *)((char *)h.topk + off) : nullptr;
	s->pm.temp = (float *)((char *)h.temp + off);
	s->row_kc = (float *const *const *)((char *)h.row_kc + off);
	s->row_vc = (float *const *const *)((char *)h.row_vc + off);
	s->seq_conv = (float *const *const *)((char *)h.seq_conv + off);
	s->seq_rec = (float *const *const *)((char *)h.seq_rec + off);

	for (int64_t i = 0; i < n; i++)
		seqs[i]->pos = h.pos[i] + 1;
	nw = o->logits || o->picks ? nw : 0;
	note_expert_lora(c, m);
	if ((rc = run_pass(&p, n, ns, nw)))
		return rc;
	int *picks = NULL;
	const int rec = p.topk ? PICK_REC : 2;
	if (nw > 0 && o->picks) {
		if (!(picks = (int *)malloc((size_t)nw * rec * sizeof(int))))
			return lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory");
		if (cudaMemcpyAsync(picks, s->pm.out, (size_t)nw * rec * sizeof(int), cudaMemcpyDeviceToHost, p.st) !=
		    cudaSuccess)
			rc = lynn_errf(err, -LYNN_ECUDA, "cuda: copying the picks back failed");
	} else if (nw > 0) {
		LYNN_CUDA_TRY(cudaMemcpyAsync(o->logits, s->logits, (size_t)nw * m->V * sizeof(float),
					      cudaMemcpyDeviceToHost, p.st));
	}
	if (!rc && cudaStreamSynchronize(p.st) != cudaSuccess)
		rc = lynn_errf(err, -LYNN_ECUDA, "cuda: a pass failed: %s", cudaGetErrorString(cudaGetLastError()));
	for (int64_t i = 0; picks && !rc && i < nw; i++)
		unpack_picks(picks + (size_t)i * rec, p.topk, &o->pk, i);
	free(picks);
	/* the rows whose sampler cannot pick from the candidates: their logits,
	 * while this chunk's are still here */
	for (int64_t i = 0; !rc && o->picks && o->pk.need_logits && i < nw; i++)
		if (o->pk.need_logits(o->pk.ud, o->w0 + i) &&
		    cudaMemcpy(o->pk.logits + (size_t)(o->w0 + i) * m->V, s->logits + (size_t)i * m->V,
			       (size_t)m->V * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
			rc = lynn_errf(err, -LYNN_ECUDA, "cuda: copying a row's logits back failed");
	if (rc)
		return rc;
	*n_out = nw;
	return 0;
}

static int forward(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs, const int32_t *ids,
		   const bool *want, struct pass_out o, struct lynn_err *err)
{
	for (int64_t r0 = 0; r0 < n; r0 += CHUNK_ROWS) {
		int64_t nc = LYNN_MIN(CHUNK_ROWS, n - r0), nw = 0;
		int rc = forward_chunk(m, nc, seqs + r0, ids + r0, want ? want + r0 : NULL, &o, &nw, err);
		if (rc) {
			cudaStreamSynchronize(m->cuda->st);
			return rc;
		}
		if (o.logits)
			o.logits += nw * m->V;
		o.w0 += nw;
		if (o.picks) {
			struct lynn_row_picks *k = &o.pk;
			k->greedy += nw;
			k->finite += nw;
			if (k->top_k) {
				k->top_k += nw;
				k->temperature += nw;
				k->n_cand += nw;
				k->cand_id += nw * LYNN_DEVICE_TOP_K;
				k->cand_x += nw * LYNN_DEVICE_TOP_K;
			}
		}
	}
	return 0;
}

extern "C" int lynn_cuda_forward(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
				 const int32_t *ids, const bool *want, float *logits, struct lynn_err *err)
{
	return forward(m, n, seqs, ids, want, pass_out{ logits, {}, false, 0 }, err);
}

extern "C" int lynn_cuda_forward_picks(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
				       const int32_t *ids, const bool *want, const struct lynn_row_picks *pk,
				       struct lynn_err *err)
{
	return forward(m, n, seqs, ids, want, pass_out{ NULL, *pk, true, 0 }, err);
}

/* The device's picks over host logits (the kernels' test against
 * lynn_sample_greedy and a full sort). */
extern "C" int lynn_cuda_picks(const float *logits, int64_t rows, int V, const struct lynn_row_picks *pk,
			       struct lynn_err *err)
{
	if (rows < 1 || V < 1)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: picks: %lld rows of %d", (long long)rows, V);
	const bool topk = pk->top_k != NULL;
	const int rec = topk ? PICK_REC : 2;
	struct lynn_arena a = { NULL, 0, 0 };
	struct pick_mem pm;
	float *dl;
	int rc = 0;
	for (int pass = 0; pass < 2; pass++) { /* sizes, then places */
		a.used = 0;
		dl = (float *)lynn_carve(&a, (size_t)rows * V * sizeof(float));
		carve_picks(&a, &pm, rows, topk);
		pm.topk = (int *)lynn_carve(&a, (size_t)rows * sizeof(int));
		pm.temp = (float *)lynn_carve(&a, (size_t)rows * sizeof(float));
		if (pass == 0 && cudaMalloc(&a.base, a.used) != cudaSuccess)
			return lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory");
	}
	if (!topk)
		pm.topk = nullptr;
	int *ho = (int *)malloc((size_t)rows * rec * sizeof(int));
	if (!ho)
		rc = lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory");
	if (!rc && (cudaMemcpy(dl, logits, (size_t)rows * V * sizeof(float), cudaMemcpyHostToDevice) ||
		    (topk && (cudaMemcpy(pm.topk, pk->top_k, (size_t)rows * sizeof(int), cudaMemcpyHostToDevice) ||
			      cudaMemcpy(pm.temp, pk->temperature, (size_t)rows * sizeof(float),
					 cudaMemcpyHostToDevice)))))
		rc = lynn_errf(err, -LYNN_ECUDA, "cuda: copying logits failed");
	if (!rc) {
		pick_rows(dl, rows, V, &pm, 0, false);
		if (cudaMemcpy(ho, pm.out, (size_t)rows * rec * sizeof(int), cudaMemcpyDeviceToHost))
			rc = lynn_errf(err, -LYNN_ECUDA, "cuda: picks: %s", cudaGetErrorString(cudaGetLastError()));
	}
	for (int64_t i = 0; !rc && i < rows; i++)
		unpack_picks(ho + (size_t)i * rec, topk, pk, i);
	cudaFree(a.base);
	free(ho);
	return rc;
}

extern "C" double lynn_cuda_copy_bandwidth(void)
{
	size_t n = (size_t)1 << 30;
	void *a = NULL, *b = NULL;
	cudaEvent_t e0, e1;
	double best = -1;
	if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) {
		cudaFree(a);
		return -1;
	}
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	cudaMemset(a, 1, n);
	for (int r = 0; r < 6; r++) {
		float ms = 0;
		cudaEventRecord(e0);
		cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice);
		cudaEventRecord(e1);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&ms, e0, e1);
		if (r > 0 && 2.0 * n / (ms * 1e-3) > best)
			best = 2.0 * n / (ms * 1e-3);
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaFree(a);
	cudaFree(b);
	return best;
}
