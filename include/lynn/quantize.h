/*
 * quantize.h - round-to-nearest NVFP4 quantization of a BF16/F16/F32
 * checkpoint folder (`lynn quantize --nvfp4`; docs/lynn-quantize.md).
 *
 * The "RTN" recipe (weight-formats.md §2.6, Lynn v8-RTN): every 2-D `.weight`
 * linear with K % 16 == 0 is quantized (attention, linear attention, shared
 * and routed experts) except lm_head, embed_tokens, the vision tower, the
 * router `mlp.gate`, `shared_expert_gate`, conv1d, MTP layers and anything
 * matching an --ignore pattern; 1-D tensors (norms, biases, A_log) are copied
 * as they are. Weights only (W4A16): no activation scales are written, since
 * none are calibrated. Global scales are shared within fused groups (q/k/v;
 * gate/up, per expert), so serving engines that fuse them lose nothing.
 * Fused 3-D expert tensors (`mlp.experts.gate_up_proj` [E,2I,H],
 * `mlp.experts.down_proj` [E,H,I]) are written as per-expert linears
 * (`mlp.experts.E.{gate,up,down}_proj.*`), as llm-compressor does.
 */
#ifndef LYNN_QUANTIZE_H
#define LYNN_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "lynn/err.h"
#include "lynn/nvfp4.h"
#include "lynn/progress.h"

struct lynn_quantize_opts {
	enum lynn_nvfp4_format format;   /* CT (default) or MODELOPT */
	const char *const *ignore;       /* extra patterns: fnmatch wildcards, or
					  * "re:REGEX" (lynn_re: matched from the start,
					  * as compressed-tensors' re.match), against the
					  * module name ("model.layers.3.mlp.gate") */
	int n_ignore;
	bool force;                      /* replace a non-empty OUT_DIR */
	uint64_t max_shard_bytes;        /* 0: 5 GB, as Hugging Face */
	lynn_progress_fn progress;       /* bytes of source weights done */
	void *progress_ud;
};

struct lynn_quantize_stats {
	int64_t n_quantized;             /* linears written as NVFP4 */
	int64_t n_copied;                /* tensors copied unchanged */
	int64_t n_split_experts;         /* per-expert linears cut from fused 3-D tensors */
	uint64_t bytes_in, bytes_out;    /* tensor bytes */
	double rel_rmse;                 /* ||dequant(W) - W|| / ||W|| over quantized weights */
	int n_ship_files;                /* tokenizer etc. copied */
};

/* Quantize the checkpoint folder `src` into the new folder `out` (built in
 * a temp folder beside it and renamed into place at the end). Returns 0,
 * -LYNN_EUNSUPPORTED (already quantized, unknown dtype), -LYNN_EFORMAT,
 * -LYNN_EIO, -LYNN_ENOMEM, -LYNN_EINVAL (bad pattern, OUT_DIR not empty). */
int lynn_nvfp4_quantize(const char *src, const char *out, const struct lynn_quantize_opts *o,
			struct lynn_quantize_stats *st, struct lynn_err *err);

/* Would the RTN recipe (plus `o`'s patterns) quantize the 2-D linear
 * `module` ("model.layers.0.self_attn.q_proj", no ".weight")? */
bool lynn_nvfp4_rtn_wants(const char *module, const struct lynn_quantize_opts *o);

#endif
