/* bench_cpu_nvfp4.c - the CPU NVFP4 kernel (src/cpu/nvfp4_matmul.c) against
 * the runner's BF16 kernel (src/cpu/matmul.c) on in_proj_qkv's shape
 * (8192 x 2048) at M = 1 and 16 tokens, 1 and 2 threads: time per call and
 * weight bytes per second. Run by tests/bench/run.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lynn/cpu.h"
#include "lynn/cpu_nvfp4.h"
#include "lynn/pool.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
	const int64_t N = 8192, K = 2048;
	uint8_t *P = malloc((size_t)(N * K / 2)), *S = malloc((size_t)(N * K / 16));
	uint16_t *Wb = malloc((size_t)(N * K) * 2);
	float *x = malloc(sizeof(float) * 16 * K), *y = malloc(sizeof(float) * 16 * N);
	uint64_t r = 1;
	for (int64_t i = 0; i < N * K / 2; i++)
		P[i] = (uint8_t)((r = r * 6364136223846793005ull + 1) >> 56);
	for (int64_t i = 0; i < N * K / 16; i++)
		S[i] = 0x30;
	for (int64_t i = 0; i < N * K; i++)
		Wb[i] = 0x3c00 | (uint16_t)((r = r * 6364136223846793005ull + 1) >> 57);
	for (int64_t i = 0; i < 16 * K; i++)
		x[i] = 0.001f * (float)(i % 97);
	struct lynn_nvfp4_view v = { P, S, 0.01f, N, K };
	double nv_bytes = N * K / 2 + N * K / 16, bf_bytes = N * K * 2.0;
	printf("cpu nvfp4 vs bf16, %lldx%lld (%s)\n", (long long)N, (long long)K,
	       lynn_cpu_nvfp4_simd() ? "avx2" : "portable");
	for (int th = 1; th <= 2; th++) {
		struct lynn_pool *pool = lynn_pool_create(th, NULL);
		for (int m = 1; m <= 16; m += 15) {
			int reps = m == 1 ? 200 : 40;
			double t0 = now_s();
			for (int i = 0; i < reps; i++)
				lynn_cpu_nvfp4_matmul(&v, x, m, y, pool, NULL);
			double tn = (now_s() - t0) / reps;
			struct lynn_mm mm = { .wdt = LYNN_DTYPE_BF16, .w = Wb, .n_out = N, .n_in = K,
					      .x = x, .ldx = K, .y = y, .ldy = N, .n_tok = m };
			t0 = now_s();
			for (int i = 0; i < reps; i++)
				lynn_cpu_matmul(pool, &mm, LYNN_CPU_AUTO);
			double tb = (now_s() - t0) / reps;
			printf("threads %d M=%-2d nvfp4 %7.3f ms (%5.1f GB/s of weights) | bf16 %7.3f ms "
			       "(%5.1f GB/s) | speed-up %.2fx\n",
			       th, m, tn * 1e3, nv_bytes / tn / 1e9, tb * 1e3, bf_bytes / tb / 1e9, tb / tn);
		}
		lynn_pool_free(pool);
	}
	free(P);
	free(S);
	free(Wb);
	free(x);
	free(y);
	return 0;
}
