/*
 * inproc.c - in-process generation for eval: the engine (model + tokenizer
 * + chat template + unmerged LoRA, engine.h) answers the same requests the
 * endpoint client sends, greedily, up to `batch` of them generated together
 * (continuous batching over lynn_engine_step, as `lynn serve` runs them):
 * the candidate's requests with the adapter on, then the base's with it off.
 *
 * The answer is decoded the way the original toolkit decodes it
 * (tokenizer.decode(new_tokens, skip_special_tokens=True)): the generated
 * ids again, special added tokens dropped. A request whose `model` is set
 * runs with the adapter on (the candidate); without, adapter off (the base).
 */
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/engine.h"
#include "lynn/eval.h"
#include "lynn/progress.h"

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

/* One request being generated */
struct slot {
	size_t i;
	struct lynn_gen_opts go; /* borrowed by the gen */
	struct lynn_gen *g;
};

/* The requests of one side (adapter on or off), `batch` at a time: a
 * finished one's slot takes the next request at once. */
static int run_side(struct lynn_eval_engine *ee, const struct lynn_chat_req *reqs, size_t n, bool candidate,
		    lynn_client_done_fn done, void *done_ud, struct lynn_err *err)
{
	const int B = ee->batch > 1 ? ee->batch : 1;
	struct slot *s = calloc((size_t)B, sizeof *s);
	struct lynn_gen **gens = calloc((size_t)B, sizeof *gens);
	size_t next = 0;
	int rc = s && gens ? 0 : lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
	lynn_engine_adapter_enable(ee->engine, candidate);
	for (;;) {
		int active = 0;
		for (int b = 0; b < B && !rc; b++) { /* free slots take the next requests */
			while (!s[b].g && next < n) {
				const size_t i = next++;
				struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
				if ((reqs[i].model != NULL) != candidate)
					continue;
				s[b].i = i;
				memset(&s[b].go, 0, sizeof s[b].go);
				lynn_sample_params_init(&s[b].go.sample); /* greedy */
				s[b].go.max_tokens = reqs[i].max_tokens;
				if (!(rc = encode(ee, &reqs[i], &ids, err)) &&
				    !(s[b].g = lynn_gen_create(ee->engine, ids.ids, ids.n, &s[b].go, err)))
					rc = err && err->code ? err->code : -LYNN_ENOMEM;
				lynn_tok_ids_release(&ids);
				if (rc)
					break;
			}
			if (s[b].g)
				gens[active++] = s[b].g;
		}
		if (rc || !active)
			break;
		if ((rc = lynn_engine_step(ee->engine, gens, (size_t)active, 0, err)))
			break;
		for (int b = 0; b < B && !rc; b++) {
			if (!s[b].g || !lynn_gen_finished(s[b].g))
				continue;
			rc = answer(ee, s[b].i, lynn_gen_result(s[b].g), done, done_ud, err);
			lynn_gen_free(s[b].g);
			s[b].g = NULL;
		}
	}
	for (int b = 0; s && b < B; b++)
		lynn_gen_free(s[b].g);
	free(s);
	free(gens);
	return rc;
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
	for (int side = 1; side >= 0 && !rc; side--) /* the candidate's first */
		if (any[side])
			rc = run_side(ee, reqs, n, side, done, done_ud, err);
	return rc;
}
