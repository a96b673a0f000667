/*
 * nvfp4_fp4.cu - the Blackwell path: native block-scaled FP4 GEMM through
 * cuBLASLt (weight-formats.md §3.4). Built for sm_90 (so the helper kernels
 * load everywhere) and sm_100a/sm_120a (Makefile per-file flags).
 *
 * UNTESTED ON HARDWARE: the project's GPUs are H200s (cc 9.0), where
 * lynn_cuda_fp4_gemm returns -LYNN_EUNSUPPORTED. The scale swizzle and the
 * activation quantizer run (and are checked) on any GPU; only the cuBLASLt
 * FP4 matmul itself has never run.
 *
 *  - A = W (CUDA_R_4F_E2M1, op T), B = Xq (CUDA_R_4F_E2M1, op N), D bf16;
 *    CUBLASLT_MATMUL_DESC_{A,B}_SCALE_MODE = VEC16_UE4M3 with the scales in
 *    the 128x4 swizzled layout: element (r = 128*rt + 32*i + j, c = 4*ct + l)
 *    at byte ((rt*Cp/4 + ct)*32 + j)*16 + 4*i + l, Cp = K/16 padded to 4.
 *  - The mode carries no per-tensor factor: alpha = x_alpha * w_alpha.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>

#include "cuda_common.cuh"
#include "lynn_cuda.h"


static __device__ __host__ __forceinline__ int64_t swz_offset(int64_t r, int64_t c, int64_t cp)
{
	int64_t rt = r >> 7, i = (r >> 5) & 3, j = r & 31, ct = c >> 2, l = c & 3;
	return ((rt * (cp / 4) + ct) * 32 + j) * 16 + 4 * i + l;
}

extern "C" int64_t lynn_cuda_fp4_swizzled_bytes(int64_t rows, int64_t k)
{
	int64_t rp = (rows + 127) / 128 * 128, cp = (k / 16 + 3) / 4 * 4;
	return rp * cp;
}

static __global__ void swizzle_kernel(const uint8_t *__restrict__ src, int64_t rows, int64_t cols,
				      int64_t rp, int64_t cp, uint8_t *__restrict__ dst)
{
	int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (idx >= rp * cp)
		return;
	int64_t r = idx / cp, c = idx % cp;
	dst[swz_offset(r, c, cp)] = (r < rows && c < cols) ? src[r * cols + c] : 0;
}

extern "C" int lynn_cuda_fp4_swizzle_scales(const uint8_t *d_scales, int64_t rows, int64_t k,
					    uint8_t *d_out, lynn_stream_t stream,
					    struct lynn_err *err)
{
	int64_t rp = (rows + 127) / 128 * 128, cp = (k / 16 + 3) / 4 * 4;
	int64_t total = rp * cp;
	if (rows < 1 || k < 16 || k % 16)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: fp4 swizzle: bad shape %lldx%lld",
				 (long long)rows, (long long)k);
	swizzle_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
		d_scales, rows, k / 16, rp, cp, d_out);
	LYNN_CUDA_CHECK_LAUNCH();
	return 0;
}

/* Same rounding as lynn_f32_to_e2m1 (RNE on the grid, saturating). */
static __device__ __forceinline__ uint32_t e2m1_rne(float v)
{
	float a = fabsf(v);
	uint32_t i = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3 :
		     a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
	return (signbit(v) ? 8u : 0u) | i;
}

/* f32 -> e4m3 (RNE, saturating, positive inputs) through the hardware cvt. */
static __device__ __forceinline__ uint32_t e4m3_rne(float v)
{
	unsigned short r;
	asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(v));
	return r & 0xff;
}

/* One thread per 16-element block: vLLM's ref_nvfp4_quant with g = 1/x_alpha:
 * s = e4m3(g*amax/6), q = rne(x*g/s). */
static __global__ void quant_act_kernel(const __nv_bfloat16 *__restrict__ x, int m, int64_t k,
					float g, uint8_t *__restrict__ xq, uint8_t *__restrict__ xs,
					int64_t cp)
{
	int64_t blk = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t nb = k / 16;
	if (blk >= (int64_t)m * nb)
		return;
	int64_t r = blk / nb, c = blk % nb;
	const __nv_bfloat16 *xp = x + r * k + c * 16;
	float v[16], amax = 0.0f;
#pragma unroll
	for (int j = 0; j < 16; j++) {
		v[j] = __bfloat162float(xp[j]) * g;
		amax = fmaxf(amax, fabsf(v[j]));
	}
	uint32_t sc = e4m3_rne(fminf(amax / 6.0f, 448.0f));
	float s = lynn_e4m3_dev(sc);
	uint8_t *q = xq + r * (k / 2) + c * 8;
#pragma unroll
	for (int j = 0; j < 8; j++) {
		uint32_t lo = s > 0 ? e2m1_rne(v[2 * j] / s) : 0;
		uint32_t hi = s > 0 ? e2m1_rne(v[2 * j + 1] / s) : 0;
		q[j] = (uint8_t)(lo | (hi << 4));
	}
	xs[swz_offset(r, c, cp)] = (uint8_t)sc;
}

extern "C" int lynn_cuda_fp4_quant_act(const void *d_x, int m, int64_t k, float x_alpha,
				       uint8_t *d_xq, uint8_t *d_xs_swizzled,
				       lynn_stream_t stream, struct lynn_err *err)
{
	int64_t cp = (k / 16 + 3) / 4 * 4, total = (int64_t)m * (k / 16);
	if (m < 1 || k % 16 || !(x_alpha > 0.0f))
		return lynn_errf(err, -LYNN_EINVAL, "cuda: fp4 quant: bad arguments");
	LYNN_CUDA_TRY(cudaMemsetAsync(d_xs_swizzled, 0, (size_t)lynn_cuda_fp4_swizzled_bytes(m, k),
				      (cudaStream_t)stream));
	quant_act_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
		(const __nv_bfloat16 *)d_x, m, k, 1.0f / x_alpha, d_xq, d_xs_swizzled, cp);
	LYNN_CUDA_CHECK_LAUNCH();
	return 0;
}


extern "C" int lynn_cuda_fp4_gemm(struct lynn_cublas *b, const uint8_t *d_wq,
				  const uint8_t *d_w_scales_swizzled, const uint8_t *d_xq,
				  const uint8_t *d_x_scales_swizzled, float alpha, int m, int64_t n,
				  int64_t k, void *d_y, lynn_stream_t stream, struct lynn_err *err)
{
	cublasLtMatmulDesc_t op = NULL;
	int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
	float zero = 0.0f;
	int rc = 0;
	int cc = lynn_cuda_device_cc(err);

	if (cc < 0)
		return cc;
	if (cc < 100)
		return lynn_errf(err, -LYNN_EUNSUPPORTED,
				 "cuda: native fp4 needs compute capability >= 10.0 (this is %d.%d)",
				 cc / 10, cc % 10);
	if (k % 32 || n % 32)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: fp4 gemm needs N and K multiples of 32");
	LT_TRY(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
					      sizeof mode));
	LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
					      sizeof mode));
	LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
					      &d_w_scales_swizzled, sizeof d_w_scales_swizzled));
	LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
					      &d_x_scales_swizzled, sizeof d_x_scales_swizzled));
	rc = lynn_lt_matmul_tn(b, op, CUDA_R_4F_E2M1, &alpha, &zero, d_wq, d_xq, m, n, k, d_y,
			       (cudaStream_t)stream, "fp4", err);
out:
	if (op)
		cublasLtMatmulDescDestroy(op);
	return rc;
}
