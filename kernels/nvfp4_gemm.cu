/*
 * nvfp4_gemm.cu - NVFP4 weight x BF16 activation products for sm_90
 * (kernels/lynn_cuda.h), plus the BF16 cuBLASLt GEMM for large M.
 *
 * The NVFP4 kernels read the checkpoint layout as it is (no repacking) and
 * dequantize in registers: q*s is exact in f32 and in bf16 (E2M1 has 2
 * significant bits, E4M3 4), so the only rounding is the f32 accumulation;
 * the tensor multiplier alpha is applied once at the end.
 *  - gemv: CUDA cores. A row is split over `lpr` lanes, each lane takes 32
 *    elements (16 bytes + 2 scale bytes) per step, block sums use the
 *    integer 2*q values and the block scale is applied once per 16.
 *  - mma: BF16 tensor cores through wmma 16x16x16. A block owns 64 weight
 *    rows; each K step of 64 dequantizes a 64x64 tile into shared memory
 *    (one 16-byte load per thread) and multiplies it with the M x 64
 *    activation tile (M padded to 16).
 *  - tc2 / tc3: BF16 mma.sync m16n8k16 with the weights as the 16-row operand
 *    and the tokens as the 8-column one (see the comment above lynn_prmt);
 *    tc2 streams the weights through a per-warp cp.async ring, tc3 (K %
 *    128 == 0) into registers; both are launched with programmatic
 *    dependent launch (their weight loads start while the previous kernel
 *    on the stream ends; they wait for that kernel before reading X or
 *    expert ids).
 *  - tcm: tc3's decode for batches of plain weights: each decoded fragment
 *    is multiplied with up to 8 token tiles (64 tokens), K is split over a
 *    thread-block cluster and reduced through distributed shared memory.
 * AUTO uses tc3 (else tc2) for M <= 16, tcm above (and from M = 9 for
 * weights of many row blocks), else the wmma path.
 * All take an optional expert-id list (grid.y = selected experts) so the
 * grouped MoE call is the same kernels: one launch for every selected
 * expert's gate/up (the fused [2I, H] weight), one for down.
 * CPU twin: src/cpu/nvfp4_matmul.c.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <stdlib.h>

#include <cooperative_groups.h>
#include <type_traits>

#include "cuda_common.cuh"
#include "lynn_cuda.h"

using namespace nvcuda;
namespace cg = cooperative_groups;

/* ===== gemv (CUDA cores) ===== */

#define GEMV_WARPS 8
#define GEMV_RPW 2 /* row groups per warp: more 16-byte loads in flight */

static __device__ __forceinline__ void store_out(__nv_bfloat16 *y, float v) { *y = __float2bfloat16(v); }
static __device__ __forceinline__ void store_out(float *y, float v) { *y = v; }

/* X (MT rows, zero-padded) is staged in shared memory as f32; each lane
 * loads its 16-byte weight pieces for GEMV_RPW rows x 2 chunks before any
 * arithmetic, decodes 8 nibbles with 6 byte_perms into signed 2*q bytes,
 * and applies the block scale once per 16. */
template <int MT, typename TY>
static __global__ void __launch_bounds__(GEMV_WARPS * 32)
nvfp4_gemv_kernel(const uint8_t *__restrict__ packed, const uint8_t *__restrict__ scales,
		  const float *__restrict__ alpha, const int32_t *__restrict__ ids,
		  const __nv_bfloat16 *__restrict__ x, int64_t x_group_stride, int m, int64_t n,
		  int64_t k, int lpr, TY *__restrict__ y, int64_t y_ld, int64_t y_group_stride)
{
	extern __shared__ float4 xsh4[];
	float *xsh = (float *)xsh4;
	const int g = blockIdx.y;
	const int e = ids ? ids[g] : 0;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int sub = lane / lpr, l = lane % lpr;
	const int rpw = 32 / lpr;
	const int64_t row0 = ((int64_t)blockIdx.x * GEMV_WARPS + warp) * GEMV_RPW * rpw + sub;
	const int64_t chunks = k / 32;
	const uint8_t *P = packed + (int64_t)e * n * (k / 2);
	const uint8_t *S = scales + (int64_t)e * n * (k / 16);
	float acc[GEMV_RPW][MT];

	x += (int64_t)g * x_group_stride;
	/* padded by 4 floats per 32 so that lanes reading consecutive chunks
	 * (128 bytes apart) hit distinct banks */
	for (int64_t i = threadIdx.x; i < (int64_t)MT * k / 8; i += blockDim.x) {
		uint4 v = make_uint4(0, 0, 0, 0);
		const int64_t d = 2 * i + (i >> 2);
		if (i * 8 / k < m)
			v = __ldg((const uint4 *)(x + i * 8));
		xsh4[d] = make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
					  __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
		xsh4[d + 1] = make_float4(__uint_as_float(v.z << 16), __uint_as_float(v.z & 0xffff0000u),
					      __uint_as_float(v.w << 16), __uint_as_float(v.w & 0xffff0000u));
	}
	__syncthreads();
#pragma unroll
	for (int rr = 0; rr < GEMV_RPW; rr++)
#pragma unroll
		for (int i = 0; i < MT; i++)
			acc[rr][i] = 0.0f;
	for (int64_t c0 = l; c0 < chunks; c0 += 2 * lpr) {
		uint4 wv[GEMV_RPW][2];
		uint32_t sc[GEMV_RPW][2];
		bool ok[GEMV_RPW][2];
#pragma unroll
		for (int rr = 0; rr < GEMV_RPW; rr++)
#pragma unroll
			for (int u = 0; u < 2; u++) {
				int64_t row = row0 + rr * rpw, c = c0 + u * lpr;
				ok[rr][u] = row < n && c < chunks;
				if (ok[rr][u]) {
					wv[rr][u] = __ldcs((const uint4 *)(P + row * (k / 2) + c * 16));
					sc[rr][u] = *(const uint16_t *)(S + row * (k / 16) + c * 2);
				}
			}
#pragma unroll
		for (int rr = 0; rr < GEMV_RPW; rr++)
#pragma unroll
			for (int u = 0; u < 2; u++) {
				if (!ok[rr][u])
					continue;
				const int64_t c = c0 + u * lpr;
				const uint32_t wd[4] = { wv[rr][u].x, wv[rr][u].y, wv[rr][u].z, wv[rr][u].w };
				float q[32];
#pragma unroll
				for (int v = 0; v < 4; v++) {
					uint32_t lo, hi;
					lynn_e2m1x8_to_s8x8(wd[v], &lo, &hi);
#pragma unroll
					for (int j = 0; j < 4; j++) {
						q[v * 8 + j] = lynn_s8_at(lo, j);
						q[v * 8 + 4 + j] = lynn_s8_at(hi, j);
					}
				}
				const float s0 = lynn_e4m3_dev(sc[rr][u] & 0xff) * 0.5f;
				const float s1 = lynn_e4m3_dev(sc[rr][u] >> 8) * 0.5f;
#pragma unroll
				for (int i = 0; i < MT; i++) {
					if (i >= m)
						break;
					const float4 *xp = (const float4 *)(xsh + (int64_t)i * (k / 32) * 36 + c * 36);
					float b0 = 0.0f, b1 = 0.0f;
#pragma unroll
					for (int v = 0; v < 8; v++) {
						float4 xv = xp[v];
						float t = q[4 * v] * xv.x;
						t = fmaf(q[4 * v + 1], xv.y, t);
						t = fmaf(q[4 * v + 2], xv.z, t);
						t = fmaf(q[4 * v + 3], xv.w, t);
						if (v < 4)
							b0 += t;
						else
							b1 += t;
					}
					acc[rr][i] = fmaf(b0, s0, fmaf(b1, s1, acc[rr][i]));
				}
			}
	}
	y += (int64_t)g * y_group_stride;
#pragma unroll
	for (int rr = 0; rr < GEMV_RPW; rr++) {
		const int64_t row = row0 + rr * rpw;
#pragma unroll
		for (int i = 0; i < MT; i++)
			for (int off = lpr / 2; off > 0; off >>= 1)
				acc[rr][i] += __shfl_xor_sync(0xffffffffu, acc[rr][i], off);
		if (row < n && l == 0) {
			const float a = alpha[e];
#pragma unroll
			for (int i = 0; i < MT; i++)
				if (i < m)
					store_out(y + (int64_t)i * y_ld + row, acc[rr][i] * a);
		}
	}
}

/* ===== mma (BF16 tensor cores via wmma) ===== */

#define MMA_BN 64
#define MMA_BK 64
#define MMA_LD (MMA_BK + 8)

/* 8 warps: two K-groups of 4 warps take alternate 64-wide K steps (named
 * barriers per group), each with its own tiles; the next weight piece is
 * loaded into registers before the current one is multiplied; the two
 * partial products are summed at the end. */
template <int MT16, typename TY>
static __global__ void __launch_bounds__(256)
nvfp4_mma_kernel(const uint8_t *__restrict__ packed, const uint8_t *__restrict__ scales,
		 const float *__restrict__ alpha, const int32_t *__restrict__ ids,
		 const __nv_bfloat16 *__restrict__ x, int64_t x_group_stride, int m, int64_t n,
		 int64_t k, TY *__restrict__ y, int64_t y_ld, int64_t y_group_stride)
{
	constexpr int WS = MMA_BN * MMA_LD, XS = MT16 * 16 * MMA_LD, OS = MT16 * 16 * MMA_BN;
	constexpr int TILE_BYTES = 2 * (WS + XS) * 2, OUT_BYTES = 2 * OS * 4;
	__shared__ __align__(128) unsigned char smem[TILE_BYTES > OUT_BYTES ? TILE_BYTES : OUT_BYTES];
	const int g = blockIdx.y;
	const int e = ids ? ids[g] : 0;
	const int t = threadIdx.x, warp = t >> 5, kg = warp >> 2, wq = warp & 3, tg = t & 127;
	__nv_bfloat16 *ws = (__nv_bfloat16 *)smem + kg * (WS + XS);
	__nv_bfloat16 *xs = ws + WS;
	const int64_t n0 = (int64_t)blockIdx.x * MMA_BN;
	const int wrow = tg >> 1, whalf = tg & 1;
	const uint8_t *P = packed + ((int64_t)e * n + n0 + wrow) * (k / 2) + whalf * 16;
	const uint8_t *S = scales + ((int64_t)e * n + n0 + wrow) * (k / 16) + whalf * 2;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[MT16];
	const int64_t nsteps = (k / MMA_BK - kg + 1) / 2; /* this group's K steps */
	uint4 w0 = make_uint4(0, 0, 0, 0), w1 = w0, w2 = w0, w3 = w0;
	uint32_t c0 = 0, c1 = 0, c2 = 0, c3 = 0;

	x += (int64_t)g * x_group_stride;
#pragma unroll
	for (int i = 0; i < MT16; i++)
		wmma::fill_fragment(acc[i], 0.0f);
	/* a ring of 4 weight pieces in registers: the load for step s+4 is
	 * issued before step s is multiplied */
#define KOFF(st) (((int64_t)(st) * 2 + kg) * MMA_BK)
#define LOAD(wr, cr, st)                                                          \
	do {                                                                      \
		if ((st) < nsteps) {                                              \
			wr = __ldcs((const uint4 *)(P + KOFF(st) / 2));           \
			cr = *(const uint16_t *)(S + KOFF(st) / 16);              \
		}                                                                 \
	} while (0)
	LOAD(w0, c0, 0);
	LOAD(w1, c1, 1);
	LOAD(w2, c2, 2);
	LOAD(w3, c3, 3);
	auto step = [&](const uint4 cur, const uint32_t csc, int64_t st) {
		const int64_t k0 = KOFF(st);
		const uint32_t wd[4] = { cur.x, cur.y, cur.z, cur.w };
		uint32_t pk[16];
#pragma unroll
		for (int v = 0; v < 4; v++) {
			uint32_t lo, hi;
			const float s = lynn_e4m3_dev(v < 2 ? (csc & 0xff) : (csc >> 8)) * 0.5f;
			lynn_e2m1x8_to_s8x8(wd[v], &lo, &hi);
#pragma unroll
			for (int j = 0; j < 2; j++) {
				/* q*s is exact in bf16: truncating the f32 bits is exact */
				pk[v * 4 + j] = __byte_perm(__float_as_uint(lynn_s8_at(lo, 2 * j) * s),
							    __float_as_uint(lynn_s8_at(lo, 2 * j + 1) * s), 0x7632);
				pk[v * 4 + 2 + j] = __byte_perm(__float_as_uint(lynn_s8_at(hi, 2 * j) * s),
								__float_as_uint(lynn_s8_at(hi, 2 * j + 1) * s), 0x7632);
			}
		}
		uint4 *wdst = (uint4 *)(ws + wrow * MMA_LD + whalf * 32);
#pragma unroll
		for (int v = 0; v < 4; v++)
			wdst[v] = make_uint4(pk[4 * v], pk[4 * v + 1], pk[4 * v + 2], pk[4 * v + 3]);
#pragma unroll
		for (int i = 0; i < MT16; i++) {
			int idx = tg + 128 * i, r = idx >> 3, c = idx & 7;
			uint4 v = make_uint4(0, 0, 0, 0);
			if (r < m)
				v = __ldg((const uint4 *)(x + (int64_t)r * k + k0 + c * 8));
			*(uint4 *)(xs + r * MMA_LD + c * 8) = v;
		}
		asm volatile("bar.sync %0, 128;" ::"r"(kg + 1));
#pragma unroll
		for (int kk = 0; kk < MMA_BK; kk += 16) {
			wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bf;
			wmma::load_matrix_sync(bf, ws + wq * 16 * MMA_LD + kk, MMA_LD);
#pragma unroll
			for (int i = 0; i < MT16; i++) {
				wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16,
					       wmma::row_major> af;
				wmma::load_matrix_sync(af, xs + i * 16 * MMA_LD + kk, MMA_LD);
				wmma::mma_sync(acc[i], af, bf, acc[i]);
			}
		}
		asm volatile("bar.sync %0, 128;" ::"r"(kg + 1));
	};
	for (int64_t st = 0; st < nsteps; st += 4) {
		uint4 cur;
		uint32_t csc;
		cur = w0, csc = c0;
		LOAD(w0, c0, st + 4);
		step(cur, csc, st);
		if (st + 1 < nsteps) {
			cur = w1, csc = c1;
			LOAD(w1, c1, st + 5);
			step(cur, csc, st + 1);
		}
		if (st + 2 < nsteps) {
			cur = w2, csc = c2;
			LOAD(w2, c2, st + 6);
			step(cur, csc, st + 2);
		}
		if (st + 3 < nsteps) {
			cur = w3, csc = c3;
			LOAD(w3, c3, st + 7);
			step(cur, csc, st + 3);
		}
	}
#undef LOAD
#undef KOFF
	__syncthreads();
	float *out = (float *)smem + kg * OS;
#pragma unroll
	for (int i = 0; i < MT16; i++)
		wmma::store_matrix_sync(out + i * 16 * MMA_BN + wq * 16, acc[i], MMA_BN,
					wmma::mem_row_major);
	__syncthreads();
	{
		const float a = alpha[e];
		const float *o0 = (const float *)smem, *o1 = o0 + OS;
		y += (int64_t)g * y_group_stride;
		for (int idx = t; idx < OS; idx += 256) {
			int r = idx / MMA_BN, c = idx % MMA_BN;
			if (r < m)
				store_out(y + (int64_t)r * y_ld + n0 + c, (o0[idx] + o1[idx]) * a);
		}
	}
}

/* ===== tc2 / tc3 (BF16 tensor cores via mma.sync m16n8k16, dequant in registers) =====
 * The weight is the m16 operand A (16 weight rows), the tokens are the n8
 * operand B (8 tokens per n-tile; M = 1 uses one column), so the decode cost
 * per weight does not grow with M up to 8 and the MMA replaces the per-element
 * FMAs. A warp's unit of work is 16 rows x a "span" of 128 K: lane (g, c)
 * loads 16 bytes (32 elements) of rows g and g+8 at K offset 32c and the two
 * scale bytes of each, and feeds them to 8 MMAs (4 elements per row each).
 * The K order inside an MMA is permuted identically for A and B, which a dot
 * product does not see. Decode (exact): two byte_perm tables give 64 + 2q per
 * nibble (sign through prmt's sign-replicate select), a second byte_perm
 * makes the bf16 value 192 + 2q, and one bf16x2 FMA with (s/2, -96s) yields
 * q*s exactly (every intermediate has <= 8 significant bits and stays
 * normal). The 8 warps of a block split K (KG groups) and/or rows (8/KG),
 * partial sums are reduced in shared memory; X (this call's tokens, whole K)
 * sits in shared memory; weight loads are issued before X is staged. */

static __device__ __forceinline__ uint32_t lynn_prmt(uint32_t a, uint32_t b, uint32_t s)
{
	uint32_t d;
	asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
	return d;
}

static __device__ __forceinline__ uint32_t lynn_bf16x2_fma(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t d;
	asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
}

/* 4 nibbles (low 16 bits of h) -> bf16x2 (q0 s, q1 s) and (q2 s, q3 s);
 * sc = bf16x2 (s/2, s/2), sh = bf16x2 (-96 s, -96 s). A nibble's sign bit is
 * its selector's sign-replicate flag in prmt: against tables whose bytes have
 * bit 7 clear, the positive table yields 64 + 2|q| for positive nibbles and
 * 0 for negative ones, the negative table (selectors with the sign flipped)
 * 64 - 2|q| for negative nibbles and 0 otherwise, so one OR merges them. */
static __device__ __forceinline__ void lynn_tc_dec4(uint32_t h, uint32_t sc, uint32_t sh,
						    uint32_t &w0, uint32_t &w1)
{
	const uint32_t p = lynn_prmt(0x43424140u, 0x4C484644u, h);	     /* 64 + 2|q| */
	const uint32_t n = lynn_prmt(0x3D3E3F40u, 0x34383A3Cu, h ^ 0x8888u); /* 64 - 2|q| */
	const uint32_t b = p + n; /* disjoint bytes: an add, which ptxas can put on the FMA pipe */
	w0 = lynn_bf16x2_fma(lynn_prmt(b, 0x43u, 0x4140u), sc, sh);
	w1 = lynn_bf16x2_fma(lynn_prmt(b, 0x43u, 0x4342u), sc, sh);
}

/* w >> 16 as a multiply-high, which runs on the FMA pipe rather than the
 * integer pipe that the decode keeps busy */
static __device__ __forceinline__ uint32_t lynn_hi16(uint32_t w) { return __umulhi(w, 0x10000u); }

/* 8 nibbles -> the bf16x2 pairs of lynn_tc_dec4 for the low (lo0, lo1) and
 * the high (hi0, hi1) four: the negative table's selectors flipped once for
 * the word, the high halves taken on the FMA pipe */
static __device__ __forceinline__ void lynn_tc_dec8(uint32_t w, uint32_t sc, uint32_t sh,
						    uint32_t &lo0, uint32_t &lo1, uint32_t &hi0,
						    uint32_t &hi1)
{
	const uint32_t wx = w ^ 0x88888888u, wh = lynn_hi16(w), wxh = lynn_hi16(wx);
	const uint32_t pl = lynn_prmt(0x43424140u, 0x4C484644u, w);
	const uint32_t ph = lynn_prmt(0x43424140u, 0x4C484644u, wh);
	const uint32_t bl = pl + lynn_prmt(0x3D3E3F40u, 0x34383A3Cu, wx);
	const uint32_t bh = ph + lynn_prmt(0x3D3E3F40u, 0x34383A3Cu, wxh);
	lo0 = lynn_bf16x2_fma(lynn_prmt(bl, 0x43u, 0x4140u), sc, sh);
	lo1 = lynn_bf16x2_fma(lynn_prmt(bl, 0x43u, 0x4342u), sc, sh);
	hi0 = lynn_bf16x2_fma(lynn_prmt(bh, 0x43u, 0x4140u), sc, sh);
	hi1 = lynn_bf16x2_fma(lynn_prmt(bh, 0x43u, 0x4342u), sc, sh);
}

static __device__ __forceinline__ void lynn_mma_bf16(float *c, uint32_t a0, uint32_t a1,
						     uint32_t a2, uint32_t a3, uint32_t b0,
						     uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
		     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* a row's two scale bytes (low 16 bits of pair) -> (s/2, s/2) and
 * (-96 s, -96 s) as bf16x2, exact: each E4M3 magnitude is moved to the top of
 * an f32 (2^-120 times its value, as in lynn_e4m3_dev) with a multiply and
 * one mask, keeping the work off the integer pipe where it can */
static __device__ __forceinline__ void lynn_tc_scale2(uint32_t pair, uint32_t *sc, uint32_t *sh)
{
	const uint32_t bits[2] = { (pair * 0x100000u) & 0x07F00000u, (pair * 0x1000u) & 0x07F00000u };
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const float f = __int_as_float((int)bits[i]);
		__nv_bfloat162 a = __floats2bfloat162_rn(f * 0x1p119f, f * 0x1p119f);
		__nv_bfloat162 b = __floats2bfloat162_rn(f * -0x1.8p126f, f * -0x1.8p126f);
		sc[i] = *(uint32_t *)&a;
		sh[i] = *(uint32_t *)&b;
	}
}

/* The call's tokens (at most MT8 * 8 rows of K) into shared memory rows of
 * xld elements, then a block barrier. */
template <int MT8>
static __device__ __forceinline__ void tc_stage_x(__nv_bfloat16 *xs, int xld,
						  const __nv_bfloat16 *__restrict__ x, int m, int k)
{
	const int mm = m < MT8 * 8 ? m : MT8 * 8, per_row = k / 8;
	for (int i = threadIdx.x; i < mm * per_row; i += blockDim.x) {
		const int r = i / per_row, q = i - r * per_row;
		*(uint4 *)(xs + r * xld + q * 8) = __ldg((const uint4 *)(x + (int64_t)r * k + q * 8));
	}
	__syncthreads();
}

/* End of the tc kernels: the K groups' partial sums (acc) are reduced
 * through shared memory (the kernel's, reused after a barrier) and the
 * group's first warp stores rows rA and rA + 8 (< n) of the m tokens, times
 * alpha. GATED (the expert MLP's gate/up bank, N = 2I): acc holds gate row rA
 * and up row rA + I, and row rA (< I) of silu(gate) * up is stored. */
static __device__ __forceinline__ float lynn_silu(float v) { return v / (1.0f + __expf(-v)); }

template <int MT8, typename TY, bool GATED = false>
static __device__ __forceinline__ void tc_reduce_store(float (&acc)[MT8][4], void *shm, int kg_n,
						       int64_t rA, int m, int64_t n, float a,
						       TY *__restrict__ y, int64_t y_ld)
{
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, c = lane & 3;
	float *red = (float *)shm;
	__syncthreads();
	if (kg_n > 1) {
#pragma unroll
		for (int t = 0; t < MT8; t++)
#pragma unroll
			for (int q = 0; q < 4; q++)
				red[((warp * MT8 + t) * 4 + q) * 32 + lane] = acc[t][q];
		__syncthreads();
		if (warp % kg_n != 0)
			return;
		for (int w2 = 1; w2 < kg_n; w2++)
#pragma unroll
			for (int t = 0; t < MT8; t++)
#pragma unroll
				for (int q = 0; q < 4; q++)
					acc[t][q] += red[(((warp + w2) * MT8 + t) * 4 + q) * 32 + lane];
	}
#pragma unroll
	for (int t = 0; t < MT8; t++)
#pragma unroll
		for (int q = 0; q < (GATED ? 2 : 4); q++) {
			const int tok = t * 8 + 2 * c + (q & 1);
			const int64_t row = q < 2 ? rA : rA + 8;
			if (GATED && tok < m && rA < n / 2)
				store_out(y + (int64_t)tok * y_ld + rA,
					  lynn_silu(acc[t][q] * a) * (acc[t][q + 2] * a));
			else if (!GATED && tok < m && row < n)
				store_out(y + (int64_t)tok * y_ld + row, acc[t][q] * a);
		}
}

/* The block's expert: ids written by the previous kernel (the router) are
 * read after griddepcontrol.wait; ids_ready (the caller's promise that they
 * were written before the previous kernel started, as for the down
 * projection after gate/up) lets the weight loads start before the wait. */
static __device__ __forceinline__ int tc_expert(const int32_t *ids, int ids_ready, int g)
{
	if (ids_ready == 2) /* stacked linears: group g is chunk g */
		return g;
	if (!ids)
		return 0;
	if (!ids_ready)
		asm volatile("griddepcontrol.wait;" ::: "memory");
	return __ldcg(ids + g);
}

/* ===== tc2: a per-warp cp.async pipeline =====
 * Each lane streams its own two
 * 16-byte pieces per span through a private TC2_NST-stage ring in shared
 * memory (cp.async.cg, zero-filled outside the matrix), so up to
 * TC2_NST - 1 spans per warp are in flight while one is decoded and
 * multiplied; the scale bytes ride along in a register ring. A lane reads
 * back only what it copied itself, so no block barrier is needed in the
 * loop. Two accumulator sets halve the MMA dependency chain. */

#define TC2_NST 6

static __device__ __forceinline__ void lynn_cp16(void *dst, const void *src, bool valid)
{
	const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
		     "r"(valid ? 16 : 0));
}

template <int MT8, typename TY, int NST = TC2_NST, int MINB = 2>
static __global__ void __launch_bounds__(256, MINB)
nvfp4_tc2_kernel(const uint8_t *__restrict__ packed, const uint8_t *__restrict__ scales,
		 const float *__restrict__ alpha, const int32_t *__restrict__ ids, int ids_ready,
		 const __nv_bfloat16 *__restrict__ x, int64_t x_group_stride, int m, int64_t n,
		 int64_t k, int kg_n, TY *__restrict__ y, int64_t y_ld, int64_t y_group_stride)
{
	extern __shared__ uint4 tc_sh4[];
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	/* [warp][stage][row A/B][lane] 16-byte pieces, then X */
	uint4 *ring = tc_sh4 + (size_t)warp * NST * 64;
	__nv_bfloat16 *xs = (__nv_bfloat16 *)(tc_sh4 + 8 * NST * 64);
	const int64_t xld = k + 8;
	const int g = blockIdx.y;
	const int e = tc_expert(ids, ids_ready, g);
	const int gq = lane >> 2, c = lane & 3;
	const int rg = warp / kg_n, kgi = warp % kg_n;
	const int64_t rA = ((int64_t)blockIdx.x * (8 / kg_n) + rg) * 16 + gq, rB = rA + 8;
	const int nspans = (int)((k + 127) / 128);
	const int my = kgi < nspans ? (nspans - kgi + kg_n - 1) / kg_n : 0;
	const uint8_t *P = packed + (int64_t)e * n * (k / 2);
	const uint8_t *S = scales + (int64_t)e * n * (k / 16);
	const bool okA = rA < n, okB = rB < n;
	const uint8_t *PA = P + (okA ? rA : 0) * (k / 2), *PB = P + (okB ? rB : 0) * (k / 2);
	const uint8_t *SA = S + (okA ? rA : 0) * (k / 16), *SB = S + (okB ? rB : 0) * (k / 16);
	float acc[2][MT8][4];
	uint32_t sra[NST], srb[NST];

#pragma unroll
	for (int h = 0; h < 2; h++)
#pragma unroll
		for (int t = 0; t < MT8; t++)
			acc[h][t][0] = acc[h][t][1] = acc[h][t][2] = acc[h][t][3] = 0.0f;
	/* local span i -> K offset of this lane's piece */
	/* 32-bit K arithmetic (K <= 4152 here): the ring's address and
	 * predicate work shares the integer pipe with the decode */
	const int k32 = (int)k;
	auto issue = [&](int i, int slot) {
		const int kk = (kgi + i * kg_n) * 128 + 32 * c;
		const bool kv = i < my && kk < k32;
		lynn_cp16(ring + slot * 64 + lane, PA + (kv ? kk >> 1 : 0), kv && okA);
		lynn_cp16(ring + slot * 64 + 32 + lane, PB + (kv ? kk >> 1 : 0), kv && okB);
		sra[slot] = kv && okA ? __ldcs((const uint16_t *)(SA + (kk >> 4))) : 0u;
		srb[slot] = kv && okB ? __ldcs((const uint16_t *)(SB + (kk >> 4))) : 0u;
		asm volatile("cp.async.commit_group;" ::: "memory");
	};
#pragma unroll
	for (int s = 0; s < NST - 1; s++)
		issue(s, s);
	/* programmatic dependent launch (a no-op without it): the weight loads
	 * above do not depend on the previous kernel, X does */
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	asm volatile("griddepcontrol.wait;" ::: "memory");
	tc_stage_x<MT8>(xs, (int)xld, x + (int64_t)g * x_group_stride, m, (int)k);
	for (int base = 0; base < my; base += NST) {
#pragma unroll
		for (int st = 0; st < NST; st++) {
			const int i = base + st;
			if (i >= my)
				break;
			issue(i + NST - 1, (st + NST - 1) % NST);
			asm volatile("cp.async.wait_group %0;" ::"n"(NST - 1) : "memory");
			const int kk = (kgi + i * kg_n) * 128 + 32 * c;
			const bool kv = kk < k32;
			const uint4 va = ring[st * 64 + lane], vb = ring[st * 64 + 32 + lane];
			uint32_t scA[2], shA[2], scB[2], shB[2];
			lynn_tc_scale2(sra[st], scA, shA);
			lynn_tc_scale2(srb[st], scB, shB);
			const uint32_t wA[4] = { va.x, va.y, va.z, va.w };
			const uint32_t wB[4] = { vb.x, vb.y, vb.z, vb.w };
			/* one token tile: the span's 32 X values of token gq in four
			 * 16-byte loads, not eight predicated 8-byte ones */
			uint4 xv[4] = {};
			if (MT8 == 1 && kv && gq < m) {
				const uint4 *xp = (const uint4 *)(xs + gq * xld + kk);
#pragma unroll
				for (int q = 0; q < 4; q++)
					xv[q] = xp[q];
			}
#pragma unroll
			for (int j = 0; j < 8; j++) {
				uint32_t a0, a1, a2, a3;
				lynn_tc_dec4(j & 1 ? lynn_hi16(wA[j >> 1]) : wA[j >> 1], scA[j >> 2], shA[j >> 2],
					     a0, a2);
				lynn_tc_dec4(j & 1 ? lynn_hi16(wB[j >> 1]) : wB[j >> 1], scB[j >> 2], shB[j >> 2],
					     a1, a3);
#pragma unroll
				for (int t = 0; t < MT8; t++) {
					const int tok = t * 8 + gq;
					uint2 bv = make_uint2(0, 0);
					if (MT8 == 1)
						bv = j & 1 ? make_uint2(xv[j >> 1].z, xv[j >> 1].w)
							   : make_uint2(xv[j >> 1].x, xv[j >> 1].y);
					else if (kv && tok < m)
						bv = *(const uint2 *)(xs + tok * xld + kk + 4 * j);
					lynn_mma_bf16(acc[j & 1][t], a0, a1, a2, a3, bv.x, bv.y);
				}
			}
		}
	}
	asm volatile("cp.async.wait_group 0;" ::: "memory");
#pragma unroll
	for (int t = 0; t < MT8; t++)
#pragma unroll
		for (int q = 0; q < 4; q++)
			acc[0][t][q] += acc[1][t][q];
	tc_reduce_store<MT8, TY>(acc[0], tc_sh4, kg_n, rA, m, n, alpha[e],
				y + (int64_t)g * y_group_stride, y_ld);
}

/* ===== tc3: tc2's operands and decode, the weights streamed into registers =====
 * For K % 128 == 0 (every projection of the model). The warps of a row group
 * split K into contiguous runs of spans; each lane keeps D spans of its
 * two 16-byte pieces and two scale pairs in flight in registers and reaches
 * them at immediate offsets from four pointers, so the loop does no address
 * or predicate arithmetic and has no shared-memory ring. Rows past N read
 * row N - 1 and are not stored; the MMA columns of tokens past M take the
 * last token's X and are not stored either (a column of the product depends
 * only on its own token). */

/* The loop's refills of the weight stream: not kept in L1 (read once), and
 * L2 is asked for the whole 256-byte run of the row, i.e. the lane's next
 * spans. (The first D spans are plain evict-first loads: with the
 * prefetch, a kernel whose warps load all their spans at once, like the
 * 2048 -> 8192 projection, ran 8% slower on the H200.) */
static __device__ __forceinline__ uint4 lynn_ld_ahead(const uint4 *p)
{
	uint4 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(p));
	return v;
}

static __device__ __forceinline__ uint32_t lynn_ld_ahead(const uint16_t *p)
{
	unsigned short v;
	asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
	return v;
}

/* A warp's weight stream (tc3, tcm): D spans of its rows A and B (16
 * bytes a lane) and their scale pairs in flight in registers, reached at
 * immediate offsets from four pointers; a slot is refilled right after its
 * span is decoded */
template <int D> struct tc_stream {
	const uint4 *pa, *pb;
	const uint16_t *qa, *qb;
	uint4 wa[D], wb[D];
	uint32_t sa[D], sb[D];

	/* rows ra and rb of the weight (P) and its scales (S) from span s0;
	 * per span a row has 4 uint4 (64 bytes) and 4 uint16 (8 scale bytes),
	 * lane c takes the c-th of each */
	__device__ __forceinline__ void point(const uint8_t *P, const uint8_t *S, int64_t ra,
					      int64_t rb, int64_t k, int s0, int c)
	{
		pa = (const uint4 *)(P + ra * (k / 2) + s0 * 64 + 16 * c);
		pb = (const uint4 *)(P + rb * (k / 2) + s0 * 64 + 16 * c);
		qa = (const uint16_t *)(S + ra * (k / 16) + s0 * 8 + 2 * c);
		qb = (const uint16_t *)(S + rb * (k / 16) + s0 * 8 + 2 * c);
	}
	/* the first D spans of the warp's my, plain evict-first loads */
	__device__ __forceinline__ void start(int my)
	{
#pragma unroll
		for (int s = 0; s < D; s++)
			if (s < my) {
				wa[s] = __ldcs(pa + 4 * s);
				wb[s] = __ldcs(pb + 4 * s);
				sa[s] = __ldcs(qa + 4 * s);
				sb[s] = __ldcs(qb + 4 * s);
			}
	}
	/* slot s <- the span D further on */
	__device__ __forceinline__ void refill(int s)
	{
		wa[s] = lynn_ld_ahead(pa + 4 * (s + D));
		wb[s] = lynn_ld_ahead(pb + 4 * (s + D));
		sa[s] = lynn_ld_ahead(qa + 4 * (s + D));
		sb[s] = lynn_ld_ahead(qb + 4 * (s + D));
	}
	__device__ __forceinline__ void advance()
	{
		pa += 4 * D;
		pb += 4 * D;
		qa += 4 * D;
		qb += 4 * D;
	}
};

/* One span of slot s opened for decoding: its words and scale pairs */
struct tc_span {
	uint32_t wA[4], wB[4], scA[2], shA[2], scB[2], shB[2];
};

template <int D>
static __device__ __forceinline__ tc_span tc_span_open(const tc_stream<D> &st, int s)
{
	tc_span p;
	lynn_tc_scale2(st.sa[s], p.scA, p.shA);
	lynn_tc_scale2(st.sb[s], p.scB, p.shB);
	p.wA[0] = st.wa[s].x, p.wA[1] = st.wa[s].y, p.wA[2] = st.wa[s].z, p.wA[3] = st.wa[s].w;
	p.wB[0] = st.wb[s].x, p.wB[1] = st.wb[s].y, p.wB[2] = st.wb[s].z, p.wB[3] = st.wb[s].w;
	return p;
}

/* the A fragments of the span's K steps 2jj and 2jj + 1 */
static __device__ __forceinline__ void tc_span_frags(const tc_span &p, int jj, uint32_t (&a)[2][4])
{
	lynn_tc_dec8(p.wA[jj], p.scA[jj >> 1], p.shA[jj >> 1], a[0][0], a[0][2], a[1][0], a[1][2]);
	lynn_tc_dec8(p.wB[jj], p.scB[jj >> 1], p.shB[jj >> 1], a[0][1], a[0][3], a[1][1], a[1][3]);
}

/* D spans in flight per warp, MINB blocks of 256 threads per SM (the
 * registers: 4 spans and 2 blocks; 2 spans and 3 blocks for grids of many
 * waves, see launch_tc_pdl) */
template <int MT8, typename TY, int D, int MINB, bool GATED = false>
static __global__ void __launch_bounds__(256, MINB)
nvfp4_tc3_kernel(const uint8_t *__restrict__ packed, const uint8_t *__restrict__ scales,
		 const float *__restrict__ alpha, const int32_t *__restrict__ ids, int ids_ready,
		 const __nv_bfloat16 *__restrict__ x, int64_t x_group_stride, int m, int64_t n,
		 int64_t k, int kg_n, TY *__restrict__ y, int64_t y_ld, int64_t y_group_stride)
{
	extern __shared__ uint4 tc_sh4[];
	__nv_bfloat16 *xs = (__nv_bfloat16 *)tc_sh4;
	const int k32 = (int)k, xld = k32 + 8;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int gq = lane >> 2, c = lane & 3;
	const int rg = warp / kg_n, kgi = warp % kg_n;
	const int g = blockIdx.y;
	const int e = tc_expert(ids, ids_ready, g);
	if (e < 0) /* a group with no work (lynn_cuda_nvfp4_moe_mlp) */
		return;
	/* a warp's 16 rows: rows rA and rA + 8 of a 16-row tile, or (GATED)
	 * gate row rA and its up row rA + N/2 of an 8-row tile */
	const int64_t tile = (int64_t)blockIdx.x * (8 / kg_n) + rg;
	const int64_t rA = tile * (GATED ? 8 : 16) + gq, rB = rA + (GATED ? n / 2 : 8);
	const int nspans = k32 / 128;
	const int s0 = kgi * nspans / kg_n, my = (kgi + 1) * nspans / kg_n - s0;
	const uint8_t *P = packed + (int64_t)e * n * (k / 2);
	const uint8_t *S = scales + (int64_t)e * n * (k / 16);
	const int64_t lastA = GATED ? n / 2 - 1 : n - 1;
	const int64_t ra = rA <= lastA ? rA : lastA, rb = GATED ? ra + n / 2 : rB < n ? rB : n - 1;
	tc_stream<D> ws;
	ws.point(P, S, ra, rb, k, s0, c);
	float acc[2][MT8][4];

#pragma unroll
	for (int h = 0; h < 2; h++)
#pragma unroll
		for (int t = 0; t < MT8; t++)
			acc[h][t][0] = acc[h][t][1] = acc[h][t][2] = acc[h][t][3] = 0.0f;
	ws.start(my);
	/* programmatic dependent launch: the weight loads above do not depend
	 * on the previous kernel, X does */
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	asm volatile("griddepcontrol.wait;" ::: "memory");
	/* One token tile in the 4-span configuration (grids of one wave or so)
	 * reads X straight from global memory (L1), so no warp waits at a
	 * barrier for the block's X staging: MoE layer at M = 1 -5%; grids of
	 * many waves (lm_head) were 2% slower so, and stage it. Token rows past
	 * M read the last token's row (their columns are not stored), so no
	 * uninitialised memory is read. */
	constexpr bool x_direct = MT8 == 1 && D >= 4;
	const int mm = m < MT8 * 8 ? m : MT8 * 8;
	int xo[MT8];
#pragma unroll
	for (int t = 0; t < MT8; t++)
		xo[t] = (t * 8 + gq < mm ? t * 8 + gq : mm - 1) * (x_direct ? k32 : xld);
	const __nv_bfloat16 *xr = x_direct ? x + (int64_t)g * x_group_stride + s0 * 128 + 32 * c
					   : xs + s0 * 128 + 32 * c;
	if (!x_direct)
		tc_stage_x<MT8>(xs, xld, x + (int64_t)g * x_group_stride, m, k32);
#pragma unroll 1
	for (int base = 0; base < my; base += D) {
#pragma unroll
		for (int s = 0; s < D; s++) {
			if (base + s >= my)
				break;
			const tc_span sp = tc_span_open(ws, s);
			uint4 xv[4] = {};
			if (MT8 == 1) {
				const uint4 *xp = (const uint4 *)(xr + xo[0] + s * 128);
#pragma unroll
				for (int q = 0; q < 4; q++)
					xv[q] = xp[q];
			}
#pragma unroll
			for (int jj = 0; jj < 4; jj++) {
				uint32_t a[2][4];
				tc_span_frags(sp, jj, a);
#pragma unroll
				for (int h = 0; h < 2; h++)
#pragma unroll
					for (int t = 0; t < MT8; t++) {
						uint2 bv;
						if (MT8 == 1)
							bv = h ? make_uint2(xv[jj].z, xv[jj].w)
							       : make_uint2(xv[jj].x, xv[jj].y);
						else
							bv = *(const uint2 *)(xr + xo[t] + s * 128 +
									      8 * jj + 4 * h);
						lynn_mma_bf16(acc[h][t], a[h][0], a[h][1], a[h][2], a[h][3],
							      bv.x, bv.y);
					}
			}
			/* refill the slot just used (its registers are free now) */
			if (base + s + D < my)
				ws.refill(s);
		}
		ws.advance();
		xr += 128 * D;
	}
#pragma unroll
	for (int t = 0; t < MT8; t++)
#pragma unroll
		for (int q = 0; q < 4; q++)
			acc[0][t][q] += acc[1][t][q];
	tc_reduce_store<MT8, TY, GATED>(acc[0], tc_sh4, kg_n, rA, m, n, alpha[e],
				       y + (int64_t)g * y_group_stride, y_ld);
}

/* ===== tcm: many tokens (M 9..64 per launch), one decode per weight =====
 * tc3's operands and decode, for batches: each warp owns one 16-row tile and
 * multiplies every decoded A fragment with up to NT token tiles of 8, so a
 * weight is decoded once per 64 tokens, not once per 8 or 16. A block's X
 * (all its tokens over its K range) sits in shared memory, read with one
 * 16-byte load per token tile and K-step pair. K is split over the blocks of
 * a thread-block cluster (grid.y = KS), which keeps the X stage small and the
 * grid at least a wave; the partial sums are reduced through distributed
 * shared memory, each block of the cluster storing its share of the tile. */
#define TCM_WARPS 8
#define TCM_ROWS (16 * TCM_WARPS)

/* X in shared memory, laid out so that a quarter warp's 16-byte loads
 * (token rows gq, gq + 1; lane K offsets 32c) hit all 32 banks: a span's
 * second 64 elements sit 8 further on (TCM_SPAN = 136 a span) and rows are
 * 32 bytes past a multiple of 128 apart. */
#define TCM_SPAN 136

/* 16 bytes of block `rank`'s shared memory (at this block's offset sh) */
static __device__ __forceinline__ float4 lynn_ld_cluster4(uint32_t sh, int rank)
{
	uint32_t r;
	float4 v;
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(sh), "r"(rank));
	asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];"
		     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
		     : "r"(r)
		     : "memory");
	return v;
}
static __host__ __device__ __forceinline__ int tcm_xcol(int kk) /* K offset in the block's range */
{
	return kk / 128 * TCM_SPAN + kk % 128 + (kk % 128 >= 64 ? 8 : 0);
}
static __host__ __device__ __forceinline__ int tcm_xld(int spans)
{
	return spans * TCM_SPAN + ((16 - 8 * spans) % 64 + 64) % 64;
}

/* MINB blocks per multiprocessor: 1 leaves a warp the registers to keep
 * eight token tiles' accumulators and its loads in flight without spilling
 * (grids of one wave); 2 overlaps one block's X stage and reduction with
 * the other's products (grids of many waves, lm_head) */
template <int NT, typename TY, int MINB>
static __global__ void __launch_bounds__(256, MINB)
nvfp4_tcm_kernel(const uint8_t *__restrict__ packed, const uint8_t *__restrict__ scales,
		 const float *__restrict__ alpha, const __nv_bfloat16 *__restrict__ x, int m,
		 int64_t n, int64_t k, TY *__restrict__ y, int64_t y_ld)
{
	constexpr int D = NT >= 8 ? 2 : 4; /* spans in flight per lane (8 tiles: registers) */
	extern __shared__ uint4 tc_sh4[];
	__nv_bfloat16 *xs = (__nv_bfloat16 *)tc_sh4;
	cg::cluster_group cl = cg::this_cluster();
	const int ks = (int)cl.num_blocks(), kr = (int)cl.block_rank();
	const int k32 = (int)k, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int gq = lane >> 2, c = lane & 3;
	const int nspans = k32 / 128, s0 = kr * nspans / ks, my = (kr + 1) * nspans / ks - s0;
	const int xld = tcm_xld(my);
	const int64_t rA = ((int64_t)blockIdx.x * TCM_WARPS + warp) * 16 + gq, rB = rA + 8;
	const int64_t ra = rA < n ? rA : n - 1, rb = rB < n ? rB : n - 1;
	tc_stream<D> ws;
	ws.point(packed, scales, ra, rb, k, s0, c);
	float acc[NT][4];

#pragma unroll
	for (int t = 0; t < NT; t++)
		acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
	ws.start(my);
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	asm volatile("griddepcontrol.wait;" ::: "memory");
	{ /* the block's X: NT * 8 token rows (past M: the last token's) of its K
	   * range, all 16-byte copies in flight at once; a thread keeps its
	   * piece q of the row and steps over rows (my <= 16, so a row's
	   * pieces fit in the block) */
		const int per_row = my * 16, rstep = 256 / per_row;
		const int q = threadIdx.x % per_row, r0 = threadIdx.x / per_row;
		if (r0 < rstep) {
			const __nv_bfloat16 *src = x + s0 * 128 + q * 8;
			__nv_bfloat16 *dst = xs + tcm_xcol(q * 8);
			for (int r = r0; r < NT * 8; r += rstep)
				lynn_cp16(dst + r * xld, src + (int64_t)(r < m ? r : m - 1) * k, true);
		}
		asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
		__syncthreads();
	}
	const __nv_bfloat16 *xr = xs + gq * xld + tcm_xcol(32 * c);
#pragma unroll 1
	for (int base = 0; base < my; base += D) {
#pragma unroll
		for (int s = 0; s < D; s++) {
			if (base + s >= my)
				break;
			const tc_span sp = tc_span_open(ws, s);
#pragma unroll
			for (int jj = 0; jj < 4; jj++) {
				uint32_t a[2][4];
				tc_span_frags(sp, jj, a);
#pragma unroll
				for (int t = 0; t < NT; t++) {
					const uint4 bv =
						*(const uint4 *)(xr + t * 8 * xld + s * TCM_SPAN + 8 * jj);
					lynn_mma_bf16(acc[t], a[0][0], a[0][1], a[0][2], a[0][3], bv.x, bv.y);
					lynn_mma_bf16(acc[t], a[1][0], a[1][1], a[1][2], a[1][3], bv.z, bv.w);
				}
			}
			if (base + s + D < my)
				ws.refill(s);
		}
		ws.advance();
		xr += TCM_SPAN * D;
	}
	/* the cluster's reduction: partial sums into this block's shared memory
	 * (over X, once every warp is past it), [warp][tile][q][lane] */
	float *red = (float *)tc_sh4;
	__syncthreads();
#pragma unroll
	for (int t = 0; t < NT; t++)
#pragma unroll
		for (int q = 0; q < 4; q++)
			red[((warp * NT + t) * 4 + q) * 32 + lane] = acc[t][q];
	cl.sync();
	/* block kr reduces every ks-th group of 4 lanes (one row g of warp w's
	 * tile, accumulator q, tokens t*8 + 2c + (q & 1) for c = 0..3) over the
	 * cluster and stores it: 8 consecutive threads take 8 consecutive rows */
	const float a = alpha[0];
	const int64_t row0 = (int64_t)blockIdx.x * TCM_ROWS;
	const uint32_t red_sh = (uint32_t)__cvta_generic_to_shared(red);
	for (int i = kr * 256 + threadIdx.x; i < TCM_WARPS * NT * 32; i += ks * 256) {
		const int g = i & 7, q = (i >> 3) & 3, t = (i >> 5) % NT, w = (i >> 5) / NT;
		const int64_t row = row0 + w * 16 + g + (q >> 1) * 8;
		float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		for (int b = 0; b < ks; b++) {
			const float4 p = lynn_ld_cluster4(red_sh + (uint32_t)(i * 16), b);
			v.x += p.x;
			v.y += p.y;
			v.z += p.z;
			v.w += p.w;
		}
		const float vs[4] = { v.x, v.y, v.z, v.w };
		if (row < n)
#pragma unroll
			for (int j = 0; j < 4; j++) { /* lane 4g + j: tokens t*8 + 2j + (q & 1) */
				const int tok = t * 8 + 2 * j + (q & 1);
				if (tok < m)
					store_out(y + (int64_t)tok * y_ld + row, vs[j] * a);
			}
	}
	cl.sync(); /* no block leaves while its partial sums are being read */
}

/* ===== launchers ===== */

/* X staged as f32: MT * K * 4 bytes of dynamic shared memory at most. */
#define GEMV_MAX_SHM (96 * 1024)
#define GEMV_SHM_PER_K 4.5 /* bytes per K element and row, with padding */

/* gemv: each lane takes 2 chunks of 32 per row per pass. */
static int lanes_per_row(int64_t k)
{
	int64_t chunks = k / 32;
	int l = 32;
	while (l > 1 && 2 * l > chunks)
		l >>= 1;
	return l;
}

template <int MT, typename TY>
static void launch_gemv(const struct lynn_cuda_nvfp4_weight *w, const int32_t *ids, int groups,
			const __nv_bfloat16 *x, int64_t xgs, int m, TY *y, int64_t y_ld,
			int64_t ygs, cudaStream_t st)
{
	int lpr = lanes_per_row(w->k);
	int64_t rows_per_block = GEMV_WARPS * GEMV_RPW * (32 / lpr);
	size_t shm = (size_t)MT * (size_t)(w->k / 32) * 36 * 4;
	static bool raised;
	dim3 grid((unsigned)((w->n + rows_per_block - 1) / rows_per_block), (unsigned)groups);
	if (shm > 48 * 1024 && !raised) {
		cudaFuncSetAttribute(nvfp4_gemv_kernel<MT, TY>,
				     cudaFuncAttributeMaxDynamicSharedMemorySize, GEMV_MAX_SHM);
		raised = true;
	}
	nvfp4_gemv_kernel<MT, TY><<<grid, GEMV_WARPS * 32, shm, st>>>(
		w->d_packed, w->d_scales, w->d_alpha, ids, x, xgs, m, w->n, w->k, lpr, y, y_ld, ygs);
}

template <int MT16, typename TY>
static void launch_mma(const struct lynn_cuda_nvfp4_weight *w, const int32_t *ids, int groups,
		       const __nv_bfloat16 *x, int64_t xgs, int m, TY *y, int64_t y_ld,
		       int64_t ygs, cudaStream_t st)
{
	dim3 grid((unsigned)(w->n / MMA_BN), (unsigned)groups);
	nvfp4_mma_kernel<MT16, TY><<<grid, 256, 0, st>>>(w->d_packed, w->d_scales, w->d_alpha, ids, x,
						      xgs, m, w->n, w->k, y, y_ld, ygs);
}

/* tc: K groups per block (a power of two <= 8 and <= the span count), the
 * rest of the 8 warps take 16 more rows each. */
static int tc_kg_override; /* 0, or a benchmark's choice (lynn_cuda_nvfp4_tc_tune) */

extern "C" void lynn_cuda_nvfp4_tc_tune(int kgroups) { tc_kg_override = kgroups; }

/* The fewest K groups (so the most rows per block and the longest weight
 * stream per warp) that still give >= 1.5 blocks per multiprocessor: the
 * K-group sweep on the H200 (docs/benchmarks.md) found 4 best for 2048 ->
 * 8192 (one full wave of 256 blocks) and 1 for lm_head. */
static int sm_count(void)
{
	static int sms;
	if (!sms) {
		int dev = 0;
		cudaGetDevice(&dev);
		if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
			sms = 132;
	}
	return sms;
}

static int tc_kgroups(int64_t n, int64_t k, int groups)
{
	int64_t spans = (k + 127) / 128;
	int kg = 1;
	if (tc_kg_override)
		return tc_kg_override;
	while (kg < 8 && kg * 2 <= spans &&
	       ((n + 16 * (8 / kg) - 1) / (16 * (8 / kg))) * groups * 2 < 3 * (int64_t)sm_count())
		kg *= 2;
	return kg;
}

/* Shared memory of tc2 (v = 2: the ring, then X) and tc3 (v = 3: X, or the
 * K-group reduction where that is larger) for mt8 token tiles of 8; both
 * may take TC_MAX_SHM (two blocks per multiprocessor). */
#define TC_MAX_SHM (113 * 1024)

/* Launch flags of the tc paths, for lynn_cuda_nvfp4_moe_mlp: */
#define TC_GATED 1u     /* a gate/up bank (N = 2I) -> silu(gate) * up, I wide (tc3, bf16) */
#define TC_IDS_READY 2u /* the expert ids may be read before griddepcontrol.wait */
#define TC_STACKED 4u   /* group g is chunk g of stacked linears (lynn_cuda_nvfp4_stacked_gemm) */

static size_t tc_smem(int v, int mt8, int64_t k)
{
	const size_t xb = (size_t)mt8 * 8 * (size_t)(k + 8) * 2;
	const size_t rb = (size_t)mt8 * 4096;
	return v == 2 ? (size_t)8 * TC2_NST * 64 * 16 + xb : xb > rb ? xb : rb;
}

/* tokens per launch: the largest of 8/16/32/64 that the call needs and
 * that fits (more passes over the weights beyond that) */
static int tc_mt8(int v, int m, int64_t k)
{
	int mt8 = 1;
	while (mt8 < 8 && mt8 * 8 < m && tc_smem(v, mt8 * 2, k) <= TC_MAX_SHM)
		mt8 *= 2;
	return mt8;
}

/* The launch of a tc kernel: 256-thread blocks, programmatic dependent
 * launch (the kernel's weight loads may start while the previous kernel on
 * the stream ends) and, with cluster_y > 0, thread-block clusters of
 * (1, cluster_y, 1). Used in place: cfg points at the attributes. */
struct pdl_launch {
	cudaLaunchConfig_t cfg;
	cudaLaunchAttribute at[2];

	pdl_launch(dim3 grid, size_t smem, cudaStream_t st, unsigned cluster_y = 0) : cfg()
	{
		at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[0].val.programmaticStreamSerializationAllowed = 1;
		at[1].id = cudaLaunchAttributeClusterDimension;
		at[1].val.clusterDim.x = 1;
		at[1].val.clusterDim.y = cluster_y;
		at[1].val.clusterDim.z = 1;
		cfg.gridDim = grid;
		cfg.blockDim = dim3(256);
		cfg.dynamicSmemBytes = smem;
		cfg.stream = st;
		cfg.attrs = at;
		cfg.numAttrs = cluster_y ? 2 : 1;
	}
	pdl_launch(const pdl_launch &) = delete;
};

/* tc2 (V = 2) or tc3 (V = 3), launched with programmatic dependent launch:
 * the kernel's weight loads start while the previous kernel on the stream
 * finishes (griddepcontrol.wait in the kernel guards X and the expert ids) */
template <int V, int MT8, typename TY>
static void launch_tc_pdl(const struct lynn_cuda_nvfp4_weight *w, const int32_t *ids, int groups,
			  const __nv_bfloat16 *x, int64_t xgs, int m, TY *y, int64_t y_ld,
			  int64_t ygs, unsigned flags, cudaStream_t st)
{
	const bool gated = flags & TC_GATED;
	/* a stacked chunk (16..128 rows) is one block's rows */
	const int kg = flags & TC_STACKED ? (int)(128 / w->n) : tc_kgroups(w->n, w->k, groups);
	/* output rows: a warp tile is 16 weight rows either way */
	const int64_t rows = gated ? w->n / 2 : w->n, rows_per_block = (gated ? 8 : 16) * (8 / kg);
	const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block * groups;
	/* tc3 over more than a wave of 2 blocks per SM (lm_head; the expert
	 * MLP's 9 slots at M = 1, the DeltaNet stack: 288 and 386 blocks) runs
	 * 3 blocks per SM with 2 spans in flight: a third block per SM overlaps
	 * the blocks' starts and ends better than more spans in flight per
	 * warp, and a grid of 1 to 1.5 waves at 2 blocks per SM fits in one
	 * (docs/benchmarks.md, run 46) */
	bool many = false;
	auto kern = V == 2 ? nvfp4_tc2_kernel<MT8, TY> : nvfp4_tc3_kernel<MT8, TY, 4, 2>;
	if constexpr (V == 3 && MT8 == 1) { /* (more tokens: registers spill) */
		many = blocks > 2 * (int64_t)sm_count();
		if (many)
			kern = nvfp4_tc3_kernel<1, TY, 2, 3>;
	}
	if constexpr (V == 3 && std::is_same<TY, __nv_bfloat16>::value) /* the MLP's activation */
		if (gated)
			kern = MT8 == 1 && many ? nvfp4_tc3_kernel<MT8, TY, 2, 3, true>
						: nvfp4_tc3_kernel<MT8, TY, 4, 2, true>;
	static bool raised[4];
	if (!raised[many + 2 * gated]) {
		cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, TC_MAX_SHM);
		raised[many + 2 * gated] = true;
	}
	const pdl_launch L(dim3((unsigned)((rows + rows_per_block - 1) / rows_per_block), (unsigned)groups),
			   tc_smem(V, MT8, w->k), st);
	cudaLaunchKernelEx(&L.cfg, kern, w->d_packed, w->d_scales, (const float *)w->d_alpha, ids,
			   flags & TC_STACKED ? 2 : (int)!!(flags & TC_IDS_READY), x, xgs, m, w->n, w->k, kg, y,
			   y_ld, ygs);
}

/* tcm's shared memory: X (the block's longest K range), or the partial sums */
static size_t tcm_smem(int nt, int ks, int64_t k)
{
	const int64_t spans = k / 128, longest = (spans + ks - 1) / ks;
	const size_t xb = (size_t)nt * 8 * (size_t)tcm_xld((int)longest) * 2;
	const size_t rb = (size_t)TCM_WARPS * nt * 4 * 32 * 4;
	return xb > rb ? xb : rb;
}

/* Largest X stage for 1 and 2 blocks per multiprocessor */
#define TCM_MAX_SHM1 (200 * 1024)
#define TCM_MAX_SHM2 (80 * 1024)

/* The K split (cluster size): the smallest power of two <= 8 that keeps the
 * block's X stage within the limit, its K range within 16 spans (the X
 * stage's loop gives a thread one piece of a row) and gives >= 0.75 * minb
 * blocks per multiprocessor, with at least one span per block. */
static int tcm_ks(int nt, int64_t n, int64_t k, int minb)
{
	const int64_t spans = k / 128, rowblocks = (n + TCM_ROWS - 1) / TCM_ROWS;
	int ks = 1;
	while (ks < 8 && ks * 2 <= spans &&
	       (tcm_smem(nt, ks, k) > (minb == 1 ? TCM_MAX_SHM1 : TCM_MAX_SHM2) ||
		(spans + ks - 1) / ks > 16 ||
		rowblocks * ks * 4 < 3 * minb * (int64_t)sm_count()))
		ks *= 2;
	return ks;
}

template <int NT, typename TY, int MINB>
static void launch_tcm_minb(const struct lynn_cuda_nvfp4_weight *w, const __nv_bfloat16 *x,
			    int m, TY *y, int64_t y_ld, int ks, cudaStream_t st)
{
	static bool raised;
	if (!raised) {
		cudaFuncSetAttribute(nvfp4_tcm_kernel<NT, TY, MINB>,
				     cudaFuncAttributeMaxDynamicSharedMemorySize,
				     MINB == 1 ? TCM_MAX_SHM1 : TC_MAX_SHM); /* tcm_ks keeps within */
		raised = true;
	}
	const pdl_launch L(dim3((unsigned)((w->n + TCM_ROWS - 1) / TCM_ROWS), (unsigned)ks),
			   tcm_smem(NT, ks, w->k), st, (unsigned)ks);
	cudaLaunchKernelEx(&L.cfg, nvfp4_tcm_kernel<NT, TY, MINB>, w->d_packed, w->d_scales,
			   (const float *)w->d_alpha, x, m, w->n, w->k, y, y_ld);
}

/* One block per multiprocessor where the grid is one wave at that (on the
 * H200: in_proj_qkv at M = 64 13.7 against 20.2 us with two), else two
 * (lm_head); docs/benchmarks.md. */
template <int NT, typename TY>
static void launch_tcm(const struct lynn_cuda_nvfp4_weight *w, const __nv_bfloat16 *x, int m,
		       TY *y, int64_t y_ld, cudaStream_t st)
{
	const int ks1 = tcm_ks(NT, w->n, w->k, 1);
	if ((w->n + TCM_ROWS - 1) / TCM_ROWS * ks1 <= sm_count())
		launch_tcm_minb<NT, TY, 1>(w, x, m, y, y_ld, ks1, st);
	else
		launch_tcm_minb<NT, TY, 2>(w, x, m, y, y_ld, tcm_ks(NT, w->n, w->k, 2), st);
}

/* M below which the CUDA-core kernel wins (measured on the H200, see
 * docs/benchmarks.md). */
#define GEMV_MAX_M 2
/* M up to which tc3 (or tc2) is chosen: on the H200
 * (tests/bench/results/h200_run12.txt) tc3 is the fastest path at M = 1, 4,
 * 16 on both dense shapes and the MoE layer (it re-reads the weights per 16
 * tokens). Above it, plain weights take tcm (run 22: M = 64 in_proj_qkv
 * 13.7 against the wmma path's 24.4 us, lm_head 355 against 558 us), as do
 * weights of many row blocks from M = 9 (lm_head M = 16: 128.8 against tc3's
 * 148.9 us; in_proj_qkv keeps tc3, 10.0 against 10.6 us); expert banks keep
 * tc3 / wmma. */
#define TC_AUTO_MAX_M 16

template <typename TY>
static void launch(const struct lynn_cuda_nvfp4_weight *w, const int32_t *ids, int groups,
		   const __nv_bfloat16 *x, int64_t xgs, int m, TY *y, int64_t ygs,
		   enum lynn_cuda_path path, unsigned flags, cudaStream_t st)
{
	int gmax = 8;
	while (gmax > 1 && (int64_t)gmax * w->k * GEMV_SHM_PER_K > GEMV_MAX_SHM)
		gmax >>= 1;
	const bool gv = path == LYNN_CUDA_PATH_GEMV;
	if (path == LYNN_CUDA_PATH_TCM) { /* dense (run() checks): passes of 64 tokens */
		for (int m0 = 0; m0 < m; m0 += 64) {
			const int mm = m - m0 < 64 ? m - m0 : 64;
			const __nv_bfloat16 *xm = x + (int64_t)m0 * w->k;
			TY *ym = y + (int64_t)m0 * w->n;
			if (mm <= 16)
				launch_tcm<2>(w, xm, mm, ym, w->n, st);
			else if (mm <= 32)
				launch_tcm<4>(w, xm, mm, ym, w->n, st);
			else
				launch_tcm<8>(w, xm, mm, ym, w->n, st);
		}
		return;
	}
	if (path == LYNN_CUDA_PATH_TC2 || path == LYNN_CUDA_PATH_TC3) {
		/* token tiles of 8, 16, 32 or 64 per launch, more as further passes */
		typedef void (*tc_launch)(const struct lynn_cuda_nvfp4_weight *, const int32_t *, int,
					  const __nv_bfloat16 *, int64_t, int, TY *, int64_t, int64_t,
					  unsigned, cudaStream_t);
		static const tc_launch tc[2][4] = {
			{ launch_tc_pdl<2, 1, TY>, launch_tc_pdl<2, 2, TY>, launch_tc_pdl<2, 4, TY>,
			  launch_tc_pdl<2, 8, TY> },
			{ launch_tc_pdl<3, 1, TY>, launch_tc_pdl<3, 2, TY>, launch_tc_pdl<3, 4, TY>,
			  launch_tc_pdl<3, 8, TY> },
		};
		const int v = path == LYNN_CUDA_PATH_TC2 ? 2 : 3;
		const int mt8 = tc_mt8(v, m, w->k);
		const tc_launch f = tc[v - 2][mt8 == 1 ? 0 : mt8 == 2 ? 1 : mt8 == 4 ? 2 : 3];
		const int64_t ncols = flags & TC_GATED ? w->n / 2 : w->n;
		for (int m0 = 0; m0 < m; m0 += mt8 * 8) {
			const int mm = m - m0 < mt8 * 8 ? m - m0 : mt8 * 8;
			f(w, ids, groups, x + (int64_t)m0 * w->k, xgs, mm, y + (int64_t)m0 * ncols, ncols,
			  ygs, flags, st);
		}
		return;
	}
	for (int m0 = 0; m0 < m; m0 += gv ? gmax : 64) {
		int mm = m - m0;
		const __nv_bfloat16 *xm = x + (int64_t)m0 * w->k;
		TY *ym = y + (int64_t)m0 * w->n;
		if (path == LYNN_CUDA_PATH_GEMV) {
			if (mm > gmax)
				mm = gmax;
			if (mm == 1)
				launch_gemv<1>(w, ids, groups, xm, xgs, mm, ym, w->n, ygs, st);
			else if (mm == 2)
				launch_gemv<2>(w, ids, groups, xm, xgs, mm, ym, w->n, ygs, st);
			else if (mm <= 4)
				launch_gemv<4>(w, ids, groups, xm, xgs, mm, ym, w->n, ygs, st);
			else
				launch_gemv<8>(w, ids, groups, xm, xgs, mm, ym, w->n, ygs, st);
		} else {
			if (mm > 64)
				mm = 64;
			if (mm <= 16)
				launch_mma<1>(w, ids, groups, xm, xgs, mm, ym, w->n, ygs, st);
			else if (mm <= 32)
				launch_mma<2>(w, ids, groups, xm, xgs, mm, ym, w->n, ygs, st);
			else
				launch_mma<4>(w, ids, groups, xm, xgs, mm, ym, w->n, ygs, st);
		}
	}
}

static int run(const struct lynn_cuda_nvfp4_weight *w, const int32_t *ids, int groups,
	       const void *d_x, int64_t xgs, int m, void *d_y, enum lynn_cuda_out out,
	       enum lynn_cuda_path path, unsigned flags, lynn_stream_t stream, struct lynn_err *err)
{
	const __nv_bfloat16 *x = (const __nv_bfloat16 *)d_x;
	cudaStream_t st = (cudaStream_t)stream;
	int64_t ygs;
	bool mma_ok, tc2_ok, tc3_ok, tcm_ok;

	if (!w || !w->d_packed || !w->d_scales || !w->d_alpha || !d_x || !d_y || m < 1 ||
	    w->n < 1 || w->k < 32 || w->k % 32 || w->k * GEMV_SHM_PER_K > GEMV_MAX_SHM)
		return lynn_errf(err, -LYNN_EINVAL,
				 "cuda: nvfp4 gemm: bad arguments (m %d, n %lld, k %lld; K %% 32 == 0)",
				 m, (long long)(w ? w->n : 0), (long long)(w ? w->k : 0));
	ygs = (int64_t)m * (flags & TC_GATED ? w->n / 2 : w->n);
	mma_ok = w->n % MMA_BN == 0 && w->k % MMA_BK == 0;
	/* tc2, tc3: whether one token tile fits (tc3 also needs whole spans) */
	tc2_ok = tc_smem(2, 1, w->k) <= TC_MAX_SHM;
	tc3_ok = tc_smem(3, 1, w->k) <= TC_MAX_SHM && w->k % 128 == 0;
	tcm_ok = !ids && w->k % 128 == 0 && tcm_smem(8, tcm_ks(8, w->n, w->k, 2), w->k) <= TC_MAX_SHM;
	if (path == LYNN_CUDA_PATH_AUTO) {
		if (tcm_ok && (m > TC_AUTO_MAX_M || (m > 8 && w->n > (int64_t)TCM_ROWS * sm_count())))
			path = LYNN_CUDA_PATH_TCM;
		else if (m <= TC_AUTO_MAX_M && (tc3_ok || tc2_ok))
			path = tc3_ok ? LYNN_CUDA_PATH_TC3 : LYNN_CUDA_PATH_TC2;
		else
			path = (m <= GEMV_MAX_M || !mma_ok) ? LYNN_CUDA_PATH_GEMV : LYNN_CUDA_PATH_MMA;
	}
	if (path == LYNN_CUDA_PATH_TC2 && !tc2_ok)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: nvfp4 tc2 path needs K <= %d",
				 (TC_MAX_SHM - 8 * TC2_NST * 64 * 16) / 16 - 8);
	if (path == LYNN_CUDA_PATH_TC3 && !tc3_ok)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: nvfp4 tc3 path needs K %% 128 == 0 and K <= %d",
				 TC_MAX_SHM / 16 - 8);
	if (path == LYNN_CUDA_PATH_TCM && !tcm_ok)
		return lynn_errf(err, -LYNN_EINVAL,
				 "cuda: nvfp4 tcm path is for plain weights (no experts) with K %% 128 "
				 "== 0 and K <= 6144");
	if (path == LYNN_CUDA_PATH_MMA && !mma_ok)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: nvfp4 mma path needs N %% 64 and K %% 64");
	if ((flags & TC_GATED) && (path != LYNN_CUDA_PATH_TC3 || out != LYNN_CUDA_OUT_BF16))
		return lynn_errf(err, -LYNN_EINVAL, "cuda: nvfp4 gated gate/up runs on tc3 into bf16");
	if (out == LYNN_CUDA_OUT_F32)
		launch(w, ids, groups, x, xgs, m, (float *)d_y, ygs, path, flags, st);
	else
		launch(w, ids, groups, x, xgs, m, (__nv_bfloat16 *)d_y, ygs, path, flags, st);
	LYNN_CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int lynn_cuda_nvfp4_gemm_path(const struct lynn_cuda_nvfp4_weight *w, const void *d_x,
					 int m, void *d_y, enum lynn_cuda_out out,
					 enum lynn_cuda_path path, lynn_stream_t stream,
					 struct lynn_err *err)
{
	return run(w, NULL, 1, d_x, 0, m, d_y, out, path, 0, stream, err);
}

extern "C" int lynn_cuda_nvfp4_gemm(const struct lynn_cuda_nvfp4_weight *w, const void *d_x,
				    int m, void *d_y, enum lynn_cuda_out out, lynn_stream_t stream,
				    struct lynn_err *err)
{
	return run(w, NULL, 1, d_x, 0, m, d_y, out, LYNN_CUDA_PATH_AUTO, 0, stream, err);
}

extern "C" int lynn_cuda_nvfp4_moe_gemm(const struct lynn_cuda_nvfp4_weight *w,
					const int32_t *d_ids, int n_sel, const void *d_x,
					int64_t x_group_stride, int m, void *d_y,
					enum lynn_cuda_out out, enum lynn_cuda_path path,
					lynn_stream_t stream, struct lynn_err *err)
{
	if (n_sel < 1 || !d_ids)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: nvfp4 moe: no experts selected");
	return run(w, d_ids, n_sel, d_x, x_group_stride, m, d_y, out, path, 0, stream, err);
}

template <typename TY>
static void launch_stacked(const struct lynn_cuda_nvfp4_weight *w, const __nv_bfloat16 *x, int m, TY *y,
			   cudaStream_t st)
{
	const int64_t ld = w->n * w->n_experts;
	if (m <= 8)
		launch_tc_pdl<3, 1, TY>(w, NULL, (int)w->n_experts, x, 0, m, y, ld, w->n, TC_STACKED, st);
	else
		launch_tc_pdl<3, 2, TY>(w, NULL, (int)w->n_experts, x, 0, m, y, ld, w->n, TC_STACKED, st);
}

extern "C" int lynn_cuda_nvfp4_stacked_gemm(const struct lynn_cuda_nvfp4_weight *w, const void *d_x,
					    int m, void *d_y, enum lynn_cuda_out out,
					    lynn_stream_t stream, struct lynn_err *err)
{
	if (!w || !w->d_packed || !w->d_scales || !w->d_alpha || !d_x || !d_y || m < 1 || m > 16 ||
	    (w->n != 16 && w->n != 32 && w->n != 64 && w->n != 128) || w->n_experts < 1 ||
	    w->n_experts > 65535 || w->k % 128 || w->k / 128 < 128 / w->n || /* a span per K group */
	    tc_smem(3, 2, w->k) > TC_MAX_SHM)
		return lynn_errf(err, -LYNN_EINVAL,
				 "cuda: nvfp4 stacked gemm: bad arguments (m %d, chunks %lld of %lld rows, k "
				 "%lld; M 1..16, chunks of 16/32/64/128 rows, K %% 128 == 0 and K >= 16384 / rows)",
				 m, (long long)(w ? w->n_experts : 0), (long long)(w ? w->n : 0),
				 (long long)(w ? w->k : 0));
	const __nv_bfloat16 *x = (const __nv_bfloat16 *)d_x;
	if (out == LYNN_CUDA_OUT_F32)
		launch_stacked(w, x, m, (float *)d_y, (cudaStream_t)stream);
	else
		launch_stacked(w, x, m, (__nv_bfloat16 *)d_y, (cudaStream_t)stream);
	LYNN_CUDA_CHECK_LAUNCH();
	return 0;
}

/* The gate/up launch waits for the router's ids before it lets the next
 * kernel start, so the down launch may read them before its own wait. */
extern "C" int lynn_cuda_nvfp4_moe_mlp(const struct lynn_cuda_nvfp4_weight *gate_up,
				       const struct lynn_cuda_nvfp4_weight *down,
				       const int32_t *d_ids, int n_sel, const void *d_x,
				       int64_t x_group_stride, int m, void *d_act, void *d_y,
				       enum lynn_cuda_out out, lynn_stream_t stream,
				       struct lynn_err *err)
{
	if (n_sel < 1 || !d_ids)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: nvfp4 moe mlp: no experts selected");
	if (!d_act)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: nvfp4 moe mlp: no activation buffer (d_act)");
	if (!gate_up || !down || gate_up->n % 2 || down->k != gate_up->n / 2 ||
	    gate_up->k % 128 || down->k % 128 || down->n_experts != gate_up->n_experts)
		return lynn_errf(err, -LYNN_EINVAL,
				 "cuda: nvfp4 moe mlp: gate/up must be [E, 2I, H] and down [E, H', I] "
				 "with H and I multiples of 128");
	int rc = run(gate_up, d_ids, n_sel, d_x, x_group_stride, m, d_act, LYNN_CUDA_OUT_BF16,
		     LYNN_CUDA_PATH_TC3, TC_GATED, stream, err);
	if (rc)
		return rc;
	return run(down, d_ids, n_sel, d_act, (int64_t)m * down->k, m, d_y, out, LYNN_CUDA_PATH_AUTO,
		   TC_IDS_READY, stream, err);
}

/* ===== cuBLASLt BF16 ===== */



extern "C" struct lynn_cublas *lynn_cuda_blas_create(struct lynn_err *err)
{
	struct lynn_cublas *b = (struct lynn_cublas *)calloc(1, sizeof *b);
	if (!b) {
		lynn_errf(err, -LYNN_ENOMEM, "cuda: out of memory");
		return NULL;
	}
	b->ws_size = 32u << 20;
	if (cublasLtCreate(&b->h) != CUBLAS_STATUS_SUCCESS) {
		lynn_errf(err, -LYNN_ECUDA, "cublaslt: cannot create a handle");
		free(b);
		return NULL;
	}
	if (cudaMalloc(&b->d_ws, b->ws_size) != cudaSuccess ||
	    cudaMalloc(&b->d_zero, sizeof *b->d_zero) != cudaSuccess ||
	    cudaMemset(b->d_zero, 0, sizeof *b->d_zero) != cudaSuccess) {
		lynn_errf(err, -LYNN_ECUDA, "cuda: cannot allocate the cublaslt workspace");
		cudaFree(b->d_ws);
		cudaFree(b->d_zero);
		cublasLtDestroy(b->h);
		free(b);
		return NULL;
	}
	return b;
}

extern "C" void lynn_cuda_blas_free(struct lynn_cublas *b)
{
	if (!b)
		return;
	cudaFree(b->d_ws);
	cudaFree(b->d_zero);
	cublasLtDestroy(b->h);
	free(b);
}

int lynn_lt_matmul_tn(struct lynn_cublas *b, cublasLtMatmulDesc_t op, cudaDataType_t ab,
		      const void *alpha, const void *beta, const void *d_w, const void *d_x, int m,
		      int64_t n, int64_t k, void *d_y, cudaStream_t stream, const char *what,
		      struct lynn_err *err)
{
	cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t heur;
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	int found = 0, rc = 0;

	LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
	LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
	LT_TRY(cublasLtMatrixLayoutCreate(&la, ab, (uint64_t)k, (uint64_t)n, k));
	LT_TRY(cublasLtMatrixLayoutCreate(&lb, ab, (uint64_t)k, (uint64_t)m, k));
	LT_TRY(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, (uint64_t)n, (uint64_t)m, n));
	LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
	LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
						    &b->ws_size, sizeof b->ws_size));
	LT_TRY(cublasLtMatmulAlgoGetHeuristic(b->h, op, la, lb, lc, lc, pref, 1, &heur, &found));
	if (!found) {
		rc = lynn_errf(err, -LYNN_EUNSUPPORTED, "cublaslt: no %s algorithm for %lldx%lldx%d",
			       what, (long long)n, (long long)k, m);
		goto out;
	}
	LT_TRY(cublasLtMatmul(b->h, op, alpha, d_w, la, d_x, lb, beta, d_y, lc, d_y, lc, &heur.algo,
			      b->d_ws, b->ws_size, stream));
out:
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (lc)
		cublasLtMatrixLayoutDestroy(lc);
	if (lb)
		cublasLtMatrixLayoutDestroy(lb);
	if (la)
		cublasLtMatrixLayoutDestroy(la);
	return rc;
}

/* Y = alpha * X * W^T, all BF16; d_alpha NULL: alpha 1 (host scalar), else a
 * device f32 (pointer mode device, beta from b->d_zero). */
static int lt_bf16_gemm(struct lynn_cublas *b, const void *d_w, const void *d_x, int m, int64_t n,
			int64_t k, const float *d_alpha, void *d_y, cudaStream_t stream,
			struct lynn_err *err)
{
	cublasLtMatmulDesc_t op = NULL;
	const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
	float one = 1.0f, zero = 0.0f;
	int rc = 0;

	LT_TRY(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
	if (d_alpha)
		LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm,
						      sizeof pm));
	rc = lynn_lt_matmul_tn(b, op, CUDA_R_16BF, d_alpha ? (const void *)d_alpha : &one,
			       d_alpha ? (const void *)b->d_zero : &zero, d_w, d_x, m, n, k, d_y,
			       stream, "bf16", err);
out:
	if (op)
		cublasLtMatmulDescDestroy(op);
	return rc;
}

extern "C" int lynn_cuda_bf16_gemm(struct lynn_cublas *b, const void *d_w, const void *d_x,
				   int m, int64_t n, int64_t k, void *d_y, lynn_stream_t stream,
				   struct lynn_err *err)
{
	return lt_bf16_gemm(b, d_w, d_x, m, n, k, NULL, d_y, (cudaStream_t)stream, err);
}

/* ===== large M: dequantize to BF16, then cuBLASLt =====
 * One thread per 4-byte word (8 weights, one scale block), so a warp reads
 * 128 contiguous bytes and writes 512: the tc decode, every weight q*s
 * exactly in bf16; alpha is applied by cuBLASLt in f32. */
static __global__ void __launch_bounds__(256)
nvfp4_dequant_bf16_kernel(const uint32_t *__restrict__ packed, const uint8_t *__restrict__ scales,
			  int64_t words, uint4 *__restrict__ out)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= words)
		return;
	const uint32_t w = __ldcs(packed + i);
	uint32_t sc[2], sh[2], o[4];
	lynn_tc_scale2(__ldg(scales + i / 2), sc, sh); /* 16 weights per scale: two words */
	lynn_tc_dec4(w, sc[0], sh[0], o[0], o[1]);
	lynn_tc_dec4(lynn_hi16(w), sc[0], sh[0], o[2], o[3]);
	__stcs(out + i, make_uint4(o[0], o[1], o[2], o[3]));
}

extern "C" int lynn_cuda_nvfp4_dequant_bf16(const struct lynn_cuda_nvfp4_weight *w, void *d_out,
					    lynn_stream_t stream, struct lynn_err *err)
{
	if (!w || !w->d_packed || !w->d_scales || !d_out || w->n < 1 || w->k < 32 || w->k % 32)
		return lynn_errf(err, -LYNN_EINVAL, "cuda: nvfp4 dequant: bad arguments (K %% 32 == 0)");
	const int64_t words = (w->n_experts > 1 ? w->n_experts : 1) * w->n * (w->k / 8);
	nvfp4_dequant_bf16_kernel<<<(unsigned)((words + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
		(const uint32_t *)w->d_packed, w->d_scales, words, (uint4 *)d_out);
	LYNN_CUDA_CHECK_LAUNCH();
	return 0;
}

extern "C" int lynn_cuda_nvfp4_gemm_blas(struct lynn_cublas *b,
					 const struct lynn_cuda_nvfp4_weight *w, const void *d_x,
					 int m, void *d_scratch, void *d_y, lynn_stream_t stream,
					 struct lynn_err *err)
{
	int rc;
	if (!b || !w || w->n_experts > 1 || m < 1 || !d_scratch)
		return lynn_errf(err, -LYNN_EINVAL,
				 "cuda: nvfp4 blas gemm: bad arguments (one linear, M >= 1, scratch)");
	if ((rc = lynn_cuda_nvfp4_dequant_bf16(w, d_scratch, stream, err)))
		return rc;
	return lt_bf16_gemm(b, d_scratch, d_x, m, w->n, w->k, w->d_alpha, d_y, (cudaStream_t)stream,
			    err);
}

extern "C" int lynn_cuda_device_cc(struct lynn_err *err)
{
	int dev, major, minor;
	LYNN_CUDA_TRY(cudaGetDevice(&dev));
	LYNN_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
	LYNN_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
	return major * 10 + minor;
}
