/*
 * ggml_quants.h - dequantizing ggml weight blocks (GGUF tensors) to f32, the
 * way ggml's reference dequantize_row_* (src/ggml-quants.c) and gguf-py's
 * gguf.quants.dequantize do it (weight-formats.md §4.3), and products with
 * such weights that stay quantized in memory (a row is dequantized block by
 * block into f32 inside the kernel, then dotted with the activations).
 *
 * Supported types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
 * Q6_K (what F32/F16/BF16/Q8_0/Q4_K_M files made by llama-quantize hold).
 */
#ifndef LYNN_GGML_QUANTS_H
#define LYNN_GGML_QUANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ggml type ids (include/ggml.h) of the supported types. */
enum lynn_ggml_type {
	LYNN_GGML_F32 = 0,
	LYNN_GGML_F16 = 1,
	LYNN_GGML_Q4_0 = 2,
	LYNN_GGML_Q4_1 = 3,
	LYNN_GGML_Q5_0 = 6,
	LYNN_GGML_Q5_1 = 7,
	LYNN_GGML_Q8_0 = 8,
	LYNN_GGML_Q4_K = 12,
	LYNN_GGML_Q5_K = 13,
	LYNN_GGML_Q6_K = 14,
	LYNN_GGML_BF16 = 30,
};

/* Can this module dequantize ggml type `type`? */
bool lynn_ggml_type_ok(uint32_t type);
/* Bytes of a row of n elements (n a multiple of the block size); 0 when the
 * type is unsupported or n is not a whole number of blocks. */
size_t lynn_ggml_row_bytes(uint32_t type, int64_t n);
/* Elements per block (1 for F32/F16/BF16, 32, 256); 0 when unsupported. */
int lynn_ggml_block_elems(uint32_t type);

/* Dequantize n elements (a whole number of blocks) starting at `src` into
 * out[0..n). The type must be supported (lynn_ggml_type_ok). Q4_K, Q6_K and
 * Q8_0 use AVX2 when the CPU has it (the same values: each element is the
 * same f32 multiply/subtract); _ref is the portable scalar twin. */
void lynn_ggml_dequant(uint32_t type, const void *src, int64_t n, float *out);
void lynn_ggml_dequant_ref(uint32_t type, const void *src, int64_t n, float *out);

/* A borrowed quantized matrix W (n_out rows of n_in elements, row-major in
 * ggml layout: ne[0] = n_in), e.g. straight into a GGUF file's mmap. */
struct lynn_ggml_view {
	uint32_t type;
	const uint8_t *data;
	int64_t n_out, n_in;
	size_t row_bytes;       /* lynn_ggml_row_bytes(type, n_in) */
};

/* Output rows [r0, r1) of y = W x for the n_tok rows of x (ldx floats
 * apart): y[t*ldy + r] = (or +=, with accumulate) sum_k W[r][k] x[t][k].
 * Runs on the caller's thread without allocating (src/cpu/matmul.c calls it
 * from its parallel-for for lynn_mm jobs with `gg`). */
void lynn_ggml_rows(const struct lynn_ggml_view *w, const float *x, int64_t ldx, int64_t n_tok,
		    int64_t r0, int64_t r1, float *y, int64_t ldy, bool accumulate);

#endif
