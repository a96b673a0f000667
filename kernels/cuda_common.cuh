/* cuda_common.cuh - shared by kernels/ (.cu files): error plumbing and the NVFP4
 * element/scale decoders used inside kernels. */
#ifndef LYNN_CUDA_COMMON_CUH
#define LYNN_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "lynn/err.h"
}

/* Turn a cudaError_t into -LYNN_ECUDA with file:line; `goto out` style
 * callers set rc first. */
#define LYNN_CUDA_TRY(expr)                                                           \
	do {                                                                          \
		cudaError_t e_ = (expr);                                              \
		if (e_ != cudaSuccess)                                                \
			return lynn_errf(err, -LYNN_ECUDA, "cuda: %s:%d: %s: %s", __FILE__, \
					 __LINE__, #expr, cudaGetErrorString(e_));    \
	} while (0)

#define LYNN_CUDA_CHECK_LAUNCH() LYNN_CUDA_TRY(cudaGetLastError())

/* F8_E4M3 (fn) bits -> float: the 7 magnitude bits placed at the top of an
 * f32 mantissa/exponent give 2^-120 times the value (subnormals included,
 * so this needs no flush-to-zero; nvcc's default). 0x7f (NaN) is rejected
 * by the checkpoint rules before any kernel runs. */
__device__ __forceinline__ float lynn_e4m3_dev(uint32_t b)
{
	return __int_as_float((int)((b & 0x7fu) << 20)) * 0x1p120f;
}

/* 4 E2M1 nibbles (the low 16 bits of w) -> 4 bytes holding 2*|q|
 * ({0,1,2,3,4,6,8,12}): one byte_perm against an 8-byte table. */
__device__ __forceinline__ uint32_t lynn_e2m1x4_mag2(uint32_t w)
{
	return __byte_perm(0x03020100u, 0x0C080604u, w & 0x7777u);
}

/* 8 nibbles of w -> 8 floats = 2*q (signed, exact). */
__device__ __forceinline__ void lynn_e2m1x8_to_f32x2(uint32_t w, float *o)
{
	uint32_t lo = lynn_e2m1x4_mag2(w), hi = lynn_e2m1x4_mag2(w >> 16);
#pragma unroll
	for (int j = 0; j < 4; j++) {
		float a = (float)((lo >> (8 * j)) & 0xffu);
		float b = (float)((hi >> (8 * j)) & 0xffu);
		o[j] = __int_as_float(__float_as_int(a) ^ (int)((w << (28 - 4 * j)) & 0x80000000u));
		o[j + 4] = __int_as_float(__float_as_int(b) ^
					  (int)((w << (12 - 4 * j)) & 0x80000000u));
	}
}

/* 8 nibbles of w -> 8 signed bytes holding 2*q, 4 per word (lo: elements
 * 0-3, hi: 4-7): byte_perm against a positive and a negative table, and a
 * per-byte select mask built from the nibble sign bits (the top bits of the
 * bytes of w and w<<4 are exactly those bits; __byte_perm has no
 * sign-replicate mode, so the mask is spread with a multiply). */
__device__ __forceinline__ void lynn_e2m1x8_to_s8x8(uint32_t w, uint32_t *lo, uint32_t *hi)
{
	const uint32_t p0 = 0x03020100u, p1 = 0x0C080604u; /* 0 1 2 3 | 4 6 8 12 */
	const uint32_t n0 = 0xFDFEFF00u, n1 = 0xF4F8FAFCu; /* negated */
	uint32_t s0 = w & 0x7777u, s1 = (w >> 16) & 0x7777u, w4 = w << 4;
	/* top bit of byte j of these = sign of nibble j (0-3 / 4-7) */
	uint32_t t0 = __byte_perm(w, w4, 0x1504), t1 = __byte_perm(w, w4, 0x3726);
	uint32_t m0 = ((t0 >> 7) & 0x01010101u) * 0xFFu, m1 = ((t1 >> 7) & 0x01010101u) * 0xFFu;
	*lo = (__byte_perm(p0, p1, s0) & ~m0) | (__byte_perm(n0, n1, s0) & m0);
	*hi = (__byte_perm(p0, p1, s1) & ~m1) | (__byte_perm(n0, n1, s1) & m1);
}

__device__ __forceinline__ float lynn_s8_at(uint32_t v, int j)
{
	return (float)(int8_t)(uint8_t)(v >> (8 * j));
}

/* A cuBLASLt call that fails: -LYNN_ECUDA with the call named, `goto out`
 * (callers declare rc and the label). */
#define LT_TRY(expr)                                                                      \
	do {                                                                              \
		cublasStatus_t s_ = (expr);                                               \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                        \
			rc = lynn_errf(err, -LYNN_ECUDA, "cublaslt: %s:%d: %s: status %d", \
				       __FILE__, __LINE__, #expr, (int)s_);               \
			goto out;                                                         \
		}                                                                         \
	} while (0)

/* The cuBLASLt handle behind lynn_cublas (lynn_cuda.h). */
struct lynn_cublas {
	cublasLtHandle_t h;
	void *d_ws;
	size_t ws_size;
	float *d_zero; /* beta for calls whose alpha is a device pointer */
};

/* Programmatic dependent launch, the producer's side: the next kernel on
 * the stream, where it was launched with programmatic stream serialization
 * (the NVFP4 kernels), may start now. It loads its weights and waits
 * (griddepcontrol.wait) for this kernel's end before it reads anything this
 * kernel writes. A plainly launched next kernel is not affected. */
static __device__ __forceinline__ void lynn_pdl_trigger(void)
{
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* Y^T (N x M, ld N) = W (K x N, ld K)^T * X^T (K x M, ld K) in cuBLASLt's
 * column-major view, i.e. row-major Y[M,N] = X[M,K] * W[N,K]^T: the
 * caller's `op` (compute type, scales, pointer mode) gets the transposes
 * here; W and X are of type `ab`, Y BF16; the heuristic's first algorithm.
 * alpha/beta are host or device pointers per op's pointer mode; `what`
 * names the case in errors (kernels/nvfp4_gemm.cu). */
int lynn_lt_matmul_tn(struct lynn_cublas *b, cublasLtMatmulDesc_t op, cudaDataType_t ab,
		      const void *alpha, const void *beta, const void *d_w, const void *d_x, int m,
		      int64_t n, int64_t k, void *d_y, cudaStream_t stream, const char *what,
		      struct lynn_err *err);

#endif
