/*
 * bench_st_read.c - read every tensor's bytes of a checkpoint through lynn's
 * reader (the zero-copy mmap views), in file then data order, and print the
 * bytes and seconds. Run by tests/bench/bench_inspect.sh next to dd.
 *
 *   bench_st_read PATH
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lynn/st.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	struct lynn_err err;
	struct lynn_ckpt *c;
	uint64_t bytes = 0, acc = 0;
	double t0, t1;

	if (argc != 2) {
		fprintf(stderr, "usage: bench_st_read PATH\n");
		return 2;
	}
	t0 = now();
	c = lynn_ckpt_open(argv[1], &err);
	if (!c) {
		fprintf(stderr, "%s\n", err.msg);
		return 2;
	}
	for (int64_t i = 0; i < lynn_ckpt_n_tensors(c); i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(c, i);
		const uint8_t *p = t->data;
		uint64_t n = t->nbytes, k = 0, w;
		/* one load per 64 bytes touches every cache line of the data */
		for (; k + 8 <= n; k += 64) {
			memcpy(&w, p + k, 8);
			acc += w;
		}
		bytes += n;
	}
	t1 = now();
	printf("%llu bytes in %.3f s = %.2f GB/s (checksum %llu)\n", (unsigned long long)bytes,
	       t1 - t0, (double)bytes / (t1 - t0) / 1e9, (unsigned long long)acc);
	lynn_ckpt_close(c);
	return 0;
}
