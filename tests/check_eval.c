/*
 * check_eval.c - lynn eval (src/eval, src/cmd/eval.c) against the original
 * toolkit.
 *
 * A scripted OpenAI-compatible endpoint runs inside the test (libmicrohttpd):
 * it serves canned answers per (model, prompt) from
 * tests/fixtures/eval/<scenario>/canned.json, checks each request (greedy,
 * thinking off, the max_tokens the toolkit used, tools on v8 prompts), and
 * fails, drops or delays requests on demand. The expected reports were
 * computed by the toolkit's own four_gate_eval.py on the same outputs
 * (tests/tools/gen_eval_fixtures.py); lynn's report must equal them field
 * for field, except the run's own facts (created_at, runtime_s, latency_s,
 * base/adapter paths, the sanity file path).
 */
#include <check.h>
#include <stdint.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lynn/buf.h"
#include "lynn/cache.h"
#include "lynn/client.h"
#include "lynn/eval.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/model.h"
#include "lynn/profile.h"
#include "lynn/tok.h"
#include "testutil.h"

#define EVAL_FIX FIXTURES "/eval"

static const char *scenarios[] = { "net_win", "abort_style", "abort_regress", "abort_net",
				   "mixed", "missing_sanity", "implicit_sanity", "sanity_fail" };

/* ===== the scripted endpoint ===== */

struct fake {
	struct MHD_Daemon *d;
	int port;
	cJSON *canned;    /* {"cand": {prompt: out}, "base": {...}, "max_tokens": {...}} */
	pthread_mutex_t mu;
	int n_ok;         /* 200 answers */
	int n_posts;      /* every POST to chat/completions */
	int fail_first;   /* per (model, prompt): the first N attempts fail ... */
	int fail_status;  /* ... with this status, or by dropping the connection (0) */
	cJSON *attempts;  /* "model\x1fprompt" -> count */
	int delay_ms;
	char bad[512];    /* first request that broke the contract */
};

static enum MHD_Result bad_request(struct fake *f, struct MHD_Connection *c, const char *why)
{
	char buf[700];
	pthread_mutex_lock(&f->mu);
	if (!f->bad[0])
		snprintf(f->bad, sizeof(f->bad), "%s", why);
	pthread_mutex_unlock(&f->mu);
	snprintf(buf, sizeof(buf), "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\"}}", why);
	return tu_http_reply(c, 400, buf);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			      const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct fake *f = cls;
	struct lynn_buf *cn = *con_cls; /* the request body */
	cJSON *req, *msgs, *kw, *x, *table, *want_mt;
	const char *model, *prompt, *out;
	char key[4096], why[400];
	int n_att, mt;

	char prefix[64] = "";

	(void)version;
	/* "/NAME/v1/..." serves the canned table NAME (one server, many variants) */
	if (strncmp(url, "/v1/", 4)) {
		const char *sl = strchr(url + 1, '/');
		if (sl && (size_t)(sl - url - 1) < sizeof(prefix)) {
			snprintf(prefix, sizeof(prefix), "%.*s", (int)(sl - url - 1), url + 1);
			url = sl;
		}
	}
	if (!strcmp(method, "GET") && !strcmp(url, "/v1/models"))
		return tu_http_reply(c, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"base-model\",\"object\":\"model\"}]}");
	if (strcmp(method, "POST") || strcmp(url, "/v1/chat/completions"))
		return tu_http_reply(c, 404, "{\"error\":{\"message\":\"not found\"}}");
	if (!cn) {
		cn = calloc(1, sizeof(*cn));
		*con_cls = cn;
		return MHD_YES;
	}
	if (*upload_size) {
		lynn_buf_append(cn, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	req = cJSON_Parse(cn->data ? cn->data : "");
	model = cJSON_GetStringValue(cJSON_GetObjectItem(req, "model"));
	msgs = cJSON_GetObjectItem(req, "messages");
	prompt = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content"));
	if (!model || !prompt || cJSON_GetArraySize(msgs) != 1) {
		cJSON_Delete(req);
		return bad_request(f, c, "no model or single user message");
	}
	snprintf(key, sizeof(key), "%s\x1f%s", model, prompt);
	pthread_mutex_lock(&f->mu);
	f->n_posts++;
	x = cJSON_GetObjectItem(f->attempts, key);
	if (!x)
		x = cJSON_AddNumberToObject(f->attempts, key, 0);
	n_att = (int)x->valuedouble + 1;
	cJSON_SetNumberValue(x, n_att);
	pthread_mutex_unlock(&f->mu);
	if (f->delay_ms) {
		struct timespec ts = { f->delay_ms / 1000, (f->delay_ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	if (n_att <= f->fail_first) {
		cJSON_Delete(req);
		if (!f->fail_status)
			return MHD_NO; /* drop the connection */
		return tu_http_reply(c, f->fail_status, "{\"error\":{\"message\":\"scripted failure\"}}");
	}
	/* the request contract: greedy, thinking off, the toolkit's max_tokens, tools on v8 */
	x = cJSON_GetObjectItem(req, "temperature");
	kw = cJSON_GetObjectItem(req, "chat_template_kwargs");
	want_mt = cJSON_GetObjectItem(cJSON_GetObjectItem(f->canned, "max_tokens"), prompt);
	mt = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(req, "max_tokens"));
	why[0] = 0;
	if (!cJSON_IsNumber(x) || x->valuedouble != 0)
		snprintf(why, sizeof(why), "temperature is not 0");
	else if (!cJSON_IsFalse(cJSON_GetObjectItem(kw, "enable_thinking")))
		snprintf(why, sizeof(why), "enable_thinking is not false");
	else if (want_mt && mt != (int)want_mt->valuedouble)
		snprintf(why, sizeof(why), "max_tokens %d, the toolkit used %d", mt, (int)want_mt->valuedouble);
	else if ((mt == 256) != (cJSON_GetArraySize(cJSON_GetObjectItem(req, "tools")) > 0))
		snprintf(why, sizeof(why), "tools missing on a v8 prompt or present elsewhere");
	table = cJSON_GetObjectItem(f->canned, prefix[0] ? prefix : strcmp(model, "base-model") ? "cand" : "base");
	if (prefix[0] || !strcmp(model, "base-model") || !strcmp(model, "cand"))
		out = cJSON_GetStringValue(cJSON_GetObjectItem(table, prompt));
	else
		out = NULL;
	if (!why[0] && !out)
		snprintf(why, sizeof(why), "no canned answer for model '%s'", model);
	cJSON_Delete(req);
	if (why[0])
		return bad_request(f, c, why);
	{
		cJSON *r = cJSON_CreateObject(), *ch = cJSON_AddArrayToObject(r, "choices"), *c0 = cJSON_CreateObject(), *m;
		char *s;
		enum MHD_Result ret;
		cJSON_AddStringToObject(r, "object", "chat.completion");
		cJSON_AddItemToArray(ch, c0);
		cJSON_AddNumberToObject(c0, "index", 0);
		m = cJSON_AddObjectToObject(c0, "message");
		cJSON_AddStringToObject(m, "role", "assistant");
		cJSON_AddStringToObject(m, "content", out);
		cJSON_AddStringToObject(c0, "finish_reason", "stop");
		cJSON_AddNumberToObject(cJSON_AddObjectToObject(r, "usage"), "completion_tokens", 16);
		s = cJSON_PrintUnformatted(r);
		cJSON_Delete(r);
		pthread_mutex_lock(&f->mu);
		f->n_ok++;
		pthread_mutex_unlock(&f->mu);
		ret = tu_http_reply(c, 200, s);
		free(s);
		return ret;
	}
}

static void fake_start_json(struct fake *f, cJSON *canned)
{
	memset(f, 0, sizeof(*f));
	pthread_mutex_init(&f->mu, NULL);
	f->canned = canned;
	f->attempts = cJSON_CreateObject();
	f->d = tu_http_start(handle, f, &f->port);
}

static void fake_start(struct fake *f, const char *scenario)
{
	char path[512];
	struct lynn_err e = { 0 };
	cJSON *canned;
	snprintf(path, sizeof(path), EVAL_FIX "/%s/canned.json", scenario);
	canned = lynn_json_load(path, 16 << 20, &e);
	ck_assert_msg(canned != NULL, "%s", e.msg);
	fake_start_json(f, canned);
}

static void fake_stop(struct fake *f)
{
	MHD_stop_daemon(f->d);
	cJSON_Delete(f->canned);
	cJSON_Delete(f->attempts);
	pthread_mutex_destroy(&f->mu);
}

/* ===== comparing with the toolkit's report ===== */

/* Comparing two lynn runs (resume): only the run's own time fields differ. */
static bool same_run_compare;

static bool ignored(const char *k)
{
	static const char *skip[] = { "created_at", "runtime_s", "latency_s", "base", "adapter", "report_path" };
	for (size_t i = 0; i < (same_run_compare ? 2 : sizeof(skip) / sizeof(*skip)); i++)
		if (k && !strcmp(k, skip[i]))
			return true;
	return false;
}

/* "" when equal, else the path of the first difference. */
static void json_diff(const cJSON *want, const cJSON *got, const char *path, char *out, size_t cap)
{
	char sub[512];
	if (out[0])
		return;
	if (cJSON_IsNumber(want) && cJSON_IsNumber(got)) {
		if (want->valuedouble != got->valuedouble)
			snprintf(out, cap, "%s: want %.17g got %.17g", path, want->valuedouble, got->valuedouble);
		return;
	}
	if ((want->type & 0xff) != (got->type & 0xff)) {
		snprintf(out, cap, "%s: type differs", path);
		return;
	}
	if (cJSON_IsString(want)) {
		if (strcmp(want->valuestring, got->valuestring))
			snprintf(out, cap, "%s: want '%.120s' got '%.120s'", path, want->valuestring, got->valuestring);
		return;
	}
	if (cJSON_IsArray(want)) {
		int n = cJSON_GetArraySize(want);
		if (n != cJSON_GetArraySize(got)) {
			snprintf(out, cap, "%s: %d items, got %d", path, n, cJSON_GetArraySize(got));
			return;
		}
		for (int i = 0; i < n; i++) {
			snprintf(sub, sizeof(sub), "%s[%d]", path, i);
			json_diff(cJSON_GetArrayItem(want, i), cJSON_GetArrayItem(got, i), sub, out, cap);
		}
		return;
	}
	if (cJSON_IsObject(want)) {
		const cJSON *w, *g;
		cJSON_ArrayForEach(w, want) {
			if (ignored(w->string))
				continue;
			g = cJSON_GetObjectItemCaseSensitive(got, w->string);
			snprintf(sub, sizeof(sub), "%s.%s", path, w->string);
			if (!g) {
				snprintf(out, cap, "%s: missing", sub);
				return;
			}
			json_diff(w, g, sub, out, cap);
		}
		cJSON_ArrayForEach(g, got) if (!cJSON_GetObjectItemCaseSensitive(want, g->string)) {
			snprintf(out, cap, "%s.%s: not in the toolkit's report", path, g->string);
			return;
		}
	}
}

static cJSON *load_json(const char *path)
{
	struct lynn_err e = { 0 };
	cJSON *j = lynn_json_load(path, 64 << 20, &e);
	ck_assert_msg(j != NULL, "%s", e.msg);
	return j;
}

static void assert_report_matches(const char *scenario, const char *report_path)
{
	char ep[512], diff[1024] = "";
	cJSON *want, *got;
	snprintf(ep, sizeof(ep), EVAL_FIX "/%s/expected.json", scenario);
	want = load_json(ep);
	got = load_json(report_path);
	json_diff(want, got, "$", diff, sizeof(diff));
	ck_assert_msg(!diff[0], "%s: report differs from the toolkit's: %s", scenario, diff);
	cJSON_Delete(want);
	cJSON_Delete(got);
}

/* The sanity arguments the toolkit was run with. */
static char *scenario_args(const char *scenario)
{
	char p[512];
	struct lynn_buf b = LYNN_BUF_INIT;
	cJSON *a, *x;
	snprintf(p, sizeof(p), EVAL_FIX "/%s/args.json", scenario);
	a = load_json(p);
	cJSON_ArrayForEach(x, cJSON_GetObjectItem(a, "args")) lynn_buf_printf(&b, " '%s'", x->valuestring);
	cJSON_Delete(a);
	return b.data ? lynn_buf_detach(&b) : strdup("");
}

static struct tu_run run_eval(const char *urls, const char *scenario, const char *out, const char *extra)
{
	char *sa = scenario_args(scenario), *args;
	struct tu_run r;
	ck_assert(asprintf(&args, "-q eval --model '%s' --adapter cand --prompts-dir " EVAL_FIX "/prompts "
			   "--output '%s' --model-tag fixture --concurrency 4 --backoff 0.01 --timeout 20 %s %s",
			   urls, out, sa, extra ? extra : "") > 0);
	r = tu_lynn(args, NULL, NULL);
	free(args);
	free(sa);
	return r;
}

static const char *last_line(const char *s)
{
	const char *end = s + strlen(s), *p;
	while (end > s && end[-1] == '\n')
		end--;
	for (p = end; p > s && p[-1] != '\n'; p--)
		;
	return p;
}

/* ===== the toolkit's verdicts ===== */

START_TEST(test_oracle_scenarios)
{
	const char *sc = scenarios[_i];
	struct fake f;
	char url[128], out[512], *dir = tu_mkdtemp(), *md;
	cJSON *want;
	struct tu_run r;
	bool win;

	fake_start(&f, sc);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f.port);
	snprintf(out, sizeof(out), "%s/report.json", dir);
	r = run_eval(url, sc, out, NULL);
	ck_assert_msg(!f.bad[0], "%s: request broke the contract: %s", sc, f.bad);
	snprintf(url, sizeof(url), EVAL_FIX "/%s/expected.json", sc);
	want = load_json(url);
	win = !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(want, "verdict")), "NET_WIN");
	ck_assert_msg(r.status == (win ? 0 : 1), "%s: exit %d\n%s", sc, r.status, r.err);
	ck_assert_str_eq(last_line(r.out), win ? "__FOUR_GATE_PASS__\n" : "__FOUR_GATE_FAIL__\n");
	assert_report_matches(sc, out);
	/* every output generated once: 2 sides x (8 style + 5 v8 + 5 v9) */
	ck_assert_int_eq(f.n_ok, 36);
	/* schema_version first; the Markdown summary with its per-item table beside the report */
	{
		char *txt = tu_read(out, NULL);
		ck_assert(!strncmp(txt, "{\n  \"schema_version\": \"lynn-4gate-v1\"", 36));
		free(txt);
	}
	snprintf(out, sizeof(out), "%s/report.md", dir);
	md = tu_read(out, NULL);
	ck_assert_ptr_nonnull(md);
	ck_assert_ptr_nonnull(strstr(md, "| 8 | t_008 | research_long |"));
	ck_assert_ptr_nonnull(strstr(md, "| v9 | p_c |"));
	free(md);
	cJSON_Delete(want);
	tu_run_free(&r);
	fake_stop(&f);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* 500, 429 and dropped connections are retried; the report is unchanged. */
START_TEST(test_retries)
{
	static const int statuses[] = { 500, 429, 0, 503 };
	struct fake f;
	char url[128], out[512], *dir = tu_mkdtemp();
	struct tu_run r;

	fake_start(&f, "mixed");
	f.fail_first = 2;
	f.fail_status = statuses[_i];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f.port);
	snprintf(out, sizeof(out), "%s/report.json", dir);
	r = run_eval(url, "mixed", out, NULL);
	ck_assert_msg(r.status == 1, "status %d: %s", r.status, r.err);
	assert_report_matches("mixed", out);
	ck_assert_int_eq(f.n_ok, 36);
	ck_assert_int_eq(f.n_posts, 36 * 3);
	tu_run_free(&r);
	fake_stop(&f);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* Retries run out: exit 3 naming the status. */
START_TEST(test_retries_exhausted)
{
	struct fake f;
	char url[128], out[512], *dir = tu_mkdtemp();
	struct tu_run r;

	fake_start(&f, "net_win");
	f.fail_first = 1000;
	f.fail_status = 502;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f.port);
	snprintf(out, sizeof(out), "%s/report.json", dir);
	r = run_eval(url, "net_win", out, "--retries 2");
	ck_assert_int_eq(r.status, 3);
	ck_assert_ptr_nonnull(strstr(r.err, "HTTP 502"));
	ck_assert_ptr_nonnull(strstr(r.err, "after 3 attempts"));
	ck_assert(!lynn_file_exists(out));
	tu_run_free(&r);
	fake_stop(&f);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* A replica that refuses connections is routed around. */
START_TEST(test_replica_down)
{
	struct fake f;
	char url[256], out[512], *dir = tu_mkdtemp();
	struct tu_run r;

	fake_start(&f, "net_win");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1,http://127.0.0.1:%d/v1", tu_dead_port(), f.port);
	snprintf(out, sizeof(out), "%s/report.json", dir);
	r = run_eval(url, "net_win", out, NULL);
	ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
	assert_report_matches("net_win", out);
	ck_assert_int_eq(f.n_ok, 36);
	tu_run_free(&r);
	/* all replicas down: a network failure, exit 3 */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", tu_dead_port());
	r = run_eval(url, "net_win", out, "--retries 1");
	ck_assert_int_eq(r.status, 3);
	tu_run_free(&r);
	fake_stop(&f);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* kill -9 in the middle, then --resume: nothing finished is asked again and
 * the report equals the toolkit's. */
START_TEST(test_resume_after_kill)
{
	struct fake f;
	char url[128], out[512], cpath[512], *dir = tu_mkdtemp(), *cmd, *sa;
	const char *bin = getenv("LYNN_BIN");
	struct tu_run r;
	struct lynn_cache *c;
	size_t n_cached;
	int pid, first_ok;

	fake_start(&f, "mixed");
	f.delay_ms = 40;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f.port);
	snprintf(out, sizeof(out), "%s/report.json", dir);
	snprintf(cpath, sizeof(cpath), "%s/report.cache.jsonl.zst", dir);
	sa = scenario_args("mixed");
	ck_assert(asprintf(&cmd, "'%s' -q eval --model '%s' --adapter cand --prompts-dir " EVAL_FIX "/prompts "
			   "--output '%s' --concurrency 2 %s >/dev/null 2>&1 & echo $!",
			   bin ? bin : "./lynn", url, out, sa) > 0);
	r = tu_sh(cmd, NULL);
	pid = atoi(r.out);
	ck_assert_int_gt(pid, 0);
	tu_run_free(&r);
	for (int i = 0; i < 400; i++) {
		int n;
		pthread_mutex_lock(&f.mu);
		n = f.n_ok;
		pthread_mutex_unlock(&f.mu);
		if (n >= 15)
			break;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	usleep(200000);
	ck_assert(!lynn_file_exists(out));
	first_ok = f.n_ok;
	ck_assert_int_lt(first_ok, 36);
	c = lynn_cache_open(cpath, true, NULL);
	ck_assert_ptr_nonnull(c);
	n_cached = lynn_cache_n_loaded(c);
	lynn_cache_close(c);
	/* 15 answers were served with at most 2 in flight; a loaded machine may
	 * not have written the last few before the kill, but most are there and
	 * none that was not served */
	ck_assert_uint_ge(n_cached, 5);
	ck_assert_uint_le(n_cached, (size_t)first_ok);
	/* rerun: only the missing outputs are generated */
	f.delay_ms = 0;
	pthread_mutex_lock(&f.mu);
	f.n_ok = 0;
	pthread_mutex_unlock(&f.mu);
	r = run_eval(url, "mixed", out, "--resume");
	ck_assert_msg(r.status == 1, "status %d: %s", r.status, r.err);
	ck_assert_int_eq(f.n_ok, 36 - (int)n_cached);
	assert_report_matches("mixed", out);
	tu_run_free(&r);
	/* and again: everything from the cache, the same report as the resumed
	 * run in every field but created_at and runtime_s (latencies included) */
	{
		cJSON *first = load_json(out), *again;
		char diff[1024] = "";
		f.n_ok = 0;
		r = run_eval(url, "mixed", out, "--resume");
		ck_assert_int_eq(r.status, 1);
		ck_assert_int_eq(f.n_ok, 0);
		assert_report_matches("mixed", out);
		again = load_json(out);
		same_run_compare = true;
		json_diff(first, again, "$", diff, sizeof(diff));
		same_run_compare = false;
		ck_assert_msg(!diff[0], "resumed reports differ: %s", diff);
		cJSON_Delete(first);
		cJSON_Delete(again);
		tu_run_free(&r);
	}
	/* without --resume the cache starts afresh */
	r = run_eval(url, "mixed", out, NULL);
	ck_assert_int_eq(f.n_ok, 36);
	tu_run_free(&r);
	free(cmd);
	free(sa);
	fake_stop(&f);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* --out-dir: the timestamped and the canonical report. */
START_TEST(test_out_dir)
{
	struct fake f;
	char url[128], *dir = tu_mkdtemp(), *args, canon[512];
	struct tu_run r;

	fake_start(&f, "net_win");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f.port);
	ck_assert(asprintf(&args, "eval --model '%s' --adapter cand --prompts-dir " EVAL_FIX "/prompts "
			   "--out-dir '%s/rep' --model-tag 'my tag' --runner r6000 --sanity-pass", url, dir) > 0);
	r = tu_lynn(args, NULL, NULL);
	ck_assert_msg(r.status == 0, "%s", r.err);
	ck_assert_ptr_nonnull(strstr(r.out, "/rep/4gate_my_tag_"));
	snprintf(canon, sizeof(canon), "%s/rep/4gate_results.json", dir);
	{
		cJSON *j = load_json(canon);
		ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "runner")), "r6000");
		ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "model_tag")), "my tag");
		ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "adapter")), "cand");
		ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "verdict")), "NET_WIN");
		cJSON_Delete(j);
	}
	snprintf(canon, sizeof(canon), "%s/rep/4gate_my_tag.cache.jsonl.zst", dir);
	ck_assert(lynn_file_exists(canon));
	tu_run_free(&r);
	free(args);
	fake_stop(&f);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* --suite: one column per model; v8 counts equal the toolkit's tool-call scorer. */
START_TEST(test_daily_mix)
{
	struct fake f;
	char url[128], *dir = tu_mkdtemp(), *args;
	struct tu_run r;
	cJSON *j, *m;

	fake_start(&f, "mixed");
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1", f.port);
	ck_assert(asprintf(&args, "-q eval --suite v8,v9 --model '%s' --model '%s' --label A --label B "
			   "--prompts-dir " EVAL_FIX "/prompts --out-dir '%s' --json", url, url, dir) > 0);
	r = tu_lynn(args, NULL, NULL);
	ck_assert_msg(r.status == 0, "%s", r.err);
	j = cJSON_Parse(r.out);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "schema_version")), "lynn-daily-mix-v1");
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "models")), 2);
	m = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "models"), 1);
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(m, "label")), "B");
	/* the base model answers: v8 4/5 per the toolkit (v8_base_pass_pct 80) */
	ck_assert_int_eq((int)cJSON_GetNumberValue(cJSON_GetObjectItem(
				 cJSON_GetObjectItem(cJSON_GetObjectItem(m, "suites"), "v8"), "pass")), 4);
	ck_assert_int_eq((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "total"), "n")), 10);
	cJSON_Delete(j);
	tu_run_free(&r);
	free(args);
	/* the table form */
	ck_assert(asprintf(&args, "-q eval --suite v8 --model '%s' --label NVFP4 --prompts-dir " EVAL_FIX "/prompts "
			   "--out-dir '%s' --resume", url, dir) > 0);
	r = tu_lynn(args, NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "| suite | NVFP4 |"));
	ck_assert_ptr_nonnull(strstr(r.out, "| v8 | 4/5 (80.0%) |"));
	tu_run_free(&r);
	free(args);
	fake_stop(&f);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* ===== usage and bad input: exit 2 with a clear message ===== */

START_TEST(test_usage_errors)
{
	static const struct {
		const char *args, *msg;
	} cases[] = {
		{ "eval", "--model is required" },
		{ "eval --model http://127.0.0.1:9/v1", "no baseline" },
		{ "eval --model http://127.0.0.1:9/v1 --adapter a --bogus", "unknown" },
		{ "eval --model tests/fixtures --adapter tests/fixtures --prompts-dir " EVAL_FIX "/prompts", "config.json" },
		{ "eval --model /no/such/model --adapter x --prompts-dir " EVAL_FIX "/prompts", "not found" },
		{ "eval --model http://x/v1 --adapter a --prompts-dir /no/such/dir", "not found" },
		{ "eval --model ftp://x --adapter a --prompts-dir " EVAL_FIX "/prompts", "not an http(s) URL" },
		{ "eval --model http://x/v1 --adapter a --concurrency 0", "--concurrency" },
		{ "eval --suite v7 --model http://x/v1", "unknown suite" },
		{ "eval --suite v8 --model http://x/v1 --label a --label b", "--label" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct tu_run r = tu_lynn(cases[i].args, NULL, NULL);
		ck_assert_msg(r.status == 2, "'%s': exit %d (%s)", cases[i].args, r.status, r.err);
		ck_assert_msg(strstr(r.err, cases[i].msg), "'%s': stderr lacks '%s': %s", cases[i].args,
			      cases[i].msg, r.err);
		tu_run_free(&r);
	}
}
END_TEST

/* Broken prompt files: exit 2 naming the file, line and field. */
START_TEST(test_bad_prompt_files)
{
	static const struct {
		const char *line, *msg;
	} cases[] = {
		{ "{\"id\": \"a\", \"prompt\": \"x\"\n", "line 1" },
		{ "[1, 2]\n", "not a JSON object" },
		{ "{\"id\": \"a\"}\n", "no 'prompt'" },
		{ "{\"id\": \"a\", \"prompt\": \"x\", \"reference_output\": 3}\n", "reference_output" },
		{ "\n\n{\"id\": {}, \"prompt\": \"x\"}\n", "line 3: field 'id'" },
		{ "{\"prompt\": \"\xff\xfe\"}\n{\"prompt\": 1}\n", "line 2" },
	};
	char *dir = tu_mkdtemp(), p[512], *args;
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct tu_run r;
		snprintf(p, sizeof(p), "%s/style.jsonl", dir);
		tu_write(p, cases[i].line, strlen(cases[i].line));
		ck_assert(asprintf(&args, "eval --model http://127.0.0.1:9/v1 --adapter a --prompts '%s' "
				   "--prompts-dir " EVAL_FIX "/prompts", p) > 0);
		r = tu_lynn(args, NULL, NULL);
		ck_assert_msg(r.status == 2, "case %zu: exit %d (%s)", i, r.status, r.err);
		ck_assert_msg(strstr(r.err, cases[i].msg) && strstr(r.err, "style.jsonl"),
			      "case %zu: stderr lacks '%s': %s", i, cases[i].msg, r.err);
		tu_run_free(&r);
		free(args);
	}
	/* v8 field types */
	{
		struct lynn_eval_set s = { LYNN_EVAL_V8, NULL, 0 };
		struct lynn_err e = { 0 };
		snprintf(p, sizeof(p), "%s/v8.jsonl", dir);
		tu_write(p, "{\"prompt\":\"x\",\"expected\":{\"tool_name\":\"t\",\"param_hints\":{\"k\":\"v\"}}}\n", 67);
		ck_assert_int_eq(lynn_eval_set_load(&s, p, &e), -LYNN_EFORMAT);
		ck_assert_ptr_nonnull(strstr(e.msg, "expected.param_hints.k"));
		lynn_eval_set_release(&s);
	}
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* ===== units ===== */

START_TEST(test_pyfloat)
{
	static const struct {
		double x;
		const char *want; /* Python repr() */
	} cases[] = {
		{ 4.0, "4.0" }, { 85.71, "85.71" }, { -10.0, "-10.0" }, { 0.0, "0.0" }, { 3.25, "3.25" },
		{ -5.0, "-5.0" }, { 0.03, "0.03" }, { 1e-05, "1e-05" }, { 1e16, "1e+16" }, { 123456789.0, "123456789.0" },
		{ 0.1 + 0.2, "0.30000000000000004" }, { 1.5e-4, "0.00015" }, { -0.0, "-0.0" }, { 100.0, "100.0" },
	};
	char buf[64];
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		lynn_eval_pyfloat(cases[i].x, buf, sizeof(buf));
		ck_assert_str_eq(buf, cases[i].want);
	}
	/* numeric golds out of the integer range, as Python's json + str() give
	 * them (1e999 parses as inf; found by fuzz_eval_set under UBSan) */
	char *dir = tu_mkdtemp(), *f = lynn_path_join(dir, "g.jsonl");
	static const char lines[] = "{\"id\":\"a\",\"prompt\":\"p\",\"gold_answer\":1e999}\n"
				    "{\"id\":\"b\",\"prompt\":\"p\",\"gold_answer\":-1e300}\n"
				    "{\"id\":\"c\",\"prompt\":\"p\",\"gold_answer\":12}\n";
	tu_write(f, lines, sizeof lines - 1);
	struct lynn_eval_set s = { LYNN_EVAL_V9, NULL, 0 };
	ck_assert_int_eq(lynn_eval_set_load(&s, f, NULL), 0);
	ck_assert_uint_eq(s.n, 3);
	ck_assert_str_eq(s.items[0].gold, "inf");
	ck_assert_str_eq(s.items[1].gold, "-1e+300");
	ck_assert_str_eq(s.items[2].gold, "12");
	lynn_eval_set_release(&s);
	lynn_rm_rf(dir);
	free(f);
	free(dir);
}
END_TEST

START_TEST(test_strip)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
		{ "  a b \n", "a b" }, { "\xe3\x80\x80中文\xc2\xa0", "中文" }, { "", "" }, { " \t\n", "" },
		{ "\xe2\x80\x83x\xe2\x80\xa8", "x" }, { "x\xe4\xb8\x80", "x\xe4\xb8\x80" }, { "\x1c" "a", "a" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		char *s = strdup(cases[i].in);
		lynn_eval_strip(s);
		ck_assert_str_eq(s, cases[i].want);
		free(s);
	}
}
END_TEST

START_TEST(test_cache_torn_tail)
{
	char *dir = tu_mkdtemp(), p[512], key[65];
	struct lynn_cache *c;
	struct lynn_err e = { 0 };
	cJSON *rec;
	FILE *f;

	snprintf(p, sizeof(p), "%s/c.jsonl.zst", dir);
	c = lynn_cache_open(p, false, &e);
	ck_assert_ptr_nonnull(c);
	for (int i = 0; i < 3; i++) {
		char prompt[32];
		snprintf(prompt, sizeof(prompt), "prompt %d", i);
		lynn_cache_key(key, "m", NULL, prompt, NULL, 384, false);
		rec = cJSON_CreateObject();
		cJSON_AddStringToObject(rec, "key", key);
		cJSON_AddStringToObject(rec, "output", prompt);
		ck_assert_int_eq(lynn_cache_put(c, rec, &e), 0);
		cJSON_Delete(rec);
	}
	lynn_cache_close(c);
	/* a torn record at the end (a kill mid-write) */
	f = fopen(p, "ab");
	fwrite("\x28\xb5\x2f\xfd\x20", 1, 5, f);
	fclose(f);
	c = lynn_cache_open(p, true, &e);
	ck_assert_ptr_nonnull(c);
	ck_assert_uint_eq(lynn_cache_n_loaded(c), 3);
	ck_assert_uint_eq(lynn_cache_n_dropped(c), 1);
	lynn_cache_key(key, "m", NULL, "prompt 1", NULL, 384, false);
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(lynn_cache_get(c, key), "output")), "prompt 1");
	/* settings are part of the key */
	lynn_cache_key(key, "m", NULL, "prompt 1", NULL, 512, false);
	ck_assert_ptr_null(lynn_cache_get(c, key));
	lynn_cache_key(key, "m", "adapter", "prompt 1", NULL, 384, false);
	ck_assert_ptr_null(lynn_cache_get(c, key));
	/* appending after the cut keeps the file readable */
	rec = cJSON_CreateObject();
	cJSON_AddStringToObject(rec, "key", key);
	cJSON_AddStringToObject(rec, "output", "new");
	ck_assert_int_eq(lynn_cache_put(c, rec, &e), 0);
	cJSON_Delete(rec);
	lynn_cache_close(c);
	c = lynn_cache_open(p, true, &e);
	ck_assert_uint_eq(lynn_cache_n_loaded(c), 4);
	ck_assert_uint_eq(lynn_cache_n_dropped(c), 0);
	lynn_cache_close(c);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_request_body)
{
	struct lynn_client_opts o = { 0 };
	struct lynn_chat_req q = { 0 };
	struct lynn_client *c;
	cJSON *b, *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
	char *s;

	o.urls = "http://127.0.0.1:9/v1/ , http://127.0.0.1:10/v1";
	o.model = "m";
	o.think = true;
	c = lynn_client_create(&o, NULL);
	ck_assert_ptr_nonnull(c);
	q.prompt = "你好";
	q.tools = tools;
	q.max_tokens = 256;
	s = lynn_client_request_body(c, &q);
	b = cJSON_Parse(s);
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(b, "model")), "m");
	ck_assert_int_eq((int)cJSON_GetNumberValue(cJSON_GetObjectItem(b, "max_tokens")), 256);
	ck_assert(cJSON_GetNumberValue(cJSON_GetObjectItem(b, "temperature")) == 0);
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(b, "chat_template_kwargs"), "enable_thinking")));
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(b, "tools")), 1);
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "messages"), 0), "content")), "你好");
	free(s);
	cJSON_Delete(b);
	cJSON_Delete(tools);
	lynn_client_free(c);
}
END_TEST

/* The committed v9 golds recompute (tests/tools/verify_golds.py). */
START_TEST(test_prompt_golds)
{
	struct tu_run r;
	struct lynn_eval_set s9 = { LYNN_EVAL_V9, NULL, 0 }, s8 = { LYNN_EVAL_V8, NULL, 0 },
			     st = { LYNN_EVAL_STYLE, NULL, 0 };
	size_t n_ref = 0;
	ck_assert_int_eq(lynn_eval_set_load(&st, "prompts/v4_distill_verify_35_v2.jsonl", NULL), 0);
	ck_assert_int_eq(lynn_eval_set_load(&s8, "prompts/stage1_tool_calling.jsonl", NULL), 0);
	ck_assert_int_eq(lynn_eval_set_load(&s8, "prompts/stage4_research.jsonl", NULL), 0);
	ck_assert_int_eq(lynn_eval_set_load(&s8, "prompts/stage5_coding.jsonl", NULL), 0);
	ck_assert_int_eq(lynn_eval_set_load(&s9, "prompts/v9_holdout.jsonl", NULL), 0);
	ck_assert_uint_ge(s9.n, 8);
	ck_assert_int_eq(lynn_eval_set_load(&s9, "prompts/v9_probe_expanded.jsonl", NULL), 0);
	ck_assert_uint_eq(st.n, 35);
	for (size_t i = 0; i < st.n; i++)
		n_ref += st.items[i].reference != NULL;
	ck_assert_uint_ge(n_ref, 18);
	ck_assert_uint_ge(s8.n, 15);
	ck_assert_uint_ge(s9.n, 58);
	for (size_t i = 0; i < s9.n; i++)
		ck_assert_ptr_nonnull(s9.items[i].gold);
	lynn_eval_set_release(&st);
	lynn_eval_set_release(&s8);
	lynn_eval_set_release(&s9);
	if (access("/usr/bin/python3", X_OK) == 0) {
		r = tu_sh("/usr/bin/python3 tests/tools/verify_golds.py", NULL);
		ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
		tu_run_free(&r);
	}
}
END_TEST

/* The answer an in-process eval cached for `prompt` on model (with the
 * adapter, or none) is `lynn generate`'s ids for it, decoded without the
 * special tokens (as eval decodes) and stripped. */
static void eval_answer_is_generate(struct lynn_cache *c, const char *model, const char *adapter, const char *prompt,
				    const char *extra)
{
	char key[65], *cmd, *tail;
	struct lynn_err err = { 0 };
	struct lynn_tok_ids ids = { 0 };
	struct lynn_buf text = { 0 };
	lynn_cache_key(key, model, adapter, prompt, NULL, 384, false);
	const cJSON *rec = lynn_cache_get(c, key);
	ck_assert_msg(rec != NULL, "%s: no cached answer", model);
	ck_assert(asprintf(&cmd, "-q generate --model %s %s%s --prompt '%s' --max-tokens 384 --threads 1 --print-ids %s",
			   model, adapter ? "--adapter " : "", adapter ? adapter : "", prompt, extra ? extra : "") > 0);
	struct tu_run r = tu_lynn(cmd, NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	for (const char *p = r.out; *p; p = tail) {
		long id = strtol(p, &tail, 10);
		if (tail == p)
			break;
		if (ids.n == ids.cap) {
			ids.cap = ids.cap ? 2 * ids.cap : 256;
			ids.ids = realloc(ids.ids, ids.cap * sizeof *ids.ids);
		}
		ids.ids[ids.n++] = (int32_t)id;
	}
	ck_assert_int_gt((int)ids.n, 0);
	struct lynn_tok *tok = lynn_tok_load(model, &err);
	ck_assert_msg(tok != NULL, "%s", err.msg);
	ck_assert_int_eq(lynn_tok_decode(tok, ids.ids, ids.n, LYNN_TOK_F_SKIP_SPECIAL, &text, &err), 0);
	ck_assert_int_eq(lynn_buf_puts(&text, ""), 0);
	lynn_eval_strip(text.data);
	ck_assert_msg(!strcmp(text.data, cJSON_GetStringValue(cJSON_GetObjectItem(rec, "output"))),
		      "%s%s: eval's answer differs from lynn generate's", model, adapter ? " with the adapter" : "");
	lynn_tok_free(tok);
	lynn_tok_ids_release(&ids);
	lynn_buf_release(&text);
	free(cmd);
	tu_run_free(&r);
}

/* How many of the fixture prompt sets' answers on model (with the adapter,
 * or none) two eval caches hold; each must be the same in both. */
static int same_answers(const struct lynn_cache *a, const struct lynn_cache *b, const char *model,
			const char *adapter)
{
	static const struct { enum lynn_eval_kind kind; const char *file; } sets[] = {
		{ LYNN_EVAL_STYLE, "v4_distill_verify_35_v2.jsonl" }, { LYNN_EVAL_V8, "stage1_tool_calling.jsonl" },
		{ LYNN_EVAL_V8, "stage4_research.jsonl" }, { LYNN_EVAL_V8, "stage5_coding.jsonl" },
		{ LYNN_EVAL_V9, "v9_holdout.jsonl" }, { LYNN_EVAL_V9, "v9_probe_expanded.jsonl" },
	};
	int n = 0;
	for (size_t f = 0; f < sizeof sets / sizeof *sets; f++) {
		struct lynn_eval_set set = { sets[f].kind, NULL, 0 };
		char path[512], key[65];
		snprintf(path, sizeof path, EVAL_FIX "/prompts/%s", sets[f].file);
		ck_assert_int_eq(lynn_eval_set_load(&set, path, NULL), 0);
		for (size_t i = 0; i < set.n; i++) {
			const struct lynn_eval_item *it = &set.items[i];
			lynn_cache_key(key, model, adapter, it->prompt, it->tools, it->max_tokens, false);
			const cJSON *x = lynn_cache_get(a, key), *y = lynn_cache_get(b, key);
			if (!x && !y)
				continue;
			ck_assert_msg(x && y, "%s %s: an answer in one cache only", sets[f].file, it->id ? it->id : "");
			ck_assert_msg(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(x, "output")),
					      cJSON_GetStringValue(cJSON_GetObjectItem(y, "output"))),
				      "%s %s%s: the answers differ", sets[f].file, it->id ? it->id : "",
				      adapter ? " (adapter)" : "");
			n++;
		}
		lynn_eval_set_release(&set);
	}
	return n;
}

/* In-process (engine, adapter on/off per request) on the tiny model: the
 * answers equal `lynn generate` with and without the adapter, and every
 * answer generated 8 together equals the one generated alone; --resume
 * regenerates nothing. */
START_TEST(test_eval_inprocess)
{
	const char *tiny = FIXTURES "/qwen35moe-tiny", *lora = FIXTURES "/lora-tiny";
	char *dir = tu_mkdtemp(), *args, cpath[512];
	const char *prompt = "用 markdown 表格比较 HTTP/1.1 和 HTTP/2。";
	struct tu_run r;
	struct lynn_cache *c;

	if (!lynn_dir_exists(tiny) || !lynn_dir_exists(lora)) {
		free(dir);
		return;
	}
	ck_assert(asprintf(&args, "-q eval --model %s --adapter %s --sanity-pass --prompts-dir " EVAL_FIX "/prompts "
			   "--output '%s/r.json' --threads 1", tiny, lora, dir) > 0);
	r = tu_lynn(args, NULL, NULL);
	ck_assert_msg(r.status == 0 || r.status == 1, "exit %d: %s", r.status, r.err);
	ck_assert(!strcmp(last_line(r.out), "__FOUR_GATE_PASS__\n") || !strcmp(last_line(r.out), "__FOUR_GATE_FAIL__\n"));
	{
		char rp[512];
		cJSON *j;
		snprintf(rp, sizeof(rp), "%s/r.json", dir);
		j = load_json(rp);
		ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "runner")), "local");
		ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "adapter")), lora);
		cJSON_Delete(j);
	}
	tu_run_free(&r);
	snprintf(cpath, sizeof(cpath), "%s/r.cache.jsonl.zst", dir);
	c = lynn_cache_open(cpath, true, NULL);
	ck_assert_ptr_nonnull(c);
	ck_assert_uint_eq(lynn_cache_n_loaded(c), 36);
	eval_answer_is_generate(c, tiny, lora, prompt, NULL);
	eval_answer_is_generate(c, tiny, NULL, prompt, NULL);
	/* generated one at a time (--concurrency 1; 8 above): the same answers */
	free(args);
	ck_assert(asprintf(&args, "-q eval --model %s --adapter %s --sanity-pass --prompts-dir " EVAL_FIX "/prompts "
			   "--output '%s/one.json' --threads 1 --concurrency 1", tiny, lora, dir) > 0);
	r = tu_lynn(args, NULL, NULL);
	ck_assert_msg(r.status == 0 || r.status == 1, "exit %d: %s", r.status, r.err);
	tu_run_free(&r);
	snprintf(cpath, sizeof(cpath), "%s/one.cache.jsonl.zst", dir);
	struct lynn_cache *c1 = lynn_cache_open(cpath, true, NULL);
	ck_assert_ptr_nonnull(c1);
	ck_assert_int_eq(same_answers(c, c1, tiny, lora) + same_answers(c, c1, tiny, NULL), 36);
	lynn_cache_close(c1);
	lynn_cache_close(c);
	/* resume: everything from the cache */
	free(args);
	ck_assert(asprintf(&args, "-v eval --model %s --adapter %s --sanity-pass --prompts-dir " EVAL_FIX "/prompts "
			   "--output '%s/r.json' --threads 1 --resume", tiny, lora, dir) > 0);
	r = tu_lynn(args, NULL, NULL);
	ck_assert(strstr(r.err, "g1 style (candidate): 8 of 8 outputs from the cache"));
	ck_assert(!strstr(r.err, "generate: "));
	tu_run_free(&r);
	free(args);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST


/* In-process on .gguf files (llama.cpp's Q8_0 against its BF16; the CPU
 * runner binds them): the answers equal `lynn generate` on each file. */
START_TEST(test_eval_inprocess_gguf)
{
	const char *q8 = FIXTURES "/gguf/tiny-q8_0.gguf", *bf16 = FIXTURES "/gguf/tiny-bf16.gguf";
	const char *prompt = "用 markdown 表格比较 HTTP/1.1 和 HTTP/2。";
	char *dir = tu_mkdtemp(), *args, cpath[512];
	ck_assert(asprintf(&args, "-q eval --model %s --base %s --sanity-pass --prompts-dir " EVAL_FIX "/prompts "
			   "--output '%s/r.json' --threads 1 --device cpu", q8, bf16, dir) > 0);
	struct tu_run r = tu_lynn(args, NULL, NULL);
	ck_assert_msg(r.status == 0 || r.status == 1, "exit %d: %s", r.status, r.err);
	tu_run_free(&r);
	snprintf(cpath, sizeof(cpath), "%s/r.json", dir);
	cJSON *j = load_json(cpath);
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "runner")), "local");
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(j, "base")), bf16);
	cJSON_Delete(j);
	snprintf(cpath, sizeof(cpath), "%s/r.cache.jsonl.zst", dir);
	struct lynn_cache *c = lynn_cache_open(cpath, true, NULL);
	ck_assert_ptr_nonnull(c);
	ck_assert_uint_eq(lynn_cache_n_loaded(c), 36);
	eval_answer_is_generate(c, q8, NULL, prompt, "--device cpu");
	eval_answer_is_generate(c, bf16, NULL, prompt, "--device cpu");
	lynn_cache_close(c);
	free(args);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* ===== lynn profile (SPEC §7) ===== */

/* The heatmap's cells (the background rect has no x). */
static int heatmap_cells(const char *svg)
{
	int n = 0;
	for (const char *q = svg; (q = strstr(q, "<rect x=")); q++)
		n++;
	return n;
}

/* The accumulator on hand-made routes: counts, shares, mean probabilities,
 * categories, and routes it must refuse. */
START_TEST(test_profile_counts)
{
	struct lynn_err e = { 0 };
	ck_assert_ptr_null(lynn_profile_new(2, 4, 5, &e));
	ck_assert_int_eq(e.code, -LYNN_EINVAL);
	struct lynn_profile *p = lynn_profile_new(3, 4, 2, &e);
	const int r1[] = { 1, 3 }, r2[] = { 1, 2 }, r3[] = { 3, 1 }, bad[] = { 0, 4 };
	const float p1[] = { 0.5f, 0.25f }, p2[] = { 0.75f, 0.125f }, p3[] = { 0.5f, 0.5f };
	lynn_profile_route(p, 0, 2, r1, p1); /* before any category */
	ck_assert_int_eq(lynn_profile_category(p, "a", &e), 0);
	lynn_profile_route(p, 0, 2, r1, p1);
	lynn_profile_route(p, 0, 2, r2, p2);
	lynn_profile_route(p, 3, 2, r1, p1);  /* no such layer */
	lynn_profile_route(p, 0, 1, r1, p1);  /* k != top_k */
	lynn_profile_route(p, 0, 2, bad, p1); /* no such expert */
	lynn_profile_prompt_done(p);
	ck_assert_int_eq(lynn_profile_category(p, "b", &e), 0);
	lynn_profile_route(p, 0, 2, r3, p3);
	lynn_profile_route(p, 2, 2, r2, p2);
	lynn_profile_prompt_done(p);
	ck_assert_int_eq(lynn_profile_malformed(p), 4);
	ck_assert_int_eq(lynn_profile_layer_tokens(p, 0), 3);
	ck_assert_int_eq(lynn_profile_layer_tokens(p, 1), 0);

	cJSON *r = lynn_profile_report(p, 16);
	ck_assert_str_eq(cJSON_GetObjectItem(r, "schema_version")->valuestring, "lynn-activation-profile-v1");
	ck_assert(tu_num(r, "n_layers") == 3 && tu_num(r, "n_experts_per_layer") == 4 && tu_num(r, "top_k") == 2);
	ck_assert(tu_num(r, "n_prompts") == 2 && tu_num(r, "max_tokens_per_prompt") == 16);
	ck_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "categories"), 1)->valuestring, "b");
	const cJSON *layers = cJSON_GetObjectItem(r, "layers"), *l0 = cJSON_GetArrayItem(layers, 0);
	ck_assert_int_eq(cJSON_GetArraySize(layers), 2); /* layer 1 routed nothing */
	ck_assert(tu_num(cJSON_GetArrayItem(layers, 1), "layer_idx") == 2);
	ck_assert(tu_num(l0, "n_tokens") == 3);
	const double want_cnt[] = { 0, 3, 1, 2 }, want_avg[] = { 0, (0.5 + 0.75 + 0.5) / 3, 0.125, 0.375 };
	for (int x = 0; x < 4; x++) {
		ck_assert(cJSON_GetArrayItem(cJSON_GetObjectItem(l0, "expert_token_count"), x)->valuedouble == want_cnt[x]);
		ck_assert(fabs(cJSON_GetArrayItem(cJSON_GetObjectItem(l0, "expert_usage_pct"), x)->valuedouble -
			       100.0 * want_cnt[x] / 3) < 1e-12);
		ck_assert(fabs(cJSON_GetArrayItem(cJSON_GetObjectItem(l0, "avg_gate_prob_when_active"), x)->valuedouble -
			       want_avg[x]) < 1e-7);
	}
	const cJSON *b0 = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "by_category"), "b"), 0);
	ck_assert(tu_num(b0, "n_tokens") == 1);
	ck_assert(cJSON_GetArrayItem(cJSON_GetObjectItem(b0, "expert_token_count"), 3)->valuedouble == 1);
	ck_assert(cJSON_GetArrayItem(cJSON_GetObjectItem(b0, "expert_usage_pct"), 1)->valuedouble == 100);
	ck_assert_ptr_null(cJSON_GetObjectItem(b0, "avg_gate_prob_when_active"));
	cJSON_Delete(r);
	char *svg = lynn_profile_heatmap_svg(p);
	ck_assert_int_eq(heatmap_cells(svg), 3 * 4);
	ck_assert_ptr_nonnull(strstr(svg, "layer 0 expert 1: 100.00% (3 tokens)"));
	ck_assert_ptr_nonnull(strstr(svg, "</svg>"));
	free(svg);
	lynn_profile_free(p);
}
END_TEST

static void write_profile_prompts(const char *dir)
{
	char p[512];
	snprintf(p, sizeof p, "%s/general.jsonl", dir);
	static const char general[] = "{\"id\":\"a\",\"category\":\"chat\",\"prompt\":\"Hello there\"}\n"
				      "{\"id\":\"b\",\"prompt\":\"What is 2+2?\"}\n",
			  zh[] = "\n{\"user\":\"写一首关于秋天的诗\"}\n", notes[] = "not a prompt file\n";
	tu_write(p, general, strlen(general));
	snprintf(p, sizeof p, "%s/zh.jsonl", dir);
	tu_write(p, zh, strlen(zh));
	snprintf(p, sizeof p, "%s/notes.txt", dir);
	tu_write(p, notes, strlen(notes));
}

/* The command on the tiny Qwen3.5-MoE: the report's arithmetic holds
 * together, the token count matches `lynn generate` on the same prompt, and
 * two runs agree. */
START_TEST(test_profile_command)
{
	char *dir = tu_mkdtemp(), *args;
	char p1[512], p2[512], svg[512];
	write_profile_prompts(dir);
	snprintf(p1, sizeof p1, "%s/a.json", dir);
	snprintf(p2, sizeof p2, "%s/b.json", dir);
	snprintf(svg, sizeof svg, "%s/h.svg", dir);
	ck_assert(asprintf(&args, "profile --model " FIXTURES "/qwen35moe-tiny --prompts-dir '%s' --out '%s' "
			   "--max-tokens 8 --heatmap '%s' --threads 1", dir, p1, svg) > 0);
	struct tu_run r = tu_lynn(args, NULL, NULL);
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	tu_run_free(&r);
	free(args);
	cJSON *rep = lynn_json_load(p1, 1 << 24, NULL);
	ck_assert_ptr_nonnull(rep);
	ck_assert(tu_num(rep, "n_layers") == 4 && tu_num(rep, "n_experts_per_layer") == 8 && tu_num(rep, "top_k") == 2);
	ck_assert(tu_num(rep, "n_prompts") == 3);
	const cJSON *cats = cJSON_GetObjectItem(rep, "categories");
	ck_assert_int_eq(cJSON_GetArraySize(cats), 3);
	ck_assert_str_eq(cJSON_GetArrayItem(cats, 0)->valuestring, "chat");
	ck_assert_str_eq(cJSON_GetArrayItem(cats, 1)->valuestring, "general");
	ck_assert_str_eq(cJSON_GetArrayItem(cats, 2)->valuestring, "zh");
	const cJSON *layers = cJSON_GetObjectItem(rep, "layers"), *by = cJSON_GetObjectItem(rep, "by_category");
	ck_assert_int_eq(cJSON_GetArraySize(layers), 4);
	double ntok = tu_num(cJSON_GetArrayItem(layers, 0), "n_tokens");
	for (int li = 0; li < 4; li++) {
		const cJSON *l = cJSON_GetArrayItem(layers, li);
		double sum = 0, cat_tok = 0;
		ck_assert(tu_num(l, "layer_idx") == li && tu_num(l, "n_tokens") == ntok);
		for (int x = 0; x < 8; x++) {
			double c = cJSON_GetArrayItem(cJSON_GetObjectItem(l, "expert_token_count"), x)->valuedouble;
			double pct = cJSON_GetArrayItem(cJSON_GetObjectItem(l, "expert_usage_pct"), x)->valuedouble;
			double avg = cJSON_GetArrayItem(cJSON_GetObjectItem(l, "avg_gate_prob_when_active"), x)->valuedouble;
			double cat_c = 0;
			sum += c;
			ck_assert(fabs(pct - 100 * c / ntok) < 1e-9);
			/* a selected expert holds at least 1/E of the probability in top-2 of 8 */
			ck_assert(c ? avg >= 1.0 / 8 && avg <= 1 : avg == 0);
			for (const cJSON *cat = by->child; cat; cat = cat->next)
				cat_c += cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cat, li),
										"expert_token_count"), x)->valuedouble;
			ck_assert(cat_c == c);
		}
		ck_assert(sum == 2 * ntok);
		for (const cJSON *cat = by->child; cat; cat = cat->next)
			cat_tok += tu_num(cJSON_GetArrayItem(cat, li), "n_tokens");
		ck_assert(cat_tok == ntok);
	}
	/* the "chat" prompt alone: its prompt tokens plus the generated ones
	 * fed back, as `lynn generate` counts them */
	r = tu_lynn("generate --model " FIXTURES "/qwen35moe-tiny --prompt 'Hello there' --max-tokens 8 "
		    "--print-ids", NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	int n_prompt = 0, n_gen = 0;
	const char *st = strstr(r.err, "prompt ");
	ck_assert(st && sscanf(st, "prompt %d tokens", &n_prompt) == 1);
	for (char *q = r.out; *q;)
		if (strtol(q, &q, 10) >= 0 && (*q == ' ' || *q == '\0' || *q == '\n')) {
			n_gen++;
			while (*q == ' ' || *q == '\n')
				q++;
		} else
			break;
	tu_run_free(&r);
	const cJSON *chat0 = cJSON_GetArrayItem(cJSON_GetObjectItem(by, "chat"), 0);
	ck_assert_msg(tu_num(chat0, "n_tokens") == n_prompt + n_gen - 1, "%g vs %d + %d - 1",
		      tu_num(chat0, "n_tokens"), n_prompt, n_gen);
	/* the heatmap: one cell per (layer, expert) */
	char *s = tu_read(svg, NULL);
	ck_assert_int_eq(heatmap_cells(s), 4 * 8);
	free(s);
	/* a second run, one prompt: the same routes for it */
	ck_assert(asprintf(&args, "profile --model " FIXTURES "/qwen35moe-tiny --prompts-dir '%s' --out '%s' "
			   "--max-tokens 8 --max-prompts 1 -q", dir, p2) > 0);
	r = tu_lynn(args, NULL, NULL);
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	tu_run_free(&r);
	free(args);
	cJSON *rep2 = lynn_json_load(p2, 1 << 24, NULL);
	ck_assert(tu_num(rep2, "n_prompts") == 1);
	const cJSON *only = cJSON_GetObjectItem(rep2, "by_category");
	ck_assert_int_eq(cJSON_GetArraySize(only), 1);
	ck_assert(cJSON_Compare(cJSON_GetObjectItem(only, "chat"), cJSON_GetObjectItem(by, "chat"), true));
	cJSON_Delete(rep2);
	cJSON_Delete(rep);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

/* Bad arguments and inputs: exit 2, naming what is wrong; no report. */
START_TEST(test_profile_bad_input)
{
	static const char *const subdirs[] = { "empty", "broken", "good" };
	char *dir = tu_mkdtemp(), *args, out[512];
	for (size_t i = 0; i < 3; i++) {
		snprintf(out, sizeof out, "%s/%s", dir, subdirs[i]);
		ck_assert(mkdir(out, 0755) == 0);
	}
	snprintf(out, sizeof out, "%s/broken/b.jsonl", dir);
	tu_write(out, "{\"prompt\":\"ok\"}\n{\"prompt\": 3}\n", 31);
	snprintf(out, sizeof out, "%s/good/g.jsonl", dir);
	tu_write(out, "{\"prompt\":\"ok\"}\n", 16);
	snprintf(out, sizeof out, "%s/r.json", dir);
	const struct {
		const char *args, *msg;
	} cases[] = {
		{ "profile --prompts-dir %s --out %s", "required" },
		{ "profile --model " FIXTURES "/qwen35moe-tiny --prompts-dir %s/nope --out %s", "nope" },
		{ "profile --model " FIXTURES "/qwen35moe-tiny --prompts-dir %s/empty --out %s", "no *.jsonl" },
		{ "profile --model " FIXTURES "/qwen35moe-tiny --prompts-dir %s/broken --out %s", "b.jsonl' line 2" },
		{ "profile --model " FIXTURES "/qwen35moe-tiny --prompts-dir %s/broken --out %s --max-tokens 0",
		  "--max-tokens" },
		{ "profile --model " FIXTURES "/qwen35moe-tiny --prompts-dir %s/broken --out %s --device gpu",
		  "--device" },
		{ "profile --model %s/none --prompts-dir %s/good --out %s", "none" },
		{ "profile --model %s --prompts-dir %s/good --out %s", "config.json" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		if (i >= 6)
			ck_assert(asprintf(&args, cases[i].args, dir, dir, out) > 0);
		else
			ck_assert(asprintf(&args, cases[i].args, dir, out) > 0);
		struct tu_run r = tu_lynn(args, NULL, NULL);
		ck_assert_msg(r.status == 2, "case %zu: exit %d (%s)", i, r.status, r.err);
		ck_assert_msg(strstr(r.err, cases[i].msg), "case %zu: stderr lacks '%s': %s", i, cases[i].msg,
			      r.err);
		ck_assert(!lynn_file_exists(out));
		tu_run_free(&r);
		free(args);
	}
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST


/* ===== lynn profile against llama.cpp's router (tests/fixtures/profile) ===== */

/* Router probabilities: llama.cpp keeps its KV cache in f16 and sums in
 * another order (its logits differ from lynn's by up to 7.2e-3 on this
 * model, docs/benchmarks.md); the probabilities of the choices differ by at
 * most 9.9e-4 on the fixture. A choice whose k-th probability leads the
 * next one by less than TOL_ROUTE_GAP is a near tie either runner may break
 * either way (25 of the fixture's 480 routes). */
#define TOL_ROUTE_PROB 2e-3
#define TOL_ROUTE_GAP 1e-3

struct route_rec {
	int n, cap, k;
	int *layer, *experts;
	float *probs;
};

static void record_route(void *ud, int layer, int k, const int *experts, const float *probs)
{
	struct route_rec *r = ud;
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 256;
		r->layer = realloc(r->layer, (size_t)r->cap * sizeof *r->layer);
		r->experts = realloc(r->experts, (size_t)r->cap * (size_t)k * sizeof *r->experts);
		r->probs = realloc(r->probs, (size_t)r->cap * (size_t)k * sizeof *r->probs);
		ck_assert(r->layer && r->experts && r->probs);
	}
	r->k = k;
	r->layer[r->n] = layer;
	memcpy(r->experts + (size_t)r->n * k, experts, (size_t)k * sizeof *experts);
	memcpy(r->probs + (size_t)r->n * k, probs, (size_t)k * sizeof *probs);
	r->n++;
}

/* The router observer against llama.cpp token by token, on the same ids. */
START_TEST(test_profile_routes_vs_llama)
{
	struct lynn_err e = { 0 };
	cJSON *fx = lynn_json_load(FIXTURES "/profile/llama_routes.json", 1 << 24, &e);
	ck_assert_msg(fx, "%s", e.msg);
	struct lynn_model *m = lynn_model_open(FIXTURES "/qwen35moe-tiny-text-f32", NULL, &e);
	ck_assert_msg(m, "%s", e.msg);
	struct lynn_seq *seq = lynn_seq_create(m, &e);
	int n_cmp = 0, n_tie = 0;
	double max_dp = 0;
	const cJSON *pr;
	cJSON_ArrayForEach(pr, cJSON_GetObjectItem(fx, "prompts")) {
		const cJSON *jids = cJSON_GetObjectItem(pr, "ids"), *layers = cJSON_GetObjectItem(pr, "layers");
		int n = cJSON_GetArraySize(jids), k = (int)tu_num(pr, "top_k");
		int32_t *ids = malloc((size_t)n * sizeof *ids);
		for (int i = 0; i < n; i++)
			ids[i] = (int32_t)cJSON_GetArrayItem(jids, i)->valueint;
		struct route_rec rec = { 0 };
		lynn_seq_reset(seq);
		lynn_model_set_route_observer(m, record_route, &rec);
		ck_assert_int_eq(lynn_model_prefill(m, seq, ids, n, false, NULL, &e), 0);
		lynn_model_set_route_observer(m, NULL, NULL);
		ck_assert_int_eq(rec.n, n * cJSON_GetArraySize(layers));
		ck_assert_int_eq(rec.k, k);
		/* routes arrive layer by layer, token by token within a layer */
		for (int r = 0; r < rec.n; r++) {
			const int li = rec.layer[r], t = r % n;
			const cJSON *lt = cJSON_GetArrayItem(
				cJSON_GetObjectItem(cJSON_GetArrayItem(layers, li), "tokens"), t);
			ck_assert_int_eq(li, r / n);
			if (tu_num(lt, "gap") < TOL_ROUTE_GAP) {
				n_tie++;
				continue;
			}
			for (int j = 0; j < k; j++) {
				int want = cJSON_GetArrayItem(cJSON_GetObjectItem(lt, "experts"), j)->valueint;
				double wp = cJSON_GetArrayItem(cJSON_GetObjectItem(lt, "probs"), j)->valuedouble;
				double dp = fabs(rec.probs[(size_t)r * k + j] - wp);
				ck_assert_msg(rec.experts[(size_t)r * k + j] == want && dp <= TOL_ROUTE_PROB,
					      "layer %d token %d choice %d: expert %d p %.6f, llama.cpp %d p %.6f",
					      li, t, j, rec.experts[(size_t)r * k + j],
					      (double)rec.probs[(size_t)r * k + j], want, wp);
				max_dp = dp > max_dp ? dp : max_dp;
			}
			n_cmp++;
		}
		free(rec.layer);
		free(rec.experts);
		free(rec.probs);
		free(ids);
	}
	fprintf(stderr, "profile: routes vs llama.cpp: %d agree (max |dp| %.2e), %d near ties skipped\n",
		n_cmp, max_dp, n_tie);
	ck_assert(n_cmp > 400);
	lynn_seq_free(seq);
	lynn_model_close(m);
	cJSON_Delete(fx);
}
END_TEST

Suite *eval_suite(void)
{
	Suite *s = suite_create("eval");
	TCase *u = tcase_create("units"), *e = tcase_create("endpoint");

	tcase_add_test(u, test_pyfloat);
	tcase_add_test(u, test_strip);
	tcase_add_test(u, test_cache_torn_tail);
	tcase_add_test(u, test_request_body);
	tcase_add_test(u, test_prompt_golds);
	tcase_add_test(u, test_usage_errors);
	tcase_add_test(u, test_bad_prompt_files);
	tcase_set_timeout(u, 60);
	tcase_add_loop_test(e, test_oracle_scenarios, 0, (int)(sizeof(scenarios) / sizeof(*scenarios)));
	tcase_add_loop_test(e, test_retries, 0, 4);
	tcase_add_test(e, test_retries_exhausted);
	tcase_add_test(e, test_replica_down);
	tcase_add_test(e, test_resume_after_kill);
	tcase_add_test(e, test_out_dir);
	tcase_add_test(e, test_daily_mix);
	tcase_add_test(e, test_eval_inprocess);
	tcase_add_test(e, test_eval_inprocess_gguf);
	tcase_add_test(u, test_profile_counts);
	tcase_add_test(u, test_profile_bad_input);
	tcase_add_test(e, test_profile_command);
	tcase_add_test(e, test_profile_routes_vs_llama);
	tcase_set_timeout(e, 120);
	suite_add_tcase(s, u);
	suite_add_tcase(s, e);
	return s;
}
