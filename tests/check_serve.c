/*
 * check_serve.c - `lynn serve` (SPEC §7). The server runs in-process on the
 * tiny model (a real libmicrohttpd daemon on a loopback port) and is driven
 * over HTTP with libcurl and with the real `openai` npm client
 * (tests/node/serve_openai.mjs). What it must equal is the engine's own
 * generate (lynn_engine_generate, the path `lynn generate` takes, itself
 * checked against transformers in check_model.c): greedy results served
 * one at a time, streamed, and batched with other requests are the same
 * text. Also: the prefix cache (cached counts, answers as without it),
 * stop strings, the error table, the bounded queue,
 * cancellation on disconnect, the small endpoints, the API key, and the
 * binary's SIGTERM drain.
 */
#include <check.h>
#include <math.h>
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lynn/bench.h"
#include "lynn/buf.h"
#include "lynn/chat.h"
#include "lynn/engine.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/model.h"
#include "lynn/serve.h"
#include "lynn/util.h"
#include "serve/serve_internal.h"
#include "testutil.h"

#define TINY FIXTURES "/qwen35moe-tiny"
#define KEY "test-key-QwErTy"

/* ===== a server on the tiny model ===== */

static struct lynn_engine *eng;
static struct lynn_server *srv;
static int port;

/* with gen_defaults, the sampling defaults lynn serve takes from the
 * model's generation_config.json; else OpenAI's; cache: the prefix
 * cache's bytes */
static void start_with(int parallel, int max_queue, int ctx, const char *key, bool metrics, bool gen_defaults,
		       size_t cache)
{
	struct lynn_err err = { 0 };
	struct lynn_engine_opts eo = { .n_threads = 2 };
	struct lynn_sample_params def;
	struct lynn_server_opts so = { .host = "127.0.0.1", .port = 0, .model_name = "tiny",
				       .parallel = parallel, .max_queue = max_queue, .ctx_size = ctx,
				       .max_prefill = 7, .api_key = key, .metrics = metrics,
				       .prefix_cache = cache };
	eng = lynn_engine_open(TINY, &eo, &err);
	ck_assert_msg(eng, "%s", err.msg);
	if (gen_defaults) {
		ck_assert_int_eq(lynn_server_sampling_defaults(lynn_model_config(lynn_engine_model(eng)),
							       "generation_config.json", &def, &err), 0);
		so.defaults = &def;
	}
	ck_assert_msg(eng, "%s", err.msg);
	srv = lynn_server_start(eng, &so, &err);
	ck_assert_msg(srv, "%s", err.msg);
	port = lynn_server_port(srv);
	ck_assert_int_gt(port, 0);
}

static void start(int parallel, int max_queue, int ctx, const char *key, bool metrics)
{
	start_with(parallel, max_queue, ctx, key, metrics, false, 0);
}

static void stop(void)
{
	lynn_server_stop(srv);
	lynn_engine_close(eng);
	srv = NULL;
	eng = NULL;
}

struct http {
	long status;
	struct lynn_buf body;
};

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
	return lynn_buf_append(ud, p, sz * n) ? 0 : sz * n;
}

/* method GET when body is NULL; auth NULL = no Authorization header;
 * timeout_ms > 0 ends the transfer early (a client that goes away). */
static struct http call(const char *path, const char *body, const char *auth, long timeout_ms)
{
	struct http h = { 0 };
	char url[256], hdr[128];
	struct curl_slist *hs = NULL;
	CURL *c = curl_easy_init();
	snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &h.body);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	hs = curl_slist_append(hs, "Content-Type: application/json");
	if (auth) {
		snprintf(hdr, sizeof hdr, "Authorization: Bearer %s", auth);
		hs = curl_slist_append(hs, hdr);
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 120000L);
	CURLcode rc = curl_easy_perform(c);
	ck_assert_msg(rc == CURLE_OK || (timeout_ms > 0 && rc == CURLE_OPERATION_TIMEDOUT), "%s: %s",
		      path, curl_easy_strerror(rc));
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &h.status);
	curl_slist_free_all(hs);
	curl_easy_cleanup(c);
	if (!h.body.data)
		lynn_buf_puts(&h.body, "");
	return h;
}

static cJSON *ok_json(struct http *h)
{
	cJSON *j = cJSON_Parse(h->body.data);
	ck_assert_msg(h->status == 200 && j, "status %ld: %s", h->status, h->body.data);
	return j;
}

static const char *str_at(const cJSON *o, const char *path)
{
	/* "a.b.0.c": object keys and array indexes */
	char buf[128], *save = NULL;
	snprintf(buf, sizeof buf, "%s", path);
	for (char *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save))
		o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(k)) : cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(o) ? o->valuestring : NULL;
}

/* What the engine generates from `prompt` as raw text (special tokens left
 * out, as the server does by default), greedily or with sp's sampling. */
static char *engine_text_sp(const char *prompt, int max_tokens, const char *stop, bool skip_special,
			    const struct lynn_sample_params *sp)
{
	struct lynn_err err = { 0 };
	struct lynn_tok_ids ids = { 0 };
	struct lynn_gen_result r = { 0 };
	struct lynn_gen_opts go = { .max_tokens = max_tokens, .skip_special = skip_special };
	const char *stops[1] = { stop };
	lynn_sample_params_init(&go.sample);
	if (sp)
		go.sample = *sp;
	go.stop = stops;
	go.n_stop = stop ? 1 : 0;
	ck_assert_int_eq(lynn_engine_encode_text(eng, prompt, &ids, &err), 0);
	ck_assert_int_eq(lynn_engine_generate(eng, ids.ids, ids.n, &go, &r, &err), 0);
	char *t = strndup(r.text.data ? r.text.data : "", r.text.len);
	lynn_tok_ids_release(&ids);
	lynn_gen_result_release(&r);
	return t;
}

static char *engine_text_opt(const char *prompt, int max_tokens, const char *stop, bool skip_special)
{
	return engine_text_sp(prompt, max_tokens, stop, skip_special, NULL);
}

static char *engine_text(const char *prompt, int max_tokens, const char *stop)
{
	return engine_text_opt(prompt, max_tokens, stop, true);
}

/* A /v1/completions body: greedy unless `extra` (more fields, JSON text
 * without braces) sets the temperature. */
static char *completion_body(const char *prompt, int max_tokens, const char *extra)
{
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "prompt", prompt);
	cJSON_AddNumberToObject(b, "max_tokens", max_tokens);
	if (!extra || !strstr(extra, "\"temperature\""))
		cJSON_AddNumberToObject(b, "temperature", 0);
	char *s = cJSON_PrintUnformatted(b), *out;
	cJSON_Delete(b);
	if (!extra)
		return s;
	s[strlen(s) - 1] = 0;
	ck_assert_int_gt(asprintf(&out, "%s,%s}", s, extra), 0);
	free(s);
	return out;
}

/* The texts of a streamed response's n choices (their "text" or "content"
 * deltas, by index) into text[], with the stream's framing checked: each
 * choice finishes once (its finish_reason into finish[], 32 bytes each,
 * when given), nothing comes after a choice's finish or after [DONE], which
 * comes once, and the usage chunk, if any, comes last (its completion
 * tokens the return value, else -1). */
static int stream_choices(const char *sse, int n, struct lynn_buf *text, char (*finish)[32])
{
	int finishes[SRV_MAX_CHOICES] = { 0 }, done = 0, usage = -1;
	for (int i = 0; i < n; i++)
		lynn_buf_puts(&text[i], "");
	for (const char *p = sse; (p = strstr(p, "data: "));) {
		const char *e = strstr(p, "\n\n");
		ck_assert_ptr_nonnull(e);
		ck_assert_int_eq(done, 0); /* nothing after [DONE] */
		if (!strncmp(p + 6, "[DONE]", 6)) {
			done = 1;
			p = e;
			continue;
		}
		cJSON *j = cJSON_ParseWithLength(p + 6, (size_t)(e - p - 6));
		ck_assert_ptr_nonnull(j);
		ck_assert_int_lt(usage, 0); /* the usage chunk comes last */
		if (cJSON_GetObjectItem(j, "usage")) {
			usage = (int)tu_num(cJSON_GetObjectItem(j, "usage"), "completion_tokens");
		} else {
			const int i = (int)tu_num(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "index");
			ck_assert(i >= 0 && i < n);
			ck_assert_int_eq(finishes[i], 0); /* nothing after a choice's finish */
			const char *t = str_at(j, "choices.0.text");
			if (!t)
				t = str_at(j, "choices.0.delta.content");
			if (t)
				lynn_buf_puts(&text[i], t);
			if ((t = str_at(j, "choices.0.finish_reason"))) {
				finishes[i]++;
				if (finish)
					snprintf(finish[i], sizeof finish[i], "%s", t);
			}
		}
		cJSON_Delete(j);
		p = e;
	}
	ck_assert_int_eq(done, 1);
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(finishes[i], 1);
	return usage;
}

/* The text of a streamed one-choice completion (framing checked as by
 * stream_choices), its finish_reason in *finish_out when given. */
static char *stream_text(const char *sse, const char **finish_out)
{
	struct lynn_buf t = { 0 };
	static char finish[1][32];
	stream_choices(sse, 1, &t, finish);
	if (finish_out)
		*finish_out = finish[0];
	return t.data;
}

/* One request on its own thread. */
struct job {
	pthread_t th;
	const char *path;
	char *body;
	long timeout_ms;
	struct http h;
};

static void *job_run(void *p)
{
	struct job *j = p;
	j->h = call(j->path, j->body, NULL, j->timeout_ms);
	return NULL;
}

static const char *const prompts[] = {
	"The sky is", "Once upon a time", "1, 2, 3,", "def main():", "你好，世界", "Dear team,",
};
#define N_PROMPTS (int)(sizeof prompts / sizeof *prompts)

/* Greedy completions served one at a time, streamed, and six at once (four
 * generated together, two queued; prompts fed 7 tokens a step between the
 * others' tokens) are all the engine's own text. */
START_TEST(test_served_equals_engine)
{
	char *want[N_PROMPTS];
	start(4, 8, 4096, NULL, true);
	for (int i = 0; i < N_PROMPTS; i++) {
		want[i] = engine_text(prompts[i], 24, NULL);
		char *b = completion_body(prompts[i], 24, NULL);
		struct http h = call("/v1/completions", b, NULL, 0);
		cJSON *j = ok_json(&h);
		ck_assert_str_eq(str_at(j, "choices.0.text"), want[i]);
		ck_assert_str_eq(str_at(j, "object"), "text_completion");
		cJSON_Delete(j);
		lynn_buf_release(&h.body);
		free(b);
		/* streamed */
		b = completion_body(prompts[i], 24, "\"stream\":true");
		h = call("/v1/completions", b, NULL, 0);
		ck_assert_int_eq(h.status, 200);
		char *t = stream_text(h.body.data, NULL);
		ck_assert_str_eq(t, want[i]);
		free(t);
		lynn_buf_release(&h.body);
		free(b);
	}
	/* all at once */
	struct job jobs[N_PROMPTS] = { 0 };
	for (int i = 0; i < N_PROMPTS; i++) {
		jobs[i].path = "/v1/completions";
		jobs[i].body = completion_body(prompts[i], 24, NULL);
		ck_assert_int_eq(pthread_create(&jobs[i].th, NULL, job_run, &jobs[i]), 0);
	}
	for (int i = 0; i < N_PROMPTS; i++) {
		pthread_join(jobs[i].th, NULL);
		cJSON *j = ok_json(&jobs[i].h);
		ck_assert_msg(!strcmp(str_at(j, "choices.0.text"), want[i]), "prompt %d batched: '%s' vs '%s'", i,
			      str_at(j, "choices.0.text"), want[i]);
		cJSON_Delete(j);
		lynn_buf_release(&jobs[i].h.body);
		free(jobs[i].body);
		free(want[i]);
	}
	/* special tokens stay in with skip_special_tokens: false (vLLM's field) */
	char *want_first = engine_text(prompts[0], 24, NULL);
	for (int i = 0; i < 2; i++) {
		char *keep = engine_text_opt(prompts[i], 24, NULL, false);
		char *b = completion_body(prompts[i], 24, "\"skip_special_tokens\":false");
		struct http h = call("/v1/completions", b, NULL, 0);
		cJSON *j = ok_json(&h);
		ck_assert_str_eq(str_at(j, "choices.0.text"), keep);
		if (i == 0) /* this prompt's greedy text has one (so the two modes differ) */
			ck_assert(strstr(keep, "<|") && strcmp(keep, want_first));
		cJSON_Delete(j);
		lynn_buf_release(&h.body);
		free(b);
		free(keep);
	}
	free(want_first);
	struct http m = call("/metrics", NULL, NULL, 0);
	ck_assert_int_eq(m.status, 200);
	ck_assert_ptr_nonnull(strstr(m.body.data, "\nlynn_requests_succeeded_total 20\n"));
	ck_assert_ptr_nonnull(strstr(m.body.data, "\nlynn_requests_processing 0\n"));
	lynn_buf_release(&m.body);
	stop();
}
END_TEST

/* presence_penalty, frequency_penalty, repetition_penalty (vLLM's) and
 * logit_bias give the engine's text with those sampling settings (the
 * sampler's are checked against transformers in check_model), alone and
 * batched with requests without them, greedy and sampled, and as n = 2
 * choices; and they change the text. */
START_TEST(test_penalties)
{
	static const struct {
		const char *fields;
		float t, rep, pres, freq, bias300;
	} set[] = {
		{ "\"repetition_penalty\":1.3", 0, 1.3f, 0, 0, 0 },
		{ "\"presence_penalty\":1.5,\"frequency_penalty\":0.5", 0, 1, 1.5f, 0.5f, 0 },
		{ "\"temperature\":0.8,\"seed\":7,\"presence_penalty\":-1,\"repetition_penalty\":0.8", 0.8f, 0.8f,
		  -1, 0, 0 },
		{ "\"logit_bias\":{\"300\":8.5},\"presence_penalty\":1", 0, 1, 1, 0, 8.5f },
	};
	const int32_t id300 = 300;
	const int ns = (int)(sizeof set / sizeof *set);
	start(4, 8, 4096, NULL, false);
	struct job jobs[2 * 4] = { 0 };
	char *want[4];
	int changed = 0;
	for (int i = 0; i < ns; i++) {
		struct lynn_sample_params sp;
		lynn_sample_params_init(&sp);
		sp.temperature = set[i].t;
		sp.seed = 7;
		char *plain = engine_text_sp(prompts[2], 32, NULL, true, &sp);
		sp.repetition_penalty = set[i].rep;
		sp.presence_penalty = set[i].pres;
		sp.frequency_penalty = set[i].freq;
		sp.n_bias = set[i].bias300 != 0;
		sp.bias_ids = &id300;
		sp.bias = &set[i].bias300;
		want[i] = engine_text_sp(prompts[2], 32, NULL, true, &sp);
		changed += strcmp(plain, want[i]) != 0;
		free(plain);
		char *b = completion_body(prompts[2], 32, set[i].fields);
		struct http h = call("/v1/completions", b, NULL, 0);
		cJSON *j = ok_json(&h);
		ck_assert_msg(!strcmp(str_at(j, "choices.0.text"), want[i]), "set %d: '%s' vs '%s'", i,
			      str_at(j, "choices.0.text"), want[i]);
		cJSON_Delete(j);
		lynn_buf_release(&h.body);
		/* again, each beside a greedy request without penalties */
		jobs[2 * i].path = jobs[2 * i + 1].path = "/v1/completions";
		jobs[2 * i].body = b;
		jobs[2 * i + 1].body = completion_body(prompts[2], 32, NULL);
	}
	ck_assert_int_eq(changed, ns); /* each set changes this prompt's text */
	for (int i = 0; i < 2 * ns; i++)
		ck_assert_int_eq(pthread_create(&jobs[i].th, NULL, job_run, &jobs[i]), 0);
	for (int i = 0; i < 2 * ns; i++) {
		pthread_join(jobs[i].th, NULL);
		cJSON *j = ok_json(&jobs[i].h);
		if (i % 2 == 0)
			ck_assert_msg(!strcmp(str_at(j, "choices.0.text"), want[i / 2]), "set %d batched", i / 2);
		cJSON_Delete(j);
		lynn_buf_release(&jobs[i].h.body);
		free(jobs[i].body);
	}
	/* two choices (the second a clone of the request, bias and all) */
	char *b = completion_body(prompts[2], 32, "\"n\":2,\"logit_bias\":{\"300\":8.5},\"presence_penalty\":1");
	struct http h = call("/v1/completions", b, NULL, 0);
	cJSON *j = ok_json(&h);
	for (int c = 0; c < 2; c++) {
		char path[32];
		snprintf(path, sizeof path, "choices.%d.text", c);
		ck_assert_str_eq(str_at(j, path), want[ns - 1]);
	}
	cJSON_Delete(j);
	lynn_buf_release(&h.body);
	free(b);
	for (int i = 0; i < ns; i++)
		free(want[i]);
	stop();
}
END_TEST

/* A chat body of `msgs` (a JSON array) */
static char *chat_body(const char *msgs, int max_tokens)
{
	char *b;
	ck_assert_int_gt(asprintf(&b, "{\"messages\":%s,\"max_tokens\":%d,\"temperature\":0}", msgs, max_tokens), 0);
	return b;
}

/* A greedy /v1/completions body over token ids */
static char *ids_body(const int32_t *ids, size_t n, int max_tokens)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
	char *pj = cJSON_PrintUnformatted(a), *b;
	ck_assert_int_gt(asprintf(&b, "{\"prompt\":%s,\"max_tokens\":%d,\"temperature\":0}", pj, max_tokens), 0);
	cJSON_Delete(a);
	free(pj);
	return b;
}

/* How many tokens the prompts of two chat request bodies share from the
 * start (the template and the tokenizer) */
static size_t agreeing_tokens(const char *a, const char *b)
{
	struct lynn_err err = { 0 };
	const char *body[2] = { a, b };
	struct lynn_tok_ids ids[2] = { { 0 }, { 0 } };
	size_t n = 0;
	for (int i = 0; i < 2; i++) {
		char *t = NULL;
		size_t l = 0;
		ck_assert_int_eq(lynn_chat_render_request(lynn_engine_template(eng), body[i], strlen(body[i]), -1, &t,
							  &l, &err), 0);
		ck_assert_int_eq(lynn_tok_encode(lynn_engine_tok(eng), t, l, 0, &ids[i], &err), 0);
		free(t);
	}
	while (n < ids[0].n && n < ids[1].n && ids[0].ids[n] == ids[1].ids[n])
		n++;
	lynn_tok_ids_release(&ids[0]);
	lynn_tok_ids_release(&ids[1]);
	return n;
}

static int cached_tokens(const cJSON *j)
{
	const cJSON *u = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens_details");
	const cJSON *c = cJSON_GetObjectItem(u, "cached_tokens");
	ck_assert_msg(cJSON_IsNumber(c), "usage without prompt_tokens_details.cached_tokens");
	return c->valueint;
}

/* The prefix cache through the server (the engine's is checked against
 * transformers in check_model):
 * - a conversation's second turn starts from the state its first turn
 *   kept before the generation prompt: cached_tokens is where the first
 *   turn's messages rendered without it stop agreeing with the second
 *   turn's prompt, in tokens; its message is the one served without the
 *   cache;
 * - another conversation with the same system message starts from the
 *   state the first turn kept where the two conversations' prompts part
 *   (at the user message's text);
 * - a completion that continues one (token ids: the prompt and its
 *   completion) starts from the state the first left at its end (all but
 *   the last generated token), and its text is the engine's;
 * - the second and third of n = 3 sampled choices start from the first's
 *   state at its prompt's last token, and the choices are those served
 *   without the cache;
 * - with the cache off (0), nothing is cached; the metric counts the
 *   cached tokens. */
START_TEST(test_prefix_cache)
{
	static const char turn1[] = "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
				    "{\"role\":\"user\",\"content\":\"Name three colours.\"}]";
	struct lynn_err err = { 0 };
	char *reply[2] = { NULL, NULL }, *cont[2] = { NULL, NULL }, *choices[2][3];
	struct lynn_gen_result gen = { 0 }, r2 = { 0 };
	for (int on = 0; on < 2; on++) {
		start_with(2, 4, 4096, NULL, true, false, on ? (size_t)64 << 20 : 0);
		char *b = chat_body(turn1, 12);
		struct http h = call("/v1/chat/completions", b, NULL, 0);
		cJSON *j = ok_json(&h);
		ck_assert_int_eq(cached_tokens(j), 0);
		const char *a = str_at(j, "choices.0.message.content");
		ck_assert_ptr_nonnull(a);
		/* the second turn */
		cJSON *msgs = cJSON_Parse(turn1), *m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "role", "assistant");
		cJSON_AddStringToObject(m, "content", a);
		cJSON_AddItemToArray(msgs, m);
		m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "role", "user");
		cJSON_AddStringToObject(m, "content", "And three animals?");
		cJSON_AddItemToArray(msgs, m);
		char *ms = cJSON_PrintUnformatted(msgs), *b2 = chat_body(ms, 12);
		cJSON_Delete(j);
		lynn_buf_release(&h.body);
		/* where the first turn kept its state, from the template and the tokenizer */
		char *b1;
		ck_assert_int_gt(asprintf(&b1, "{\"messages\":%s,\"add_generation_prompt\":false}", turn1), 0);
		const size_t lcp = agreeing_tokens(b1, b2);
		ck_assert_int_gt((int)lcp, 10);
		h = call("/v1/chat/completions", b2, NULL, 0);
		j = ok_json(&h);
		ck_assert_int_eq(cached_tokens(j), on ? (int)lcp : 0);
		reply[on] = strdup(str_at(j, "choices.0.message.content"));
		cJSON_Delete(j);
		lynn_buf_release(&h.body);
		free(b);
		free(b1);
		free(b2);
		free(ms);
		cJSON_Delete(msgs);
		/* another conversation with the same system message starts where
		 * the first turn's system message ended */
		b = chat_body("[{\"role\":\"system\",\"content\":\"Be brief.\"},"
			      "{\"role\":\"user\",\"content\":\"Which city is largest?\"}]", 4);
		char *first = chat_body(turn1, 12);
		const size_t lsys = agreeing_tokens(first, b);
		free(first);
		ck_assert_int_gt((int)lsys, 3);
		h = call("/v1/chat/completions", b, NULL, 0);
		j = ok_json(&h);
		ck_assert_int_eq(cached_tokens(j), on ? (int)lsys : 0);
		cJSON_Delete(j);
		lynn_buf_release(&h.body);
		free(b);

		/* a completion continued from its own tokens; the engine's text from
		 * the first run, where nothing is cached */
		struct lynn_tok_ids p = { 0 };
		struct lynn_gen_opts go = { .max_tokens = 8, .skip_special = true };
		lynn_sample_params_init(&go.sample);
		ck_assert_int_eq(lynn_engine_encode_text(eng, "Once upon a time", &p, &err), 0);
		const size_t np = p.n;
		if (!on) {
			ck_assert_int_eq(lynn_engine_generate(eng, p.ids, np, &go, &gen, &err), 0);
			ck_assert_int_eq((int)gen.ids.n, 8);
		}
		int32_t *all = malloc((np + 8) * sizeof *all);
		memcpy(all, p.ids, np * sizeof *all);
		memcpy(all + np, gen.ids.ids, 8 * sizeof *all);
		for (int k = 0; k < 2; k++) { /* the prompt, then the prompt and its completion */
			char *cb = ids_body(all, k ? np + 8 : np, 8);
			h = call("/v1/completions", cb, NULL, 0);
			free(cb);
			j = ok_json(&h);
			ck_assert_int_eq(cached_tokens(j), k && on ? (int)np + 7 : 0);
			if (k)
				cont[on] = strdup(str_at(j, "choices.0.text"));
			cJSON_Delete(j);
			lynn_buf_release(&h.body);
		}
		if (!on)
			ck_assert_int_eq(lynn_engine_generate(eng, all, np + 8, &go, &r2, &err), 0);
		free(all);
		lynn_tok_ids_release(&p);
		/* n = 3 choices: the second and third wait for the first's prompt
		 * and start from its state at the prompt's last token */
		struct lynn_tok_ids sky = { 0 };
		ck_assert_int_eq(lynn_engine_encode_text(eng, "The sky is", &sky, &err), 0);
		char *nb = completion_body("The sky is", 12, "\"temperature\":0.8,\"seed\":5,\"n\":3");
		h = call("/v1/completions", nb, NULL, 0);
		j = ok_json(&h);
		for (int c = 0; c < 3; c++) {
			char path[32];
			snprintf(path, sizeof path, "choices.%d.text", c);
			choices[on][c] = strdup(str_at(j, path));
		}
		cJSON_Delete(j);
		lynn_buf_release(&h.body);
		free(nb);
		const int twins = on ? 2 * ((int)sky.n - 1) : 0;
		lynn_tok_ids_release(&sky);
		struct http mt = call("/metrics", NULL, NULL, 0);
		char line[96];
		snprintf(line, sizeof line, "\nlynn_prompt_tokens_cached_total %d\n",
			 on ? (int)(lcp + lsys + np + 7) + twins : 0);
		ck_assert_msg(strstr(mt.body.data, line), "%s", mt.body.data);
		lynn_buf_release(&mt.body);
		stop();
	}
	ck_assert_str_eq(reply[1], reply[0]);
	ck_assert_str_eq(cont[0], r2.text.data ? r2.text.data : "");
	ck_assert_str_eq(cont[1], cont[0]);
	for (int c = 0; c < 3; c++)
		ck_assert_msg(!strcmp(choices[1][c], choices[0][c]), "choice %d: '%s' with the cache, '%s' without", c,
			      choices[1][c], choices[0][c]);
	for (int i = 0; i < 2; i++) {
		free(reply[i]);
		free(cont[i]);
		for (int c = 0; c < 3; c++)
			free(choices[i][c]);
	}
	lynn_gen_result_release(&gen);
	lynn_gen_result_release(&r2);
}
END_TEST

/* A chat completion is the template's prompt generated from and parsed:
 * /apply-template is lynn_chat_render_request, and the message's content
 * and reasoning are lynn_chat_parse of the engine's greedy text. */
START_TEST(test_chat_equals_engine)
{
	static const char body[] = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
				   "{\"role\":\"user\",\"content\":\"Name three colours.\"}],"
				   "\"max_tokens\":16,\"temperature\":0}";
	struct lynn_err err = { 0 };
	char *prompt = NULL;
	size_t plen = 0;
	start(2, 4, 4096, NULL, false);
	ck_assert_int_eq(lynn_chat_render_request(lynn_engine_template(eng), body, sizeof body - 1, -1, &prompt,
						  &plen, &err), 0);
	struct http h = call("/apply-template", body, NULL, 0);
	cJSON *j = ok_json(&h);
	ck_assert_str_eq(str_at(j, "prompt"), prompt);
	cJSON_Delete(j);
	lynn_buf_release(&h.body);

	/* vLLM's newer "reasoning" on an assistant message reaches the template as reasoning_content */
	{
		static const char rc_body[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":"
					      "\"assistant\",\"content\":\"A\",\"reasoning_content\":\"mull it over\"}]}";
		static const char r_body[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":"
					     "\"assistant\",\"content\":\"A\",\"reasoning\":\"mull it over\"}]}";
		char *want = NULL;
		size_t wlen = 0;
		ck_assert_int_eq(lynn_chat_render_request(lynn_engine_template(eng), rc_body, sizeof rc_body - 1, -1,
							  &want, &wlen, &err), 0);
		ck_assert_ptr_nonnull(strstr(want, "mull it over"));
		struct http ha = call("/apply-template", r_body, NULL, 0);
		cJSON *ja = ok_json(&ha);
		ck_assert_str_eq(str_at(ja, "prompt"), want);
		cJSON_Delete(ja);
		lynn_buf_release(&ha.body);
		free(want);
	}

	/* tool_choice "none": the model is not shown the tools */
	{
		static const char plain[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}";
		static const char none[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}],\"tools\":[{\"type\":"
					   "\"function\",\"function\":{\"name\":\"get_weather\"}}],\"tool_choice\":\"none\"}";
		static const char tools[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}],\"tools\":[{\"type\":"
					    "\"function\",\"function\":{\"name\":\"get_weather\"}}]}";
		struct http hp = call("/apply-template", plain, NULL, 0), hn = call("/apply-template", none, NULL, 0);
		struct http ht = call("/apply-template", tools, NULL, 0);
		cJSON *jp = ok_json(&hp), *jn = ok_json(&hn), *jt = ok_json(&ht);
		ck_assert_str_eq(str_at(jn, "prompt"), str_at(jp, "prompt"));
		ck_assert_ptr_nonnull(strstr(str_at(jt, "prompt"), "get_weather")); /* shown when not "none" */
		cJSON_Delete(jp);
		cJSON_Delete(jn);
		cJSON_Delete(jt);
		lynn_buf_release(&hp.body);
		lynn_buf_release(&hn.body);
		lynn_buf_release(&ht.body);
	}

	struct lynn_tok_ids ids = { 0 };
	struct lynn_gen_result r = { 0 };
	struct lynn_gen_opts go = { .max_tokens = 16, .skip_special = true };
	struct lynn_chat_parse_opts po = { .in_think = lynn_chat_prompt_in_think(prompt, plen) };
	struct lynn_chat_msg msg = { 0 };
	lynn_sample_params_init(&go.sample);
	ck_assert_int_eq(lynn_tok_encode(lynn_engine_tok(eng), prompt, plen, 0, &ids, &err), 0);
	ck_assert_int_eq(lynn_engine_generate(eng, ids.ids, ids.n, &go, &r, &err), 0);
	ck_assert_int_eq(lynn_chat_parse(r.text.data ? r.text.data : "", r.text.len, &po, &msg, &err), 0);

	h = call("/v1/chat/completions", body, NULL, 0);
	j = ok_json(&h);
	ck_assert_str_eq(str_at(j, "object"), "chat.completion");
	ck_assert_str_eq(str_at(j, "choices.0.message.content"), msg.content);
	const char *rc = str_at(j, "choices.0.message.reasoning_content");
	ck_assert_str_eq(rc ? rc : "", msg.reasoning_content);
	ck_assert_str_eq(str_at(j, "choices.0.finish_reason"), r.finish == LYNN_GEN_LENGTH ? "length" : "stop");
	const cJSON *u = cJSON_GetObjectItem(j, "usage");
	ck_assert_int_eq((int)tu_num(u, "prompt_tokens"), (int)ids.n);
	ck_assert_int_eq((int)tu_num(u, "completion_tokens"), (int)r.ids.n);
	cJSON_Delete(j);
	lynn_buf_release(&h.body);
	lynn_chat_msg_release(&msg);
	lynn_gen_result_release(&r);
	lynn_tok_ids_release(&ids);
	free(prompt);
	stop();
}
END_TEST

/* n choices are n requests with seeds seed, seed + 1, …: each choice is
 * the text one request with that seed gives, sampled (temperature 1). */
START_TEST(test_n_choices)
{
	char extra[160];
	start(4, 8, 4096, NULL, false);
	snprintf(extra, sizeof extra, "\"temperature\":1,\"seed\":41,\"n\":3,\"stop\":\"zzz\"");
	char *b = completion_body(prompts[1], 16, extra);
	struct http h = call("/v1/completions", b, NULL, 0);
	cJSON *j = ok_json(&h), *ch = cJSON_GetObjectItem(j, "choices");
	ck_assert_int_eq(cJSON_GetArraySize(ch), 3);
	int completion = 0, distinct = 0;
	const char *prev = NULL;
	for (int i = 0; i < 3; i++) {
		cJSON *c = cJSON_GetArrayItem(ch, i);
		ck_assert_int_eq((int)tu_num(c, "index"), i);
		snprintf(extra, sizeof extra, "\"temperature\":1,\"seed\":%d", 41 + i);
		char *b1 = completion_body(prompts[1], 16, extra);
		struct http h1 = call("/v1/completions", b1, NULL, 0);
		cJSON *j1 = ok_json(&h1);
		const char *t = cJSON_GetObjectItem(c, "text")->valuestring;
		ck_assert_str_eq(t, str_at(j1, "choices.0.text"));
		completion += (int)tu_num(cJSON_GetObjectItem(j1, "usage"), "completion_tokens");
		distinct += !prev || strcmp(prev, t) != 0;
		prev = t;
		cJSON_Delete(j1);
		lynn_buf_release(&h1.body);
		free(b1);
	}
	ck_assert_int_ge(distinct, 2); /* different seeds, different samples */
	ck_assert_int_eq((int)tu_num(cJSON_GetObjectItem(j, "usage"), "completion_tokens"), completion);
	/* streamed, the same body: each choice's chunks carry its index, its
	 * text is the choice's above and it finishes once; then one usage
	 * chunk over the three, and [DONE] */
	snprintf(extra, sizeof extra,
		 "\"temperature\":1,\"seed\":41,\"n\":3,\"stop\":\"zzz\",\"stream\":true,"
		 "\"stream_options\":{\"include_usage\":true}");
	char *bs = completion_body(prompts[1], 16, extra);
	struct http hs = call("/v1/completions", bs, NULL, 0);
	ck_assert_int_eq(hs.status, 200);
	struct lynn_buf text[3] = { { 0 } };
	ck_assert_int_eq(stream_choices(hs.body.data, 3, text, NULL), completion);
	for (int i = 0; i < 3; i++) {
		ck_assert_str_eq(text[i].data, cJSON_GetObjectItem(cJSON_GetArrayItem(ch, i), "text")->valuestring);
		lynn_buf_release(&text[i]);
	}
	lynn_buf_release(&hs.body);
	free(bs);
	cJSON_Delete(j);
	lynn_buf_release(&h.body);
	free(b);
	stop();
}
END_TEST

/* The sampling a request leaves out: generation_config.json's (the tiny
 * model's: temperature 1, top_k 20, top_p 0.95) when the server takes it,
 * so a request with no sampling fields gives, seed for seed, the text of
 * one that sets those three, and not the text of OpenAI's defaults
 * (temperature 1, no top-k, top_p 1); a request's own fields still win. */
START_TEST(test_generation_config_defaults)
{
	const char *bodies[] = {
		"{\"prompt\":\"The sky is\",\"max_tokens\":12,\"ignore_eos\":true,\"seed\":5}",
		"{\"prompt\":\"The sky is\",\"max_tokens\":12,\"ignore_eos\":true,\"seed\":5,"
		"\"temperature\":1,\"top_k\":20,\"top_p\":0.95}",
		"{\"prompt\":\"The sky is\",\"max_tokens\":12,\"ignore_eos\":true,\"seed\":5,"
		"\"temperature\":1,\"top_k\":0,\"top_p\":1}",
	};
	char *text[2][3];
	for (int g = 0; g < 2; g++) {
		start_with(2, 8, 4096, NULL, false, g == 1, 0);
		for (int i = 0; i < 3; i++) {
			struct http h = call("/v1/completions", bodies[i], NULL, 0);
			cJSON *j = ok_json(&h);
			text[g][i] = strdup(str_at(j, "choices.0.text"));
			cJSON_Delete(j);
			lynn_buf_release(&h.body);
		}
		stop();
	}
	/* OpenAI's defaults: no fields = the third body; generation_config's:
	 * no fields = the second, which differs from the third */
	ck_assert_str_eq(text[0][0], text[0][2]);
	ck_assert_str_eq(text[1][0], text[1][1]);
	ck_assert_str_ne(text[1][0], text[1][2]);
	ck_assert_str_eq(text[1][1], text[0][1]);
	ck_assert_str_eq(text[1][2], text[0][2]);
	for (int g = 0; g < 2; g++)
		for (int i = 0; i < 3; i++)
			free(text[g][i]);
	/* the file's values are checked as a request's would be */
	struct lynn_config c = { .gen_temperature = NAN, .gen_top_p = 0, .gen_min_p = NAN,
				 .gen_repetition_penalty = NAN, .gen_top_k = -1 };
	struct lynn_sample_params p;
	struct lynn_err e = { 0 };
	ck_assert_int_eq(lynn_server_sampling_defaults(&c, "x/generation_config.json", &p, &e), -LYNN_EFORMAT);
	ck_assert_msg(strstr(e.msg, "x/generation_config.json") && strstr(e.msg, "'top_p'"), "%s", e.msg);
	c.gen_top_p = NAN;
	c.gen_temperature = 2.5;
	ck_assert_int_eq(lynn_server_sampling_defaults(&c, "x", &p, &e), -LYNN_EFORMAT);
	ck_assert_ptr_nonnull(strstr(e.msg, "'temperature'"));
	c.gen_temperature = NAN;
	c.gen_min_p = 1;
	ck_assert_int_eq(lynn_server_sampling_defaults(&c, "x", &p, &e), -LYNN_EFORMAT);
	ck_assert_ptr_nonnull(strstr(e.msg, "'min_p'"));
	c.gen_min_p = 0.05;
	c.gen_repetition_penalty = 0;
	ck_assert_int_eq(lynn_server_sampling_defaults(&c, "x", &p, &e), -LYNN_EFORMAT);
	ck_assert_ptr_nonnull(strstr(e.msg, "'repetition_penalty'"));
	c.gen_repetition_penalty = 1.05;
	c.gen_top_k = 40;
	ck_assert_int_eq(lynn_server_sampling_defaults(&c, "x", &p, &e), 0);
	ck_assert(p.temperature == 1.0f && p.top_p == 1.0f && p.top_k == 40 && p.min_p == 0.05f &&
		  p.repetition_penalty == 1.05f && p.presence_penalty == 0 && p.frequency_penalty == 0);
}
END_TEST

/* A stop string ends the text where it first occurs (it is not part of
 * it), streamed or not; a string whose first character occurs but which
 * itself never does is held back and then released, so nothing is lost. */
START_TEST(test_stop_strings)
{
	start(2, 4, 4096, NULL, false);
	for (int i = 0; i < N_PROMPTS; i++) {
		char *want = engine_text(prompts[i], 24, NULL), stop[8], never[16], extra[96];
		size_t n = strlen(want), k = n / 2;
		while (k > 0 && (want[k] & 0xC0) == 0x80)
			k--;
		size_t len = 1;
		while (k + len < n && (want[k + len] & 0xC0) == 0x80)
			len++;
		if (n < 4 || len >= sizeof stop) {
			free(want);
			continue;
		}
		memcpy(stop, want + k, len);
		stop[len] = 0;
		snprintf(never, sizeof never, "%s\x01\x02", stop);
		const size_t cut = (size_t)(strstr(want, stop) - want);
		for (int streamed = 0; streamed < 2; streamed++) {
			cJSON *sj = cJSON_CreateString(stop);
			char *js = cJSON_PrintUnformatted(sj);
			snprintf(extra, sizeof extra, "\"stop\":[%s]%s", js, streamed ? ",\"stream\":true" : "");
			cJSON_Delete(sj);
			free(js);
			char *b = completion_body(prompts[i], 24, extra);
			struct http h = call("/v1/completions", b, NULL, 0);
			const char *fin = NULL;
			char *got;
			if (streamed) {
				got = stream_text(h.body.data, &fin);
			} else {
				cJSON *j = ok_json(&h);
				got = strdup(str_at(j, "choices.0.text"));
				fin = str_at(j, "choices.0.finish_reason");
				ck_assert_str_eq(fin, "stop");
				cJSON_Delete(j);
			}
			ck_assert_int_eq(strlen(got), cut);
			ck_assert_int_eq(memcmp(got, want, cut), 0);
			if (streamed)
				ck_assert_str_eq(fin, "stop");
			free(got);
			free(b);
			lynn_buf_release(&h.body);
			/* the never-matching one */
			sj = cJSON_CreateString(never);
			js = cJSON_PrintUnformatted(sj);
			snprintf(extra, sizeof extra, "\"stop\":[%s]%s", js, streamed ? ",\"stream\":true" : "");
			cJSON_Delete(sj);
			free(js);
			b = completion_body(prompts[i], 24, extra);
			h = call("/v1/completions", b, NULL, 0);
			if (streamed) {
				got = stream_text(h.body.data, NULL);
			} else {
				cJSON *j = ok_json(&h);
				got = strdup(str_at(j, "choices.0.text"));
				cJSON_Delete(j);
			}
			ck_assert_str_eq(got, want);
			free(got);
			free(b);
			lynn_buf_release(&h.body);
		}
		free(want);
	}
	stop();
}
END_TEST

/* Bad requests: status, OpenAI error type and the field named. The server
 * stays up (every case runs against the same one) and never shows its key. */
static const struct {
	const char *path, *body, *auth;
	int status;
	const char *type, *param;
} bad[] = {
	{ "/v1/chat/completions", "{", KEY, 400, "invalid_request_error", NULL },
	{ "/v1/chat/completions", "[1]", KEY, 400, "invalid_request_error", NULL },
	{ "/v1/chat/completions", "{}", KEY, 400, "invalid_request_error", "messages" },
	{ "/v1/chat/completions", "{\"messages\":[]}", KEY, 400, "invalid_request_error", "messages" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", KEY, 400,
	  "invalid_request_error", "messages" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", KEY,
	  400, "invalid_request_error", "messages" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}", KEY,
	  400, "invalid_request_error", "temperature" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}", KEY, 400,
	  "invalid_request_error", "top_p" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", KEY,
	  400, "invalid_request_error", "max_tokens" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1.5}", KEY,
	  400, "invalid_request_error", "max_tokens" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}", KEY, 400,
	  "invalid_request_error", "n" },
	{ "/v1/chat/completions",
	  "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream_options\":{\"include_usage\":true}}", KEY,
	  400, "invalid_request_error", "stream_options" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", KEY,
	  400, "invalid_request_error", "top_logprobs" },
	{ "/v1/chat/completions",
	  "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", KEY, 400,
	  "invalid_request_error", "top_logprobs" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"logprobs\":-1}", KEY, 400, "invalid_request_error", "logprobs" },
	{ "/v1/chat/completions",
	  "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}", KEY,
	  400, "invalid_request_error", "response_format" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
	  KEY, 400, "invalid_request_error", "tool_choice" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}",
	  KEY, 400, "invalid_request_error", "tools" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"\"]}", KEY, 400,
	  "invalid_request_error", "stop" },
	{ "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":\"gpt-9\"}", KEY,
	  404, "not_found_error", "model" },
	{ "/v1/completions", "{\"prompt\":\"" "a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a"
	  "\"}", KEY, 400, "exceed_context_size_error", NULL },
	{ "/v1/completions", "{\"prompt\":[1,2,99999999]}", KEY, 400, "invalid_request_error", "prompt" },
	{ "/v1/completions", "{\"prompt\":7}", KEY, 400, "invalid_request_error", "prompt" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"echo\":true}", KEY, 400, "invalid_request_error", "echo" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"presence_penalty\":2.5}", KEY, 400, "invalid_request_error",
	  "presence_penalty" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"frequency_penalty\":\"1\"}", KEY, 400, "invalid_request_error",
	  "frequency_penalty" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"repetition_penalty\":0}", KEY, 400, "invalid_request_error",
	  "repetition_penalty" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"repetition_penalty\":-1}", KEY, 400, "invalid_request_error",
	  "repetition_penalty" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":[1]}", KEY, 400, "invalid_request_error", "logit_bias" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"x\":1}}", KEY, 400, "invalid_request_error",
	  "logit_bias" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", KEY, 400, "invalid_request_error",
	  "logit_bias" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"5\":1,\"05\":2}}", KEY, 400,
	  "invalid_request_error", "logit_bias" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"99999999\":1}}", KEY, 400,
	  "invalid_request_error", "logit_bias" },
	{ "/v1/completions", "{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", KEY, 400, "invalid_request_error",
	  "logit_bias" },
	{ "/v1/completions", "{\"prompt\":\"x\"}", NULL, 401, "authentication_error", NULL },
	{ "/v1/completions", "{\"prompt\":\"x\"}", "wrong", 401, "authentication_error", NULL },
	{ "/v1/models", NULL, "test-key-QwErTyX", 401, "authentication_error", NULL },
	{ "/tokenize", "{\"content\":5}", KEY, 400, "invalid_request_error", "content" },
	{ "/detokenize", "{\"tokens\":[-1]}", KEY, 400, "invalid_request_error", "tokens" },
	{ "/detokenize", "{\"tokens\":[100000000]}", KEY, 400, "invalid_request_error", "tokens" },
	{ "/v1/nothing", NULL, KEY, 404, "not_found_error", NULL },
	{ "/v1/embeddings", "{}", KEY, 501, "not_supported_error", NULL },
	{ "/metrics", NULL, KEY, 501, "not_supported_error", NULL },
};

START_TEST(test_errors)
{
	start(2, 4, 32, KEY, false);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		struct http h = call(bad[i].path, bad[i].body, bad[i].auth, 0);
		cJSON *j = cJSON_Parse(h.body.data);
		ck_assert_msg(h.status == bad[i].status && j, "case %zu: status %ld: %s", i, h.status, h.body.data);
		ck_assert_msg(!strcmp(str_at(j, "error.type"), bad[i].type), "case %zu: %s", i, h.body.data);
		ck_assert_int_eq((int)tu_num(cJSON_GetObjectItem(j, "error"), "code"), bad[i].status);
		ck_assert_ptr_nonnull(str_at(j, "error.message"));
		const char *param = str_at(j, "error.param");
		ck_assert_msg(bad[i].param ? param && !strcmp(param, bad[i].param) : !param, "case %zu: %s", i,
			      h.body.data);
		ck_assert_msg(!strstr(h.body.data, "QwErTy"), "case %zu shows the key", i);
		if (!strcmp(bad[i].type, "exceed_context_size_error")) {
			ck_assert_int_eq((int)tu_num(cJSON_GetObjectItem(j, "error"), "n_ctx"), 32);
			ck_assert_int_ge((int)tu_num(cJSON_GetObjectItem(j, "error"), "n_prompt_tokens"), 32);
		}
		cJSON_Delete(j);
		lynn_buf_release(&h.body);
	}
	/* /health needs no key; the rest does and works with it */
	struct http h = call("/health", NULL, NULL, 0);
	cJSON *j = ok_json(&h);
	ck_assert_str_eq(str_at(j, "status"), "ok");
	cJSON_Delete(j);
	lynn_buf_release(&h.body);
	h = call("/v1/models", NULL, KEY, 0);
	j = ok_json(&h);
	ck_assert_str_eq(str_at(j, "data.0.id"), "tiny");
	cJSON_Delete(j);
	lynn_buf_release(&h.body);
	/* a body over 8 MiB */
	char *big = malloc((9u << 20) + 1);
	memset(big, ' ', 9u << 20);
	big[9u << 20] = 0;
	h = call("/v1/completions", big, KEY, 0);
	ck_assert_int_eq(h.status, 413);
	lynn_buf_release(&h.body);
	free(big);
	stop();
}
END_TEST

static int metric(const char *name)
{
	struct http m = call("/metrics", NULL, NULL, 0);
	char key[96];
	snprintf(key, sizeof key, "\n%s ", name);
	const char *p = strstr(m.body.data, key);
	ck_assert_msg(p, "%s not in %s", name, m.body.data);
	int v = atoi(p + strlen(key));
	lynn_buf_release(&m.body);
	return v;
}

/* Waits up to 10 s for metric `name` to reach v. */
static void await_metric(const char *name, int v)
{
	for (int t = 0; t < 200 && metric(name) != v; t++)
		usleep(50000);
	ck_assert_int_eq(metric(name), v);
}

/* One slot and no queue: a second request is refused with 503 while the
 * first runs; a client that goes away (streamed or not) cancels its
 * request, which frees the slot. */
START_TEST(test_queue_and_cancel)
{
	static const char endless[] = "{\"prompt\":\"The sky is\",\"max_tokens\":900000,\"ignore_eos\":true%s}";
	char body[160];
	start(1, 0, 1000000, NULL, true);
	for (int streamed = 0; streamed < 2; streamed++) {
		struct job a = { .path = "/v1/completions", .timeout_ms = 1500 };
		snprintf(body, sizeof body, endless, streamed ? ",\"stream\":true" : "");
		a.body = body;
		ck_assert_int_eq(pthread_create(&a.th, NULL, job_run, &a), 0);
		await_metric("lynn_requests_processing", 1);
		/* the token counter moves while the request runs */
		const int before = metric("lynn_tokens_predicted_total");
		for (int t = 0; t < 100 && metric("lynn_tokens_predicted_total") == before; t++)
			usleep(20000);
		ck_assert_int_gt(metric("lynn_tokens_predicted_total"), before);
		struct http h = call("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2}", NULL, 0);
		ck_assert_int_eq(h.status, 503);
		ck_assert_ptr_nonnull(strstr(h.body.data, "unavailable_error"));
		lynn_buf_release(&h.body);
		pthread_join(a.th, NULL);
		lynn_buf_release(&a.h.body);
		await_metric("lynn_requests_cancelled_total", streamed + 1);
		await_metric("lynn_requests_processing", 0);
	}
	ck_assert_int_eq(metric("lynn_requests_rejected_total"), 2);
	/* the slot is free again */
	struct http h = call("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":2}", NULL, 0);
	cJSON *j = ok_json(&h);
	cJSON_Delete(j);
	lynn_buf_release(&h.body);
	stop();
}
END_TEST

/* 24 clients at once against 2 slots and a queue of 4: each gets its
 * completion or a 503 error object, none hangs, and the server is idle and
 * healthy afterwards. */
START_TEST(test_overload)
{
	enum { N = 24 };
	struct job jobs[N] = { 0 };
	int ok = 0, busy = 0;
	start(2, 4, 4096, NULL, true);
	for (int i = 0; i < N; i++) {
		jobs[i].path = "/v1/completions";
		jobs[i].body = completion_body(prompts[i % N_PROMPTS], 6, NULL);
		ck_assert_int_eq(pthread_create(&jobs[i].th, NULL, job_run, &jobs[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(jobs[i].th, NULL);
		cJSON *j = cJSON_Parse(jobs[i].h.body.data);
		ck_assert_ptr_nonnull(j);
		if (jobs[i].h.status == 200) {
			ck_assert_ptr_nonnull(str_at(j, "choices.0.text"));
			ok++;
		} else {
			ck_assert_int_eq(jobs[i].h.status, 503);
			ck_assert_str_eq(str_at(j, "error.type"), "unavailable_error");
			busy++;
		}
		cJSON_Delete(j);
		lynn_buf_release(&jobs[i].h.body);
		free(jobs[i].body);
	}
	ck_assert_int_ge(ok, 2);
	ck_assert_int_eq(ok + busy, N);
	ck_assert_int_eq(metric("lynn_requests_rejected_total"), busy);
	ck_assert_int_eq(metric("lynn_requests_succeeded_total"), ok);
	ck_assert_int_eq(metric("lynn_requests_processing"), 0);
	ck_assert_int_eq(metric("lynn_requests_deferred"), 0);
	struct http h = call("/health", NULL, NULL, 0);
	ck_assert_int_eq(h.status, 200);
	lynn_buf_release(&h.body);
	stop();
}
END_TEST

/* /tokenize and /detokenize are the tokenizer's encode and decode. */
START_TEST(test_tokenize_endpoints)
{
	static const char text[] = "Hello 世界<|im_end|> tokens!";
	struct lynn_err err = { 0 };
	struct lynn_tok_ids ids = { 0 };
	start(1, 1, 4096, NULL, false);
	ck_assert_int_eq(lynn_tok_encode(lynn_engine_tok(eng), text, sizeof text - 1, 0, &ids, &err), 0);
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "content", text);
	char *bs = cJSON_PrintUnformatted(b);
	struct http h = call("/tokenize", bs, NULL, 0);
	cJSON *j = ok_json(&h), *t = cJSON_GetObjectItem(j, "tokens");
	ck_assert_int_eq(cJSON_GetArraySize(t), (int)ids.n);
	for (size_t i = 0; i < ids.n; i++)
		ck_assert_int_eq(cJSON_GetArrayItem(t, (int)i)->valueint, ids.ids[i]);
	/* back */
	cJSON *d = cJSON_CreateObject();
	cJSON_AddItemReferenceToObject(d, "tokens", t);
	char *ds = cJSON_PrintUnformatted(d);
	struct http h2 = call("/detokenize", ds, NULL, 0);
	cJSON *j2 = ok_json(&h2);
	ck_assert_str_eq(str_at(j2, "content"), text);
	/* with pieces: they join to the text */
	cJSON_AddTrueToObject(b, "with_pieces");
	free(bs);
	bs = cJSON_PrintUnformatted(b);
	struct http h3 = call("/tokenize", bs, NULL, 0);
	cJSON *j3 = ok_json(&h3), *p;
	struct lynn_buf joined = { 0 };
	cJSON_ArrayForEach(p, cJSON_GetObjectItem(j3, "tokens")) {
		const cJSON *piece = cJSON_GetObjectItem(p, "piece"), *byte;
		if (cJSON_IsString(piece)) {
			lynn_buf_puts(&joined, piece->valuestring);
			continue;
		}
		ck_assert(cJSON_IsArray(piece)); /* part of a character: its bytes */
		cJSON_ArrayForEach(byte, piece)
			lynn_buf_putc(&joined, (char)byte->valueint);
	}
	ck_assert_str_eq(joined.data, text);
	lynn_buf_release(&joined);
	cJSON_Delete(j3);
	cJSON_Delete(j2);
	cJSON_Delete(d);
	cJSON_Delete(j);
	cJSON_Delete(b);
	free(bs);
	free(ds);
	lynn_buf_release(&h.body);
	lynn_buf_release(&h2.body);
	lynn_buf_release(&h3.body);
	lynn_tok_ids_release(&ids);
	stop();
}
END_TEST

/* A generated text with reasoning and a Qwen3.5 XML tool call (the random
 * tiny model does not write one), as a finished chat request. */
static const char tc_tools[] = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
			       "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
			       "\"days\":{\"type\":\"integer\"}}}}}]";
static const char tc_text[] = "Let me check.\n</think>\n\nSure.\n<tool_call>\n<function=get_weather>\n"
			      "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
			      "</function>\n</tool_call>";

static struct srv_req *tool_call_req(void)
{
	struct srv_req *r = calloc(1, sizeof *r);
	r->kind = SRV_CHAT;
	snprintf(r->id, sizeof r->id, "chatcmpl-test");
	r->tools_json = strdup(tc_tools);
	r->parse.tools_json = r->tools_json;
	r->parse.in_think = true;
	r->prompt.n = 10;
	r->include_usage = true;
	lynn_buf_puts(&r->res.text, tc_text);
	r->res.finish = LYNN_GEN_EOS;
	pthread_cond_init(&r->cv, NULL);
	return r;
}

static void check_weather_call(const char *name, const char *arguments)
{
	ck_assert_str_eq(name, "get_weather");
	cJSON *args = cJSON_Parse(arguments);
	ck_assert_str_eq(cJSON_GetObjectItem(args, "city")->valuestring, "Paris");
	ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(args, "days")));
	ck_assert_int_eq(cJSON_GetObjectItem(args, "days")->valueint, 3);
	cJSON_Delete(args);
}

/* The whole response: content, reasoning_content, tool_calls with the
 * arguments typed by the tool's schema, finish_reason tool_calls. */
START_TEST(test_tool_call_response)
{
	struct srv s = { .model_name = "tiny" };
	struct srv_req *r = tool_call_req();
	char *js = srv_response(&s, &r, 1);
	cJSON *j = cJSON_Parse(js);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(str_at(j, "choices.0.message.content"), "Sure.");
	ck_assert_str_eq(str_at(j, "choices.0.message.reasoning_content"), "Let me check.");
	ck_assert_str_eq(str_at(j, "choices.0.message.tool_calls.0.type"), "function");
	check_weather_call(str_at(j, "choices.0.message.tool_calls.0.function.name"),
			   str_at(j, "choices.0.message.tool_calls.0.function.arguments"));
	ck_assert_str_eq(str_at(j, "choices.0.finish_reason"), "tool_calls");
	cJSON_Delete(j);
	free(js);
	/* a call alone: content is null, as OpenAI sends it */
	lynn_buf_reset(&r->res.text);
	lynn_buf_puts(&r->res.text, strstr(tc_text, "<tool_call>"));
	r->parse.in_think = false;
	js = srv_response(&s, &r, 1);
	j = cJSON_Parse(js);
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(
		cJSON_GetObjectItem(j, "choices"), 0), "message"), "content")));
	ck_assert_str_eq(str_at(j, "choices.0.message.tool_calls.0.function.name"), "get_weather");
	cJSON_Delete(j);
	free(js);
	/* tool_choice "none": the call stays text in the content, streamed or not */
	r->parse.no_tools = true;
	r->parse.tools_json = NULL;
	js = srv_response(&s, &r, 1);
	j = cJSON_Parse(js);
	const char *content = str_at(j, "choices.0.message.content");
	ck_assert_ptr_nonnull(content);
	ck_assert_ptr_nonnull(strstr(content, "<tool_call>\n<function=get_weather>"));
	ck_assert_ptr_null(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(
		cJSON_GetObjectItem(j, "choices"), 0), "message"), "tool_calls"));
	ck_assert_str_eq(str_at(j, "choices.0.finish_reason"), "stop");
	struct srv_events ev;
	struct lynn_err err = { 0 };
	ck_assert_int_eq(srv_events_init(&ev, &s, r, 0, &err), 0);
	for (size_t i = 0; i < r->res.text.len; i += 3)
		srv_events_text(&ev, r->res.text.data + i, LYNN_MIN(3, r->res.text.len - i));
	r->state = SRV_DONE;
	srv_events_end(&ev);
	srv_events_close(&ev, &r, 1);
	ck_assert_ptr_null(strstr(ev.out.data, "tool_calls"));
	srv_events_release(&ev);
	cJSON_Delete(j);
	free(js);
	srv_req_free(r);
}
END_TEST

/* The same text streamed in pieces of 1..7 bytes: the role chunk first,
 * the reasoning and content deltas join to the whole response's, the call
 * comes whole in one tool_calls delta, one finish_reason (tool_calls), the
 * usage chunk, [DONE]; a failed request ends with the error object and
 * [DONE] instead. */
START_TEST(test_tool_call_stream)
{
	struct srv s = { .model_name = "tiny" };
	for (size_t piece = 1; piece <= 7; piece++) {
		struct srv_req *r = tool_call_req();
		struct srv_events ev;
		struct lynn_err err = { 0 };
		ck_assert_int_eq(srv_events_init(&ev, &s, r, 0, &err), 0);
		for (size_t i = 0; i < sizeof tc_text - 1; i += piece)
			srv_events_text(&ev, tc_text + i, LYNN_MIN(piece, sizeof tc_text - 1 - i));
		r->state = SRV_DONE;
		srv_events_end(&ev);
		srv_events_close(&ev, &r, 1);
		struct lynn_buf reason = { 0 }, content = { 0 };
		int n = 0, calls = 0, finishes = 0, usage = 0;
		lynn_buf_puts(&reason, "");
		lynn_buf_puts(&content, "");
		for (const char *p = ev.out.data; (p = strstr(p, "data: ")); n++) {
			const char *e = strstr(p, "\n\n");
			if (!strncmp(p + 6, "[DONE]", 6)) {
				ck_assert_str_eq(e + 2, "");
				break;
			}
			cJSON *j = cJSON_ParseWithLength(p + 6, (size_t)(e - p - 6));
			ck_assert_ptr_nonnull(j);
			ck_assert_str_eq(str_at(j, "id"), "chatcmpl-test");
			if (n == 0)
				ck_assert_str_eq(str_at(j, "choices.0.delta.role"), "assistant");
			else
				ck_assert_ptr_null(str_at(j, "choices.0.delta.role"));
			const char *t;
			if ((t = str_at(j, "choices.0.delta.reasoning_content")))
				lynn_buf_puts(&reason, t);
			if ((t = str_at(j, "choices.0.delta.content")))
				lynn_buf_puts(&content, t);
			if ((t = str_at(j, "choices.0.delta.tool_calls.0.function.name"))) {
				check_weather_call(t, str_at(j, "choices.0.delta.tool_calls.0.function.arguments"));
				calls++;
			}
			if ((t = str_at(j, "choices.0.finish_reason"))) {
				ck_assert_str_eq(t, "tool_calls");
				finishes++;
			}
			if (cJSON_GetObjectItem(j, "usage")) {
				ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 0);
				usage++;
			}
			cJSON_Delete(j);
			p = e;
		}
		ck_assert_str_eq(reason.data, "Let me check.");
		ck_assert_str_eq(content.data, "Sure.");
		ck_assert_int_eq(calls, 1);
		ck_assert_int_eq(finishes, 1);
		ck_assert_int_eq(usage, 1);
		lynn_buf_release(&reason);
		lynn_buf_release(&content);
		srv_events_release(&ev);
		srv_req_free(r);
	}
	/* failed */
	struct srv_req *r = tool_call_req();
	struct srv_events ev;
	struct lynn_err err = { 0 };
	ck_assert_int_eq(srv_events_init(&ev, &s, r, 0, &err), 0);
	srv_events_text(&ev, "Let me", 6);
	srv_fail(&r->err, 500, NULL, "generation failed: boom");
	r->state = SRV_FAILED;
	srv_events_end(&ev);
	const char *e = strstr(ev.out.data, "data: {\"error\":");
	ck_assert_ptr_nonnull(e);
	ck_assert_ptr_nonnull(strstr(e, "boom"));
	ck_assert(lynn_str_ends_with(ev.out.data, "\n\ndata: [DONE]\n\n"));
	ck_assert_ptr_null(strstr(ev.out.data, "finish_reason\":\""));
	srv_events_release(&ev);
	srv_req_free(r);
}
END_TEST

/* Log-probabilities: a greedy completion's token_logprobs and top 5 at each
 * position are the log-softmax of the logits that a fresh prefill of the
 * prompt plus the tokens before it gives (lynn_engine_last_logits, computed
 * here in double); the chat form carries the same numbers per token. */
#define LOGPROB_TOL 1e-5 /* decode vs one-shot prefill logits, f32 sums in another order: 2.4e-6 seen */
START_TEST(test_logprobs)
{
	static const char prompt[] = "Once upon a time";
	struct lynn_err err = { 0 };
	struct lynn_tok_ids ids = { 0 };
	struct lynn_gen_result g = { 0 };
	struct lynn_gen_opts go = { .max_tokens = 10 };
	start(2, 4, 4096, NULL, false);
	lynn_sample_params_init(&go.sample);
	ck_assert_int_eq(lynn_engine_encode_text(eng, prompt, &ids, &err), 0);
	ck_assert_int_eq(lynn_engine_generate(eng, ids.ids, ids.n, &go, &g, &err), 0);
	const size_t n_lp = g.ids.n - (g.finish == LYNN_GEN_EOS ? 1 : 0);
	ck_assert_uint_gt(n_lp, 0);

	char *b = completion_body(prompt, 10, "\"logprobs\":5");
	struct http h = call("/v1/completions", b, NULL, 0);
	cJSON *j = ok_json(&h), *lp = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "logprobs");
	cJSON *tlp = cJSON_GetObjectItem(lp, "token_logprobs"), *top = cJSON_GetObjectItem(lp, "top_logprobs");
	cJSON *off = cJSON_GetObjectItem(lp, "text_offset");
	ck_assert_int_eq(cJSON_GetArraySize(tlp), (int)n_lp);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(lp, "tokens")), (int)n_lp);
	const int V = lynn_model_n_vocab(lynn_engine_model(eng));
	float *logits = malloc((size_t)V * sizeof *logits);
	int32_t *seq = malloc((ids.n + g.ids.n) * sizeof *seq);
	memcpy(seq, ids.ids, ids.n * sizeof *seq);
	for (size_t i = 0; i < n_lp; i++) {
		/* the reference: a fresh prefill up to position i */
		memcpy(seq + ids.n, g.ids.ids, i * sizeof *seq);
		ck_assert_int_eq(lynn_engine_last_logits(eng, seq, ids.n + i, logits, &err), 0);
		double mx = -INFINITY, sum = 0;
		for (int v = 0; v < V; v++)
			mx = logits[v] > mx ? logits[v] : mx;
		for (int v = 0; v < V; v++)
			sum += exp((double)logits[v] - mx);
		const double lse = mx + log(sum);
		const double want = (double)logits[g.ids.ids[i]] - lse;
		const double got = cJSON_GetArrayItem(tlp, (int)i)->valuedouble;
		ck_assert_msg(fabs(got - want) < LOGPROB_TOL && got <= 0, "position %zu: %.9g vs %.9g (%.2g)", i, got, want, got - want);
		/* greedy: the generated token is the most likely, so it is the top value */
		double best = -INFINITY;
		const cJSON *e;
		int n_top = 0;
		cJSON_ArrayForEach(e, cJSON_GetArrayItem(top, (int)i)) {
			best = e->valuedouble > best ? e->valuedouble : best;
			n_top++;
		}
		ck_assert_int_ge(n_top, 1);
		ck_assert_int_le(n_top, 5);
		ck_assert(fabs(best - got) < 1e-6);
		ck_assert_int_eq(cJSON_GetArrayItem(off, (int)i)->valueint >= 0, 1);
	}
	ck_assert_int_eq(cJSON_GetArrayItem(off, 0)->valueint, 0);
	cJSON_Delete(j);
	lynn_buf_release(&h.body);
	free(b);

	/* chat: one entry per token, 3 alternatives each, sorted, the first is the token */
	h = call("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":8,"
		 "\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3}", NULL, 0);
	j = ok_json(&h);
	cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0),
								 "logprobs"), "content"), *t;
	const int completion = (int)tu_num(cJSON_GetObjectItem(j, "usage"), "completion_tokens");
	const char *fin = str_at(j, "choices.0.finish_reason");
	ck_assert_int_eq(cJSON_GetArraySize(content), completion - (!strcmp(fin, "stop") ? 1 : 0));
	cJSON_ArrayForEach(t, content) {
		cJSON *alts = cJSON_GetObjectItem(t, "top_logprobs");
		ck_assert_int_eq(cJSON_GetArraySize(alts), 3);
		ck_assert(cJSON_IsArray(cJSON_GetObjectItem(t, "bytes")));
		ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(alts, 0), "token")->valuestring,
				 cJSON_GetObjectItem(t, "token")->valuestring);
		for (int k = 1; k < 3; k++)
			ck_assert(tu_num(cJSON_GetArrayItem(alts, k), "logprob") <=
				  tu_num(cJSON_GetArrayItem(alts, k - 1), "logprob"));
	}
	/* streamed: the chunks' logprobs, joined, are the whole response's */
	for (int chat = 0; chat < 2; chat++) {
		const char *path = chat ? "/v1/chat/completions" : "/v1/completions";
		const char *whole_b = chat ? "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":8,"
					     "\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3}"
					   : "{\"prompt\":\"Once upon a time\",\"max_tokens\":10,\"temperature\":0,\"logprobs\":3}";
		char stream_b[256];
		snprintf(stream_b, sizeof stream_b, "%.*s,\"stream\":true}", (int)strlen(whole_b) - 1, whole_b);
		struct http hw = call(path, whole_b, NULL, 0), hs = call(path, stream_b, NULL, 0);
		cJSON *jw = ok_json(&hw);
		cJSON *lw = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(jw, "choices"), 0), "logprobs");
		cJSON *want = cJSON_Duplicate(cJSON_GetObjectItem(lw, chat ? "content" : "token_logprobs"), true);
		cJSON *got = cJSON_CreateArray();
		for (const char *p = hs.body.data; (p = strstr(p, "data: {"));) {
			const char *e = strstr(p, "\n\n");
			cJSON *c = cJSON_ParseWithLength(p + 6, (size_t)(e - p - 6));
			cJSON *lp = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "choices"), 0), "logprobs"), *x;
			cJSON_ArrayForEach(x, cJSON_GetObjectItem(lp, chat ? "content" : "token_logprobs"))
				cJSON_AddItemToArray(got, cJSON_Duplicate(x, true));
			cJSON_Delete(c);
			p = e;
		}
		ck_assert_int_gt(cJSON_GetArraySize(want), 0);
		ck_assert_msg(cJSON_Compare(got, want, true), "%s: streamed logprobs differ", path);
		cJSON_Delete(got);
		cJSON_Delete(want);
		cJSON_Delete(jw);
		lynn_buf_release(&hw.body);
		lynn_buf_release(&hs.body);
	}
	cJSON_Delete(j);
	lynn_buf_release(&h.body);
	free(seq);
	free(logits);
	lynn_gen_result_release(&g);
	lynn_tok_ids_release(&ids);
	stop();
}
END_TEST

/* lynn bench (its own client, libcurl multi) against lynn serve: 4 streams
 * at once on 2 slots, every request runs to max_tokens (ignore_eos) and the
 * token counts agree with the server's usage. */
START_TEST(test_bench_against_serve)
{
	char url[96];
	struct lynn_err err = { 0 };
	struct lynn_bench_level lv;
	start(2, 8, 4096, KEY, false);
	snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", port);
	struct lynn_bench_opts o = { .url = url, .model = "tiny", .api_key = KEY, .prompt_tokens = 8,
				     .max_tokens = 12, .requests = 6, .timeout_s = 60 };
	ck_assert_int_eq(lynn_bench_level_run(&o, 4, &lv, &err), 0);
	ck_assert_msg(lv.n_ok == 6 && lv.n_failed == 0, "%d ok, %d failed", lv.n_ok, lv.n_failed);
	ck_assert_int_eq(lv.completion_tokens, 6 * 12);
	ck_assert(lv.ttft_mean_s > 0 && lv.ttft_p90_s >= lv.ttft_p50_s && lv.aggregate_tps > 0);
	ck_assert(lv.prompt_tokens_mean > 8);
	stop();
}
END_TEST

/* lynn quant-verify with the tiny model in-process as the reference and
 * the same model served as the variant: every answer is the same text (its
 * eval client, the server's chat path and the in-process path agree). The
 * random model's answers fail the quality checks, so the exit is 1. */
START_TEST(test_quant_verify_against_serve)
{
	char args[256];
	start(4, 8, 4096, NULL, false);
	snprintf(args, sizeof args, "quant-verify --reference " TINY " --variant served=http://127.0.0.1:%d/v1 "
		 "--max-tokens 16 --threads 2 --json", port);
	struct tu_run r = tu_lynn(args, NULL, NULL);
	ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
	cJSON *j = cJSON_Parse(r.out), *ri = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "reference"), "items");
	cJSON *vi = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "variants"), 0), "items");
	ck_assert_int_eq(cJSON_GetArraySize(ri), 6);
	ck_assert_int_eq(cJSON_GetArraySize(vi), 6);
	for (int i = 0; i < 6; i++)
		ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(vi, i), "output")->valuestring,
				 cJSON_GetObjectItem(cJSON_GetArrayItem(ri, i), "output")->valuestring);
	cJSON_Delete(j);
	tu_run_free(&r);
	stop();
}
END_TEST

/* The real openai client (npm, tests/node/serve_openai.mjs) against the
 * server: its checks pass, and the text it got is the engine's. */
START_TEST(test_openai_client)
{
	char cmd[512];
	start(2, 4, 4096, KEY, false);
	char *want = engine_text("The sky is", 6, NULL);
	struct lynn_sample_params sp;
	lynn_sample_params_init(&sp);
	const int32_t bid = 300;
	const float bv = 8.5f;
	sp.presence_penalty = 1;
	sp.n_bias = 1;
	sp.bias_ids = &bid;
	sp.bias = &bv;
	char *want_pen = engine_text_sp("The sky is", 6, NULL, true, &sp);
	ck_assert_str_ne(want_pen, want);
	snprintf(cmd, sizeof cmd, "cd tests/node && node serve_openai.mjs http://127.0.0.1:%d/v1 '%s' tiny", port, KEY);
	struct tu_run r = tu_sh(cmd, NULL);
	ck_assert_msg(r.status == 0, "serve_openai.mjs: exit %d\n%s\n%s", r.status, r.out, r.err);
	cJSON *j = cJSON_Parse(r.out);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(str_at(j, "completion"), want);
	ck_assert_str_eq(str_at(j, "penalized"), want_pen);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 3); /* streamed n = 3 ran */
	ck_assert(!strstr(r.out, "QwErTy") && !strstr(r.err, "QwErTy"));
	cJSON_Delete(j);
	tu_run_free(&r);
	free(want);
	free(want_pen);
	stop();
}
END_TEST

/* The binary: SIGTERM while a request streams lets it finish ([DONE], all
 * its tokens), then the process exits 0 and the port is closed. */
START_TEST(test_sigterm_drain)
{
	const char *bin = getenv("LYNN_BIN") ? getenv("LYNN_BIN") : "./lynn";
	char *dir = tu_mkdtemp(), errpath[512];
	snprintf(errpath, sizeof errpath, "%s/serve.err", dir);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		freopen(errpath, "w", stderr);
		execl(bin, bin, "serve", "--model", TINY, "--port", "0", "--threads", "1", (char *)NULL);
		_exit(127);
	}
	port = 0;
	for (int t = 0; t < 300 && !port; t++) {
		char *e = tu_read(errpath, NULL);
		const char *p = e ? strstr(e, "listening on http://127.0.0.1:") : NULL;
		if (p)
			port = atoi(p + strlen("listening on http://127.0.0.1:"));
		free(e);
		if (!port)
			usleep(50000);
	}
	ck_assert_int_gt(port, 0);
	struct job a = { .path = "/v1/completions",
			 .body = "{\"prompt\":\"The sky is\",\"max_tokens\":400,\"ignore_eos\":true,\"stream\":true,"
				 "\"stream_options\":{\"include_usage\":true}}" };
	ck_assert_int_eq(pthread_create(&a.th, NULL, job_run, &a), 0);
	usleep(200000);
	kill(pid, SIGTERM);
	pthread_join(a.th, NULL);
	int st = 0;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	ck_assert_int_eq(a.h.status, 200);
	const char *fin = NULL;
	char *t = stream_text(a.h.body.data, &fin);
	ck_assert_str_eq(fin, "length");
	ck_assert_ptr_nonnull(strstr(a.h.body.data, "\"completion_tokens\":400"));
	free(t);
	lynn_buf_release(&a.h.body);
	char *e = tu_read(errpath, NULL);
	ck_assert_msg(strstr(e, "draining") && strstr(e, "stopped"), "%s", e);
	free(e);
	/* nothing listens any more */
	CURL *c = curl_easy_init();
	char url[64];
	snprintf(url, sizeof url, "http://127.0.0.1:%d/health", port);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	ck_assert_int_eq(curl_easy_perform(c), CURLE_COULDNT_CONNECT);
	curl_easy_cleanup(c);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* Bad command lines: exit 2 with the option named. */
START_TEST(test_cli)
{
	static const struct {
		const char *args, *msg;
	} cases[] = {
		{ "serve", "--model is required" },
		{ "serve --model " TINY " --port 70000", "--port" },
		{ "serve --model " TINY " --parallel 0", "--parallel" },
		{ "serve --model " TINY " --ctx-size 1", "--ctx-size" },
		{ "serve --model " TINY " --device gpu", "--device" },
		{ "serve --model " TINY " --host not-an-address --port 0", "--host" },
		{ "serve --model /nonexistent/model --port 0", "/nonexistent/model" },
		{ "serve --model " TINY " --generation-config vllm", "--generation-config" },
		{ "serve --model " TINY " --prefix-cache -1", "--prefix-cache" },
		{ "serve --model " TINY " --prefix-cache 4G", "--prefix-cache" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct tu_run r = tu_lynn(cases[i].args, NULL, NULL);
		ck_assert_msg(r.status == 2 && strstr(r.err, cases[i].msg), "case %zu: exit %d: %s", i, r.status,
			      r.err);
		tu_run_free(&r);
	}
	/* the tiny model with a generation_config.json whose top_p no request
	 * could ask for: refused at start, naming the file and the field */
	char *dir = tu_mkdtemp(), cmd[1024], *gen = lynn_path_join(dir, "generation_config.json");
	snprintf(cmd, sizeof cmd, "for f in \"$(cd %s && pwd)\"/*; do ln -s \"$f\" %s/; done && rm %s", TINY, dir,
		 gen);
	struct tu_run r = tu_sh(cmd, NULL);
	ck_assert_msg(r.status == 0, "%s: %s", cmd, r.err);
	tu_run_free(&r);
	const char *bad = "{\"eos_token_id\":[482,480],\"top_p\":0,\"top_k\":20}";
	tu_write(gen, bad, strlen(bad));
	snprintf(cmd, sizeof cmd, "serve --model %s --port 0", dir);
	r = tu_lynn(cmd, NULL, NULL);
	ck_assert_msg(r.status == 2 && strstr(r.err, gen) && strstr(r.err, "'top_p'"), "exit %d: %s", r.status,
		      r.err);
	tu_run_free(&r);
	free(gen);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* A port already in use is a runtime failure (exit 3) naming the address. */
static enum MHD_Result busy_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				    const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	return tu_http_reply(c, 200, "{}");
}

START_TEST(test_port_in_use)
{
	int taken = 0;
	struct MHD_Daemon *d = tu_http_start(busy_handler, NULL, &taken);
	char args[128], where[64];
	snprintf(args, sizeof args, "serve --model " TINY " --port %d", taken);
	snprintf(where, sizeof where, "127.0.0.1:%d", taken);
	struct tu_run r = tu_lynn(args, NULL, NULL);
	ck_assert_msg(r.status == 3 && strstr(r.err, where), "exit %d: %s", r.status, r.err);
	tu_run_free(&r);
	MHD_stop_daemon(d);
}
END_TEST

Suite *serve_suite(void)
{
	Suite *s = suite_create("serve");
	TCase *u = tcase_create("unit"), *h = tcase_create("http");
	tcase_add_test(u, test_tool_call_response);
	tcase_add_test(u, test_tool_call_stream);
	tcase_add_test(u, test_cli);
	tcase_add_test(u, test_port_in_use);
	tcase_add_test(h, test_served_equals_engine);
	tcase_add_test(h, test_chat_equals_engine);
	tcase_add_test(h, test_stop_strings);
	tcase_add_test(h, test_n_choices);
	tcase_add_test(h, test_penalties);
	tcase_add_test(h, test_prefix_cache);
	tcase_add_test(h, test_generation_config_defaults);
	tcase_add_test(h, test_errors);
	tcase_add_test(h, test_queue_and_cancel);
	tcase_add_test(h, test_overload);
	tcase_add_test(h, test_tokenize_endpoints);
	tcase_add_test(h, test_logprobs);
	tcase_add_test(h, test_bench_against_serve);
	tcase_add_test(h, test_quant_verify_against_serve);
	tcase_add_test(h, test_openai_client);
	tcase_add_test(h, test_sigterm_drain);
	tcase_set_timeout(h, 240);
	tcase_set_timeout(u, 60);
	suite_add_tcase(s, u);
	suite_add_tcase(s, h);
	return s;
}
