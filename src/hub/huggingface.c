/* huggingface.c - the Hugging Face Hub upload protocol (serving-and-hubs.md
 * §3b): create repo (409 = exists), preupload (256 files per call: upload
 * mode and remote oid, which skips unchanged files and tells whether a
 * commit landed), Git LFS batch with basic and multipart transfers (+
 * verify), NDJSON commit. Xet is never offered. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub_internal.h"
#include "lynn/log.h"
#include "lynn/util.h"

#define HF_PREUPLOAD_FILES 256
#define HF_BATCH_OIDS 100
#define HF_COMMIT_FILES 100 /* "fewer than 100 files per commit recommended" */
#define HF_COMMIT_INLINE (64u << 20)

static int hf_create(struct hub_job *j, struct lynn_err *err)
{
	char *url = NULL, *body = NULL;
	struct hub_resp rs = { 0 };
	struct hub_req rq;
	cJSON *o = cJSON_CreateObject();
	int rc = 0;

	if (!o || !cJSON_AddStringToObject(o, "name", j->name) ||
	    !cJSON_AddStringToObject(o, "organization", j->owner) ||
	    !cJSON_AddStringToObject(o, "type", "model") ||
	    !cJSON_AddStringToObject(o, "visibility", j->o->private_repo ? "private" : "public") ||
	    !(body = cJSON_PrintUnformatted(o)) ||
	    asprintf(&url, "%s/api/repos/create", j->base) < 0) {
		url = NULL;
		rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
		goto out;
	}
	rq = (struct hub_req){ .method = "POST", .url = url, .auth = true,
			       .content_type = "application/json", .body = body,
			       .body_len = strlen(body) };
	for (int a = 0; a < HUB_TRIES; a++) {
		char msg[160];
		rc = hub_http(j->c, &rq, &rs, HUB_RETRY_TRANSIENT, err);
		if (rc)
			goto out;
		if (rs.status >= 200 && rs.status < 300) {
			j->res->created_repo = true;
			lynn_log_info("push: created huggingface repo '%s/%s' (%s)", j->owner, j->name,
				      j->o->private_repo ? "private" : "public");
			goto out;
		}
		if (rs.status != 409)
			break;
		hub_body_message(rs.body.data, rs.body.len, msg, sizeof msg);
		if (!strcasestr(msg, "conflicting operation"))
			goto out; /* exists */
		hub_backoff(j->c, a, rs.retry_after);
	}
	rc = hub_status_error(j->c, &rq, &rs, err);
out:
	cJSON_Delete(o);
	free(body);
	free(url);
	hub_resp_release(&rs);
	return rc;
}

/* Preupload the files idx[0..n): fills lfs/unchanged (when `apply`) or
 * reports whether every file's remote oid equals the local one. */
static int hf_preupload(struct hub_job *j, const size_t *idx, size_t n, bool apply,
			bool *all_match, struct lynn_err *err)
{
	const char **paths = calloc(HF_PREUPLOAD_FILES, sizeof *paths);
	bool *lfs = calloc(HF_PREUPLOAD_FILES, sizeof *lfs);
	bool *ign = calloc(HF_PREUPLOAD_FILES, sizeof *ign);
	char(*oid)[65] = calloc(HF_PREUPLOAD_FILES, sizeof *oid);
	struct hub_resp rs = { 0 };
	char *url = NULL;
	cJSON *o = NULL;
	char *body = NULL;
	int rc = 0;

	if (all_match)
		*all_match = true;
	if (!paths || !lfs || !ign || !oid ||
	    asprintf(&url, "%s/api/models/%s/%s/preupload/%s", j->base, j->owner, j->name,
		     j->rev_esc) < 0) {
		url = NULL;
		rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
		goto out;
	}
	for (size_t s = 0; s < n; s += HF_PREUPLOAD_FILES) {
		size_t m = LYNN_MIN(n - s, (size_t)HF_PREUPLOAD_FILES);
		struct hub_req rq = { .method = "POST", .url = url, .auth = true,
				      .content_type = "application/json" };
		struct lynn_buf b64 = LYNN_BUF_INIT;
		cJSON *arr;
		o = cJSON_CreateObject();
		arr = o ? cJSON_AddArrayToObject(o, "files") : NULL;
		if (!arr)
			goto oom;
		for (size_t k = 0; k < m; k++) {
			const struct hub_file *f = &j->files[idx[s + k]];
			cJSON *e = cJSON_CreateObject();
			paths[k] = f->rpath;
			if (!e)
				goto oom;
			cJSON_AddItemToArray(arr, e);
			lynn_buf_reset(&b64);
			if (hub_b64_append(&b64, f->sample, f->sample_len) ||
			    !cJSON_AddStringToObject(e, "path", f->rpath) ||
			    !cJSON_AddStringToObject(e, "sample", b64.data ? b64.data : "") ||
			    !cJSON_AddNumberToObject(e, "size", (double)f->size)) {
				lynn_buf_release(&b64);
				goto oom;
			}
		}
		lynn_buf_release(&b64);
		body = cJSON_PrintUnformatted(o);
		if (!body)
			goto oom;
		rq.body = body;
		rq.body_len = strlen(body);
		rc = hub_http_ok(j->c, &rq, &rs, err);
		if (rc)
			goto out;
		rc = hub_hf_parse_preupload(rs.body.data, rs.body.len, m, paths, lfs, ign, oid, err);
		if (rc) {
			rc = hub_reply_error(err, rc);
			goto out;
		}
		for (size_t k = 0; k < m; k++) {
			struct hub_file *f = &j->files[idx[s + k]];
			bool is_lfs = f->size > 0 && lfs[k]; /* empty files go as regular */
			const char *mine = is_lfs ? f->sha256 : f->sha1;
			bool same = oid[k][0] && !strcmp(oid[k], mine);
			if (apply) {
				f->lfs = is_lfs;
				f->exists = oid[k][0] != '\0';
				if (!is_lfs && !f->sha1[0]) {
					rc = lynn_errf(err, -LYNN_EIO,
						       "hub: huggingface wants '%s' (%llu bytes) as a "
						       "regular file; too large to send inline",
						       f->rpath, (unsigned long long)f->size);
					goto out;
				}
				if (ign[k]) {
					lynn_log_warn("push: the hub ignores '%s' (.gitignore)",
						      f->rpath);
					f->unchanged = true;
				} else if (same) {
					f->unchanged = true;
					j->res->n_unchanged++;
				}
			} else if (!same && !ign[k] && all_match) {
				*all_match = false;
			}
		}
		free(body);
		body = NULL;
		cJSON_Delete(o);
		o = NULL;
	}
	goto out;
oom:
	rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
out:
	free(body);
	cJSON_Delete(o);
	free(url);
	free(paths);
	free(lfs);
	free(ign);
	free(oid);
	hub_resp_release(&rs);
	return rc;
}

/* One LFS batch request body: upload, basic or multipart, sha256 oids, the target ref. */
static int hf_lfs_body(struct hub_job *j, const size_t *idx, size_t m, struct lynn_buf *body)
{
	cJSON *o = cJSON_CreateObject(), *tr, *objs, *ref;
	char *t = NULL;
	int rc = -LYNN_ENOMEM;

	if (!o || !cJSON_AddStringToObject(o, "operation", "upload") ||
	    !(tr = cJSON_AddArrayToObject(o, "transfers")) ||
	    !(objs = cJSON_AddArrayToObject(o, "objects")) ||
	    !cJSON_AddStringToObject(o, "hash_algo", "sha256") ||
	    !(ref = cJSON_AddObjectToObject(o, "ref")) ||
	    !cJSON_AddStringToObject(ref, "name", j->rev))
		goto out;
	cJSON_AddItemToArray(tr, cJSON_CreateString("basic"));
	cJSON_AddItemToArray(tr, cJSON_CreateString("multipart"));
	for (size_t k = 0; k < m; k++) {
		const struct hub_file *f = &j->files[idx[k]];
		cJSON *e = cJSON_CreateObject();
		if (!e)
			goto out;
		cJSON_AddItemToArray(objs, e);
		if (!cJSON_AddStringToObject(e, "oid", f->sha256) ||
		    !cJSON_AddNumberToObject(e, "size", (double)f->size))
			goto out;
	}
	t = cJSON_PrintUnformatted(o);
	if (t)
		rc = lynn_buf_puts(body, t);
out:
	free(t);
	cJSON_Delete(o);
	return rc;
}

static int hf_lfs_batch(struct hub_job *j, struct lynn_err *err)
{
	struct hub_lfs_ops ops = { .content_type = "application/vnd.git-lfs+json",
				   .accept = "application/vnd.git-lfs+json",
				   .max_oids = HF_BATCH_OIDS, .ms = false, .build = hf_lfs_body };
	char *url = NULL;
	int rc;

	if (asprintf(&url, "%s/%s/%s.git/info/lfs/objects/batch", j->base, j->owner, j->name) < 0)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
	ops.url = url;
	rc = hub_lfs_batch_all(j, &ops, err);
	free(url);
	return rc;
}

static int ndjson_line(struct lynn_buf *body, cJSON *line)
{
	char *t = cJSON_PrintUnformatted(line);
	int rc = t ? lynn_buf_puts(body, t) : -LYNN_ENOMEM;
	if (!rc)
		rc = lynn_buf_putc(body, '\n');
	free(t);
	cJSON_Delete(line);
	return rc;
}

static int hf_build(struct hub_job *j, const size_t *idx, size_t n, bool first,
		    struct lynn_buf *body, struct lynn_err *err)
{
	struct lynn_buf b64 = LYNN_BUF_INIT;
	char summary[128], *data = NULL;
	cJSON *l, *v;
	int rc = 0;
	(void)first;

	snprintf(summary, sizeof summary, "Upload %zu file(s) with lynn", n);
	l = cJSON_CreateObject();
	if (!l || !cJSON_AddStringToObject(l, "key", "header") ||
	    !(v = cJSON_AddObjectToObject(l, "value")) ||
	    !cJSON_AddStringToObject(v, "summary", j->o->message ? j->o->message : summary) ||
	    !cJSON_AddStringToObject(v, "description", ""))
		goto oom;
	rc = ndjson_line(body, l);
	l = NULL;
	if (rc)
		goto oom;
	for (size_t k = 0; k < n; k++) {
		const struct hub_file *f = &j->files[idx[k]];
		l = cJSON_CreateObject();
		if (!l || !cJSON_AddStringToObject(l, "key", f->lfs ? "lfsFile" : "file") ||
		    !(v = cJSON_AddObjectToObject(l, "value")) ||
		    !cJSON_AddStringToObject(v, "path", f->rpath))
			goto oom;
		if (f->lfs) {
			if (!cJSON_AddStringToObject(v, "algo", "sha256") ||
			    !cJSON_AddStringToObject(v, "oid", f->sha256) ||
			    !cJSON_AddNumberToObject(v, "size", (double)f->size))
				goto oom;
		} else {
			rc = hub_read_small(f->local, f->size, &data, err);
			if (rc)
				goto out;
			lynn_buf_reset(&b64);
			if (hub_b64_append(&b64, data, f->size) ||
			    !cJSON_AddStringToObject(v, "content", b64.data ? b64.data : "") ||
			    !cJSON_AddStringToObject(v, "encoding", "base64"))
				goto oom;
			free(data);
			data = NULL;
		}
		rc = ndjson_line(body, l);
		l = NULL;
		if (rc)
			goto oom;
	}
	goto out;
oom:
	cJSON_Delete(l);
	rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
out:
	free(data);
	lynn_buf_release(&b64);
	return rc;
}

static int hf_landed(struct hub_job *j, const size_t *idx, size_t n, bool *yes,
		     struct lynn_err *err)
{
	return hf_preupload(j, idx, n, false, yes, err);
}

int hub_hf_push(struct hub_job *j, struct lynn_err *err)
{
	size_t *all = calloc(j->n ? j->n : 1, sizeof *all);
	int rc;

	if (!all)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
	for (size_t i = 0; i < j->n; i++)
		all[i] = i;
	rc = hf_create(j, err);
	if (!rc)
		rc = hub_hash_files(j, err);
	if (!rc)
		rc = hf_preupload(j, all, j->n, true, NULL, err);
	if (rc)
		goto out;
	{
		struct hub_commit_ops ops = { .content_type = "application/x-ndjson",
					      .max_files = HF_COMMIT_FILES,
					      .max_inline = HF_COMMIT_INLINE, .build = hf_build,
					      .landed = hf_landed, .parse = hub_hf_parse_commit };
		rc = hub_push_finish(j, hf_lfs_batch, "api/models", &ops, err);
	}
out:
	free(all);
	return rc;
}
