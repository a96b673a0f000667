/* fuzz_serve.c - `lynn serve`'s request parsing (src/serve/oai.c) on
 * arbitrary bodies, as a chat and as a text completion, with the tiny
 * model's tokenizer and chat template: never crashes or leaks; a body is
 * either a checked request or an error with an HTTP status and a message.
 * Also the streamed-events path on whatever the parse accepts, fed with
 * the body's own bytes as "generated" text. What it accepts makes a
 * sampler (the penalties and the logit bias in range), and a chat
 * request's prefix cache points lie within its prompt, in order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/chat.h"
#include "lynn/sample.h"
#include "lynn/tok.h"
#include "serve/serve_internal.h"

#define TINY "tests/fixtures/qwen35moe-tiny"

static struct srv S;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct lynn_err err = { 0 };
	S.tok = lynn_tok_load(TINY "/tokenizer.json", &err);
	S.tmpl = lynn_chat_template_load(TINY, &err);
	if (!S.tok || !S.tmpl)
		abort();
	S.model_name = "tiny";
	S.o.ctx_size = 256;
	S.o.prefix_cache = 1 << 20; /* a chat request also finds its cache point */
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	for (int kind = 0; kind < 2; kind++) {
		struct srv_error e;
		struct srv_req *r = srv_req_parse(&S, kind ? SRV_COMPLETION : SRV_CHAT, (const char *)data, size, &e);
		if (!r) {
			if (e.status < 400 || e.status > 599 || !e.message[0] || !e.type)
				abort();
			free(srv_error_json(&e));
			continue;
		}
		if (r->prompt.n == 0 || (int64_t)r->prompt.n >= S.o.ctx_size ||
		    r->gopts.max_tokens < 1 || (int64_t)r->prompt.n + r->gopts.max_tokens > S.o.ctx_size ||
		    r->gopts.cache_at[0] > r->prompt.n || r->gopts.cache_at[1] > r->prompt.n ||
		    (r->gopts.cache_at[0] && r->gopts.cache_at[0] >= r->gopts.cache_at[1]) ||
		    r->gopts.cache_at[2] != (r->n_choices > 1 ? r->prompt.n - 1 : 0))
			abort();
		/* a sampler can be made of what was accepted (penalties, bias) */
		struct lynn_err se = { 0 };
		struct lynn_sampler *smp = lynn_sampler_create(&r->gopts.sample, lynn_tok_n_vocab(S.tok), &se);
		if (!smp)
			abort();
		lynn_sampler_free(smp);
		struct srv_events ev;
		struct lynn_err err = { 0 };
		if (srv_events_init(&ev, &S, r, r->n_choices - 1, &err) == 0) {
			srv_events_text(&ev, (const char *)data, size / 2);
			srv_events_text(&ev, (const char *)data + size / 2, size - size / 2);
			r->state = SRV_DONE;
			srv_events_end(&ev);
			srv_events_close(&ev, &r, 1);
			srv_events_release(&ev);
		}
		srv_req_free(r);
	}
	return 0;
}
