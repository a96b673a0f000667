/*
 * qv_engine.c - in-process greedy generation for quant-verify: render one
 * user message with the model's chat template (enable_thinking=false),
 * encode, prefill, decode greedily, detokenize. The one place in lynn that
 * strings model.h, tok.h and chat.h together for text generation; when a
 * shared engine (render → ids → generate → text) lands, this file gives way.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "lynn/buf.h"
#include "lynn/chat.h"
#include "lynn/eval.h"
#include "lynn/model.h"
#include "lynn/progress.h"
#include "lynn/quant_verify.h"
#include "lynn/sample.h"
#include "lynn/tok.h"

struct lynn_qv_engine {
	struct lynn_model *model;
	struct lynn_tok *tok;
	struct lynn_chat_template *tmpl;
	struct lynn_seq *seq;
	float *logits;
	int n_vocab;
};

void lynn_qv_engine_close(struct lynn_qv_engine *e)
{
	if (!e)
		return;
	free(e->logits);
	lynn_seq_free(e->seq);
	lynn_model_close(e->model);
	lynn_tok_free(e->tok);
	lynn_chat_template_free(e->tmpl);
	free(e);
}

struct lynn_qv_engine *lynn_qv_engine_open(const char *dir, int n_threads, struct lynn_err *err)
{
	struct lynn_qv_engine *e = calloc(1, sizeof(*e));
	struct lynn_model_opts mo = { .n_threads = n_threads };
	if (!e) {
		lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		return NULL;
	}
	if (!(e->tmpl = lynn_chat_template_load(dir, err)) || !(e->tok = lynn_tok_load(dir, err)) ||
	    !(e->model = lynn_model_open(dir, &mo, err)) || !(e->seq = lynn_seq_create(e->model, err)))
		goto fail;
	e->n_vocab = lynn_model_n_vocab(e->model);
	if (!(e->logits = malloc((size_t)e->n_vocab * sizeof(float)))) {
		lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		goto fail;
	}
	return e;
fail:
	lynn_qv_engine_close(e);
	return NULL;
}

static bool all_finite(const float *x, int n)
{
	for (int i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return false;
	return true;
}

static bool is_stop(const struct lynn_qv_engine *e, int32_t id)
{
	const struct lynn_config *c = lynn_model_config(e->model);
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos_ids[i] == id)
			return true;
	return lynn_tok_is_eog(e->tok, id);
}

/* Drop a leading "<think>…</think>" block (what an endpoint moves to
 * reasoning_content), then strip like Python str.strip(). */
static void drop_think(char *s)
{
	const char *p = s;
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	if (!strncmp(p, "<think>", 7)) {
		const char *e = strstr(p, "</think>");
		if (e)
			memmove(s, e + 8, strlen(e + 8) + 1);
	}
	lynn_eval_strip(s);
}

int lynn_qv_engine_generate(struct lynn_qv_engine *e, const char *prompt, int max_tokens,
			    struct lynn_qv_output *out, struct lynn_err *err)
{
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	struct lynn_buf text = LYNN_BUF_INIT;
	int32_t *gen = NULL;
	char *msgs = NULL, *rendered = NULL;
	size_t rlen = 0;
	cJSON *arr = NULL, *m;
	int rc = 0, n = 0;
	double t0;

	memset(out, 0, sizeof(*out));
	if (!(arr = cJSON_CreateArray()) || !(m = cJSON_CreateObject())) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		goto out;
	}
	cJSON_AddItemToArray(arr, m);
	if (!cJSON_AddStringToObject(m, "role", "user") || !cJSON_AddStringToObject(m, "content", prompt) ||
	    !(msgs = cJSON_PrintUnformatted(arr))) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		goto out;
	}
	struct lynn_chat_input in = {
		.messages_json = msgs, .add_generation_prompt = true, .enable_thinking = 0,
	};
	if ((rc = lynn_chat_render(e->tmpl, &in, &rendered, &rlen, err)) ||
	    (rc = lynn_tok_encode(e->tok, rendered, rlen, 0, &ids, err)))
		goto out;
	if (max_tokens > 0 && !(gen = malloc((size_t)max_tokens * sizeof(*gen)))) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		goto out;
	}
	lynn_seq_reset(e->seq);
	t0 = lynn_now();
	if (max_tokens > 0 && ids.n &&
	    (rc = lynn_model_prefill(e->model, e->seq, ids.ids, (int64_t)ids.n, false, e->logits, err)))
		goto out;
	while (n < max_tokens && ids.n) {
		if (!all_finite(e->logits, e->n_vocab)) {
			out->nonfinite = true;
			break;
		}
		int32_t id = lynn_sample_greedy(e->logits, e->n_vocab);
		if (is_stop(e, id))
			break;
		gen[n++] = id;
		if (n == max_tokens)
			break;
		if ((rc = lynn_model_decode(e->model, 1, &e->seq, &id, e->logits, err)))
			goto out;
	}
	out->gen_s = lynn_now() - t0;
	out->n_tokens = n;
	if ((rc = lynn_tok_decode(e->tok, gen, (size_t)n, LYNN_TOK_F_SKIP_SPECIAL, &text, err)))
		goto out;
	if (!(out->text = text.data ? lynn_buf_detach(&text) : strdup(""))) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		goto out;
	}
	drop_think(out->text);
out:
	lynn_buf_release(&text);
	lynn_tok_ids_release(&ids);
	free(gen);
	free(rendered);
	free(msgs);
	cJSON_Delete(arr);
	return rc;
}
