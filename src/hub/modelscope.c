/* modelscope.c - ModelScope's HTTP commit API (serving-and-hubs.md §3a):
 * repo check/creation, the repo's file list (to skip unchanged files and to
 * check whether a commit landed), LFS batch check (64 oids per call), blob
 * PUT, commit with normal (base64) and LFS actions. Every reply's `Code` is
 * checked, even on HTTP 200. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub_internal.h"
#include "lynn/log.h"
#include "lynn/sha256.h"
#include "lynn/util.h"

#define MS_BATCH_OIDS 64
#define MS_COMMIT_FILES 256
/* inline (normal) bytes per commit: ModelScope allows 500 MB in all; keep
 * each request small */
#define MS_COMMIT_INLINE (64u << 20)

/* SDK default for a new repo's configuration.json */
static const char ms_default_config[] = "{\"framework\": \"pytorch\", \"task\": \"text-generation\"}";

static int ms_ok(struct hub_job *j, const struct hub_req *rq, struct hub_resp *rs,
		 struct lynn_err *err)
{
	cJSON *data, *root;
	char path[256], what[300];
	if (rs->status < 200 || rs->status >= 300)
		return hub_status_error(j->c, rq, rs, err);
	hub_url_path(rq->url, path, sizeof path);
	snprintf(what, sizeof what, "modelscope %s %s", rq->method, path);
	root = hub_ms_envelope(what, rs->body.data, rs->body.len, &data, err);
	if (!root)
		return hub_reply_error(err, err ? err->code : -LYNN_EIO);
	cJSON_Delete(root);
	return 0;
}

static int ms_ensure_repo(struct hub_job *j, struct lynn_err *err)
{
	char *url = NULL, *body = NULL;
	struct hub_resp rs = { 0 };
	struct hub_req rq = { .method = "GET", .auth = true };
	cJSON *o = NULL;
	int rc;

	if (asprintf(&url, "%s/api/v1/models/%s/%s", j->base, j->owner, j->name) < 0)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
	rq.url = url;
	rc = hub_http(j->c, &rq, &rs, HUB_RETRY_TRANSIENT, err);
	if (rc)
		goto out;
	if (rs.status != 404) {
		rc = ms_ok(j, &rq, &rs, err);
		goto out;
	}
	/* create */
	lynn_log_info("push: creating modelscope repo '%s/%s' (%s)", j->owner, j->name,
		      j->o->private_repo ? "private" : "public");
	o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "Path", j->owner) ||
	    !cJSON_AddStringToObject(o, "Name", j->name) ||
	    !cJSON_AddStringToObject(o, "ChineseName", j->name) ||
	    !cJSON_AddNumberToObject(o, "Visibility", j->o->private_repo ? 1 : 5) ||
	    !cJSON_AddStringToObject(o, "License", "apache-2.0") ||
	    !cJSON_AddStringToObject(o, "OriginalModelId", "") ||
	    !cJSON_AddStringToObject(o, "TrainId", "") || !(body = cJSON_PrintUnformatted(o))) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
		goto out;
	}
	free(url);
	if (asprintf(&url, "%s/api/v1/models", j->base) < 0) {
		url = NULL;
		rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
		goto out;
	}
	rq = (struct hub_req){ .method = "POST", .url = url, .auth = true,
			       .content_type = "application/json", .body = body,
			       .body_len = strlen(body) };
	rc = hub_http(j->c, &rq, &rs, HUB_RETRY_TRANSIENT, err);
	if (!rc)
		rc = ms_ok(j, &rq, &rs, err);
	if (!rc)
		j->res->created_repo = true;
out:
	cJSON_Delete(o);
	free(body);
	free(url);
	hub_resp_release(&rs);
	return rc;
}

/* The repo's files at the revision (an unknown revision lists as empty). */
static int ms_list_rev(struct hub_job *j, const char *rev_esc, bool *missing,
		       struct hub_remote_file **files, size_t *n, struct lynn_err *err)
{
	char *url = NULL;
	struct hub_resp rs = { 0 };
	struct hub_req rq = { .method = "GET", .auth = true };
	int rc;

	*files = NULL;
	*n = 0;
	if (missing)
		*missing = false;
	if (asprintf(&url, "%s/api/v1/models/%s/%s/repo/files?Revision=%s&Recursive=true", j->base,
		     j->owner, j->name, rev_esc) < 0)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
	rq.url = url;
	rc = hub_http(j->c, &rq, &rs, HUB_RETRY_TRANSIENT, err);
	if (!rc && rs.status == 404 && missing)
		*missing = true;
	if (rc || rs.status == 404)
		goto out;
	if (rs.status < 200 || rs.status >= 300) {
		rc = hub_status_error(j->c, &rq, &rs, err);
		goto out;
	}
	rc = hub_ms_parse_files(rs.body.data, rs.body.len, files, n, err);
	if (rc)
		rc = hub_reply_error(err, rc);
out:
	free(url);
	hub_resp_release(&rs);
	return rc;
}

static int ms_list(struct hub_job *j, struct hub_remote_file **files, size_t *n,
		   struct lynn_err *err)
{
	return ms_list_rev(j, j->rev_esc, NULL, files, n, err);
}

static const struct hub_remote_file *find_remote(const struct hub_remote_file *v, size_t n,
						 const char *path)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i].path, path))
			return &v[i];
	return NULL;
}

static void config_sha(char hex[65])
{
	uint8_t d[32];
	struct lynn_sha256 h = { 0 };
	if (lynn_sha256_init(&h, NULL) || lynn_sha256_update(&h, ms_default_config,
							      strlen(ms_default_config), NULL) ||
	    lynn_sha256_final(&h, d, NULL)) {
		lynn_sha256_release(&h);
		hex[0] = '\0';
		return;
	}
	lynn_sha256_hex(d, hex);
}

static int add_action(cJSON *acts, const char *action, const char *path, bool lfs, uint64_t size,
		      const char *sha, const char *b64)
{
	cJSON *a = cJSON_CreateObject();
	if (!a)
		return -1;
	cJSON_AddItemToArray(acts, a);
	if (!cJSON_AddStringToObject(a, "action", action) ||
	    !cJSON_AddStringToObject(a, "path", path) ||
	    !cJSON_AddStringToObject(a, "type", lfs ? "lfs" : "normal") ||
	    !cJSON_AddNumberToObject(a, "size", (double)size) ||
	    !cJSON_AddStringToObject(a, "sha256", sha) ||
	    !cJSON_AddStringToObject(a, "content", b64 ? b64 : "") ||
	    !cJSON_AddStringToObject(a, "encoding", b64 ? "base64" : ""))
		return -1;
	return 0;
}

static int ms_build(struct hub_job *j, const size_t *idx, size_t n, bool first,
		    struct lynn_buf *body, struct lynn_err *err)
{
	cJSON *o = cJSON_CreateObject(), *acts;
	struct lynn_buf b64 = LYNN_BUF_INIT;
	char *txt = NULL, *data = NULL;
	char msg[128];
	int rc = 0;

	snprintf(msg, sizeof msg, "Upload %zu file(s) with lynn", n + (first && j->ms_add_config));
	if (!o || !cJSON_AddStringToObject(o, "commit_message", j->o->message ? j->o->message : msg) ||
	    !(acts = cJSON_AddArrayToObject(o, "actions")))
		goto oom;
	if (first && j->ms_add_config) {
		char sha[65];
		config_sha(sha);
		lynn_buf_reset(&b64);
		if (hub_b64_append(&b64, ms_default_config, strlen(ms_default_config)) ||
		    add_action(acts, "create", "configuration.json", false, strlen(ms_default_config),
			       sha, b64.data))
			goto oom;
	}
	for (size_t k = 0; k < n; k++) {
		const struct hub_file *f = &j->files[idx[k]];
		const char *act = f->exists ? "update" : "create";
		if (f->lfs) {
			if (add_action(acts, act, f->rpath, true, f->size, f->sha256, NULL))
				goto oom;
			continue;
		}
		rc = hub_read_small(f->local, f->size, &data, err);
		if (rc)
			goto out;
		lynn_buf_reset(&b64);
		if (hub_b64_append(&b64, data, f->size) ||
		    add_action(acts, act, f->rpath, false, f->size, f->sha256, b64.data ? b64.data : ""))
			goto oom;
		free(data);
		data = NULL;
	}
	txt = cJSON_PrintUnformatted(o);
	if (!txt || lynn_buf_puts(body, txt))
		goto oom;
	goto out;
oom:
	rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
out:
	free(txt);
	free(data);
	lynn_buf_release(&b64);
	cJSON_Delete(o);
	return rc;
}

static int ms_landed(struct hub_job *j, const size_t *idx, size_t n, bool *yes,
		     struct lynn_err *err)
{
	struct hub_remote_file *rf;
	size_t nr;
	int rc = ms_list(j, &rf, &nr, err);
	*yes = false;
	if (rc)
		return rc;
	*yes = true;
	for (size_t k = 0; k < n && *yes; k++) {
		const struct hub_file *f = &j->files[idx[k]];
		const struct hub_remote_file *r = find_remote(rf, nr, f->rpath);
		if (!r || strcmp(r->sha256, f->sha256))
			*yes = false;
	}
	if (n == 0 && j->ms_add_config && !find_remote(rf, nr, "configuration.json"))
		*yes = false;
	hub_remote_files_free(rf, nr);
	return 0;
}

/* One LFS batch check body: upload, the oids and sizes. */
static int ms_lfs_body(struct hub_job *j, const size_t *idx, size_t m, struct lynn_buf *body)
{
	int rc = lynn_buf_puts(body, "{\"operation\":\"upload\",\"objects\":[");
	for (size_t k = 0; !rc && k < m; k++) {
		const struct hub_file *f = &j->files[idx[k]];
		rc = lynn_buf_printf(body, "%s{\"oid\":\"%s\",\"size\":%llu}", k ? "," : "",
				     f->sha256, (unsigned long long)f->size);
	}
	return rc ? rc : lynn_buf_puts(body, "]}");
}

static int ms_lfs_check(struct hub_job *j, struct lynn_err *err)
{
	struct hub_lfs_ops ops = { .content_type = "application/json", .max_oids = MS_BATCH_OIDS,
				   .ms = true, .build = ms_lfs_body };
	char *url = NULL;
	int rc;

	if (asprintf(&url, "%s/api/v1/repos/models/%s/%s/info/lfs/objects/batch", j->base,
		     j->owner, j->name) < 0)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
	ops.url = url;
	rc = hub_lfs_batch_all(j, &ops, err);
	free(url);
	return rc;
}

int hub_ms_push(struct hub_job *j, struct lynn_err *err)
{
	struct hub_remote_file *rf = NULL;
	size_t nr = 0;
	bool has_config = false;
	int rc;

	rc = ms_ensure_repo(j, err);
	if (rc)
		goto out;
	{
		/* a new branch starts from the default one (master) */
		bool missing;
		rc = ms_list_rev(j, j->rev_esc, &missing, &rf, &nr, err);
		if (!rc && missing && strcmp(j->rev, "master")) {
			lynn_log_info("push: revision '%s' is new; comparing with master", j->rev);
			rc = ms_list_rev(j, "master", NULL, &rf, &nr, err);
		}
	}
	if (rc)
		goto out;
	rc = hub_hash_files(j, err);
	if (rc)
		goto out;
	for (size_t i = 0; i < j->n; i++) {
		struct hub_file *f = &j->files[i];
		const struct hub_remote_file *r = find_remote(rf, nr, f->rpath);
		f->lfs = f->ms_lfs;
		f->exists = r != NULL;
		f->unchanged = r && !strcmp(r->sha256, f->sha256) && r->size == f->size;
		if (f->unchanged)
			j->res->n_unchanged++;
		if (!strcmp(f->rpath, "configuration.json"))
			has_config = true;
	}
	j->ms_add_config = !has_config && !find_remote(rf, nr, "configuration.json");
	{
		struct hub_commit_ops ops = { .content_type = "application/json",
					      .max_files = MS_COMMIT_FILES,
					      .max_inline = MS_COMMIT_INLINE, .build = ms_build,
					      .landed = ms_landed, .parse = hub_ms_parse_commit };
		rc = hub_push_finish(j, ms_lfs_check, "api/v1/repos/models", &ops, err);
	}
out:
	hub_remote_files_free(rf, nr);
	return rc;
}
