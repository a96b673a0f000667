/*
 * client.c - OpenAI chat completions over libcurl's multi interface.
 *
 * One loop drives every transfer: it starts requests until `concurrency` are
 * in flight (on the replica with the fewest in flight that is not marked
 * down), waits with curl_multi_poll, and handles each finished transfer:
 * a 200 is parsed and handed to the callback; 429, 5xx, timeouts and
 * connection errors go back to the queue with a due time (exponential
 * backoff; immediately on another replica when the failure was the replica's
 * connection and a healthy replica exists); other statuses end the run.
 */
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "lynn/buf.h"
#include "lynn/client.h"
#include "lynn/log.h"
#include "lynn/progress.h"
#include "lynn/util.h"

#define MAX_REPLICAS 64
#define MAX_BODY (256u << 20) /* a response larger than this is refused */
#define MAX_BACKOFF_S 30.0

struct replica {
	char *url;         /* base URL without a trailing slash */
	int inflight;
	double down_until; /* lynn_now() seconds; 0 = healthy */
	int conn_fails;    /* consecutive connection failures */
};

struct lynn_client {
	struct lynn_client_opts o;
	char *model;
	char *auth; /* "Authorization: Bearer …" */
	struct replica rep[MAX_REPLICAS];
	int n_rep;
	int n_retries, n_failed;
};

/* ===== options and replicas ===== */

static int parse_urls(struct lynn_client *c, const char *urls, struct lynn_err *err)
{
	const char *p = urls;
	if (!urls || !*urls)
		return lynn_errf(err, -LYNN_EINVAL, "client: no endpoint URL");
	while (*p) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		while (n && (p[n - 1] == '/' || p[n - 1] == ' '))
			n--;
		while (n && *p == ' ') {
			p++;
			n--;
		}
		if (n) {
			if (c->n_rep == MAX_REPLICAS)
				return lynn_errf(err, -LYNN_EINVAL, "client: more than %d replicas",
						 MAX_REPLICAS);
			if (strncmp(p, "http://", 7) && strncmp(p, "https://", 8))
				return lynn_errf(err, -LYNN_EINVAL,
						 "client: '%.*s' is not an http(s) URL", (int)LYNN_MIN(n, 200), p);
			c->rep[c->n_rep].url = strndup(p, n);
			if (!c->rep[c->n_rep].url)
				return lynn_errf(err, -LYNN_ENOMEM, "client: out of memory");
			c->n_rep++;
		}
		p += e ? (size_t)(e - p) + 1 : strlen(p);
	}
	if (!c->n_rep)
		return lynn_errf(err, -LYNN_EINVAL, "client: no endpoint URL in '%s'", urls);
	return 0;
}

static size_t sink(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct lynn_buf *b = ud;
	size_t n = size * nmemb;
	if (b->len + n > MAX_BODY || lynn_buf_append(b, ptr, n))
		return 0; /* curl reports a write error */
	return n;
}

/* GET base/models and take data[0].id. */
static char *probe_model(struct lynn_client *c, const char *base)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	struct curl_slist *h = NULL;
	char *url = NULL, *id = NULL;
	long status = 0;
	CURL *e = curl_easy_init();
	cJSON *j = NULL;

	if (!e || asprintf(&url, "%s/models", base) < 0)
		goto out;
	if (c->auth)
		h = curl_slist_append(h, c->auth);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(c->o.connect_timeout_s * 1000));
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->o.connect_timeout_s * 1000));
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	if (curl_easy_perform(e) != CURLE_OK)
		goto out;
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200 || !b.data)
		goto out;
	j = cJSON_ParseWithLength(b.data, b.len);
	{
		cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data");
		cJSON *first = cJSON_IsArray(d) ? cJSON_GetArrayItem(d, 0) : NULL;
		cJSON *jid = cJSON_GetObjectItemCaseSensitive(first, "id");
		if (cJSON_IsString(jid) && jid->valuestring[0])
			id = strdup(jid->valuestring);
	}
out:
	cJSON_Delete(j);
	curl_slist_free_all(h);
	if (e)
		curl_easy_cleanup(e);
	free(url);
	lynn_buf_release(&b);
	return id;
}

struct lynn_client *lynn_client_create(const struct lynn_client_opts *opts, struct lynn_err *err)
{
	static int curl_ready;
	struct lynn_client *c = calloc(1, sizeof(*c));

	if (!c) {
		lynn_errf(err, -LYNN_ENOMEM, "client: out of memory");
		return NULL;
	}
	if (!curl_ready) {
		curl_global_init(CURL_GLOBAL_DEFAULT);
		curl_ready = 1;
	}
	c->o = *opts;
	if (c->o.concurrency < 1)
		c->o.concurrency = 1;
	if (c->o.timeout_s <= 0)
		c->o.timeout_s = 600;
	if (c->o.connect_timeout_s <= 0)
		c->o.connect_timeout_s = 10;
	if (c->o.max_retries < 0)
		c->o.max_retries = 0;
	if (c->o.backoff_s < 0)
		c->o.backoff_s = 0;
	if (parse_urls(c, opts->urls, err))
		goto fail;
	c->o.urls = NULL;
	if (opts->api_key && *opts->api_key) {
		if (asprintf(&c->auth, "Authorization: Bearer %s", opts->api_key) < 0) {
			c->auth = NULL;
			lynn_errf(err, -LYNN_ENOMEM, "client: out of memory");
			goto fail;
		}
	}
	c->o.api_key = NULL;
	if (opts->model) {
		c->model = strdup(opts->model);
	} else {
		for (int i = 0; i < c->n_rep && !c->model; i++)
			c->model = probe_model(c, c->rep[i].url);
		if (!c->model) {
			lynn_log_warn("client: no replica listed a model id; requests use 'default'");
			c->model = strdup("default");
		}
	}
	c->o.model = NULL;
	if (!c->model) {
		lynn_errf(err, -LYNN_ENOMEM, "client: out of memory");
		goto fail;
	}
	return c;
fail:
	lynn_client_free(c);
	return NULL;
}

void lynn_client_free(struct lynn_client *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n_rep; i++)
		free(c->rep[i].url);
	free(c->model);
	free(c->auth);
	free(c);
}

const char *lynn_client_model(const struct lynn_client *c)
{
	return c->model;
}

void lynn_client_stats(const struct lynn_client *c, int *n_retries, int *n_failed_attempts)
{
	if (n_retries)
		*n_retries = c->n_retries;
	if (n_failed_attempts)
		*n_failed_attempts = c->n_failed;
}

char *lynn_client_request_body(const struct lynn_client *c, const struct lynn_chat_req *req)
{
	cJSON *b = cJSON_CreateObject(), *msgs, *m, *kw;
	char *s = NULL;

	if (!b)
		return NULL;
	cJSON_AddStringToObject(b, "model", req->model ? req->model : c->model);
	msgs = cJSON_AddArrayToObject(b, "messages");
	m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "role", "user");
	cJSON_AddStringToObject(m, "content", req->prompt ? req->prompt : "");
	cJSON_AddItemToArray(msgs, m);
	if (req->tools && cJSON_IsArray(req->tools) && cJSON_GetArraySize(req->tools) > 0)
		cJSON_AddItemToObject(b, "tools", cJSON_Duplicate(req->tools, 1));
	cJSON_AddNumberToObject(b, "max_tokens", req->max_tokens);
	cJSON_AddNumberToObject(b, "temperature", 0);
	cJSON_AddBoolToObject(b, "stream", 0);
	kw = cJSON_AddObjectToObject(b, "chat_template_kwargs");
	cJSON_AddBoolToObject(kw, "enable_thinking", c->o.think);
	s = cJSON_PrintUnformatted(b);
	cJSON_Delete(b);
	return s;
}

/* ===== the response ===== */

/* Parse a 200 body into text / reasoning (heap strings in *text, *reasoning). */
static int parse_response(const char *body, size_t len, char **text, char **reasoning,
			  char **finish, int *n_tok, struct lynn_err *err)
{
	struct lynn_buf t = LYNN_BUF_INIT, r = LYNN_BUF_INIT;
	cJSON *j = cJSON_ParseWithLength(body, len), *ch, *msg, *x;
	int rc = 0;

	if (!j) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "client: response is not JSON");
		goto out;
	}
	ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
	msg = cJSON_GetObjectItemCaseSensitive(ch, "message");
	if (!cJSON_IsObject(msg)) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "client: response has no choices[0].message");
		goto out;
	}
	x = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "usage"), "completion_tokens");
	*n_tok = cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble < 1e9 ? (int)x->valuedouble : -1;
	x = cJSON_GetObjectItemCaseSensitive(ch, "finish_reason");
	*finish = strdup(cJSON_IsString(x) ? x->valuestring : "");
	x = cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content");
	if (!cJSON_IsString(x))
		x = cJSON_GetObjectItemCaseSensitive(msg, "reasoning");
	if (cJSON_IsString(x))
		lynn_buf_puts(&r, x->valuestring);
	x = cJSON_GetObjectItemCaseSensitive(msg, "content");
	if (cJSON_IsString(x)) {
		const char *s = x->valuestring, *open = strstr(s, "<think>"), *close = strstr(s, "</think>");
		/* a server without a reasoning parser leaves the think block in */
		if (close && (!open || open < close) && strspn(s, " \t\r\n") >= (size_t)((open ? open : s) - s)) {
			const char *from = open ? open + 7 : s;
			if (!r.len)
				lynn_buf_append(&r, from, (size_t)(close - from));
			s = close + 8;
		}
		lynn_buf_puts(&t, s);
	}
	x = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
	if (cJSON_IsArray(x)) {
		cJSON *tc;
		cJSON_ArrayForEach(tc, x) {
			cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
			cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
			cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
			cJSON *call = cJSON_CreateObject(), *pa = NULL;
			char *s;
			if (!cJSON_IsString(name)) {
				cJSON_Delete(call);
				continue;
			}
			cJSON_AddStringToObject(call, "name", name->valuestring);
			if (cJSON_IsString(args))
				pa = cJSON_Parse(args->valuestring);
			else if (cJSON_IsObject(args))
				pa = cJSON_Duplicate(args, 1);
			cJSON_AddItemToObject(call, "arguments", pa ? pa : cJSON_CreateObject());
			s = cJSON_PrintUnformatted(call);
			cJSON_Delete(call);
			if (s) {
				lynn_buf_printf(&t, "%s<tool_call>\n%s\n</tool_call>", t.len ? "\n" : "", s);
				free(s);
			}
		}
	}
	/* (an empty lynn_buf detaches without a NUL: copy "" instead) */
	*text = t.len ? lynn_buf_detach(&t) : strdup("");
	*reasoning = r.len ? lynn_buf_detach(&r) : strdup("");
	if (!*text || !*reasoning || !*finish)
		rc = lynn_errf(err, -LYNN_ENOMEM, "client: out of memory");
out:
	cJSON_Delete(j);
	lynn_buf_release(&t);
	lynn_buf_release(&r);
	return rc;
}

/* The server's error message, if the body is an OpenAI error object. */
static void error_message(const char *body, size_t len, char *out, size_t cap)
{
	cJSON *j = body ? cJSON_ParseWithLength(body, len) : NULL;
	cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
	cJSON *m = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
	snprintf(out, cap, "%s", cJSON_IsString(m) ? m->valuestring : "");
	cJSON_Delete(j);
}

/* ===== the transfer loop ===== */

struct job {
	size_t idx;
	int attempts;
	double due;      /* not before this time */
	int rep;         /* replica of the transfer in flight */
	int avoid_rep;   /* the replica that just failed it, or -1 */
	double t0;
	CURL *easy;
	struct curl_slist *hdr;
	char *body;
	struct lynn_buf resp;
	char errbuf[CURL_ERROR_SIZE];
};

static int pick_replica(struct lynn_client *c, double now, int avoid)
{
	int best = -1;
	for (int i = 0; i < c->n_rep; i++) {
		struct replica *r = &c->rep[i];
		if (r->down_until > now || (i == avoid && c->n_rep > 1))
			continue;
		if (best < 0 || r->inflight < c->rep[best].inflight)
			best = i;
	}
	if (best >= 0)
		return best;
	/* everyone is down: the one back soonest */
	best = 0;
	for (int i = 1; i < c->n_rep; i++)
		if (c->rep[i].down_until < c->rep[best].down_until)
			best = i;
	return best;
}

static bool any_healthy(const struct lynn_client *c, double now, int except)
{
	for (int i = 0; i < c->n_rep; i++)
		if (i != except && c->rep[i].down_until <= now)
			return true;
	return false;
}

static void job_release(struct job *j)
{
	if (j->easy)
		curl_easy_cleanup(j->easy);
	curl_slist_free_all(j->hdr);
	j->easy = NULL;
	j->hdr = NULL;
	lynn_buf_release(&j->resp);
}

static int job_start(struct lynn_client *c, CURLM *multi, struct job *j,
		     const struct lynn_chat_req *req, double now, struct lynn_err *err)
{
	char *url = NULL;
	int rc = 0;

	j->rep = pick_replica(c, now, j->avoid_rep);
	if (!j->body)
		j->body = lynn_client_request_body(c, req);
	j->easy = curl_easy_init();
	if (!j->body || !j->easy || asprintf(&url, "%s/chat/completions", c->rep[j->rep].url) < 0) {
		url = NULL;
		rc = lynn_errf(err, -LYNN_ENOMEM, "client: out of memory");
		goto out;
	}
	j->hdr = curl_slist_append(NULL, "Content-Type: application/json");
	j->hdr = curl_slist_append(j->hdr, "Expect:");
	if (c->auth)
		j->hdr = curl_slist_append(j->hdr, c->auth);
	j->errbuf[0] = 0;
	curl_easy_setopt(j->easy, CURLOPT_URL, url);
	curl_easy_setopt(j->easy, CURLOPT_HTTPHEADER, j->hdr);
	curl_easy_setopt(j->easy, CURLOPT_POSTFIELDS, j->body);
	curl_easy_setopt(j->easy, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(j->easy, CURLOPT_WRITEDATA, &j->resp);
	curl_easy_setopt(j->easy, CURLOPT_PRIVATE, j);
	curl_easy_setopt(j->easy, CURLOPT_ERRORBUFFER, j->errbuf);
	curl_easy_setopt(j->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(j->easy, CURLOPT_TIMEOUT_MS, (long)(c->o.timeout_s * 1000));
	curl_easy_setopt(j->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->o.connect_timeout_s * 1000));
	curl_easy_setopt(j->easy, CURLOPT_TCP_KEEPALIVE, 1L);
	if (curl_multi_add_handle(multi, j->easy) != CURLM_OK) {
		rc = lynn_errf(err, -LYNN_EIO, "client: cannot start a transfer");
		goto out;
	}
	j->attempts++;
	j->t0 = lynn_now();
	c->rep[j->rep].inflight++;
out:
	free(url);
	if (rc)
		job_release(j);
	return rc;
}

static bool conn_error(CURLcode cc)
{
	return cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
	       cc == CURLE_COULDNT_RESOLVE_PROXY || cc == CURLE_SEND_ERROR || cc == CURLE_RECV_ERROR ||
	       cc == CURLE_GOT_NOTHING || cc == CURLE_PARTIAL_FILE || cc == CURLE_SSL_CONNECT_ERROR;
}

/* Decide what a finished transfer means: 0 done (output delivered), 1 retry,
 * or a negative error. */
static int job_finish(struct lynn_client *c, struct job *j, CURLcode cc, size_t n_req,
		      lynn_client_done_fn done, void *ud, struct lynn_err *err)
{
	struct replica *r = &c->rep[j->rep];
	double now = lynn_now();
	long status = 0;
	char why[320];
	int rc = 0;

	r->inflight--;
	if (cc == CURLE_OK)
		curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &status);
	if (cc == CURLE_OK && status == 200) {
		char *text = NULL, *reasoning = NULL, *finish = NULL;
		int n_tok = -1;
		struct lynn_chat_out out;
		r->conn_fails = 0;
		r->down_until = 0;
		rc = parse_response(j->resp.data ? j->resp.data : "", j->resp.len, &text, &reasoning,
				    &finish, &n_tok, err);
		if (rc == -LYNN_EFORMAT) {
			/* a garbled 200 is treated like a server error: retry */
			snprintf(why, sizeof(why), "%s", err ? err->msg : "bad response");
			free(text);
			free(reasoning);
			free(finish);
			rc = 0;
			goto retry;
		}
		if (rc == 0) {
			out.text = text;
			out.reasoning = reasoning;
			out.finish_reason = finish;
			out.latency_s = now - j->t0;
			out.completion_tokens = n_tok;
			out.attempts = j->attempts;
			out.replica = r->url;
			rc = done ? done(ud, j->idx, &out, err) : 0;
		}
		free(text);
		free(reasoning);
		free(finish);
		return rc;
	}
	if (cc != CURLE_OK) {
		snprintf(why, sizeof(why), "%s", j->errbuf[0] ? j->errbuf : curl_easy_strerror(cc));
		if (conn_error(cc)) {
			/* the replica itself is unreachable: take it out for a while */
			double pause = c->o.backoff_s * (double)(1 << LYNN_MIN(r->conn_fails, 5));
			r->conn_fails++;
			r->down_until = now + LYNN_MAX(pause, 0.5);
			lynn_log_debug("client: replica '%s' unreachable (%s); routing around it", r->url, why);
		} else if (cc != CURLE_OPERATION_TIMEDOUT) {
			return lynn_errf(err, -LYNN_ENET, "client: '%s': request %zu of %zu: %s", r->url,
					 j->idx + 1, n_req, why);
		}
		goto retry;
	}
	r->conn_fails = 0;
	{
		char msg[160];
		error_message(j->resp.data, j->resp.len, msg, sizeof(msg));
		snprintf(why, sizeof(why), "HTTP %ld%s%s", status, msg[0] ? ": " : "", msg);
	}
	if (status != 429 && status < 500)
		return lynn_errf(err, -LYNN_ENET, "client: '%s': request %zu of %zu: %s", r->url,
				 j->idx + 1, n_req, why);
retry:
	c->n_failed++;
	if (j->attempts > c->o.max_retries)
		return lynn_errf(err, -LYNN_ENET, "client: '%s': request %zu of %zu failed after %d attempts: %s",
				 r->url, j->idx + 1, n_req, j->attempts, why);
	c->n_retries++;
	j->avoid_rep = c->n_rep > 1 ? j->rep : -1;
	if (cc != CURLE_OK && conn_error(cc) && any_healthy(c, now, j->rep))
		j->due = now; /* another replica takes it at once */
	else
		j->due = now + LYNN_MIN(c->o.backoff_s * (double)(1 << LYNN_MIN(j->attempts - 1, 10)),
					MAX_BACKOFF_S);
	lynn_log_debug("client: request %zu: %s; retry %d in %.2fs", j->idx + 1, why, j->attempts,
		       j->due - now);
	return 1;
}

int lynn_client_run(struct lynn_client *c, const struct lynn_chat_req *reqs, size_t n,
		    lynn_client_done_fn done, void *ud, struct lynn_err *err)
{
	struct job *jobs = NULL;
	size_t *queue = NULL, qhead = 0, qlen = 0, finished = 0;
	int inflight = 0, rc = 0;
	CURLM *multi = NULL;

	c->n_retries = c->n_failed = 0;
	if (!n)
		return 0;
	jobs = calloc(n, sizeof(*jobs));
	queue = malloc(n * sizeof(*queue));
	multi = curl_multi_init();
	if (!jobs || !queue || !multi) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "client: out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		jobs[i].idx = i;
		jobs[i].avoid_rep = -1;
		queue[qlen++] = i; /* ring buffer of waiting jobs, n slots */
	}
	while (finished < n) {
		double now = lynn_now(), next_due = 0;
		int running = 0, left = 0, freed;
		long wait_ms = 1000;
		CURLMsg *m;

		/* start what is due, up to the concurrency */
		for (size_t k = 0, cnt = qlen; k < cnt && inflight < c->o.concurrency; k++) {
			size_t ji = queue[qhead];
			qhead = (qhead + 1) % n;
			qlen--;
			if (jobs[ji].due > now) {
				queue[(qhead + qlen) % n] = ji;
				qlen++;
				if (!next_due || jobs[ji].due < next_due)
					next_due = jobs[ji].due;
				continue;
			}
			rc = job_start(c, multi, &jobs[ji], &reqs[ji], now, err);
			if (rc)
				goto out;
			inflight++;
		}
		if (inflight == 0 && next_due > now) {
			double d = next_due - now;
			struct timespec ts = { (time_t)d, (long)((d - (double)(time_t)d) * 1e9) };
			nanosleep(&ts, NULL);
			continue;
		}
		if (next_due > now)
			wait_ms = LYNN_MAX(1, (long)((next_due - now) * 1000));
		curl_multi_perform(multi, &running);
		freed = 0;
		while ((m = curl_multi_info_read(multi, &left))) {
			struct job *j;
			int r;
			if (m->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&j);
			r = job_finish(c, j, m->data.result, n, done, ud, err);
			curl_multi_remove_handle(multi, j->easy);
			job_release(j);
			inflight--;
			freed++;
			if (r < 0) {
				rc = r;
				goto out;
			}
			if (r == 1) {
				queue[(qhead + qlen) % n] = j->idx;
				qlen++;
			} else {
				free(j->body);
				j->body = NULL;
				finished++;
			}
		}
		/* a slot came free: fill it before waiting */
		if (finished < n && inflight > 0 && !freed)
			curl_multi_poll(multi, NULL, 0, (int)LYNN_MIN(wait_ms, 1000), NULL);
	}
out:
	if (jobs) {
		for (size_t i = 0; i < n; i++) {
			if (jobs[i].easy) {
				curl_multi_remove_handle(multi, jobs[i].easy);
				c->rep[jobs[i].rep].inflight--;
			}
			job_release(&jobs[i]);
			free(jobs[i].body);
		}
	}
	if (multi)
		curl_multi_cleanup(multi);
	free(jobs);
	free(queue);
	return rc;
}
