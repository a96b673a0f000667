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
	lynn_route_fn route_fn;      /* MoE router observer (lynn_model_set_route_observer) */
	void *route_ud;
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
};

/* model.c: sizes from m->cfg, checks, threads/ISA (before binding); then,
 * once the embeddings and lm_head are bound, the layer array (each layer
 * bound by bind_layer(ud, li), nonzero on failure with err filled in), the
 * RoPE table and the pool. model_gguf.c shares them. */
int lynn_model_setup(struct lynn_model *m, const char *path, const struct lynn_model_opts *opts,
		     struct lynn_err *err);
int lynn_model_finish(struct lynn_model *m, int (*bind_layer)(void *ud, int li), void *ud,
		      struct lynn_err *err);
/* model_gguf.c: open a .gguf file (llama.cpp's qwen35moe). */
struct lynn_model *lynn_model_open_gguf(const char *path, const struct lynn_model_opts *opts,
					struct lynn_err *err);
bool lynn_model_path_is_gguf(const char *path);

#endif
