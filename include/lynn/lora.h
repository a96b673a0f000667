/*
 * lora.h - PEFT LoRA adapters: loading, mapping onto a base checkpoint, and
 * merging (SPEC §4; peft's LoraConfig and `merge_and_unload`).
 *
 * An adapter folder holds adapter_config.json (r, lora_alpha, use_rslora,
 * target_modules, rank_pattern, alpha_pattern, fan_in_fan_out, bias, use_dora)
 * and adapter_model.safetensors with keys like
 *   base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight  [r, in]
 *   base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight                 [out, r]
 * Each module maps to the base weight `<module>.weight`, whichever of the
 * multimodal (`model.language_model.`) and text-only (`model.`) layouts the
 * adapter was trained on and the base uses. The update is
 *   W' = W + s · B · A,   s = alpha / r   (alpha / sqrt(r) with use_rslora)
 * with r and alpha per module from rank_pattern / alpha_pattern.
 */
#ifndef LYNN_LORA_H
#define LYNN_LORA_H

#include <stdbool.h>
#include <stdint.h>

#include "lynn/err.h"
#include "lynn/progress.h"
#include "lynn/st.h"

struct lynn_lora_module {
	char *module;                 /* adapter module path, "model.layers.0.self_attn.q_proj" */
	char *decoder_name;           /* text-model weight name, "layers.0.self_attn.q_proj.weight" */
	const struct lynn_tensor *a;  /* lora_A [r, in] */
	const struct lynn_tensor *b;  /* lora_B [out, r] */
	const struct lynn_tensor *base; /* bound base weight [out, in]; NULL before lynn_lora_bind */
	bool packed;                  /* base is NVFP4 E2M1 pairs [out, in / 2]: the runner applies
				       * the adapter; lynn_lora_merge refuses it */
	int r;
	double alpha;
	float scale;                  /* alpha/r or alpha/sqrt(r) */
	int64_t in, out;
};

struct lynn_lora;

/* Open an adapter folder. DoRA, LoRA on embeddings, bias other than "none"
 * and other PEFT types are -LYNN_EUNSUPPORTED. Caller frees with lynn_lora_free. */
struct lynn_lora *lynn_lora_open(const char *dir, struct lynn_err *err);
void lynn_lora_free(struct lynn_lora *l);

/* Map every adapter module onto a weight of `base` and check shapes
 * (A [r, in], B [out, r] against W [out, in]). Any module that maps to no base
 * weight or has the wrong shapes is an error whose message lists them (up to
 * what fits) — the classic silent failure of loading the wrong class. An
 * NVFP4 base linear (compressed-tensors `<module>.weight_packed`, ModelOpt
 * `<module>.weight` as uint8, each with its `weight_scale`) binds by its
 * logical shape [out, 2 * packed columns] and is marked packed. */
int lynn_lora_bind(struct lynn_lora *l, const struct lynn_ckpt *base, struct lynn_err *err);

int lynn_lora_n_modules(const struct lynn_lora *l);
const struct lynn_lora_module *lynn_lora_module(const struct lynn_lora *l, int i);
/* The module whose decoder_name is `decoder_name`, or NULL. */
const struct lynn_lora_module *lynn_lora_find(const struct lynn_lora *l, const char *decoder_name);
const char *lynn_lora_dir(const struct lynn_lora *l);

/* ===== merge ===== */
struct lynn_merge_opts {
	uint64_t shard_size;        /* bytes per shard; 0 = one file */
	int dtype;                  /* -1 keep the stored dtype, else LYNN_DTYPE_{BF16,F16,F32} */
	int n_threads;              /* <= 0: all cores */
	lynn_progress_fn progress;  /* bytes written so far / total, may be NULL */
	void *progress_ud;
};

/* Stream the merged checkpoint into `out_dir` (an existing empty folder: the
 * caller makes it atomic with lynn_tmpdir_*): targeted weights get
 * W + s·B·A computed in f32 and rounded to nearest-even into the stored (or
 * requested) dtype; every other tensor is copied byte for byte (or converted
 * when a dtype is requested, floating tensors only). Targeted rows are merged
 * in parallel; peak memory is about one output tensor (the input's pages are
 * dropped as they are consumed). The lora must be bound to `base`. */
int lynn_lora_merge(const struct lynn_lora *l, const struct lynn_ckpt *base, const char *out_dir,
		    const struct lynn_merge_opts *opts, struct lynn_err *err);

#endif
