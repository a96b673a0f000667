/*
 * inproc.c - in-process generation for eval: the engine (model + tokenizer
 * + chat template + unmerged LoRA, engine.h) answers the same requests the
 * endpoint client sends, greedily, up to `batch` of them generated together
 * (lynn_engine_generate_many: continuous batching, the decode loop `lynn
 * serve` runs): the candidate's requests with the adapter on, then the
 * base's with it off.
 *
 * The answer is decoded the way the original toolkit decodes it
 * (tokenizer.decode(new_tokens, skip_special_tokens=True)): the generated
 * ids again, special added tokens dropped. A request whose `model` is set
 * is the candidate's.
 */
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/engine.h"
#include "lynn/eval.h"

/* A request's prompt ids: its one user message (and its tools) through the
 * chat template. */
static int encode(struct lynn_eval_engine *ee, const struct lynn_chat_req *q, struct lynn_tok_ids *ids,
		  struct lynn_err *err)
{
	if (!q->tools || cJSON_GetArraySize(q->tools) == 0)
		return lynn_engine_encode_prompt(ee->engine, q->prompt, ee->think, ids, err);
	cJSON *m = cJSON_CreateArray(), *u = cJSON_CreateObject();
	struct lynn_chat_input in = { .add_generation_prompt = true, .enable_thinking = ee->think };
	char *msgs = NULL, *tools = NULL;
	int rc;
	if (m && u) {
		cJSON_AddStringToObject(u, "role", "user");
		cJSON_AddStringToObject(u, "content", q->prompt);
		cJSON_AddItemToArray(m, u);
		u = NULL;
		msgs = cJSON_PrintUnformatted(m);
		tools = cJSON_PrintUnformatted(q->tools);
	}
	in.messages_json = msgs;
	in.tools_json = tools;
	rc = msgs && tools ? lynn_engine_encode_chat(ee->engine, &in, ids, NULL, err)
			   : lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
	cJSON_Delete(m);
	cJSON_Delete(u);
	cJSON_free(msgs);
	cJSON_free(tools);
	return rc;
}

/* A finished generation handed to `done` as request i's answer */
static int answer(struct lynn_eval_engine *ee, size_t i, const struct lynn_gen_result *res,
		  lynn_client_done_fn done, void *done_ud, struct lynn_err *err)
{
	struct lynn_buf text = LYNN_BUF_INIT;
	struct lynn_chat_out out = { 0 };
	char *reasoning = NULL;
	int rc = lynn_tok_decode(lynn_engine_tok(ee->engine), res->ids.ids, res->ids.n, LYNN_TOK_F_SKIP_SPECIAL,
				 &text, err);
	if (!rc) {
		const char *body = text.data ? text.data : "";
		if (ee->think) {
			/* the reasoning stays out of the graded answer */
			const char *close = strstr(body, "</think>");
			if (close) {
				const char *open = strstr(body, "<think>");
				const char *from = open && open < close ? open + 7 : body;
				reasoning = strndup(from, (size_t)(close - from));
				body = close + 8;
			}
		}
		out.text = body;
		out.reasoning = reasoning ? reasoning : "";
		out.finish_reason = res->finish == LYNN_GEN_EOS ? "stop" : "length";
		out.completion_tokens = (int)res->ids.n;
		out.latency_s = res->t_prefill_s + res->t_decode_s;
		out.attempts = 1;
		out.replica = "in-process";
		if (res->nonfinite)
			ee->n_nonfinite++;
		ee->last_nonfinite = res->nonfinite;
		rc = done ? done(done_ud, i, &out, err) : 0;
	}
	free(reasoning);
	lynn_buf_release(&text);
	return rc;
}

/* lynn_engine_generate_many's callbacks over one side's requests */
struct side {
	struct lynn_eval_engine *ee;
	const struct lynn_chat_req *reqs;
	bool candidate;
	lynn_client_done_fn done;
	void *done_ud;
};

static int side_start(void *ud, size_t i, struct lynn_tok_ids *ids, struct lynn_gen_opts *go, struct lynn_err *err)
{
	const struct side *sd = ud;
	if ((sd->reqs[i].model != NULL) != sd->candidate)
		return 1; /* the other side's */
	lynn_sample_params_init(&go->sample); /* greedy */
	go->max_tokens = sd->reqs[i].max_tokens;
	return encode(sd->ee, &sd->reqs[i], ids, err);
}

static int side_done(void *ud, size_t i, const struct lynn_gen_result *r, const struct lynn_err *gerr,
		     struct lynn_err *err)
{
	const struct side *sd = ud;
	if (!r)
		return lynn_errf(err, gerr->code, "%s", gerr->msg);
	return answer(sd->ee, i, r, sd->done, sd->done_ud, err);
}

int lynn_eval_engine_gen(void *ud, const struct lynn_chat_req *reqs, size_t n,
			 lynn_client_done_fn done, void *done_ud, struct lynn_err *err)
{
	struct lynn_eval_engine *ee = ud;
	bool any[2] = { false, false };
	int rc = 0;

	if (!lynn_engine_tok(ee->engine) || !lynn_engine_template(ee->engine))
		return lynn_errf(err, -LYNN_ENOTFOUND,
				 "eval: the model folder has no tokenizer.json or chat template");
	for (size_t i = 0; i < n; i++)
		any[reqs[i].model != NULL] = true;
	for (int c = 1; c >= 0 && !rc; c--) { /* the candidate's first */
		struct side sd = { ee, reqs, c, done, done_ud };
		if (!any[c])
			continue;
		lynn_engine_adapter_enable(ee->engine, c);
		rc = lynn_engine_generate_many(ee->engine, n, ee->batch, side_start, side_done, &sd, err);
	}
	return rc;
}
