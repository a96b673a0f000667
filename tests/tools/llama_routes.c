/* llama_routes.c - the MoE router's choices from llama.cpp's libllama, for
 * the profile fixture (tests/tools/gen_profile_fixture.sh). Evaluates the
 * given token ids in one batch and prints, per MoE layer and token, the
 * selected experts (ffn_moe_topk-<layer>), their router probabilities
 * (ffn_moe_weights-<layer>, before renormalisation) and the gap between the
 * k-th and the (k+1)-th probability (from ffn_moe_probs-<layer>) as JSON.
 * Not part of lynn; built against a llama.cpp build.
 *
 *   llama_routes MODEL.gguf "1 2 3"
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

#define MAX_LAYERS 64

struct cap {
	int n_tok, k, E;
	float *probs[MAX_LAYERS];   /* [n_tok][E] */
	int32_t *topk[MAX_LAYERS];  /* [n_tok][k] */
	float *weights[MAX_LAYERS]; /* [n_tok][k] */
};

static int layer_of(const char *name, const char *prefix)
{
	size_t n = strlen(prefix);
	int l, end = 0;
	if (strncmp(name, prefix, n) || sscanf(name + n, "-%d%n", &l, &end) != 1 || name[n + end])
		return -1; /* exactly "<prefix>-<layer>", not a view of it */
	return l >= 0 && l < MAX_LAYERS ? l : -1;
}

/* A 4-byte tensor (up to 3 dims; views included: the top-k ids are a view
 * of the argsort) as a dense array in ne0-fastest order. */
static void *copy_out(struct ggml_tensor *t)
{
	size_t span = ggml_nbytes(t), n = (size_t)(t->ne[0] * t->ne[1] * t->ne[2]);
	char *raw = malloc(span);
	uint32_t *out = malloc(n * 4);
	if (!raw || !out)
		exit(3);
	ggml_backend_tensor_get(t, raw, 0, span);
	for (int64_t i2 = 0, o = 0; i2 < t->ne[2]; i2++)
		for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
			for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
				memcpy(&out[o++], raw + i2 * t->nb[2] + i1 * t->nb[1] + i0 * t->nb[0], 4);
	free(raw);
	return out;
}

static bool on_tensor(struct ggml_tensor *t, bool ask, void *ud)
{
	struct cap *c = ud;
	int lp = layer_of(t->name, "ffn_moe_probs"), lt = layer_of(t->name, "ffn_moe_topk"),
	    lw = layer_of(t->name, "ffn_moe_weights");
	if (ask)
		return lp >= 0 || lt >= 0 || lw >= 0;
	if (lp >= 0) {
		c->E = (int)t->ne[0];
		free(c->probs[lp]);
		c->probs[lp] = copy_out(t);
	} else if (lt >= 0) {
		c->k = (int)t->ne[0];
		free(c->topk[lt]);
		c->topk[lt] = copy_out(t);
	} else if (lw >= 0) {
		free(c->weights[lw]);
		c->weights[lw] = copy_out(t);
	}
	return true;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: llama_routes MODEL.gguf \"ids\"\n");
		return 2;
	}
	struct cap c = { 0 };
	llama_token ids[4096];
	int n = 0;
	for (char *p = argv[2], *e; n < 4096; p = e) {
		long v = strtol(p, &e, 10);
		if (e == p)
			break;
		ids[n++] = (llama_token)v;
	}
	c.n_tok = n;
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	struct llama_model *model = llama_model_load_from_file(argv[1], mp);
	if (!model)
		return 3;
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = (uint32_t)(n + 16);
	cp.n_batch = cp.n_ubatch = (uint32_t)n;
	cp.n_threads = cp.n_threads_batch = 1;
	cp.cb_eval = on_tensor;
	cp.cb_eval_user_data = &c;
	struct llama_context *ctx = llama_init_from_model(model, cp);
	if (!ctx || llama_decode(ctx, llama_batch_get_one(ids, n)))
		return 3;
	int L = llama_model_n_layer(model);
	printf("{\"n_tokens\": %d, \"top_k\": %d, \"n_experts\": %d, \"layers\": [", n, c.k, c.E);
	for (int l = 0; l < L; l++) {
		if (!c.topk[l] || !c.weights[l] || !c.probs[l])
			return 3;
		printf("%s\n {\"layer_idx\": %d, \"tokens\": [", l ? "," : "", l);
		for (int t = 0; t < n; t++) {
			/* the gap below the k-th choice: how firm the selection is */
			float kth = INFINITY, next = -INFINITY;
			for (int j = 0; j < c.k; j++)
				kth = fminf(kth, c.weights[l][t * c.k + j]);
			for (int e = 0; e < c.E; e++) {
				float v = c.probs[l][t * c.E + e];
				bool sel = false;
				for (int j = 0; j < c.k; j++)
					sel |= c.topk[l][t * c.k + j] == e;
				if (!sel)
					next = fmaxf(next, v);
			}
			printf("%s{\"experts\": [", t ? ", " : "");
			for (int j = 0; j < c.k; j++)
				printf("%s%d", j ? ", " : "", c.topk[l][t * c.k + j]);
			printf("], \"probs\": [");
			for (int j = 0; j < c.k; j++)
				printf("%s%.9g", j ? ", " : "", c.weights[l][t * c.k + j]);
			printf("], \"gap\": %.9g}", kth - next);
		}
		printf("]}");
	}
	printf("\n]}\n");
	llama_free(ctx);
	llama_model_free(model);
	return 0;
}
