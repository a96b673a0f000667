/*
 * check_bench.c - `lynn bench` (SPEC §7): the event-stream reader on a table
 * of streams (whole and split anywhere), and the command against a scripted
 * streaming endpoint whose delays are known: time to first token, token
 * counts, concurrency really reached, failures, and the API key never shown.
 */
#include <check.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lynn/bench.h"
#include "lynn/buf.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "testutil.h"

/* ===== the stream reader ===== */

static const struct {
	const char *stream;
	int tokens, prompt, completion;
	bool done, error;
} sse_cases[] = {
	{ "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
	  "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n",
	  2, -1, -1, true, false },
	/* CRLF, comments, event/id lines, no space after the colon, the usage chunk */
	{ ": keep-alive\r\n\r\nevent: message\r\nid: 1\r\ndata:{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\r\n\r\n"
	  "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7}}\r\n\r\ndata: [DONE]\r\n\r\n",
	  1, 12, 7, true, false },
	/* role-only and empty deltas carry no text; reasoning does; the completions API's text */
	{ "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
	  "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n"
	  "data: {\"choices\":[{\"text\":\"t\"}]}\n\n",
	  2, -1, -1, false, false },
	/* one event over two data lines */
	{ "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"z\"}}]}\n\n", 1, -1, -1, false, false },
	{ "data: {\"error\":{\"message\":\"overloaded\"}}\n\n", 0, -1, -1, false, true },
	{ "data: {not json}\n\n", 0, -1, -1, false, true },
	{ "data: [1,2]\n\n", 0, -1, -1, false, true },
	/* an unterminated last event is not dispatched */
	{ "data: {\"choices\":[{\"delta\":{\"content\":\"q\"}}]}", 0, -1, -1, false, false },
	/* absurd usage numbers are ignored */
	{ "data: {\"usage\":{\"prompt_tokens\":-3,\"completion_tokens\":1e30}}\n\n", 0, -1, -1, false, false },
};

static void check_sse_result(const struct lynn_sse *s, int i, const char *how)
{
	ck_assert_msg(s->n_tokens == sse_cases[i].tokens, "case %d %s: %d tokens", i, how, s->n_tokens);
	ck_assert_msg(s->done == sse_cases[i].done, "case %d %s: done", i, how);
	ck_assert_msg(s->usage_prompt == sse_cases[i].prompt && s->usage_completion == sse_cases[i].completion,
		      "case %d %s: usage %d %d", i, how, s->usage_prompt, s->usage_completion);
	ck_assert_msg((s->error[0] != 0) == sse_cases[i].error, "case %d %s: error '%s'", i, how, s->error);
}

START_TEST(test_sse_table)
{
	const char *st = sse_cases[_i].stream;
	size_t n = strlen(st);
	struct lynn_sse s;
	lynn_sse_init(&s);
	int r = lynn_sse_feed(&s, st, n);
	ck_assert(sse_cases[_i].error ? r == -1 : r == sse_cases[_i].tokens);
	check_sse_result(&s, _i, "whole");
	lynn_sse_release(&s);
	/* byte by byte, and split at every point */
	lynn_sse_init(&s);
	for (size_t k = 0; k < n; k++)
		lynn_sse_feed(&s, st + k, 1);
	check_sse_result(&s, _i, "bytewise");
	lynn_sse_release(&s);
	for (size_t cut = 1; cut < n; cut++) {
		lynn_sse_init(&s);
		lynn_sse_feed(&s, st, cut);
		lynn_sse_feed(&s, st + cut, n - cut);
		check_sse_result(&s, _i, "split");
		lynn_sse_release(&s);
	}
}
END_TEST

/* A line that never ends is refused at 1 MiB, not buffered forever. */
START_TEST(test_sse_long_line)
{
	struct lynn_sse s;
	char *chunk = malloc(1 << 16);
	memset(chunk, 'a', 1 << 16);
	lynn_sse_init(&s);
	int r = 0;
	for (int i = 0; i < 40 && r >= 0; i++)
		r = lynn_sse_feed(&s, chunk, 1 << 16);
	ck_assert_int_eq(r, -1);
	ck_assert_ptr_nonnull(strstr(s.error, "1 MiB"));
	ck_assert_int_le((long)s.line.len, (long)LYNN_SSE_MAX_LINE);
	lynn_sse_release(&s);
	free(chunk);
}
END_TEST

/* ===== a scripted streaming endpoint ===== */

#define FAKE_TTFT_MS 60 /* before the first chunk */
#define FAKE_GAP_MS 10  /* between chunks */

struct fake {
	pthread_mutex_t mu;
	int in_flight, max_in_flight, n_req;
	char bad[300];      /* the first request the endpoint found wrong */
	const char *key;    /* the Authorization it wants, or NULL */
};

struct stream {
	struct fake *f;
	int n, sent;        /* tokens to send, chunks sent */
	int mode;           /* 0 ok, 1 malformed event, 2 no [DONE] */
	bool closed;
};

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *s = cls;
	(void)pos;
	if (s->sent > s->n + 1)
		return MHD_CONTENT_READER_END_OF_STREAM;
	sleep_ms(s->sent == 0 ? FAKE_TTFT_MS : FAKE_GAP_MS);
	int len;
	if (s->sent < s->n)
		len = snprintf(buf, max, s->mode == 1 && s->sent == 1 ? "data: {oops\n\n"
								      : "data: {\"choices\":[{\"delta\":{\"content\":\"w\"}}]}\n\n");
	else if (s->sent == s->n)
		len = snprintf(buf, max, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":%d}}\n\n",
			       s->n);
	else
		len = s->mode == 2 ? 0 : snprintf(buf, max, "data: [DONE]\n\n");
	s->sent++;
	return len ? len : MHD_CONTENT_READER_END_OF_STREAM;
}

static void stream_free(void *cls)
{
	struct stream *s = cls;
	pthread_mutex_lock(&s->f->mu);
	s->f->in_flight--;
	pthread_mutex_unlock(&s->f->mu);
	free(s);
}

static void fake_bad(struct fake *f, const char *why)
{
	pthread_mutex_lock(&f->mu);
	if (!f->bad[0])
		snprintf(f->bad, sizeof f->bad, "%s", why);
	pthread_mutex_unlock(&f->mu);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			      const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct fake *f = cls;
	struct lynn_buf *b = *con_cls;
	int mode = 0;
	(void)version;
	if (!strncmp(url, "/broken", 7) || !strncmp(url, "/nodone", 7) || !strncmp(url, "/fail", 5)) {
		mode = url[1] == 'b' ? 1 : url[1] == 'n' ? 2 : 3;
		url = strchr(url + 1, '/');
	}
	if (!strcmp(method, "GET") && !strcmp(url, "/v1/models"))
		return tu_http_reply(c, 200, "{\"data\":[{\"id\":\"bench-model\"}]}");
	if (strcmp(method, "POST") || strcmp(url, "/v1/chat/completions"))
		return tu_http_reply(c, 404, "{\"error\":{\"message\":\"not found\"}}");
	if (!b) {
		*con_cls = calloc(1, sizeof(struct lynn_buf));
		return *con_cls ? MHD_YES : MHD_NO;
	}
	if (*upload_size) {
		lynn_buf_append(b, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	char want[128];
	if (f->key) {
		snprintf(want, sizeof want, "Bearer %s", f->key);
		if (!auth || strcmp(auth, want))
			return tu_http_reply(c, 401, "{\"error\":{\"message\":\"bad key\"}}");
	}
	if (mode == 3)
		return tu_http_reply(c, 500, "{\"error\":{\"message\":\"engine crashed\"}}");
	cJSON *req = cJSON_ParseWithLength(b->data ? b->data : "", b->len);
	const cJSON *so = cJSON_GetObjectItem(req, "stream_options"), *mt = cJSON_GetObjectItem(req, "max_tokens");
	const cJSON *msg = cJSON_GetArrayItem(cJSON_GetObjectItem(req, "messages"), 0);
	if (!cJSON_IsTrue(cJSON_GetObjectItem(req, "stream")) || !cJSON_IsTrue(cJSON_GetObjectItem(req, "ignore_eos")) ||
	    !cJSON_IsTrue(cJSON_GetObjectItem(so, "include_usage")) || !cJSON_IsNumber(mt) ||
	    !cJSON_GetStringValue(cJSON_GetObjectItem(req, "model")) ||
	    strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(req, "model")), "bench-model") ||
	    !cJSON_GetStringValue(cJSON_GetObjectItem(msg, "content")))
		fake_bad(f, b->data ? b->data : "(empty body)");
	struct stream *s = calloc(1, sizeof *s);
	s->f = f;
	s->n = cJSON_IsNumber(mt) ? mt->valueint : 1;
	s->mode = mode;
	cJSON_Delete(req);
	pthread_mutex_lock(&f->mu);
	f->n_req++;
	if (++f->in_flight > f->max_in_flight)
		f->max_in_flight = f->in_flight;
	pthread_mutex_unlock(&f->mu);
	struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, stream_read, s,
								    stream_free);
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	enum MHD_Result ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

static const cJSON *level(const cJSON *rep, int i)
{
	return cJSON_GetArrayItem(cJSON_GetObjectItem(rep, "levels"), i);
}

/* Two levels against the endpoint: what the report says matches what the
 * endpoint did (its delays bound the times from below), and the key stays
 * out of every output. */
START_TEST(test_bench_endpoint)
{
	struct fake f = { PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, "", "sk-bench-secret-xyzzy" };
	int port;
	struct MHD_Daemon *d = tu_http_start(handle, &f, &port);
	char *dir = tu_mkdtemp(), *args, out[512];
	snprintf(out, sizeof out, "%s/b.json", dir);
	ck_assert(asprintf(&args, "bench --endpoint http://127.0.0.1:%d/v1 --concurrency 1,4 --requests 8 "
			   "--max-tokens 6 --prompt-tokens 32 --out %s", port, out) > 0);
	struct tu_run r = tu_lynn(args, NULL, "LYNN_API_KEY=sk-bench-secret-xyzzy");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_msg(!f.bad[0], "bad request: %s", f.bad);
	char *rep_text = tu_read(out, NULL);
	/* (the key is matched by letters: digits could turn up inside any number) */
	ck_assert(!strstr(r.out, "xyzzy") && !strstr(r.err, "xyzzy") && !strstr(rep_text, "xyzzy"));
	ck_assert_ptr_nonnull(strstr(r.out, "concurrency"));
	cJSON *rep = cJSON_Parse(rep_text);
	ck_assert_str_eq(cJSON_GetObjectItem(rep, "schema_version")->valuestring, "lynn-bench-v1");
	ck_assert_str_eq(cJSON_GetObjectItem(rep, "model")->valuestring, "bench-model");
	ck_assert_int_eq(f.n_req, 16);
	ck_assert_int_eq(f.max_in_flight, 4);
	for (int i = 0; i < 2; i++) {
		const cJSON *l = level(rep, i);
		ck_assert(tu_num(l, "n_ok") == 8 && tu_num(l, "n_failed") == 0);
		ck_assert(tu_num(l, "completion_tokens") == 48 && tu_num(l, "prompt_tokens_mean") == 40);
		/* the endpoint waits FAKE_TTFT_MS before the first token and
		 * FAKE_GAP_MS between tokens: times cannot be shorter */
		ck_assert_msg(tu_num(l, "ttft_p50_s") >= FAKE_TTFT_MS * 1e-3 && tu_num(l, "ttft_mean_s") >= FAKE_TTFT_MS * 1e-3,
			      "level %d ttft %g", i, tu_num(l, "ttft_mean_s"));
		ck_assert(tu_num(l, "ttft_p90_s") >= tu_num(l, "ttft_p50_s"));
		ck_assert_msg(tu_num(l, "stream_tokens_per_s") > 0 && tu_num(l, "stream_tokens_per_s") <= 1000.0 / FAKE_GAP_MS,
			      "level %d stream %g tok/s", i, tu_num(l, "stream_tokens_per_s"));
		ck_assert(tu_num(l, "aggregate_tokens_per_s") <= 48 / (2 * (FAKE_TTFT_MS + 6 * FAKE_GAP_MS) * 1e-3) * tu_num(l, "concurrency"));
	}
	/* four streams at once finish the same work sooner */
	ck_assert(tu_num(level(rep, 1), "wall_s") < tu_num(level(rep, 0), "wall_s"));
	cJSON_Delete(rep);
	free(rep_text);
	tu_run_free(&r);
	free(args);
	/* --json on stdout, the chat-completions URL given whole, the model named */
	ck_assert(asprintf(&args, "bench --endpoint http://127.0.0.1:%d/v1/chat/completions/ --model bench-model "
			   "--concurrency 2 --requests 2 --max-tokens 3 --json", port) > 0);
	r = tu_lynn(args, NULL, "LYNN_API_KEY=sk-bench-secret-xyzzy");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	rep = cJSON_Parse(r.out);
	ck_assert_ptr_nonnull(rep);
	ck_assert(tu_num(level(rep, 0), "completion_tokens") == 6);
	cJSON_Delete(rep);
	tu_run_free(&r);
	free(args);
	MHD_stop_daemon(d);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* Failed requests make the run fail (exit 3) and say why; bad arguments
 * exit 2. */
START_TEST(test_bench_failures)
{
	struct fake f = { PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, "", NULL };
	int port;
	struct MHD_Daemon *d = tu_http_start(handle, &f, &port);
	const struct {
		const char *prefix, *msg;
	} cases[] = {
		{ "/fail", "HTTP 500" },
		{ "/broken", "not a JSON object" },
		{ "/nodone", "[DONE]" },
	};
	char *args;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		ck_assert(asprintf(&args, "bench --endpoint http://127.0.0.1:%d%s/v1 --model bench-model "
				   "--concurrency 1 --requests 2 --max-tokens 3", port, cases[i].prefix) > 0);
		struct tu_run r = tu_lynn(args, NULL, NULL);
		ck_assert_msg(r.status == 3, "case %zu: exit %d", i, r.status);
		ck_assert_msg(strstr(r.err, cases[i].msg) && strstr(r.err, "2 of 2 requests failed"),
			      "case %zu: %s", i, r.err);
		tu_run_free(&r);
		free(args);
	}
	MHD_stop_daemon(d);
	ck_assert(asprintf(&args, "bench --endpoint http://127.0.0.1:%d/v1 --model m --concurrency 1 "
			   "--requests 1", tu_dead_port()) > 0);
	struct tu_run r = tu_lynn(args, NULL, NULL);
	ck_assert_int_eq(r.status, 3);
	ck_assert_ptr_nonnull(strstr(r.err, "transfer"));
	tu_run_free(&r);
	free(args);
	static const struct {
		const char *args, *msg;
	} bad[] = {
		{ "bench", "--endpoint is required" },
		{ "bench --endpoint ftp://x/v1", "http(s)" },
		{ "bench --endpoint http://x/v1 --concurrency 0", "--concurrency" },
		{ "bench --endpoint http://x/v1 --concurrency 1,x", "--concurrency" },
		{ "bench --endpoint http://x/v1 --max-tokens -1", "--max-tokens" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		r = tu_lynn(bad[i].args, NULL, NULL);
		ck_assert_msg(r.status == 2 && strstr(r.err, bad[i].msg), "case %zu: exit %d: %s", i, r.status, r.err);
		tu_run_free(&r);
	}
}
END_TEST

Suite *bench_suite(void)
{
	Suite *s = suite_create("bench");
	TCase *u = tcase_create("sse"), *e = tcase_create("endpoint");
	tcase_add_loop_test(u, test_sse_table, 0, (int)(sizeof sse_cases / sizeof *sse_cases));
	tcase_add_test(u, test_sse_long_line);
	tcase_add_test(e, test_bench_endpoint);
	tcase_add_test(e, test_bench_failures);
	tcase_set_timeout(e, 120);
	suite_add_tcase(s, u);
	suite_add_tcase(s, e);
	return s;
}
