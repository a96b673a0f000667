/*
 * nvfp4_linear.cu - the NVFP4 linear a runner calls, its path chosen at run
 * time from the device's compute capability (weight-formats.md §3.4):
 *  - cc >= 10 with an input scale (a W4A4 checkpoint): the native FP4 path
 *    of nvfp4_fp4.cu (X quantized to NVFP4 on the fly, cuBLASLt
 *    block-scaled FP4). UNTESTED ON HARDWARE: the project has only H200s.
 *  - otherwise: the sm_90 kernels of nvfp4_gemm.cu (W4A16: X stays BF16).
 */
#include <string.h>

#include "cuda_common.cuh"
#include "lynn_cuda.h"

/* The native path's scratch: X's packed nibbles, then its swizzled scales. */
static int64_t xq_bytes(int m, int64_t k) { return ((int64_t)m * k / 2 + 255) / 256 * 256; }

extern "C" int lynn_cuda_nvfp4_linear_init(struct lynn_cuda_nvfp4_linear *l,
					   const struct lynn_cuda_nvfp4_weight *w, float x_alpha,
					   struct lynn_err *err)
{
	memset(l, 0, sizeof *l);
	if (!w || !w->d_packed || !w->d_scales || !w->d_alpha || w->n_experts > 1 || w->n < 1 ||
	    w->k < 32 || w->k % 32 || !(x_alpha >= 0.0f))
		return lynn_errf(err, -LYNN_EINVAL, "cuda: nvfp4 linear: bad weight or input scale");
	int cc = lynn_cuda_device_cc(err);
	if (cc < 0)
		return cc;
	l->w = *w;
	l->x_alpha = x_alpha;
	l->cc = cc;
	LYNN_CUDA_TRY(cudaMemcpy(&l->w_alpha, w->d_alpha, sizeof l->w_alpha, cudaMemcpyDeviceToHost));
	l->native = cc >= 100 && x_alpha > 0.0f && w->n % 32 == 0;
	if (!l->native)
		return 0;
	LYNN_CUDA_TRY(cudaMalloc(&l->d_scales_sw, (size_t)lynn_cuda_fp4_swizzled_bytes(w->n, w->k)));
	int rc = lynn_cuda_fp4_swizzle_scales(w->d_scales, w->n, w->k, l->d_scales_sw, NULL, err);
	if (!rc && cudaDeviceSynchronize() != cudaSuccess)
		rc = lynn_errf(err, -LYNN_ECUDA, "cuda: nvfp4 linear: scale swizzle failed");
	if (rc)
		lynn_cuda_nvfp4_linear_free(l);
	return rc;
}

extern "C" void lynn_cuda_nvfp4_linear_free(struct lynn_cuda_nvfp4_linear *l)
{
	if (!l)
		return;
	cudaFree(l->d_scales_sw);
	l->d_scales_sw = NULL;
	l->native = 0;
}

extern "C" int64_t lynn_cuda_nvfp4_linear_scratch(const struct lynn_cuda_nvfp4_linear *l, int m)
{
	return l->native ? xq_bytes(m, l->w.k) + lynn_cuda_fp4_swizzled_bytes(m, l->w.k) : 0;
}

extern "C" int lynn_cuda_nvfp4_linear_run(struct lynn_cublas *b,
					  const struct lynn_cuda_nvfp4_linear *l, const void *d_x,
					  int m, void *d_scratch, void *d_y, lynn_stream_t stream,
					  struct lynn_err *err)
{
	if (!l->native)
		return lynn_cuda_nvfp4_gemm(&l->w, d_x, m, d_y, LYNN_CUDA_OUT_BF16, stream, err);
	if (!b || !d_scratch || m < 1)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: nvfp4 linear: the FP4 path needs a cuBLASLt "
				 "handle and lynn_cuda_nvfp4_linear_scratch bytes of scratch");
	uint8_t *xq = (uint8_t *)d_scratch, *xs = xq + xq_bytes(m, l->w.k);
	int rc = lynn_cuda_fp4_quant_act(d_x, m, l->w.k, l->x_alpha, xq, xs, stream, err);
	if (rc)
		return rc;
	return lynn_cuda_fp4_gemm(b, l->w.d_packed, l->d_scales_sw, xq, xs, l->x_alpha * l->w_alpha, m,
				  l->w.n, l->w.k, d_y, stream, err);
}
