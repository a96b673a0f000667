/* bench_runner.c - runner speed on a model folder (tests/bench/runner.sh):
 * memory bandwidth by a stream copy, then prefill and decode tokens/s at the
 * given thread counts, decode as a fraction of the memory roofline
 * (active weight bytes per token / bandwidth). On the CUDA device (a CUDA
 * build on a GPU machine; LYNN_DEVICE picks) the roofline is the device's
 * own copy bandwidth and the thread count does not matter.
 *
 *   bench_runner MODEL_DIR [prompt_tokens=128] [decode_tokens=32] [threads...]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lynn/engine.h"
#include "lynn/model.h"
#include "lynn/sample.h"
#ifdef LYNN_CUDA
#include "../kernels/lynn_cuda.h"
#endif

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct copy_arg {
	char *dst;
	const char *src;
	size_t n;
	int reps;
};

static void *copy_fn(void *p)
{
	struct copy_arg *a = p;
	for (int r = 0; r < a->reps; r++)
		memcpy(a->dst, a->src, a->n);
	return NULL;
}

struct read_arg {
	const float *src;
	size_t n;
	int reps;
	float sum;
};

/* A plain streaming read (what decoding does with the weights). */
static void *read_fn(void *p)
{
	struct read_arg *a = p;
	float s[16] = { 0 };
	for (int r = 0; r < a->reps; r++)
		for (size_t i = 0; i < a->n; i += 16)
			for (int j = 0; j < 16; j++)
				s[j] += a->src[i + j];
	for (int j = 0; j < 16; j++)
		a->sum += s[j];
	return NULL;
}

/* Read bandwidth (bytes read per second), best of 3. */
static double stream_read(int threads)
{
	size_t n = (size_t)64 << 20; /* floats: 256 MiB */
	float *a = malloc(n * sizeof *a);
	for (size_t i = 0; i < n; i++)
		a[i] = (float)(i & 1023);
	double best = 0;
	for (int rep = 0; rep < 3; rep++) {
		pthread_t th[64];
		struct read_arg ra[64];
		double t0 = now_s();
		for (int t = 0; t < threads; t++) {
			ra[t] = (struct read_arg){ a + n / threads * t, n / threads, 2, 0 };
			pthread_create(&th[t], NULL, read_fn, &ra[t]);
		}
		for (int t = 0; t < threads; t++)
			pthread_join(th[t], NULL);
		double bw = 2.0 * n * sizeof *a / (now_s() - t0);
		if (bw > best)
			best = bw;
	}
	free(a);
	return best;
}

/* Copy bandwidth (bytes read + written per second), best of 3. */
static double stream_copy(int threads)
{
	size_t n = (size_t)256 << 20;
	char *a = malloc(n), *b = malloc(n);
	memset(a, 1, n);
	memset(b, 2, n);
	double best = 0;
	for (int rep = 0; rep < 3; rep++) {
		pthread_t th[64];
		struct copy_arg ca[64];
		double t0 = now_s();
		for (int t = 0; t < threads; t++) {
			ca[t] = (struct copy_arg){ b + n / threads * t, a + n / threads * t, n / threads, 2 };
			pthread_create(&th[t], NULL, copy_fn, &ca[t]);
		}
		for (int t = 0; t < threads; t++)
			pthread_join(th[t], NULL);
		double bw = 2.0 * 2 * (double)n / (now_s() - t0);
		if (bw > best)
			best = bw;
	}
	free(a);
	free(b);
	return best;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_runner MODEL_DIR [prompt] [decode] [threads...]\n");
		return 2;
	}
	int P = argc > 2 ? atoi(argv[2]) : 128, D = argc > 3 ? atoi(argv[3]) : 32;
	int tl[8] = { 1, 2 }, nt = 2;
	if (argc > 4) {
		nt = 0;
		for (int i = 4; i < argc && nt < 8; i++)
			tl[nt++] = atoi(argv[i]);
	}
	for (int k = 0; k < nt; k++) {
		int T = tl[k];
		struct lynn_err err = { 0 };
		struct lynn_engine_opts o = { .n_threads = T };
		struct lynn_engine *e = lynn_engine_open(argv[1], &o, &err);
		if (!e) {
			fprintf(stderr, "bench_runner: %s\n", err.msg);
			return 2;
		}
		struct lynn_model *m = lynn_engine_model(e);
		bool gpu = !strcmp(lynn_model_device(m), "cuda");
		double bw = 0, rbw = 0;
#ifdef LYNN_CUDA
		if (gpu)
			bw = rbw = lynn_cuda_copy_bandwidth();
#endif
		if (!gpu) {
			bw = stream_copy(T);
			rbw = stream_read(T);
		}
		int V = lynn_model_n_vocab(m);
		/* P prompt ids, and at least 8 x 16 for the batched prompts */
		int np = P > 128 ? P : 128;
		int32_t *ids = malloc((size_t)np * sizeof *ids);
		for (int i = 0; i < np; i++)
			ids[i] = (int32_t)((i * 7919 + 13) % V);
		float *lg = malloc((size_t)V * sizeof *lg);
		struct lynn_seq *s = lynn_seq_create(m, &err);
		/* warm-up: page the weights in */
		lynn_model_prefill(m, s, ids, P < 16 ? P : 16, false, lg, &err);
		lynn_seq_reset(s);
		double best_pf = 1e30, best_dec = 1e30;
		for (int rep = 0; rep < 2; rep++) {
			lynn_seq_reset(s);
			double t0 = now_s();
			if (lynn_model_prefill(m, s, ids, P, false, lg, &err)) {
				fprintf(stderr, "bench_runner: %s\n", err.msg);
				return 3;
			}
			double t1 = now_s();
			for (int i = 0; i < D; i++) {
				int32_t tok = lynn_sample_greedy(lg, V);
				lynn_model_decode(m, 1, &s, &tok, lg, &err);
			}
			double t2 = now_s();
			if (t1 - t0 < best_pf) best_pf = t1 - t0;
			if (t2 - t1 < best_dec) best_dec = t2 - t1;
		}
		double act = (double)lynn_model_active_bytes(m);
		double dec_tps = D / best_dec, roof = bw / act, rroof = rbw / act;
		printf("%s, threads %d: stream copy %.1f GB/s, stream read %.1f GB/s; active weights %.1f MB/token; "
		       "prefill %d tokens %.1f tok/s; decode %.2f tok/s = %.0f%% of the copy roofline "
		       "(%.2f tok/s), %.0f%% of the read roofline (%.2f tok/s)\n",
		       lynn_model_device(m), T, bw / 1e9, rbw / 1e9, act / 1e6, P, P / best_pf, dec_tps, 100.0 * dec_tps / roof, roof,
		       100.0 * dec_tps / rroof, rroof);
		/* batched decode: B = 2, 4, 8 sequences (16-token prompts) advance together, one
		 * forward pass per step, as `lynn serve` runs them */
		for (int B = 2; B <= 8; B *= 2) {
			struct lynn_seq *bs[8];
			int32_t tok[8];
			float *blg = malloc((size_t)B * (size_t)V * sizeof *blg);
			double best = 1e30;
			for (int rep = 0; rep < 2; rep++) {
				for (int b = 0; b < B; b++) {
					if (!rep)
						bs[b] = lynn_seq_create(m, &err);
					lynn_seq_reset(bs[b]);
					lynn_model_prefill(m, bs[b], ids + 16 * b, 16, false, blg + (size_t)b * V, &err);
				}
				double t0 = now_s();
				for (int i = 0; i < D; i++) {
					for (int b = 0; b < B; b++)
						tok[b] = lynn_sample_greedy(blg + (size_t)b * V, V);
					if (lynn_model_decode(m, B, bs, tok, blg, &err)) {
						fprintf(stderr, "bench_runner: %s\n", err.msg);
						return 3;
					}
				}
				if (now_s() - t0 < best)
					best = now_s() - t0;
			}
			printf("threads %d: batched decode of %d sequences: %.2f tok/s in all (%.2fx one sequence's)\n", T,
			       B, B * D / best, B * D / best / dec_tps);
			for (int b = 0; b < B; b++)
				lynn_seq_free(bs[b]);
			free(blg);
		}
		/* The engine's decode, as lynn generate and lynn serve run it
		 * (ignoring end-of-generation ids): 1 and 8 sequences, greedy,
		 * sampled (temperature 0.7, top-p 0.95) and sampled with Qwen's
		 * recommended top-k 20 (temperature 0.7, top-p 0.8), without and
		 * with a presence penalty of 1.5 (Qwen's model cards suggest one
		 * against endless repetition). On a device, greedy and top-k
		 * steps find the picks or the candidates there, so the logits do
		 * not come back to the host (lynn_model_forward_picks); a penalty
		 * brings them back. */
		static const char *const how[4] = { "greedy", "sampled (T 0.7, top-p 0.95)",
						    "sampled (T 0.7, top-k 20, top-p 0.8)",
						    "sampled (T 0.7, top-k 20, top-p 0.8, presence 1.5)" };
		for (int run = 0; run < 8; run++) {
			const int B = run & 1 ? 8 : 1, kind = run / 2;
			struct lynn_gen_opts go = { .max_tokens = D + 1, .ignore_eos = true };
			lynn_sample_params_init(&go.sample); /* greedy */
			if (kind > 0) {
				go.sample.temperature = 0.7f;
				go.sample.top_p = kind == 1 ? 0.95f : 0.8f;
				go.sample.top_k = kind == 1 ? 0 : 20;
				go.sample.presence_penalty = kind == 3 ? 1.5f : 0.0f;
				go.sample.seed = 1;
			}
			struct lynn_gen *gs[8];
			double best = 1e30;
			for (int rep = 0; rep < 2; rep++) {
				for (int b = 0; b < B; b++)
					if (!(gs[b] = lynn_gen_create(e, ids + 16 * b, 16, &go, &err))) {
						fprintf(stderr, "bench_runner: %s\n", err.msg);
						return 3;
					}
				/* the prompts and the first token, then D decode steps */
				double t0 = 0;
				for (int step = 0; step <= D; step++) {
					if (step == 1)
						t0 = now_s();
					if (lynn_engine_step(e, gs, (size_t)B, 0, &err)) {
						fprintf(stderr, "bench_runner: %s\n", err.msg);
						return 3;
					}
				}
				if (now_s() - t0 < best)
					best = now_s() - t0;
				for (int b = 0; b < B; b++)
					lynn_gen_free(gs[b]);
			}
			printf("threads %d: engine %s decode of %d sequence%s: %.2f tok/s in all\n", T, how[kind], B,
			       B > 1 ? "s" : "", B * D / best);
		}
		fflush(stdout);
		free(ids);
		free(lg);
		lynn_seq_free(s);
		lynn_engine_close(e);
	}
	return 0;
}
