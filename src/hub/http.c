/* http.c - the retrying HTTP client over libcurl used by both hub protocols.
 *
 * Retries (serving-and-hubs.md §3): 408, 429, 5xx and connection errors, up
 * to HUB_TRIES attempts, waiting min(2^n, 60) × base seconds or Retry-After
 * when the hub sends it. File bodies are re-read from disk on every attempt,
 * so a blob PUT can be replayed safely. Commits use HUB_RETRY_NONE: the
 * protocol drivers check the repo state before trying again. */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "hub_internal.h"
#include "lynn/log.h"
#include "lynn/util.h"

void hub_resp_release(struct hub_resp *rs)
{
	lynn_buf_release(&rs->body);
}

bool hub_status_transient(long status)
{
	return status == 408 || status == 429 || status >= 500;
}

void hub_url_path(const char *url, char *out, size_t cap)
{
	const char *p = strstr(url, "://");
	size_t n;
	p = p ? strchr(p + 3, '/') : url;
	if (!p)
		p = "/";
	n = strcspn(p, "?#");
	if (n >= cap)
		n = cap - 1;
	memcpy(out, p, n);
	out[n] = '\0';
}

char *hub_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *out = malloc(3 * n + 1), *q = out;
	if (!out)
		return NULL;
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
			*q++ = (char)ch;
		} else {
			*q++ = '%';
			*q++ = hex[ch >> 4];
			*q++ = hex[ch & 15];
		}
	}
	*q = '\0';
	return out;
}

void hub_backoff(const struct hub_client *c, int attempt, double retry_after)
{
	double s;
	struct timespec ts;
	if (retry_after >= 0) {
		s = LYNN_MIN(retry_after, 300.0);
	} else {
		s = (double)(1u << LYNN_MIN(attempt, 6));
		if (s > 60)
			s = 60;
		s *= c->backoff_base;
	}
	ts.tv_sec = (time_t)s;
	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ===== curl callbacks ===== */

struct xfer {
	struct hub_client *c;
	const struct hub_req *rq;
	struct hub_resp *rs;
	FILE *f;
	uint64_t left;
	uint64_t sent; /* file bytes counted into the progress by this attempt */
	bool too_big;
};

static size_t on_write(char *data, size_t sz, size_t nm, void *ud)
{
	struct xfer *x = ud;
	size_t n = sz * nm;
	if (x->rs->body.len + n > HUB_MAX_RESPONSE) {
		x->too_big = true;
		return 0;
	}
	if (lynn_buf_append(&x->rs->body, data, n))
		return 0;
	return n;
}

static size_t on_header(char *data, size_t sz, size_t nm, void *ud)
{
	struct xfer *x = ud;
	size_t n = sz * nm, k;
	char line[512];
	k = LYNN_MIN(n, sizeof line - 1);
	memcpy(line, data, k);
	line[k] = '\0';
	while (k > 0 && (line[k - 1] == '\r' || line[k - 1] == '\n'))
		line[--k] = '\0';
	if (!strncasecmp(line, "HTTP/", 5)) {
		/* a new response (after 100-continue or a redirect) */
		x->rs->retry_after = -1;
		x->rs->etag[0] = '\0';
	} else if (!strncasecmp(line, "retry-after:", 12)) {
		x->rs->retry_after = hub_parse_retry_after(line + 12);
	} else if (!strncasecmp(line, "etag:", 5)) {
		const char *v = line + 5;
		while (*v == ' ' || *v == '\t')
			v++;
		size_t k2 = LYNN_MIN(strlen(v), sizeof x->rs->etag - 1);
		memcpy(x->rs->etag, v, k2);
		x->rs->etag[k2] = '\0';
	}
	return n;
}

static size_t on_read(char *dst, size_t sz, size_t nm, void *ud)
{
	struct xfer *x = ud;
	size_t want = sz * nm, got;
	if (x->left == 0)
		return 0;
	if (want > x->left)
		want = (size_t)x->left;
	got = fread(dst, 1, want, x->f);
	if (got == 0)
		return CURL_READFUNC_ABORT; /* the file shrank under us */
	x->left -= got;
	x->sent += got;
	if (x->rq->count_upload) {
		struct hub_client *c = x->c;
		pthread_mutex_lock(&c->mu);
		c->up_done += got;
		if (c->up_fn)
			c->up_fn(c->up_ud, c->up_done, c->up_total);
		pthread_mutex_unlock(&c->mu);
	}
	return got;
}

static int add_header(struct curl_slist **h, const char *name, const char *value)
{
	struct curl_slist *n;
	char *line;
	if (asprintf(&line, "%s: %s", name, value) < 0)
		return -1;
	n = curl_slist_append(*h, line);
	/* the line may hold the token: wipe our copy (curl keeps its own) */
	explicit_bzero(line, strlen(line));
	free(line);
	if (!n)
		return -1;
	*h = n;
	return 0;
}

/* One attempt. 0 when a response arrived; -LYNN_ENET on transport failure. */
static int http_once(struct hub_client *c, const struct hub_req *rq, struct hub_resp *rs,
		     struct lynn_err *err)
{
	struct xfer x = { .c = c, .rq = rq, .rs = rs };
	struct curl_slist *h = NULL;
	char ebuf[CURL_ERROR_SIZE] = "", path[256], rid[40];
	CURL *cu = NULL;
	CURLcode cc;
	int rc = 0;

	lynn_buf_reset(&rs->body);
	rs->status = 0;
	rs->retry_after = -1;
	rs->etag[0] = '\0';
	rs->curl_msg[0] = '\0';
	hub_url_path(rq->url, path, sizeof path);

	cu = curl_easy_init();
	if (!cu)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: curl init failed");
	if (rq->file) {
		x.f = fopen(rq->file, "rb");
		if (!x.f) {
			rc = lynn_errf(err, -LYNN_EIO, "hub: '%s': %s", rq->file, strerror(errno));
			goto out;
		}
		if (fseeko(x.f, (off_t)rq->file_off, SEEK_SET) < 0) {
			rc = lynn_errf(err, -LYNN_EIO, "hub: '%s': seek: %s", rq->file,
				       strerror(errno));
			goto out;
		}
		x.left = rq->file_len;
	}

	/* headers: auth only to the hub itself (presigned URLs need none) */
	if (rq->auth && c->token) {
		char *v;
		if (asprintf(&v, "Bearer %s", c->token) < 0 ||
		    add_header(&h, "Authorization", v)) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
			goto out;
		}
		explicit_bzero(v, strlen(v));
		free(v);
		if (c->kind == LYNN_HUB_MODELSCOPE) {
			if (asprintf(&v, "m_session_id=%s", c->token) < 0 ||
			    add_header(&h, "Cookie", v)) {
				rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
				goto out;
			}
			explicit_bzero(v, strlen(v));
			free(v);
		}
	}
	if (c->kind == LYNN_HUB_MODELSCOPE) {
		unsigned char r[16] = { 0 };
		RAND_bytes(r, sizeof r);
		for (int i = 0; i < 16; i++)
			snprintf(rid + 2 * i, 3, "%02x", r[i]);
		add_header(&h, "X-Request-ID", rid);
	}
	add_header(&h, "Accept", rq->accept ? rq->accept : "application/json");
	if (rq->content_type)
		add_header(&h, "Content-Type", rq->content_type);
	for (size_t i = 0; i < rq->n_extra; i++) {
		/* never let a hub-supplied header replace ours */
		if (!strcasecmp(rq->extra[i].name, "authorization") ||
		    !strcasecmp(rq->extra[i].name, "cookie"))
			continue;
		add_header(&h, rq->extra[i].name, rq->extra[i].value);
	}
	h = curl_slist_append(h, "Expect:");

	curl_easy_setopt(cu, CURLOPT_URL, rq->url);
	curl_easy_setopt(cu, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(cu, CURLOPT_ERRORBUFFER, ebuf);
	curl_easy_setopt(cu, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(cu, CURLOPT_CONNECTTIMEOUT, 30L);
	/* ~3600 s per socket operation (§3a): abort when stalled that long */
	curl_easy_setopt(cu, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(cu, CURLOPT_LOW_SPEED_TIME, 3600L);
	curl_easy_setopt(cu, CURLOPT_USERAGENT, "lynn-push/1");
	curl_easy_setopt(cu, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(cu, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(cu, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(cu, CURLOPT_HEADERDATA, &x);
	curl_easy_setopt(cu, CURLOPT_PROTOCOLS_STR, "http,https");
	if (rq->file) {
		curl_easy_setopt(cu, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(cu, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(cu, CURLOPT_READDATA, &x);
		curl_easy_setopt(cu, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->file_len);
		curl_easy_setopt(cu, CURLOPT_CUSTOMREQUEST, rq->method);
	} else if (!strcmp(rq->method, "GET")) {
		curl_easy_setopt(cu, CURLOPT_HTTPGET, 1L);
	} else {
		curl_easy_setopt(cu, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
		curl_easy_setopt(cu, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
		curl_easy_setopt(cu, CURLOPT_CUSTOMREQUEST, rq->method);
	}
	cc = curl_easy_perform(cu);
	if (cc != CURLE_OK) {
		if (x.too_big) {
			rc = lynn_errf(err, -LYNN_EIO, "hub: %s %s: response larger than %u bytes",
				       rq->method, path, HUB_MAX_RESPONSE);
			goto out;
		}
		snprintf(rs->curl_msg, sizeof rs->curl_msg, "%s",
			 ebuf[0] ? ebuf : curl_easy_strerror(cc));
		rc = lynn_errf(err, -LYNN_ENET, "hub: %s %s: %s", rq->method, path, rs->curl_msg);
		goto out;
	}
	curl_easy_getinfo(cu, CURLINFO_RESPONSE_CODE, &rs->status);
	lynn_log_debug("hub: %s %s -> %ld", rq->method, path, rs->status);
out:
	if ((rc || rs->status < 200 || rs->status >= 300) && rq->count_upload && x.sent) {
		/* take this attempt's bytes back out of the progress: they will
		 * be sent again (or the upload fails) */
		pthread_mutex_lock(&c->mu);
		c->up_done -= LYNN_MIN(x.sent, c->up_done);
		pthread_mutex_unlock(&c->mu);
	}
	if (x.f)
		fclose(x.f);
	curl_slist_free_all(h);
	curl_easy_cleanup(cu);
	return rc;
}

int hub_http(struct hub_client *c, const struct hub_req *rq, struct hub_resp *rs,
	     enum hub_retry retry, struct lynn_err *err)
{
	char path[256];
	int rc = 0;
	int tries = retry == HUB_RETRY_NONE ? 1 : HUB_TRIES;

	hub_url_path(rq->url, path, sizeof path);
	for (int a = 0; a < tries; a++) {
		rc = http_once(c, rq, rs, err);
		if (rc && rc != -LYNN_ENET)
			return rc;
		if (!rc && !hub_status_transient(rs->status))
			return 0;
		if (a + 1 < tries) {
			if (rc)
				lynn_log_warn("hub: %s %s: %s; retrying (%d/%d)", rq->method, path,
					      rs->curl_msg, a + 2, tries);
			else
				lynn_log_warn("hub: %s %s: HTTP %ld; retrying (%d/%d)", rq->method,
					      path, rs->status, a + 2, tries);
			hub_backoff(c, a, rc ? -1 : rs->retry_after);
		}
	}
	if (rc)
		return lynn_errf(err, -LYNN_ENET, "hub: %s %s: %s (after %d tries)", rq->method, path,
				 rs->curl_msg, tries);
	return 0; /* a transient status after the last try: the caller reports it */
}

int hub_status_error(const struct hub_client *c, const struct hub_req *rq,
		     const struct hub_resp *rs, struct lynn_err *err)
{
	char path[256], msg[160];
	const char *hub = c->kind == LYNN_HUB_MODELSCOPE ? "modelscope" : "huggingface";
	hub_url_path(rq->url, path, sizeof path);
	hub_body_message(rs->body.data, rs->body.len, msg, sizeof msg);
	if (rs->status == 401 || rs->status == 403)
		return lynn_errf(err, -LYNN_EAUTH,
				 "hub: %s refused the token from %s (HTTP %ld) on %s %s%s%s",
				 hub, c->token_var, rs->status, rq->method, path,
				 msg[0] ? ": " : "", msg);
	return lynn_errf(err, hub_status_transient(rs->status) ? -LYNN_ENET : -LYNN_EIO,
			 "hub: %s: %s %s: HTTP %ld%s%s%s", hub, rq->method, path, rs->status,
			 msg[0] ? " (" : "", msg, msg[0] ? ")" : "");
}
