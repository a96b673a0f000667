/* llama_logits.c - logits from llama.cpp's libllama for given token ids, as
 * raw f32 [T][vocab] (tests/bench/llama_cpp.sh checks llama.cpp agrees with
 * lynn on the same weights before comparing speed). Built only when a
 * llama.cpp build is present; not part of lynn.
 *
 *   llama_logits MODEL.gguf "1 2 3" OUT.f32
 *   llama_logits --bench MODEL.gguf PROMPT DECODE THREADS
 *     prefill PROMPT tokens then DECODE greedy steps, best of 2, tokens/s
 *     (the same token pattern and protocol as tests/bench/bench_runner.c)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "llama.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int argmax(const float *l, int n)
{
	int b = 0;
	for (int i = 1; i < n; i++)
		if (l[i] > l[b])
			b = i;
	return b;
}

static int bench(const char *path, int P, int D, int T)
{
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	struct llama_model *model = llama_model_load_from_file(path, mp);
	if (!model)
		return 3;
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = (uint32_t)(P + D + 16);
	cp.n_batch = cp.n_ubatch = (uint32_t)P;
	cp.n_threads = cp.n_threads_batch = T;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	if (!ctx)
		return 3;
	int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
	llama_token *ids = malloc((size_t)P * sizeof *ids);
	for (int i = 0; i < P; i++)
		ids[i] = (i * 7919 + 13) % V;
	double best_pf = 1e30, best_dec = 1e30;
	for (int rep = 0; rep < 3; rep++) { /* rep 0 warms up (pages the weights in) */
		llama_memory_clear(llama_get_memory(ctx), true);
		double t0 = now_s();
		if (llama_decode(ctx, llama_batch_get_one(ids, P)))
			return 3;
		double t1 = now_s();
		for (int i = 0; i < D; i++) {
			llama_token tok = argmax(llama_get_logits_ith(ctx, -1), V);
			if (llama_decode(ctx, llama_batch_get_one(&tok, 1)))
				return 3;
		}
		double t2 = now_s();
		if (rep > 0 && t1 - t0 < best_pf) best_pf = t1 - t0;
		if (rep > 0 && t2 - t1 < best_dec) best_dec = t2 - t1;
	}
	printf("llama.cpp threads %d: prefill %d tokens %.1f tok/s; decode %.2f tok/s\n", T, P,
	       P / best_pf, D / best_dec);
	free(ids);
	llama_free(ctx);
	llama_model_free(model);
	llama_backend_free();
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 6 && !strcmp(argv[1], "--bench"))
		return bench(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
	if (argc != 4) {
		fprintf(stderr, "usage: llama_logits MODEL.gguf \"ids\" OUT.f32\n");
		return 2;
	}
	int32_t ids[4096];
	int n = 0;
	for (char *s = argv[2], *end; n < 4096; s = end) {
		long v = strtol(s, &end, 10);
		if (end == s)
			break;
		ids[n++] = (int32_t)v;
	}
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	struct llama_model *model = llama_model_load_from_file(argv[1], mp);
	if (!model)
		return 3;
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = 4096;
	cp.n_batch = 4096;
	cp.n_ubatch = 4096;
	cp.n_threads = cp.n_threads_batch = 1;
	cp.n_outputs_max = 4096;
	cp.n_outputs_max_per_seq = 4096;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	if (!ctx)
		return 3;
	struct llama_batch b = llama_batch_init(n, 0, 1);
	for (int i = 0; i < n; i++) {
		b.token[i] = ids[i];
		b.pos[i] = i;
		b.n_seq_id[i] = 1;
		b.seq_id[i][0] = 0;
		b.logits[i] = 1;
	}
	b.n_tokens = n;
	if (llama_decode(ctx, b))
		return 3;
	int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
	FILE *f = fopen(argv[3], "wb");
	for (int i = 0; i < n; i++)
		fwrite(llama_get_logits_ith(ctx, i), sizeof(float), (size_t)nv, f);
	fclose(f);
	llama_batch_free(b);
	llama_free(ctx);
	llama_model_free(model);
	llama_backend_free();
	return 0;
}
