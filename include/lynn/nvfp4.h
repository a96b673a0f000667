/*
 * nvfp4.h - NVFP4 weights: the E2M1 element grid, FP8 E4M3 block scales,
 * the two checkpoint conventions, reference dequant/quantize of one row, and
 * the rules that say whether a checkpoint's quantized linears are complete.
 *
 * Facts (docs/reference weight-formats.md §2):
 *  - element: E2M1 nibble, bit 3 = sign, bits 0-2 index {0,.5,1,1.5,2,3,4,6};
 *    K-element 2i is the LOW nibble of byte i, 2i+1 the high nibble.
 *  - one F8_E4M3 (fn) block scale per 16 consecutive K elements of a row.
 *  - compressed-tensors `nvfp4-pack-quantized`:   W = q * s / weight_global_scale
 *      weight_packed U8 [N,K/2], weight_scale F8_E4M3 [N,K/16],
 *      weight_global_scale F32 [1], input_global_scale F32 [1] (W4A4 only).
 *  - ModelOpt NVFP4:                              W = q * s * weight_scale_2
 *      weight U8 [N,K/2], weight_scale F8_E4M3 [N,K/16],
 *      weight_scale_2 F32 [] or [1], input_scale F32 [] or [1] (W4A4 only).
 *  - experts: per-expert linears (`mlp.experts.E.gate_proj`), or fused 3-D
 *    tensors with a leading expert dimension ([E,N,K/2], [E,N,K/16], [E] or
 *    [E,1] global scales).
 *
 * Everything here is plain C on host memory; nothing allocates except
 * lynn_nvfp4_scan (caller frees with lynn_nvfp4_scan_free).
 */
#ifndef LYNN_NVFP4_H
#define LYNN_NVFP4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lynn/err.h"
#include "lynn/st.h"

#define LYNN_NVFP4_BLOCK 16   /* K elements per E4M3 block scale */
#define LYNN_E2M1_MAX 6.0f
#define LYNN_E4M3_MAX 448.0f

/* ===== elements and scales ===== */

/* Value of an E2M1 nibble (only the low 4 bits are read). */
float lynn_e2m1_to_f32(uint8_t nibble);
/* Nearest E2M1 code, round-half-to-even on the grid (0.25->0, 0.75->1,
 * 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4), saturating at +-6; -0 keeps the
 * sign bit; NaN -> 0. */
uint8_t lynn_f32_to_e2m1(float x);
/* Nearest F8_E4M3 (fn) code, round-half-to-even, saturating at +-448 (no
 * Inf in this format), subnormals kept; NaN -> 0x7f. */
uint8_t lynn_f32_to_e4m3(float x);
/* (F8_E4M3 to float is st.h's lynn_e4m3_to_f32.) */

/* ===== checkpoint conventions ===== */

enum lynn_nvfp4_format {
	LYNN_NVFP4_NONE = 0,
	LYNN_NVFP4_CT = 1,       /* compressed-tensors nvfp4-pack-quantized */
	LYNN_NVFP4_MODELOPT = 2, /* NVIDIA ModelOpt NVFP4 */
};

/* "compressed-tensors", "modelopt" or "none". */
const char *lynn_nvfp4_format_name(enum lynn_nvfp4_format f);

/* The per-tensor factor as a MULTIPLIER (W = q * s * mult): CT stores a
 * divisor (returns 1/stored), ModelOpt a multiplier (returns stored). */
float lynn_nvfp4_tensor_mult(enum lynn_nvfp4_format f, float stored);

/* The stored per-tensor scale a producer writes for a tensor (or fused
 * group) with max |W| = amax: CT 448*6/amax, ModelOpt amax/(448*6); an amax
 * that is 0 or not finite gives 1 (as compressed-tensors' generate_gparam). */
float lynn_nvfp4_global_scale(enum lynn_nvfp4_format f, float amax);

/* Dequantize one row of K elements (K % 16 == 0): packed K/2 bytes, scales
 * K/16 E4M3 bytes, `stored` the row's tensor scale as the checkpoint stores
 * it (weight_global_scale for CT, weight_scale_2 for ModelOpt). Computes
 * exactly the format's definition in f32: CT q*s/g, ModelOpt q*s*g2. */
void lynn_nvfp4_dequant_row(enum lynn_nvfp4_format f, const uint8_t *packed,
			    const uint8_t *scales, float stored, int64_t k, float *out);

/* Round-to-nearest quantization of one row (K % 16 == 0) with the producer
 * recipe of each format, given the row's stored tensor scale:
 *   CT:       s = e4m3(min(g*amax_blk/6, 448)), s == 0 -> 0.125 (fp8 eps);
 *             q = rne_e2m1(x / (s/g))
 *   ModelOpt: s = e4m3(min(amax_blk/(6*g2), 448)), s == 0 -> 1.0;
 *             q = rne_e2m1(x / (s*g2))
 * Writes K/2 packed bytes and K/16 scale bytes. Non-finite inputs are the
 * caller's to reject (they quantize to 0). */
void lynn_nvfp4_quantize_row(enum lynn_nvfp4_format f, const float *x, int64_t k,
			     float stored, uint8_t *packed, uint8_t *scales);

/* ===== checkpoint rules ===== */

/* The companion suffixes of one quantized linear `<base>.<suffix>`. */
struct lynn_nvfp4_suffixes {
	const char *weight;       /* "weight_packed" | "weight" */
	const char *scale;        /* "weight_scale" */
	const char *global;       /* "weight_global_scale" | "weight_scale_2" */
	const char *input;        /* "input_global_scale" | "input_scale" */
};
const struct lynn_nvfp4_suffixes *lynn_nvfp4_suffixes(enum lynn_nvfp4_format f);

/* One quantized linear found in a checkpoint (views borrowed from the
 * tensors passed to lynn_nvfp4_scan). */
struct lynn_nvfp4_linear {
	char base[256];                   /* "model.layers.0.mlp.experts.3.up_proj" */
	int64_t n_experts;                /* 0: plain 2-D linear; E: fused 3-D */
	int64_t n, k;                     /* out rows, in columns (unpacked) */
	const struct lynn_tensor *weight; /* U8 [(E,) N, K/2] */
	const struct lynn_tensor *scale;  /* F8_E4M3 [(E,) N, K/16] */
	const struct lynn_tensor *global; /* F32 [] [1] (or [E] [E,1]) */
	const struct lynn_tensor *input;  /* F32, NULL for W4A16 */
};

struct lynn_nvfp4_scan {
	enum lynn_nvfp4_format format;    /* NONE when no quantized linear */
	bool w4a4;                        /* every linear has an activation scale */
	int64_t n_linears;                /* entries in `linears` */
	int64_t n_expert_linears;         /* of which experts (a fused 3-D counts E) */
	int64_t n_quant_tensors;          /* tensors that belong to a linear */
	int64_t n_other_tensors;          /* unquantized tensors */
	uint64_t quant_bytes, other_bytes;
	struct lynn_nvfp4_linear *linears; /* heap */
	/* First problems found (companions missing, wrong dtype/shape, bad
	 * scales); n_problems counts all of them. */
	int64_t n_problems;
	char problems[8][256];
};

/* Scan a checkpoint's tensors (`ts[0..n)`, e.g. from lynn_ckpt_tensor):
 * detect the format from the tensor names (a base with `weight_packed` is
 * CT; a U8 `weight` with a `weight_scale_2` or an F8 `weight_scale` is
 * ModelOpt; mixing both is an error), group each linear with its companions
 * and check them: every companion present, dtypes U8/F8_E4M3/F32/F32, shapes
 * [(E,)N,K/2] / [(E,)N,K/16] / one value (per expert for 3-D), K % 16 == 0,
 * no block scale 0x7f/0xff (NaN), tensor and activation scales finite and
 * > 0, and activation scales on all linears or on none. The tensor and
 * activation scales (one value, or one per expert) are always read; with
 * `check_data` false the block scales are not (headers only otherwise).
 * Problems are recorded in `out`, not returned: returns 0, or -LYNN_EFORMAT
 * when both conventions are mixed, -LYNN_ENOMEM. Release with
 * lynn_nvfp4_scan_free. */
int lynn_nvfp4_scan(const struct lynn_tensor *const *ts, int64_t n, bool check_data,
		    struct lynn_nvfp4_scan *out, struct lynn_err *err);
void lynn_nvfp4_scan_free(struct lynn_nvfp4_scan *s);

/* The NVFP4 linear of an opened checkpoint whose dense weight would be
 * `name` ("<module>.weight", as lynn_ckpt_find_decoder takes it):
 * compressed-tensors' `<module>.weight_packed`, or ModelOpt's U8
 * `<module>.weight`, 2-D or fused 3-D (a leading expert dimension), with
 * its scale and global companions where present (NULL where not: callers
 * check them). Returns the format, NONE when neither is there
 * (src/formats/nvfp4_ckpt.c). */
enum lynn_nvfp4_format lynn_nvfp4_find(const struct lynn_ckpt *c, const char *name,
				       struct lynn_nvfp4_linear *L);

/* Does `name` belong to a quantized linear of format f (ends in one of its
 * companion suffixes)? Sets *base_len to the length of "<base>" if so. */
bool lynn_nvfp4_is_companion(enum lynn_nvfp4_format f, const char *name, size_t *base_len);

/* The format named by a config.json's `quantization_config` text fields
 * (quant_method "compressed-tensors" with format "nvfp4-pack-quantized", or
 * quant_method "modelopt" / hf_quant_config quant_algo containing "FP4"),
 * or NONE. Any argument may be NULL. */
enum lynn_nvfp4_format lynn_nvfp4_format_from_config(const char *quant_method,
						    const char *format,
						    const char *quant_algo);

#endif
