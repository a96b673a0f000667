/*
 * simd.h - x86 AVX2 helpers shared by the CPU kernels (src/cpu/matmul.c,
 * src/cpu/nvfp4_matmul.c, src/formats/ggml_quants.c). Internal; included
 * only where immintrin.h is available.
 */
#ifndef LYNN_CPU_SIMD_H
#define LYNN_CPU_SIMD_H

#include <immintrin.h>

/* The sum of v's 8 lanes: halves, then pairs, then the last two (the same
 * order everywhere, so every kernel's sums round alike). */
__attribute__((target("avx2,fma"))) static inline float lynn_hsum256(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

#endif
