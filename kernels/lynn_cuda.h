/*
 * lynn_cuda.h - the CUDA launch API (kernels/ (.cu files)). Plain C11; needs no CUDA
 * header (a stream is the runtime's `struct CUstream_st *`, i.e. a
 * cudaStream_t; NULL is the default stream). Every function returns 0 or
 * -LYNN_ECUDA / -LYNN_EINVAL / -LYNN_EUNSUPPORTED with `err` filled.
 * Device pointers start with d_; the caller owns all device memory passed in.
 *
 * NVFP4 weights here are a checkpoint's tensors as they are (weight-formats.md
 * §2): packed E2M1 [N,K/2] (low nibble = even k), E4M3 block scales [N,K/16],
 * and the tensor factor as a MULTIPLIER alpha (CT: 1/weight_global_scale,
 * ModelOpt: weight_scale_2; lynn_nvfp4_tensor_mult). Activations and outputs
 * are BF16, row-major: Y[M,N] = X[M,K] * W[N,K]^T, f32 accumulation.
 *
 * CPU twins: src/cpu/nvfp4_matmul.c (lynn_cpu_nvfp4_matmul), the BF16 GEMM
 * twin is the same with BF16 weights (lynn_cpu_bf16_matmul).
 */
#ifndef LYNN_CUDA_H
#define LYNN_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "lynn/err.h"

struct CUstream_st;
typedef struct CUstream_st *lynn_stream_t;

/* One NVFP4 linear, or a bank of experts stored contiguously. */
struct lynn_cuda_nvfp4_weight {
	const uint8_t *d_packed;  /* (E,) N, K/2   e2m1 pairs */
	const uint8_t *d_scales;  /* (E,) N, K/16  e4m3 */
	const float *d_alpha;     /* (E) or (1)    tensor multiplier */
	int64_t n, k;             /* K % 32 == 0 */
	int64_t n_experts;        /* 0 or 1 for a plain linear */
};

/* Output element type of the NVFP4 products. */
enum lynn_cuda_out {
	LYNN_CUDA_OUT_BF16 = 0,
	LYNN_CUDA_OUT_F32 = 1,
};

/* Kernel choice for lynn_cuda_nvfp4_gemm_path (benchmarks and tests). */
enum lynn_cuda_path {
	LYNN_CUDA_PATH_AUTO = 0,
	LYNN_CUDA_PATH_GEMV = 1,  /* CUDA cores, dequant in registers, M <= 8 per launch */
	LYNN_CUDA_PATH_MMA = 2,   /* BF16 tensor cores (wmma), tiles of 64 rows */
	LYNN_CUDA_PATH_TC2 = 3,   /* BF16 mma.sync, weights as the m16 operand through a
				   * cp.async ring; K <= 4152 */
	LYNN_CUDA_PATH_TC3 = 4,   /* the same streamed into registers; K % 128 == 0, K <= 7224 */
	LYNN_CUDA_PATH_TCM = 5,   /* tc3's decode, each weight for up to 64 tokens, K split
				   * over a thread-block cluster; plain weights, K % 128 == 0,
				   * K <= 6144 */
	LYNN_CUDA_PATH_COUNT = 6,
};

/* Y[M,N] (bf16 or f32 per `out`) = X[M,K] (bf16) * W^T; M >= 1 (any M
 * works; the kernels are tuned for 1..64). Asynchronous on `stream`. */
int lynn_cuda_nvfp4_gemm(const struct lynn_cuda_nvfp4_weight *w, const void *d_x, int m,
			 void *d_y, enum lynn_cuda_out out, lynn_stream_t stream,
			 struct lynn_err *err);
int lynn_cuda_nvfp4_gemm_path(const struct lynn_cuda_nvfp4_weight *w, const void *d_x, int m,
			      void *d_y, enum lynn_cuda_out out, enum lynn_cuda_path path,
			      lynn_stream_t stream, struct lynn_err *err);

/* Benchmark hook: K groups (warps splitting K, 1/2/4/8) in the tc kernel's
 * blocks; 0 restores the built-in choice. Not thread-safe; not for callers. */
void lynn_cuda_nvfp4_tc_tune(int kgroups);

/* Grouped MoE: for each of n_sel selected experts g (d_ids[g] in [0,E)),
 * Y[g] (M x N, at d_y + g*M*N) = X[g] (M x K) * W[d_ids[g]]^T, where X[g] is at
 * d_x + g*x_group_stride elements (0: every group reads the same X, as the
 * gate/up projection of one token does). */
int lynn_cuda_nvfp4_moe_gemm(const struct lynn_cuda_nvfp4_weight *w, const int32_t *d_ids,
			     int n_sel, const void *d_x, int64_t x_group_stride, int m, void *d_y,
			     enum lynn_cuda_out out, enum lynn_cuda_path path, lynn_stream_t stream,
			     struct lynn_err *err);

/* Linears that read the same X, stacked (a decode step's input projections:
 * DeltaNet's qkv, z, b and a as one launch): w is a bank of w->n_experts
 * chunks of w->n rows (16, 32, 64 or 128), the parts' rows one after another
 * cut into chunks, each chunk with its part's tensor multiplier.
 * Y[t][g * n + r] = X[t] * (chunk g's row r)^T, rows of tokens
 * n_experts * n apart: the parts' outputs side by side. 1 <= M <= 16,
 * K % 128 == 0. The weight loads start before the previous kernel ends. */
int lynn_cuda_nvfp4_stacked_gemm(const struct lynn_cuda_nvfp4_weight *w, const void *d_x, int m,
				 void *d_y, enum lynn_cuda_out out, lynn_stream_t stream,
				 struct lynn_err *err);

/* One expert MLP over the selected experts, in two launches: for each g,
 * A[g] = silu(X[g] Wg^T) * (X[g] Wu^T) (bf16, M x I at d_act + g*M*I; Wg and
 * Wu are rows 0..I-1 and I..2I-1 of the gate_up bank [E, 2I, H], as
 * Qwen3.5-MoE stores them; one tensor multiplier per expert serves both
 * halves) and Y[g] (M x H', at d_y + g*M*H') = A[g] * Wd[d_ids[g]]^T. The
 * activation is fused into the gate/up kernel (f32, rounded once to bf16),
 * and the down launch's weight loads start before the gate/up kernel ends.
 * H and I must be multiples of 128. A negative id leaves its group's A and
 * Y unwritten (a prefill's expert tiles past the last). The routing weights
 * and the sum over experts are the caller's. */
int lynn_cuda_nvfp4_moe_mlp(const struct lynn_cuda_nvfp4_weight *gate_up,
			    const struct lynn_cuda_nvfp4_weight *down, const int32_t *d_ids,
			    int n_sel, const void *d_x, int64_t x_group_stride, int m, void *d_act,
			    void *d_y, enum lynn_cuda_out out, lynn_stream_t stream,
			    struct lynn_err *err);

/* ===== cuBLASLt ===== */
struct lynn_cublas;

/* Handle plus a 32 MiB workspace. Free with lynn_cuda_blas_free (NULL ok). */
struct lynn_cublas *lynn_cuda_blas_create(struct lynn_err *err);
void lynn_cuda_blas_free(struct lynn_cublas *b);

/* BF16 GEMM for large M: Y[M,N] = X[M,K] * W[N,K]^T, all BF16 row-major,
 * f32 compute (cuBLASLt "TN"). */
int lynn_cuda_bf16_gemm(struct lynn_cublas *b, const void *d_w, const void *d_x, int m,
			int64_t n, int64_t k, void *d_y, lynn_stream_t stream,
			struct lynn_err *err);

/* Large M (prefill): W dequantized to BF16 (q*s exact) into d_scratch
 * (n * k bf16, caller-owned; a plain linear, not an expert bank), then
 * Y[M,N] bf16 = alpha * X * W^T through cuBLASLt with alpha read from
 * w->d_alpha on the device. The tc2/wmma kernels re-read the weights per 16/64
 * tokens, so this is the path for M in the hundreds. */
int lynn_cuda_nvfp4_gemm_blas(struct lynn_cublas *b, const struct lynn_cuda_nvfp4_weight *w,
			      const void *d_x, int m, void *d_scratch, void *d_y,
			      lynn_stream_t stream, struct lynn_err *err);
/* The dequantization alone: d_out (E,) N, K bf16 = q*s (alpha not applied). */
int lynn_cuda_nvfp4_dequant_bf16(const struct lynn_cuda_nvfp4_weight *w, void *d_out,
				 lynn_stream_t stream, struct lynn_err *err);

/* ===== Blackwell native FP4 (compute capability >= 10) =====
 * UNTESTED ON HARDWARE: compiled for sm_100a/sm_120a, never run (the project
 * has only Hopper GPUs). cuBLASLt block-scaled FP4 (CUDA_R_4F_E2M1 with
 * VEC16_UE4M3 scales in the 128x4 swizzled layout, weight-formats.md §3.4).
 * W4A4: activations are quantized to NVFP4 on the fly with tensor multiplier
 * `x_alpha` (ModelOpt input_scale; 1/input_global_scale for CT). */

/* Bytes of the swizzled scale buffer for `rows` x K/16 scales (rows padded to
 * 128, scale columns to 4). */
int64_t lynn_cuda_fp4_swizzled_bytes(int64_t rows, int64_t k);
/* Re-lay a row-major [rows, K/16] E4M3 scale array into the swizzled layout
 * (padding zero-filled). Runs on any GPU. */
int lynn_cuda_fp4_swizzle_scales(const uint8_t *d_scales, int64_t rows, int64_t k,
				 uint8_t *d_out, lynn_stream_t stream, struct lynn_err *err);
/* Quantize X[M,K] bf16 to packed E2M1 [M,K/2] and swizzled E4M3 scales. */
int lynn_cuda_fp4_quant_act(const void *d_x, int m, int64_t k, float x_alpha, uint8_t *d_xq,
			    uint8_t *d_xs_swizzled, lynn_stream_t stream, struct lynn_err *err);
/* Y[M,N] bf16 = alpha * (Xq * Wq^T) with both operands FP4; needs cc >= 10
 * (returns -LYNN_EUNSUPPORTED otherwise). w_scales_swizzled from
 * lynn_cuda_fp4_swizzle_scales of the weight's scales. */
int lynn_cuda_fp4_gemm(struct lynn_cublas *b, const uint8_t *d_wq,
		       const uint8_t *d_w_scales_swizzled, const uint8_t *d_xq,
		       const uint8_t *d_x_scales_swizzled, float alpha, int m, int64_t n,
		       int64_t k, void *d_y, lynn_stream_t stream, struct lynn_err *err);

/* ===== The linear a runner calls: the path chosen at run time =====
 * (kernels/nvfp4_linear.cu) On compute capability >= 10, for a W4A4
 * checkpoint (x_alpha > 0: the input's tensor multiplier) with N % 32 == 0,
 * the native FP4 path above (UNTESTED ON HARDWARE); otherwise the sm_90
 * kernels (lynn_cuda_nvfp4_gemm, W4A16), which is what runs on the H200.
 * init reads the weight's alpha and, for the native path, keeps a swizzled
 * copy of its scales (freed by lynn_cuda_nvfp4_linear_free). */
struct lynn_cuda_nvfp4_linear {
	struct lynn_cuda_nvfp4_weight w; /* a plain linear */
	float x_alpha, w_alpha;          /* input and weight tensor multipliers */
	int cc;                          /* the device's compute capability at init */
	int native;                      /* 1: the FP4 path is taken */
	uint8_t *d_scales_sw;            /* native: the swizzled weight scales */
};
int lynn_cuda_nvfp4_linear_init(struct lynn_cuda_nvfp4_linear *l,
				const struct lynn_cuda_nvfp4_weight *w, float x_alpha,
				struct lynn_err *err);
void lynn_cuda_nvfp4_linear_free(struct lynn_cuda_nvfp4_linear *l);
/* Bytes of d_scratch that run needs for M tokens (0 off the native path). */
int64_t lynn_cuda_nvfp4_linear_scratch(const struct lynn_cuda_nvfp4_linear *l, int m);
/* Y[M,N] bf16 = X[M,K] bf16 * W^T; b may be NULL off the native path. */
int lynn_cuda_nvfp4_linear_run(struct lynn_cublas *b, const struct lynn_cuda_nvfp4_linear *l,
			       const void *d_x, int m, void *d_scratch, void *d_y,
			       lynn_stream_t stream, struct lynn_err *err);

/* Device-to-device copy bandwidth of the current device, bytes read plus
 * written per second (best of 5 copies of 1 GiB), or negative. */
double lynn_cuda_copy_bandwidth(void);

/* The current device's compute capability (major*10 + minor), or negative. */
int lynn_cuda_device_cc(struct lynn_err *err);

#ifdef __cplusplus
}
#endif

#endif
