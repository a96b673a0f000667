/* bench_sample.c - choosing the next token over Qwen3.6's vocabulary (248,320
 * logits), single-threaded: the greedy pick, and the sampler with the
 * settings users send (Qwen's recommended temperature 0.7 / top-k 20 /
 * top-p 0.8, with and without a presence penalty of 1.5; an OpenAI
 * client's temperature 0.7 / top-p 0.95; plain temperature 1). The
 * logits are a fixed pseudo-random draw shaped like a model's (a few high
 * logits over a broad tail). The peer, numpy doing the
 * same selections, runs on the same logits in bench_sample_peer.py.
 *
 * It also times lynn_log_sum_exp, the engine's log-softmax for logprobs.
 * -DOLD_SAMPLER builds it against an older src/model/sample.c (see
 * docs/benchmarks.md, "Sampling").
 *
 *   build/bench_sample [logits.f32]   (writes the logits there for the peer) */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lynn/sample.h"

enum { V = 248320 };

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* best of 5 runs of reps picks, microseconds a pick */
static double time_picks(struct lynn_sampler *s, const float *lg, int reps, long *sink)
{
	double best = 1e30;
	for (int r = 0; r < 5; r++) {
		double t0 = now();
		for (int i = 0; i < reps; i++)
			*sink += s ? lynn_sampler_sample(s, lg) : lynn_sample_greedy(lg, V);
		double us = (now() - t0) / reps * 1e6;
		best = us < best ? us : best;
	}
	return best;
}

int main(int argc, char **argv)
{
	float *lg = malloc(V * sizeof *lg);
	uint64_t x = 88172645463325252ull;
	long sink = 0;
	struct lynn_err err = { 0 };
	for (int i = 0; i < V; i++) { /* broad tail in [-8, 4), every 997th token up to 14 */
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		lg[i] = (float)((double)(x >> 11) * 0x1.0p-53 * 12.0 - 8.0);
		if (i % 997 == 0)
			lg[i] += 10.0f * (float)((x >> 20) & 1023) / 1023.0f;
	}
	if (argc > 1) {
		FILE *f = fopen(argv[1], "wb");
		if (!f || fwrite(lg, sizeof *lg, V, f) != V || fclose(f)) {
			fprintf(stderr, "bench_sample: cannot write '%s'\n", argv[1]);
			return 2;
		}
	}
	double g = time_picks(NULL, lg, 200, &sink);
	printf("sample, vocab %d, 1 thread: greedy %.1f us a pick (reads the logits at %.1f GB/s)\n", V, g,
	       V * sizeof *lg / g * 1e-3);
#ifndef OLD_SAMPLER /* (an older sample.c built in for comparison has no lynn_log_sum_exp) */
	double lse = 1e30, acc = 0;
	for (int r = 0; r < 5; r++) { /* best of 5 runs of 20 */
		double t0 = now();
		for (int i = 0; i < 20; i++)
			acc += lynn_log_sum_exp(lg, V);
		double us = (now() - t0) / 20 * 1e6;
		lse = us < lse ? us : lse;
	}
	sink += acc > 0;
	printf("sample, vocab %d, 1 thread: log-sum-exp (the engine's logprobs) %.1f us\n", V, lse);
#endif
	/* flat: the worst case for top-p, nearly flat logits (a random model's,
	 * or a high temperature), where the nucleus is most of the vocabulary;
	 * it comes last and has no peer line */
	static const struct {
		const char *name;
		float t, top_p;
		int top_k;
		bool flat, penalties;
	} cfg[] = {
		{ "temperature 0.7, top-k 20, top-p 0.8", 0.7f, 0.8f, 20, false, false },
		{ "temperature 0.7, top-p 0.95", 0.7f, 0.95f, 0, false, false },
		{ "temperature 1", 1.0f, 1.0f, 0, false, false },
#ifndef OLD_SAMPLER
		{ "temperature 0.7, top-k 20, top-p 0.8, presence 1.5, 4,000 tokens seen", 0.7f, 0.8f, 20, false,
		  true },
#endif
		{ "temperature 0.7, top-p 0.95 over nearly flat logits (in [0, 0.5))", 0.7f, 0.95f, 0, true, false },
	};
	for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
		if (cfg[c].flat)
			for (int i = 0; i < V; i++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				lg[i] = (float)((double)(x >> 11) * 0x1.0p-53 * 0.5);
			}
		struct lynn_sample_params p;
		lynn_sample_params_init(&p);
		p.temperature = cfg[c].t;
		p.top_p = cfg[c].top_p;
		p.top_k = cfg[c].top_k;
		p.seed = 1;
#ifndef OLD_SAMPLER
		if (cfg[c].penalties) /* against endless repetition, as Qwen's cards suggest */
			p.presence_penalty = 1.5f;
#endif
		struct lynn_sampler *s = lynn_sampler_create(&p, V, &err);
		if (!s) {
			fprintf(stderr, "bench_sample: %s\n", err.msg);
			return 3;
		}
#ifndef OLD_SAMPLER
		for (int32_t i = 0; cfg[c].penalties && i < 4000; i++) { /* a prompt and an answer's tokens */
			const int32_t id = (int32_t)((i * 7919u) % V);
			lynn_sampler_seen(s, &id, 1, i >= 3000, &err);
		}
#endif
		printf("sample, vocab %d, 1 thread: %s: %.1f us a pick\n", V, cfg[c].name,
		       time_picks(s, lg, 20, &sink));
		lynn_sampler_free(s);
	}
	free(lg);
	return sink == 42; /* keep the picks */
}
