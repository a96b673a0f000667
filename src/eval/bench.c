/*
 * bench.c - the serving throughput suite (include/lynn/bench.h).
 *
 * Each level keeps `concurrency` streamed requests in flight on one libcurl
 * multi handle until its requests are done. A request's clock starts when it
 * is handed to curl; its first token is the first event whose delta carries
 * text (content or reasoning_content); it ends when the transfer completes.
 * Token counts come from the final usage event (stream_options.include_usage)
 * and, where the server sends none, from the number of text events.
 */
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/bench.h"
#include "lynn/json.h"
#include "lynn/progress.h" /* lynn_now */

/* ===== text/event-stream ===== */

void lynn_sse_init(struct lynn_sse *s)
{
	memset(s, 0, sizeof *s);
	s->usage_prompt = s->usage_completion = -1;
}

void lynn_sse_release(struct lynn_sse *s)
{
	lynn_buf_release(&s->line);
	lynn_buf_release(&s->data);
}

static int sse_fail(struct lynn_sse *s, const char *why)
{
	if (!s->error[0])
		snprintf(s->error, sizeof s->error, "%s", why);
	return -1;
}

static bool has_text(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) && v->valuestring[0];
}

/* One complete event's data. */
static int sse_event(struct lynn_sse *s)
{
	const char *d = s->data.data ? s->data.data : "";
	if (!strcmp(d, "[DONE]")) {
		s->done = true;
		return 0;
	}
	cJSON *j = cJSON_ParseWithLength(d, s->data.len);
	if (!cJSON_IsObject(j)) {
		cJSON_Delete(j);
		return sse_fail(s, "an event's data is not a JSON object");
	}
	int n = 0;
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
	if (e) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
		char why[240];
		snprintf(why, sizeof why, "error event: %s",
			 cJSON_IsString(m) ? m->valuestring : cJSON_IsString(e) ? e->valuestring : "?");
		cJSON_Delete(j);
		return sse_fail(s, why);
	}
	const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
	const cJSON *delta = cJSON_GetObjectItemCaseSensitive(ch, "delta");
	if (has_text(delta, "content") || has_text(delta, "reasoning_content") || has_text(ch, "text"))
		n = 1;
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
	const cJSON *up = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
	const cJSON *uc = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
	if (cJSON_IsNumber(up) && up->valuedouble >= 0 && up->valuedouble < 1e9)
		s->usage_prompt = (int)up->valuedouble;
	if (cJSON_IsNumber(uc) && uc->valuedouble >= 0 && uc->valuedouble < 1e9)
		s->usage_completion = (int)uc->valuedouble;
	cJSON_Delete(j);
	s->n_tokens += n;
	return n;
}

/* One complete line (no newline). */
static int sse_line(struct lynn_sse *s, const char *l, size_t n)
{
	if (n && l[n - 1] == '\r')
		n--;
	if (n == 0) { /* the event ends */
		int r = s->data.len ? sse_event(s) : 0;
		lynn_buf_reset(&s->data);
		return r;
	}
	if (n >= 5 && !memcmp(l, "data:", 5)) {
		size_t o = n > 5 && l[5] == ' ' ? 6 : 5;
		if ((s->data.len && lynn_buf_putc(&s->data, '\n')) ||
		    lynn_buf_append(&s->data, l + o, n - o) || lynn_buf_putc(&s->data, '\0'))
			return sse_fail(s, "out of memory");
		s->data.len--; /* kept NUL-terminated */
		if (s->data.len > LYNN_SSE_MAX_LINE)
			return sse_fail(s, "an event longer than 1 MiB");
	}
	return 0; /* comments (':'), event:, id:, retry: */
}

int lynn_sse_feed(struct lynn_sse *s, const char *data, size_t len)
{
	int total = 0;
	if (s->error[0])
		return -1;
	while (len) {
		const char *nl = memchr(data, '\n', len);
		size_t take = nl ? (size_t)(nl - data) : len;
		if (s->line.len + take > LYNN_SSE_MAX_LINE)
			return sse_fail(s, "a line longer than 1 MiB");
		if (!nl) {
			if (lynn_buf_append(&s->line, data, take))
				return sse_fail(s, "out of memory");
			break;
		}
		int r;
		if (s->line.len) {
			if (lynn_buf_append(&s->line, data, take))
				return sse_fail(s, "out of memory");
			r = sse_line(s, s->line.data, s->line.len);
			lynn_buf_reset(&s->line);
		} else {
			r = sse_line(s, data, take);
		}
		if (r < 0)
			return -1;
		total += r;
		data += take + 1;
		len -= take + 1;
	}
	return total;
}

/* ===== requests ===== */

struct breq {
	CURL *h;
	struct curl_slist *hdr;
	char *body;
	struct lynn_sse sse;
	struct lynn_buf raw;   /* a non-200 reply's body, for the error */
	long status;
	double t0, t_first, t_end;
	char errbuf[CURL_ERROR_SIZE];
};

static size_t on_body(char *p, size_t sz, size_t nm, void *ud)
{
	struct breq *q = ud;
	size_t n = sz * nm;
	if (!q->status)
		curl_easy_getinfo(q->h, CURLINFO_RESPONSE_CODE, &q->status);
	if (q->status != 200) {
		if (q->raw.len < 4096)
			lynn_buf_append(&q->raw, p, n);
		return n;
	}
	int r = lynn_sse_feed(&q->sse, p, n);
	if (r > 0 && !q->t_first)
		q->t_first = lynn_now();
	return n; /* a broken stream is reported at the end, not aborted */
}

/* A synthetic prompt of about `words` tokens; the request number first, so
 * no two prompts share a cached prefix. */
static char *make_prompt(int idx, int words)
{
	static const char *const pool[] = {
		"the",   "river",  "carried", "old",    "boats",  "past",   "quiet", "towns",
		"where", "people", "traded",  "salt",   "and",    "cloth",  "for",   "grain",
		"while", "cold",   "winds",   "moved",  "over",   "green",  "hills", "near",
		"a",     "small",  "stone",   "bridge", "built",  "by",     "many",  "hands",
	};
	struct lynn_buf b = LYNN_BUF_INIT;
	int bad = lynn_buf_printf(&b, "Request %d. Continue this text:", idx);
	for (int i = 0; i < words && !bad; i++)
		bad = lynn_buf_printf(&b, " %s", pool[(i * 7 + idx) % (int)(sizeof pool / sizeof *pool)]);
	if (bad) {
		lynn_buf_release(&b);
		return NULL;
	}
	return lynn_buf_detach(&b);
}

/* Append a header; on failure the list is kept (and freed with the request). */
static bool hdr_add(struct curl_slist **l, const char *h)
{
	struct curl_slist *n = curl_slist_append(*l, h);
	if (n)
		*l = n;
	return n != NULL;
}

static int req_start(const struct lynn_bench_opts *o, CURLM *mh, struct breq *q, int idx)
{
	char *prompt = make_prompt(idx, o->prompt_tokens);
	cJSON *b = cJSON_CreateObject(), *m = cJSON_CreateObject();
	memset(q, 0, sizeof *q);
	lynn_sse_init(&q->sse);
	if (!prompt || !b || !m) {
		free(prompt);
		cJSON_Delete(b);
		cJSON_Delete(m);
		return -LYNN_ENOMEM;
	}
	cJSON_AddStringToObject(b, "model", o->model);
	cJSON_AddStringToObject(m, "role", "user");
	cJSON_AddStringToObject(m, "content", prompt);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(b, "messages"), m);
	cJSON_AddNumberToObject(b, "max_tokens", o->max_tokens);
	cJSON_AddNumberToObject(b, "temperature", 0);
	cJSON_AddBoolToObject(b, "ignore_eos", 1);
	cJSON_AddBoolToObject(b, "stream", 1);
	cJSON_AddBoolToObject(cJSON_AddObjectToObject(b, "stream_options"), "include_usage", 1);
	q->body = cJSON_PrintUnformatted(b);
	cJSON_Delete(b);
	free(prompt);
	q->h = curl_easy_init();
	bool ok = hdr_add(&q->hdr, "Content-Type: application/json") &&
		  hdr_add(&q->hdr, "Accept: text/event-stream");
	if (ok && o->api_key && *o->api_key) {
		char *auth;
		if (asprintf(&auth, "Authorization: Bearer %s", o->api_key) < 0)
			auth = NULL; /* (undefined after a failure) */
		ok = auth && hdr_add(&q->hdr, auth);
		free(auth);
	}
	if (!ok || !q->body || !q->h)
		return -LYNN_ENOMEM;
	curl_easy_setopt(q->h, CURLOPT_URL, o->url);
	curl_easy_setopt(q->h, CURLOPT_HTTPHEADER, q->hdr);
	curl_easy_setopt(q->h, CURLOPT_POSTFIELDS, q->body);
	curl_easy_setopt(q->h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(q->h, CURLOPT_WRITEDATA, q);
	curl_easy_setopt(q->h, CURLOPT_PRIVATE, q);
	curl_easy_setopt(q->h, CURLOPT_ERRORBUFFER, q->errbuf);
	curl_easy_setopt(q->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(q->h, CURLOPT_TIMEOUT_MS, (long)(o->timeout_s * 1000));
	curl_easy_setopt(q->h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	q->t0 = lynn_now();
	return curl_multi_add_handle(mh, q->h) == CURLM_OK ? 0 : -LYNN_ENOMEM;
}

static void req_free(CURLM *mh, struct breq *q)
{
	if (q->h) {
		curl_multi_remove_handle(mh, q->h);
		curl_easy_cleanup(q->h);
	}
	curl_slist_free_all(q->hdr);
	free(q->body);
	lynn_sse_release(&q->sse);
	lynn_buf_release(&q->raw);
	memset(q, 0, sizeof *q);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* nearest-rank percentile of sorted v[0..n) */
static double pct(const double *v, int n, double p)
{
	int r = (int)ceil(p / 100.0 * n);
	return n ? v[r < 1 ? 0 : r - 1] : 0;
}

/* The outcome of a finished request into the level's sums; false if it failed. */
static bool req_finish(struct breq *q, CURLcode rc, struct lynn_bench_level *lv, double *ttft,
		       double *tps, double *e2e, double *prompt_sum, int *n_prompt)
{
	char why[256] = "";
	q->t_end = lynn_now();
	curl_easy_getinfo(q->h, CURLINFO_RESPONSE_CODE, &q->status);
	if (rc != CURLE_OK)
		snprintf(why, sizeof why, "transfer: %.200s", q->errbuf[0] ? q->errbuf : curl_easy_strerror(rc));
	else if (q->status != 200)
		snprintf(why, sizeof why, "HTTP %ld: %.200s", q->status, q->raw.data ? q->raw.data : "");
	else if (q->sse.error[0])
		snprintf(why, sizeof why, "stream: %.200s", q->sse.error);
	else if (!q->sse.done)
		snprintf(why, sizeof why, "stream: ended without data: [DONE]");
	else if (!q->t_first)
		snprintf(why, sizeof why, "stream: no generated text");
	if (why[0]) {
		if (!lv->first_error[0])
			snprintf(lv->first_error, sizeof lv->first_error, "%s", why);
		return false;
	}
	int tokens = q->sse.usage_completion >= 0 ? q->sse.usage_completion : q->sse.n_tokens;
	ttft[lv->n_ok] = q->t_first - q->t0;
	tps[lv->n_ok] = tokens > 1 && q->t_end > q->t_first ? (tokens - 1) / (q->t_end - q->t_first) : 0;
	e2e[lv->n_ok] = tokens / (q->t_end - q->t0);
	lv->completion_tokens += tokens;
	if (q->sse.usage_prompt >= 0) {
		*prompt_sum += q->sse.usage_prompt;
		(*n_prompt)++;
	}
	return true;
}

int lynn_bench_level_run(const struct lynn_bench_opts *o, int concurrency,
			 struct lynn_bench_level *lv, struct lynn_err *err)
{
	const int total = o->requests > concurrency ? o->requests : concurrency;
	struct breq *q = calloc((size_t)concurrency, sizeof *q);
	double *ttft = calloc((size_t)total, sizeof *ttft), *tps = calloc((size_t)total, sizeof *tps);
	double *e2e = calloc((size_t)total, sizeof *e2e), prompt_sum = 0;
	int started = 0, active = 0, n_prompt = 0, rc = 0;
	CURLM *mh = curl_multi_init();

	memset(lv, 0, sizeof *lv);
	lv->concurrency = concurrency;
	lv->n_requests = total;
	if (!q || !ttft || !tps || !e2e || !mh) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "bench: out of memory");
		goto out;
	}
	const double t0 = lynn_now();
	while (started < total || active) {
		for (int s = 0; s < concurrency && started < total; s++)
			if (!q[s].h) {
				if ((rc = req_start(o, mh, &q[s], started))) {
					rc = lynn_errf(err, rc, "bench: cannot start a request (out of memory)");
					goto out;
				}
				started++;
				active++;
			}
		int running;
		curl_multi_perform(mh, &running);
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(mh, &left)))
			if (msg->msg == CURLMSG_DONE) {
				struct breq *d = NULL;
				curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&d);
				if (req_finish(d, msg->data.result, lv, ttft, tps, e2e, &prompt_sum, &n_prompt))
					lv->n_ok++;
				else
					lv->n_failed++;
				req_free(mh, d);
				active--;
			}
		if (active)
			curl_multi_poll(mh, NULL, 0, 100, NULL);
	}
	lv->wall_s = lynn_now() - t0;
	if (lv->n_ok) {
		for (int i = 0; i < lv->n_ok; i++) {
			lv->ttft_mean_s += ttft[i] / lv->n_ok;
			lv->stream_tps_mean += tps[i] / lv->n_ok;
			lv->stream_e2e_tps_mean += e2e[i] / lv->n_ok;
		}
		qsort(ttft, (size_t)lv->n_ok, sizeof *ttft, cmp_double);
		lv->ttft_p50_s = pct(ttft, lv->n_ok, 50);
		lv->ttft_p90_s = pct(ttft, lv->n_ok, 90);
	}
	lv->aggregate_tps = lv->wall_s > 0 ? lv->completion_tokens / lv->wall_s : 0;
	lv->prompt_tokens_mean = n_prompt ? prompt_sum / n_prompt : -1;
out:
	for (int s = 0; q && s < concurrency; s++)
		req_free(mh, &q[s]);
	curl_multi_cleanup(mh);
	free(q);
	free(ttft);
	free(tps);
	free(e2e);
	return rc;
}

cJSON *lynn_bench_report(const struct lynn_bench_opts *o, const struct lynn_bench_level *lv,
			 int n_levels)
{
	cJSON *r = lynn_json_report_new("lynn-bench-v1");
	cJSON_AddStringToObject(r, "url", o->url);
	cJSON_AddStringToObject(r, "model", o->model);
	cJSON_AddNumberToObject(r, "prompt_words", o->prompt_tokens);
	cJSON_AddNumberToObject(r, "max_tokens", o->max_tokens);
	cJSON *levels = cJSON_AddArrayToObject(r, "levels");
	for (int i = 0; i < n_levels; i++) {
		const struct lynn_bench_level *l = &lv[i];
		const struct {
			const char *key;
			double v;
		} f[] = {
			{ "concurrency", l->concurrency },
			{ "n_requests", l->n_requests },
			{ "n_ok", l->n_ok },
			{ "n_failed", l->n_failed },
			{ "wall_s", l->wall_s },
			{ "ttft_mean_s", l->ttft_mean_s },
			{ "ttft_p50_s", l->ttft_p50_s },
			{ "ttft_p90_s", l->ttft_p90_s },
			{ "stream_tokens_per_s", l->stream_tps_mean },
			{ "stream_e2e_tokens_per_s", l->stream_e2e_tps_mean },
			{ "aggregate_tokens_per_s", l->aggregate_tps },
			{ "prompt_tokens_mean", l->prompt_tokens_mean },
			{ "completion_tokens", (double)l->completion_tokens },
		};
		cJSON *x = cJSON_CreateObject();
		for (size_t k = 0; k < sizeof f / sizeof *f; k++)
			cJSON_AddNumberToObject(x, f[k].key, f[k].v);
		if (l->first_error[0])
			cJSON_AddStringToObject(x, "first_error", l->first_error);
		cJSON_AddItemToArray(levels, x);
	}
	return r;
}
