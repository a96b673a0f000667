/* http.c - the HTTP side of `lynn serve`: libmicrohttpd with one thread per
 * connection, so a handler may wait for its request: a non-streamed
 * completion waits in the handler (checking every second that the client is
 * still there), a streamed one in the response's reader callback, which
 * turns the generated text into server-sent events (a comment line every
 * second while there is nothing to say, so proxies keep the stream open and
 * a gone client shows as a failed write). Routes, authentication and the
 * error objects follow OpenAI and llama-server
 * (docs/reference/serving-and-hubs.md §1). */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "lynn/json.h"
#include "lynn/log.h"
#include "lynn/utf8.h"
#include "lynn/util.h"
#include "serve_internal.h"

#define MAX_BODY (8u << 20)

/* One connection's request body as it arrives. */
struct conn {
	struct lynn_buf body;
	bool too_big;
};

static enum MHD_Result reply(struct MHD_Connection *c, int status, const char *type, char *text)
{
	struct MHD_Response *r;
	enum MHD_Result ret;
	if (!text)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", type);
	ret = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, int status, cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return reply(c, status, "application/json", s);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, const struct srv_error *e)
{
	return reply(c, e->status, "application/json", srv_error_json(e));
}

static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *param,
			    const char *msg)
{
	struct srv_error e;
	srv_fail(&e, status, param, "%s", msg);
	return reply_error(c, &e);
}

/* Bearer token, compared in constant time. */
static bool authorized(struct srv *s, struct MHD_Connection *c)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	size_t hn, n = strlen(s->api_key);
	unsigned char diff;
	if (!h || strncasecmp(h, "Bearer ", 7))
		return false;
	h += 7;
	hn = strlen(h);
	diff = hn != n;
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)((i < hn ? (unsigned char)h[i] : 0) ^ (unsigned char)s->api_key[i]);
	return diff == 0;
}

/* Has the client closed its end? */
static bool client_gone(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct pollfd p;
	if (!ci)
		return false;
	p.fd = ci->connect_fd;
	p.events = POLLRDHUP;
	p.revents = 0;
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* ===== streaming ===== */

/* A streamed body's n choices (n requests), their events gathered into out
 * in choice order as they come. */
struct stream {
	struct srv *s;
	int n, n_ended;
	struct srv_req *r[SRV_MAX_CHOICES];
	struct srv_events ev[SRV_MAX_CHOICES];
	bool ended[SRV_MAX_CHOICES];
	bool done;                /* [DONE] is in out: nothing more */
	struct lynn_buf out;
	size_t off;
};

/* Whether choice i has something for its events (under mu). */
static bool news(const struct stream *st, int i)
{
	const struct srv_req *r = st->r[i];
	return !st->ended[i] && (r->pending.len || r->pending_lp.n || (r->state != SRV_QUEUED && r->state != SRV_RUNNING));
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream *st = cls;
	struct srv *s = st->s;
	for (;;) {
		if (st->off < st->out.len) {
			size_t n = LYNN_MIN(max, st->out.len - st->off);
			memcpy(buf, st->out.data + st->off, n);
			st->off += n;
			if (st->off == st->out.len) {
				lynn_buf_reset(&st->out);
				st->off = 0;
			}
			return (ssize_t)n;
		}
		if (st->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		struct timespec until;
		bool timed_out = false, any = false;
		struct lynn_buf got[SRV_MAX_CHOICES];
		struct srv_lps lps[SRV_MAX_CHOICES];
		enum srv_state state[SRV_MAX_CHOICES];
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		pthread_mutex_lock(&s->mu);
		/* one choice waits on its request; several on the server's
		 * condition for grouped requests */
		pthread_cond_t *cv = st->n == 1 ? &st->r[0]->cv : &s->choices_cv;
		for (;;) {
			for (int i = 0; i < st->n && !any; i++)
				any = news(st, i);
			if (any || timed_out)
				break;
			timed_out = pthread_cond_timedwait(cv, &s->mu, &until) == ETIMEDOUT;
		}
		/* taken whole; turned into events outside the lock */
		for (int i = 0; i < st->n; i++) {
			struct srv_req *r = st->r[i];
			got[i] = r->pending;
			lps[i] = r->pending_lp;
			memset(&r->pending, 0, sizeof r->pending);
			memset(&r->pending_lp, 0, sizeof r->pending_lp);
			state[i] = r->state;
		}
		pthread_mutex_unlock(&s->mu);
		size_t n_new = 0;
		for (int i = 0; i < st->n; i++) {
			struct srv_events *ev = &st->ev[i];
			n_new += got[i].len + lps[i].n;
			if (!st->done && !st->ended[i]) {
				if (got[i].len)
					srv_events_text(ev, got[i].data, got[i].len);
				srv_events_logprobs(ev, &lps[i]);
				if (state[i] == SRV_FAILED || state[i] == SRV_DONE) {
					srv_events_end(ev); /* a failure: the error object and [DONE] */
					st->ended[i] = true;
					st->n_ended++;
					st->done = state[i] == SRV_FAILED;
				}
				lynn_buf_append(&st->out, ev->out.data, ev->out.len);
				lynn_buf_reset(&ev->out);
			}
			lynn_buf_release(&got[i]);
			srv_lps_release(&lps[i]);
		}
		if (!st->done && st->n_ended == st->n) {
			srv_events_close(&st->ev[0], st->r, st->n);
			lynn_buf_append(&st->out, st->ev[0].out.data, st->ev[0].out.len);
			lynn_buf_reset(&st->ev[0].out);
			st->done = true;
		} else if (!n_new && !any && timed_out) {
			lynn_buf_puts(&st->out, ": ping\n\n");
		}
	}
}

/* Lets go of the choices (cancelling those still queued or running, if the
 * client left early). */
static void stream_free(void *cls)
{
	struct stream *st = cls;
	for (int i = 0; i < st->n; i++) {
		srv_release(st->s, st->r[i]);
		srv_events_release(&st->ev[i]);
	}
	lynn_buf_release(&st->out);
	free(st);
}

/* ===== completions ===== */

static enum MHD_Result completion(struct srv *s, struct MHD_Connection *c, enum srv_kind kind,
				  const struct conn *cn)
{
	struct srv_error e;
	struct lynn_err err = { 0 };
	struct srv_req *r = srv_req_parse(s, kind, cn->body.data ? cn->body.data : "", cn->body.len, &e);
	if (!r)
		return reply_error(c, &e);
	/* the body's n choices are n requests: r and n - 1 clones */
	r->grouped = r->stream && r->n_choices > 1;
	if (srv_submit(s, r, &e)) {
		srv_req_free(r);
		return reply_error(c, &e);
	}
	struct srv_req *rs[SRV_MAX_CHOICES] = { r };
	int n = 1;
	while (n < r->n_choices) {
		if (!(rs[n] = srv_req_clone(r, r->gopts.sample.seed + (uint64_t)n)) || srv_submit(s, rs[n], &e)) {
			if (!rs[n])
				srv_fail(&e, 500, NULL, "out of memory");
			srv_req_free(rs[n]);
			for (int i = 0; i < n; i++)
				srv_release(s, rs[i]);
			return reply_error(c, &e);
		}
		n++;
	}
	if (r->stream) {
		struct stream *st = calloc(1, sizeof *st);
		struct MHD_Response *resp;
		enum MHD_Result ret;
		bool ok = st != NULL;
		if (st) {
			st->s = s;
			for (; st->n < n; st->n++) {
				st->r[st->n] = rs[st->n];
				if (ok && srv_events_init(&st->ev[st->n], s, rs[st->n], st->n, &err))
					ok = false;
			}
			for (int i = 0; ok && i < n; i++) { /* the role chunks first */
				lynn_buf_append(&st->out, st->ev[i].out.data, st->ev[i].out.len);
				lynn_buf_reset(&st->ev[i].out);
			}
		}
		if (!ok) {
			if (st)
				stream_free(st);
			else
				for (int i = 0; i < n; i++)
					srv_release(s, rs[i]);
			return fail(c, 500, NULL, "out of memory");
		}
		resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free);
		if (!resp) {
			stream_free(st);
			return MHD_NO;
		}
		MHD_add_response_header(resp, "Content-Type", "text/event-stream");
		MHD_add_response_header(resp, "Cache-Control", "no-cache");
		ret = MHD_queue_response(c, 200, resp);
		MHD_destroy_response(resp);
		return ret;
	}
	/* not streamed: wait here for all the choices, checking every second
	 * that the client is still there */
	int busy = 0, failed = -1;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		busy = 0;
		for (int i = 0; i < n; i++)
			busy += rs[i]->state == SRV_QUEUED || rs[i]->state == SRV_RUNNING;
		if (!busy)
			break;
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		for (int i = 0; i < n; i++)
			while ((rs[i]->state == SRV_QUEUED || rs[i]->state == SRV_RUNNING) &&
			       pthread_cond_timedwait(&rs[i]->cv, &s->mu, &until) != ETIMEDOUT)
				;
		pthread_mutex_unlock(&s->mu);
		bool gone = client_gone(c);
		pthread_mutex_lock(&s->mu);
		if (gone)
			break;
	}
	for (int i = 0; i < n && failed < 0; i++)
		if (rs[i]->state == SRV_FAILED)
			failed = i;
	pthread_mutex_unlock(&s->mu);
	enum MHD_Result ret = MHD_NO; /* the client left: no reply */
	if (failed >= 0) {
		ret = reply_error(c, &rs[failed]->err);
	} else if (!busy) {
		char *j = srv_response(s, rs, n);
		ret = j ? reply(c, 200, "application/json", j) : fail(c, 500, NULL, "out of memory");
	}
	for (int i = 0; i < n; i++)
		srv_release(s, rs[i]);
	return ret;
}

/* ===== the small endpoints ===== */

static cJSON *body_object(const struct conn *cn, struct srv_error *e)
{
	struct lynn_err err = { 0 };
	cJSON *b = lynn_json_parse("the request body", cn->body.data ? cn->body.data : "", cn->body.len, &err);
	if (!b)
		srv_fail(e, 400, NULL, "%s", err.msg);
	else if (!cJSON_IsObject(b)) {
		cJSON_Delete(b);
		b = NULL;
		srv_fail(e, 400, NULL, "the request body must be a JSON object");
	}
	return b;
}

static enum MHD_Result models(struct srv *s, struct MHD_Connection *c)
{
	cJSON *o = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "object", "list");
	cJSON_AddItemToArray(d, m);
	cJSON_AddStringToObject(m, "id", s->model_name);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", (double)s->started);
	cJSON_AddStringToObject(m, "owned_by", "lynn");
	cJSON_AddNumberToObject(m, "max_model_len", s->o.ctx_size);
	return reply_json(c, 200, o);
}

static enum MHD_Result tokenize(struct srv *s, struct MHD_Connection *c, const struct conn *cn)
{
	struct srv_error e;
	struct lynn_err err = { 0 };
	struct lynn_tok_ids ids = { 0 };
	bool pieces = false;
	cJSON *b = body_object(cn, &e), *content, *o, *t;
	if (!b)
		return reply_error(c, &e);
	content = cJSON_GetObjectItemCaseSensitive(b, "content");
	t = cJSON_GetObjectItemCaseSensitive(b, "with_pieces");
	pieces = cJSON_IsTrue(t);
	if (!cJSON_IsString(content)) {
		cJSON_Delete(b);
		return fail(c, 400, "content", "'content' must be a string");
	}
	if (lynn_tok_encode(s->tok, content->valuestring, strlen(content->valuestring), 0, &ids, &err)) {
		cJSON_Delete(b);
		return fail(c, 400, "content", err.msg);
	}
	cJSON_Delete(b);
	o = cJSON_CreateObject();
	t = cJSON_AddArrayToObject(o, "tokens");
	for (size_t i = 0; i < ids.n; i++) {
		if (!pieces) {
			cJSON_AddItemToArray(t, cJSON_CreateNumber(ids.ids[i]));
			continue;
		}
		/* a piece that is not whole UTF-8 (part of a character) is its bytes, as llama-server does */
		size_t len = 0;
		const uint8_t *bytes = lynn_tok_token_bytes(s->tok, ids.ids[i], &len);
		cJSON *p = cJSON_CreateObject();
		cJSON_AddNumberToObject(p, "id", ids.ids[i]);
		if (bytes && lynn_utf8_check(bytes, len) == len && !memchr(bytes, 0, len)) {
			char *str = strndup((const char *)bytes, len);
			cJSON_AddStringToObject(p, "piece", str ? str : "");
			free(str);
		} else {
			cJSON *arr = cJSON_AddArrayToObject(p, "piece");
			for (size_t k = 0; bytes && k < len; k++)
				cJSON_AddItemToArray(arr, cJSON_CreateNumber(bytes[k]));
		}
		cJSON_AddItemToArray(t, p);
	}
	lynn_tok_ids_release(&ids);
	return reply_json(c, 200, o);
}

static enum MHD_Result detokenize(struct srv *s, struct MHD_Connection *c, const struct conn *cn)
{
	struct srv_error e;
	struct lynn_err err = { 0 };
	struct lynn_buf text = { 0 };
	cJSON *b = body_object(cn, &e), *toks, *it, *o;
	int32_t *ids = NULL;
	size_t n = 0;
	if (!b)
		return reply_error(c, &e);
	toks = cJSON_GetObjectItemCaseSensitive(b, "tokens");
	if (!cJSON_IsArray(toks)) {
		cJSON_Delete(b);
		return fail(c, 400, "tokens", "'tokens' must be a list of token ids");
	}
	ids = malloc(((size_t)cJSON_GetArraySize(toks) + 1) * sizeof *ids);
	cJSON_ArrayForEach(it, toks) {
		if (!ids || !cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX ||
		    it->valuedouble != (double)(int32_t)it->valuedouble) {
			free(ids);
			cJSON_Delete(b);
			return fail(c, 400, "tokens", "'tokens' must be a list of token ids");
		}
		ids[n++] = (int32_t)it->valuedouble;
	}
	cJSON_Delete(b);
	if (lynn_tok_decode(s->tok, ids, n, 0, &text, &err)) {
		free(ids);
		lynn_buf_release(&text);
		return fail(c, 400, "tokens", err.msg);
	}
	free(ids);
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "content", text.data ? text.data : "");
	lynn_buf_release(&text);
	return reply_json(c, 200, o);
}

static enum MHD_Result apply_template(struct srv *s, struct MHD_Connection *c, const struct conn *cn)
{
	struct srv_error e;
	char *prompt = NULL;
	size_t len = 0;
	cJSON *b = body_object(cn, &e), *o;
	if (!b)
		return reply_error(c, &e);
	int rc = srv_render(s, b, cn->body.data, cn->body.len, &prompt, &len, &e);
	cJSON_Delete(b);
	if (rc)
		return reply_error(c, &e);
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "prompt", prompt);
	free(prompt);
	return reply_json(c, 200, o);
}

/* ===== routing ===== */

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	struct srv *s = cls;
	struct conn *cn = *con_cls;
	const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
	if (!cn) {
		if (!(cn = calloc(1, sizeof *cn)))
			return MHD_NO;
		*con_cls = cn;
		pthread_mutex_lock(&s->mu);
		s->n_http++;
		pthread_mutex_unlock(&s->mu);
		return MHD_YES;
	}
	if (*upload_size) {
		if (cn->body.len + *upload_size > MAX_BODY)
			cn->too_big = true;
		else if (lynn_buf_append(&cn->body, upload, *upload_size))
			return MHD_NO;
		*upload_size = 0;
		return MHD_YES;
	}
	if (cn->too_big)
		return fail(c, 413, NULL, "the request body is larger than 8 MiB");
	if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) {
		bool draining;
		pthread_mutex_lock(&s->mu);
		draining = s->draining;
		pthread_mutex_unlock(&s->mu);
		if (draining)
			return fail(c, 503, NULL, "the server is shutting down");
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "status", "ok");
		return reply_json(c, 200, o);
	}
	if (s->api_key && !authorized(s, c))
		return fail(c, 401, NULL, "invalid or missing API key (Authorization: Bearer …)");
	if (get && (!strcmp(url, "/v1/models") || !strcmp(url, "/models")))
		return models(s, c);
	if (post && (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")))
		return completion(s, c, SRV_CHAT, cn);
	if (post && (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")))
		return completion(s, c, SRV_COMPLETION, cn);
	if (post && !strcmp(url, "/tokenize"))
		return tokenize(s, c, cn);
	if (post && !strcmp(url, "/detokenize"))
		return detokenize(s, c, cn);
	if (post && !strcmp(url, "/apply-template"))
		return apply_template(s, c, cn);
	if (get && !strcmp(url, "/metrics")) {
		char *t;
		if (!s->o.metrics)
			return fail(c, 501, NULL, "metrics are off (start lynn serve with --metrics)");
		t = srv_metrics_text(s);
		return t ? reply(c, 200, "text/plain; version=0.0.4", t) : MHD_NO;
	}
	if (!strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings"))
		return fail(c, 501, NULL, "lynn serve serves a chat model: no embeddings");
	char msg[160];
	snprintf(msg, sizeof msg, "no route for %.10s %.100s", method, url);
	return fail(c, 404, NULL, msg);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct srv *s = cls;
	struct conn *cn = *con_cls;
	if (cn) {
		lynn_buf_release(&cn->body);
		free(cn);
		*con_cls = NULL;
		pthread_mutex_lock(&s->mu);
		s->n_http--;
		pthread_cond_broadcast(&s->idle);
		pthread_mutex_unlock(&s->mu);
	}
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	lynn_log_debug("serve: http: %s", msg);
}

int srv_http_start(struct srv *s, struct lynn_err *err)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE };
	struct addrinfo *ai = NULL;
	char port[16];
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
			 MHD_USE_ERROR_LOG | MHD_USE_ITC;
	int rc;
	snprintf(port, sizeof port, "%d", s->o.port);
	if ((rc = getaddrinfo(s->host, port, &hints, &ai)))
		return lynn_errf(err, -LYNN_EINVAL, "serve: --host '%s': not a numeric IPv4 or IPv6 address (%s)",
				 s->host, gai_strerror(rc));
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	s->mhd = MHD_start_daemon(flags, (uint16_t)s->o.port, NULL, NULL, handle, s,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
				  MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				  MHD_OPTION_NOTIFY_COMPLETED, completed, s,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300,
				  MHD_OPTION_CONNECTION_LIMIT,
				  (unsigned)(s->o.parallel + s->o.max_queue + 64),
				  MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!s->mhd)
		return lynn_errf(err, -LYNN_EIO, "serve: cannot listen on %s:%d (in use, or not an address "
				 "of this machine)", s->host, s->o.port);
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : s->o.port;
	return 0;
}

void srv_http_quiesce(struct srv *s)
{
	if (s->mhd) {
		MHD_socket fd = MHD_quiesce_daemon(s->mhd);
		if (fd != MHD_INVALID_SOCKET)
			close(fd);
	}
}

void srv_http_stop(struct srv *s)
{
	if (s->mhd)
		MHD_stop_daemon(s->mhd);
	s->mhd = NULL;
}
