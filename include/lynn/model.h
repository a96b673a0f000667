/*
 * model.h - the Qwen3.5-MoE text decoder on the CPU or one CUDA device (docs/reference
 * qwen35moe-architecture.md §1-4): weights bound from a checkpoint folder
 * (multimodal `model.language_model.` or text-only `model.` names; routed
 * experts per-expert or fused 3-D; BF16, F16, F32 or NVFP4), a per-sequence decode
 * state, and a forward pass that takes any mix of (sequence, token) rows:
 * many tokens of one sequence (prefill) or one token of many sequences
 * (batched decode).
 *
 * On the CPU, weights are never copied: matrices are read from the
 * checkpoint's mmap and widened to f32 in the kernels (include/lynn/cpu.h).
 * On a CUDA device (kernels/runner.cu) they are copied to device memory at
 * open and the states live there; the same calls apply. Small vectors (norms,
 * conv taps, A_log, dt_bias) are converted to f32 at load. All arithmetic is
 * f32; KV caches and DeltaNet states are f32 (on the GPU an NVFP4 product
 * takes its input rounded to bf16: W4A16).
 *
 * Threading: a model owns one thread pool; calls on one model must not run
 * concurrently (the server serialises them and batches sequences instead).
 */
#ifndef LYNN_MODEL_H
#define LYNN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "lynn/config.h"
#include "lynn/cpu.h"
#include "lynn/err.h"
#include "lynn/st.h"

struct lynn_model;
struct lynn_seq;

/* Where the forward pass runs. AUTO: the CUDA device when lynn was built
 * with CUDA, a device is present and the model can run there (a
 * safetensors folder: BF16/F16/F32 or NVFP4 weights), else the CPU. The
 * environment variable LYNN_DEVICE (cpu, cuda, auto) replaces AUTO. */
enum lynn_device {
	LYNN_DEVICE_AUTO = 0,
	LYNN_DEVICE_CPU,
	LYNN_DEVICE_CUDA,
};

struct lynn_model_opts {
	int n_threads;          /* <= 0: all cores */
	enum lynn_cpu_isa isa;  /* LYNN_CPU_AUTO unless testing a kernel */
	enum lynn_device device;
};

/* "cpu", "cuda" or "auto" -> the device (-1 for anything else). */
int lynn_device_parse(const char *s);
/* The device a model runs on: "cpu" or "cuda". */
const char *lynn_model_device(const struct lynn_model *m);

/* Open the model folder at `path`: config.json (+ generation_config.json)
 * and the safetensors checkpoint, and bind every decoder weight. A missing
 * tensor (one expert included), a wrong shape or an unsupported dtype is
 * refused with an error naming the tensor (-LYNN_ENOTFOUND / -LYNN_EFORMAT /
 * -LYNN_EUNSUPPORTED). opts may be NULL. Caller frees with lynn_model_close. */
struct lynn_model *lynn_model_open(const char *path, const struct lynn_model_opts *opts,
				   struct lynn_err *err);
void lynn_model_close(struct lynn_model *m);

/* Borrowed views, valid until lynn_model_close. */
const struct lynn_config *lynn_model_config(const struct lynn_model *m);
const struct lynn_ckpt *lynn_model_ckpt(const struct lynn_model *m);
int lynn_model_n_vocab(const struct lynn_model *m);
int lynn_model_n_threads(const struct lynn_model *m);
/* Bytes of weights read per decoded token (embedding row, every dense
 * matrix, top-k routed experts, lm_head): the memory-roofline numerator. */
uint64_t lynn_model_active_bytes(const struct lynn_model *m);

/* Observer of the MoE router (lynn profile): called during every forward
 * pass, for every token and MoE layer, with the k selected experts (by
 * descending probability, lower index first on ties) and their router
 * probabilities (softmax over all experts, before the top-k weights are
 * renormalised). fn NULL turns it off. Not thread-safe with a running
 * forward pass. */
typedef void (*lynn_route_fn)(void *ud, int layer, int k, const int *experts, const float *probs);
void lynn_model_set_route_observer(struct lynn_model *m, lynn_route_fn fn, void *ud);

/* ===== sequence state ===== */
/* KV caches of the full-attention layers (grow on demand), conv and
 * recurrent states of the DeltaNet layers, and the position. Caller frees
 * with lynn_seq_free. */
struct lynn_seq *lynn_seq_create(const struct lynn_model *m, struct lynn_err *err);
void lynn_seq_free(struct lynn_seq *s);
/* Back to an empty sequence (keeps the allocations). */
void lynn_seq_reset(struct lynn_seq *s);
/* Tokens consumed so far (the RoPE position of the next one). */
int64_t lynn_seq_pos(const struct lynn_seq *s);
/* dst becomes a copy of src's state (its position, KV rows and DeltaNet
 * states), e.g. a prompt's kept state for a prompt that begins with it;
 * both of one model. exact: dst's KV caches grow to src's rows exactly (a
 * copy to keep), else as a growing sequence's do. */
int lynn_seq_copy(struct lynn_seq *dst, const struct lynn_seq *src, bool exact, struct lynn_err *err);
/* The memory a sequence's state holds (host or device). */
size_t lynn_seq_bytes(const struct lynn_seq *s);

/* ===== forward ===== */
/* Push n rows through the decoder: row i is token ids[i] appended to
 * seqs[i]. Rows of one sequence must be in order; sequences may interleave.
 * Logits (n_vocab floats per row) are written, packed in row order, for the
 * rows where want[i] is true (want NULL: every row) into `logits` (may be
 * NULL when no row is wanted). Each sequence's position advances by its rows.
 * Errors: -LYNN_EINVAL for an id outside the vocabulary (no state changed),
 * -LYNN_ENOMEM. */
int lynn_model_forward(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
		       const int32_t *ids, const bool *want, float *logits, struct lynn_err *err);
/* Prefill n tokens of one sequence; logits for every token ([n][vocab]) when
 * all_logits, else for the last only ([vocab]); logits may be NULL. */
int lynn_model_prefill(struct lynn_model *m, struct lynn_seq *s, const int32_t *ids, int64_t n,
		       bool all_logits, float *logits, struct lynn_err *err);
/* One token for each of n sequences (distinct); logits [n][vocab]. */
int lynn_model_decode(struct lynn_model *m, int64_t n, struct lynn_seq *const *seqs,
		      const int32_t *ids, float *logits, struct lynn_err *err);

/* ===== LoRA hook (y += scale * B (A x), unmerged) ===== */
struct lynn_lora_ref {
	enum lynn_dtype dt;   /* of A and B: BF16, F16 or F32 */
	const void *a;        /* (rank, n_in), borrowed: must outlive its use */
	const void *b;        /* (n_out, rank), borrowed */
	int rank;
	float scale;          /* alpha / r (or alpha / sqrt(r) with rsLoRA) */
};

/* Attach an adapter to the linear whose text-model weight name is `name`
 * ("layers.3.self_attn.q_proj.weight", "layers.0.linear_attn.in_proj_qkv.weight",
 * "layers.1.mlp.shared_expert.up_proj.weight", "layers.2.mlp.experts.5.down_proj.weight",
 * "lm_head.weight"). Replaces an earlier one on that linear. -LYNN_ENOTFOUND if
 * no such linear, -LYNN_EINVAL if rank/dtype do not fit. Adapters start enabled. */
int lynn_model_lora_set(struct lynn_model *m, const char *name, const struct lynn_lora_ref *lora,
			struct lynn_err *err);
/* Attach every module of a PEFT adapter (include/lynn/lora.h) already bound
 * with lynn_lora_bind to this model's checkpoint (lynn_model_ckpt). The
 * adapter's tensors are borrowed: free the adapter after the model, or
 * after lynn_model_lora_clear. Errors name the module: -LYNN_ENOTFOUND (no
 * such linear in the runner, e.g. an embedding), -LYNN_EUNSUPPORTED (A and B
 * of different or unsupported dtypes). */
struct lynn_lora;
int lynn_model_lora_attach(struct lynn_model *m, const struct lynn_lora *lora, struct lynn_err *err);
/* Open the PEFT adapter folder `dir`, bind it to this model's checkpoint and
 * attach it (enabled). Returns the adapter, which the caller frees with
 * lynn_lora_free after closing the model; NULL with err set (the errors of
 * lynn_lora_open / lynn_lora_bind / lynn_model_lora_attach). */
struct lynn_lora *lynn_model_lora_load(struct lynn_model *m, const char *dir, struct lynn_err *err);
/* Turn every attached adapter on or off (the base model when off). */
void lynn_model_lora_enable(struct lynn_model *m, bool on);
/* Detach every adapter. */
void lynn_model_lora_clear(struct lynn_model *m);
/* Number of linears with an adapter attached. */
int lynn_model_lora_count(const struct lynn_model *m);

#endif
