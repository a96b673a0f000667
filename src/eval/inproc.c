/*
 * inproc.c - in-process generation for eval and quant-verify: the engine
 * (model + tokenizer + chat template + unmerged LoRA, engine.h) answers the
 * same requests the endpoint client sends, one after the other, greedily.
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

int lynn_eval_engine_gen(void *ud, const struct lynn_chat_req *reqs, size_t n,
			 lynn_client_done_fn done, void *done_ud, struct lynn_err *err)
{
	struct lynn_eval_engine *ee = ud;
	const struct lynn_tok *tok = lynn_engine_tok(ee->engine);
	int rc = 0;

	if (!tok || !lynn_engine_template(ee->engine))
		return lynn_errf(err, -LYNN_ENOTFOUND,
				 "eval: the model folder has no tokenizer.json or chat template");
	for (size_t i = 0; i < n && !rc; i++) {
		const struct lynn_chat_req *q = &reqs[i];
		struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
		struct lynn_gen_result res = { 0 };
		struct lynn_gen_opts go = { 0 };
		struct lynn_buf text = LYNN_BUF_INIT;
		struct lynn_chat_out out = { 0 };
		char *msgs = NULL, *tools = NULL, *reasoning = NULL;
		const char *body;

		lynn_engine_adapter_enable(ee->engine, q->model != NULL);
		if (q->tools && cJSON_GetArraySize(q->tools) > 0) {
			cJSON *m = cJSON_CreateArray(), *u = cJSON_CreateObject();
			struct lynn_chat_input in = { 0 };
			cJSON_AddStringToObject(u, "role", "user");
			cJSON_AddStringToObject(u, "content", q->prompt);
			cJSON_AddItemToArray(m, u);
			msgs = cJSON_PrintUnformatted(m);
			tools = cJSON_PrintUnformatted(q->tools);
			cJSON_Delete(m);
			in.messages_json = msgs;
			in.tools_json = tools;
			in.add_generation_prompt = true;
			in.enable_thinking = ee->think;
			rc = msgs && tools ? lynn_engine_encode_chat(ee->engine, &in, &ids, NULL, err)
					   : lynn_errf(err, -LYNN_ENOMEM, "eval: out of memory");
		} else {
			rc = lynn_engine_encode_prompt(ee->engine, q->prompt, ee->think, &ids, err);
		}
		if (!rc) {
			lynn_sample_params_init(&go.sample); /* greedy */
			go.max_tokens = q->max_tokens;
			rc = lynn_engine_generate(ee->engine, ids.ids, ids.n, &go, &res, err);
		}
		if (!rc)
			rc = lynn_tok_decode(tok, res.ids.ids, res.ids.n, LYNN_TOK_F_SKIP_SPECIAL, &text, err);
		if (!rc) {
			body = text.data ? text.data : "";
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
			out.finish_reason = res.finish == LYNN_GEN_EOS ? "stop" : "length";
			out.completion_tokens = (int)res.ids.n;
			out.latency_s = res.t_prefill_s + res.t_decode_s;
			out.attempts = 1;
			out.replica = "in-process";
			if (res.nonfinite)
				ee->n_nonfinite++;
			ee->last_nonfinite = res.nonfinite;
			rc = done ? done(done_ud, i, &out, err) : 0;
		}
		free(reasoning);
		free(msgs);
		free(tools);
		lynn_buf_release(&text);
		lynn_gen_result_release(&res);
		lynn_tok_ids_release(&ids);
	}
	return rc;
}
