/* model_int.h - internals of the Qwen3.5-MoE runner shared by src/model
 * (include/lynn/model.h is the public side). */
#ifndef LYNN_MODEL_INT_H
#define LYNN_MODEL_INT_H

#include "lynn/config.h"
#include "lynn/cpu.h"
#include "lynn/cpu_nvfp4.h"
#include "lynn/ggml_quants.h"
#include "lynn/model.h"
#include "lynn/pool.h"
#include "lynn/st.h"

/* A linear y = W x (+ LoRA). W borrowed from the mmap. */
struct lin {
	enum lynn_dtype dt;
	const void *w;               /* (n_out, n_in) */
	int64_t n_out, n_in;
	char *name;                  /* text-model name, for LoRA lookup (heap) */
	bool has_lora;
	struct lynn_lora_ref lora;
	bool is_nv;                  /* NVFP4 (src/formats/nvfp4.c): nv, not dt/w */
	struct lynn_nvfp4_view nv;
	bool is_gg;                  /* ggml-quantized (GGUF, model_gguf.c): gg, not dt/w */
	struct lynn_ggml_view gg;
	void *d_lora_a, *d_lora_b;   /* the adapter's A and B on the CUDA device (runner.cu) */
};

struct layer {
	enum lynn_layer_type type;
	float *in_norm, *post_norm;  /* (H) 1 + w, f32 */
	/* full attention */
	struct lin q, k, v, o;       /* q: (n_heads * 2 * hd, H) interleaved q|gate per head */
	float *q_norm, *k_norm;      /* (hd) 1 + w */
	/* Gated DeltaNet */
	struct lin qkv, z, b, a, out; /* qkv: (2 Hk dk + Hv dv, H) */
	float *conv_w;               /* (conv_dim, K) */
	float *neg_a;                /* (Hv) -exp(A_log) */
	float *dt_bias;              /* (Hv) */
	float *gnorm;                /* (dv) plain weight */
	/* MoE */
	struct lin router;           /* (E, H) */
	struct lin *eg, *eu, *ed;    /* per expert: gate (I,H), up (I,H), down (H,I) */
	struct lin sg, su, sd;       /* shared expert */
	struct lin sgate;            /* (1, H) */
};

struct lynn_model {
	struct lynn_config cfg;
	struct lynn_ckpt *ckpt;      /* NULL for a GGUF model */
	struct lynn_gguf *gguf;      /* GGUF model (model_gguf.c), else NULL */
	bool v_tiled;                /* DeltaNet v-heads in ggml's tiled order (GGUF, §2.4) */
	struct lynn_pool *pool;
	enum lynn_cpu_isa isa;
	int n_threads;
	struct layer *layers;
	enum lynn_dtype embed_dt;
	const void *embed;           /* (V, H) */
	bool embed_is_gg;            /* quantized embedding (GGUF): embed_gg */
	struct lynn_ggml_view embed_gg;
	float *final_norm;           /* (H) 1 + w */
	struct lin lm_head;
	float *inv_freq;             /* (rot_dim / 2) */
	bool lora_on;
	unsigned lora_gen;           /* bumped whenever an adapter is attached or cleared */
	lynn_route_fn route_fn;      /* MoE router observer (lynn_model_set_route_observer) */
	void *route_ud;
	struct lynn_cuda_model *cuda; /* weights on the CUDA device (kernels/runner.cu), or NULL */
	char *arena;                 /* forward scratch, reused across calls */
	size_t arena_cap;
	/* derived sizes */
	int H, V, hd, nh, nkv, Hk, Hv, dk, dv, K, conv_dim, E, topk, I, Is;
};

struct lynn_seq {
	const struct lynn_model *m;
	int64_t pos;
	int64_t cap;                 /* KV rows allocated */
	float **kc, **vc;            /* per layer (full only): (cap, nkv * hd) */
	float **conv;                /* per layer (linear only): (K - 1, conv_dim), oldest first */
	float **rec;                 /* per layer (linear only): (Hv, dk, dv) */
	struct lynn_cuda_seq *cuda;  /* the state on the CUDA device instead (model->cuda) */
};

/* Scratch laid out in one buffer (forward.c, runner.cu): each lynn_carve
 * takes the next 256-byte aligned piece; with base NULL it only measures. */
struct lynn_arena {
	char *base;
	size_t cap, used;
};

static inline void *lynn_carve(struct lynn_arena *a, size_t bytes)
{
	size_t at = (a->used + 255) & ~(size_t)255;
	a->used = at + bytes;
	return a->base ? a->base + at : NULL;
}

/* model.c: sizes from m->cfg, checks, threads/ISA (before binding); then,
 * once the embeddings and lm_head are bound, the layer array (each layer
 * bound by bind_layer(ud, li), nonzero on failure with err filled in), the
 * RoPE table and the pool. model_gguf.c shares them. */
int lynn_model_setup(struct lynn_model *m, const char *path, const struct lynn_model_opts *opts,
		     struct lynn_err *err);
int lynn_model_finish(struct lynn_model *m, int (*bind_layer)(void *ud, int li), void *ud,
		      struct lynn_err *err);
/* model.c: move a bound model to the device opts asks for (the CPU, or
 * the CUDA device through lynn_cuda_model_init; AUTO falls back to the CPU
 * when the model cannot run there). */
int lynn_model_place(struct lynn_model *m, const struct lynn_model_opts *opts, const char *path,
		     struct lynn_err *err);
/* KV rows to hold `need` positions when `cap` are there: 64, doubled. */
int64_t lynn_kv_rows(int64_t cap, int64_t need);
/* forward.c: a host sequence's KV caches grown to hold `need` positions
 * (the rows there are kept): lynn_kv_rows of them, or exactly `need` (a
 * kept copy, which does not grow). */
int lynn_seq_grow_kv(const struct lynn_model *m, struct lynn_seq *sq, int64_t need, bool exact,
		     struct lynn_err *err);
/* model.c: the largest rank of the enabled adapters (0 when they are off):
 * the forward passes' LoRA scratch holds one row of that many per token. */
int lynn_model_lora_rank(const struct lynn_model *m);
/* model_gguf.c: open a .gguf file (llama.cpp's qwen35moe). */
struct lynn_model *lynn_model_open_gguf(const char *path, const struct lynn_model_opts *opts,
					struct lynn_err *err);
bool lynn_model_path_is_gguf(const char *path);

/* The most top-k candidates a row may ask of the device
 * (lynn_row_picks.top_k). */
#define LYNN_DEVICE_TOP_K 64

/* What lynn_model_forward_picks gives back for each wanted row w instead
 * of its logits, made where the logits are: */
struct lynn_row_picks {
	/* in: NULL, or top_k[w] in [0, LYNN_DEVICE_TOP_K] (0: the greedy pick
	 * only) with temperature[w] > 0 where top_k[w] > 0 */
	const int *top_k;
	const float *temperature;
	/* out: the token lynn_sample_greedy picks and whether every logit is
	 * finite; with top_k, the n_cand[w] <= top_k[w] largest logits by
	 * logit / temperature (descending, lower id first on ties; never -inf
	 * or NaN), ids and logits at [w * LYNN_DEVICE_TOP_K + i], as
	 * lynn_sampler_sample_top takes them */
	int32_t *greedy;
	bool *finite;
	int *n_cand;
	int32_t *cand_id;
	float *cand_x;
	/* optional: asked once row w's picks are in (w counts the wanted rows
	 * of the whole call); true: its logits are copied to logits + w * V
	 * too (a sampler that could not pick from the candidates) */
	bool (*need_logits)(void *ud, int64_t w);
	void *ud;
	float *logits;
};

/* lynn_model_forward with lynn_row_picks instead of the logits: on the
 * CUDA runner a greedy step brings back 8 bytes a row, a top-k one 8 bytes
 * a candidate, instead of the vocabulary's logits. Only for models on a
 * device (lynn_model_picks_on_device); elsewhere -LYNN_EUNSUPPORTED. */
bool lynn_model_picks_on_device(const struct lynn_model *m);
int lynn_model_forward_picks(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
			     const int32_t *ids, const bool *want, const struct lynn_row_picks *pk,
			     struct lynn_err *err);

/* kernels/runner.cu (built with CUDA only; call sites are under
 * LYNN_CUDA): the same forward pass on one CUDA device. model_init copies
 * every weight to the device (m->cuda); a model with m->cuda keeps its
 * sequences' KV caches and DeltaNet states there (seq_init instead of the
 * host arrays) and lynn_model_forward runs lynn_cuda_forward. Adapters are
 * copied when attached (lora_upload; lora_drop frees the copies). */
bool lynn_cuda_usable(void);
int lynn_cuda_model_init(struct lynn_model *m, struct lynn_err *err);
void lynn_cuda_model_free(struct lynn_model *m);
int lynn_cuda_seq_init(struct lynn_seq *s, struct lynn_err *err);
void lynn_cuda_seq_free(struct lynn_seq *s);
void lynn_cuda_seq_reset(struct lynn_seq *s);
/* dst's device state a copy of src's first src->pos positions; the KV rows
 * a device sequence holds. */
int lynn_cuda_seq_copy(struct lynn_seq *dst, const struct lynn_seq *src, bool exact, struct lynn_err *err);
int64_t lynn_cuda_seq_rows(const struct lynn_seq *s);
int lynn_cuda_forward(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
		      const int32_t *ids, const bool *want, float *logits, struct lynn_err *err);
/* lynn_model_forward_picks on the device; lynn_cuda_picks: the same picks
 * over host logits ([rows][V]), the kernels' test against
 * lynn_sample_greedy and a full sort. */
int lynn_cuda_forward_picks(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
			    const int32_t *ids, const bool *want, const struct lynn_row_picks *pk,
			    struct lynn_err *err);
int lynn_cuda_picks(const float *logits, int64_t rows, int V, const struct lynn_row_picks *pk,
		    struct lynn_err *err);
int lynn_cuda_lora_upload(struct lin *l, struct lynn_err *err);
void lynn_cuda_lora_drop(struct lin *l);

#endif
