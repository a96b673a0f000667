/* bench_cpu_nvfp4.c - the CPU NVFP4 kernel (src/cpu/nvfp4_matmul.c) against
 * the runner's BF16 kernel (src/cpu/matmul.c) on in_proj_qkv's shape
 * (8192 x 2048) at M = 1 and 16 tokens, 1 and 2 threads: time per call and
 * weight bytes per second, with the weights cache-resident and streamed from
 * memory. Run by tests/bench/run.sh. */
#include <stdbool.h>
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

/* Weight copies cycled per call: 1 (the weights stay in the last-level cache
 * after the first call), or enough for 1 GiB (each call streams its weights
 * from memory, as a 35B model's do). */
static int copies_for(double bytes, bool stream) { return stream ? (int)((1 << 30) / bytes) + 1 : 1; }

int main(void)
{
	const int64_t N = 8192, K = 2048;
	const size_t np = (size_t)(N * K / 2), ns = (size_t)(N * K / 16), nw = (size_t)(N * K);
	const double nv_bytes = (double)(np + ns), bf_bytes = nw * 2.0;
	const int cn = copies_for(nv_bytes, true), cb = copies_for(bf_bytes, true);
	uint8_t *P = malloc(np * cn), *S = malloc(ns * cn);
	uint16_t *Wb = malloc(nw * 2 * cb);
	float *x = malloc(sizeof(float) * 16 * K), *y = malloc(sizeof(float) * 16 * N);
	uint64_t r = 1;
	for (size_t i = 0; i < np; i++)
		P[i] = (uint8_t)((r = r * 6364136223846793005ull + 1) >> 56);
	memset(S, 0x30, ns);
	for (size_t i = 0; i < nw; i++)
		Wb[i] = 0x3c00 | (uint16_t)((r = r * 6364136223846793005ull + 1) >> 57);
	for (int c = 1; c < cn; c++) {
		memcpy(P + np * c, P, np);
		memcpy(S + ns * c, S, ns);
	}
	for (int c = 1; c < cb; c++)
		memcpy(Wb + nw * c, Wb, nw * 2);
	for (int64_t i = 0; i < 16 * K; i++)
		x[i] = 0.001f * (float)(i % 97);
	printf("cpu nvfp4 vs bf16, %lldx%lld (%s)\n", (long long)N, (long long)K,
	       lynn_cpu_nvfp4_simd() ? "avx2" : "portable");
	for (int stream = 0; stream < 2; stream++)
		for (int th = 1; th <= 2; th++) {
			struct lynn_pool *pool = lynn_pool_create(th, NULL);
			const int kn = copies_for(nv_bytes, stream), kb = copies_for(bf_bytes, stream);
			for (int m = 1; m <= 16; m += 15) {
				int reps = m == 1 ? 200 : 40;
				double t0 = now_s();
				for (int i = 0; i < reps; i++) {
					struct lynn_nvfp4_view v = { P + np * (i % kn), S + ns * (i % kn), 0.01f,
								     N, K };
					lynn_cpu_nvfp4_matmul(&v, x, m, y, pool, NULL);
				}
				double tn = (now_s() - t0) / reps;
				t0 = now_s();
				for (int i = 0; i < reps; i++) {
					struct lynn_mm mm = { .wdt = LYNN_DTYPE_BF16, .w = Wb + nw * (i % kb),
							      .n_out = N, .n_in = K, .x = x, .ldx = K, .y = y,
							      .ldy = N, .n_tok = m };
					lynn_cpu_matmul(pool, &mm, LYNN_CPU_AUTO);
				}
				double tb = (now_s() - t0) / reps;
				printf("%s threads %d M=%-2d nvfp4 %7.3f ms (%5.1f GB/s of weights) | bf16 %7.3f "
				       "ms (%5.1f GB/s) | speed-up %.2fx\n",
				       stream ? "streamed" : "cached  ", th, m, tn * 1e3, nv_bytes / tn / 1e9,
				       tb * 1e3, bf_bytes / tb / 1e9, tb / tn);
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
