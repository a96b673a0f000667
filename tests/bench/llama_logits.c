/* llama_logits.c - logits from llama.cpp's libllama for given token ids, as
 * raw f32 [T][vocab] (tests/bench/llama_cpp.sh checks llama.cpp agrees with
 * lynn on the same weights before comparing speed). Built only when a
 * llama.cpp build is present; not part of lynn.
 *
 *   llama_logits MODEL.gguf "1 2 3" OUT.f32
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

int main(int argc, char **argv)
{
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
