/*
 * config.h - a Qwen3.5-MoE model's config.json (SPEC §2; docs/reference
 * qwen35moe-architecture.md §1): the multimodal wrapper `qwen3_5_moe` (fields
 * under text_config) or the flat text-only `qwen3_5_moe_text`, plus the eos
 * ids from generation_config.json when the folder has one.
 */
#ifndef LYNN_CONFIG_H
#define LYNN_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "lynn/err.h"

enum lynn_layer_type {
	LYNN_LAYER_LINEAR = 0, /* Gated DeltaNet ("linear_attention") */
	LYNN_LAYER_FULL = 1,   /* gated full attention ("full_attention") */
};

#define LYNN_MAX_EOS 8

struct lynn_config {
	char model_type[32];       /* "qwen3_5_moe" or "qwen3_5_moe_text" */
	char architecture[64];     /* architectures[0] */
	bool multimodal;           /* wrapper with text_config */
	bool has_vision_config;
	int vocab_size, hidden_size, n_layers;
	int n_heads, n_kv_heads, head_dim;          /* full attention */
	int lin_n_k_heads, lin_n_v_heads;           /* Gated DeltaNet */
	int lin_k_dim, lin_v_dim, lin_conv_kernel;
	int n_experts, n_experts_per_tok;
	int moe_inter, shared_inter;
	double rms_eps;
	double rope_theta, partial_rotary;
	int rot_dim;                                /* head_dim * partial_rotary */
	int mrope_section[3];
	bool tie_word_embeddings;
	int mtp_layers;                             /* mtp_num_hidden_layers */
	enum lynn_layer_type *layer_types;          /* n_layers entries (heap) */
	int32_t eos_ids[LYNN_MAX_EOS];              /* generation_config, else config */
	int n_eos;
	int32_t bos_id, pad_id;                     /* -1 when absent */
	/* generation_config.json's sampling fields (the model maker's
	 * recommendation; lynn serve's defaults): NAN / -1 when absent or null
	 * (a .gguf's general.sampling.*: no repetition penalty, whose
	 * penalty_repeat llama.cpp applies over a window of the last tokens) */
	double gen_temperature, gen_top_p, gen_min_p, gen_repetition_penalty;
	int64_t gen_top_k;
	char torch_dtype[16];                       /* "bfloat16", "float32", ... */
	char quant_method[32];                      /* quantization_config.quant_method or "" */
	char quant_format[48];                      /* quantization_config.format or "" */
};

/* Load `<dir>/config.json` (and generation_config.json if present), or a
 * config.json path. Checks the fields are present, positive and consistent
 * (heads divide, layer_types length, rot_dim even). Release with
 * lynn_config_release. */
int lynn_config_load(struct lynn_config *cfg, const char *path, struct lynn_err *err);
void lynn_config_release(struct lynn_config *cfg);

#endif
