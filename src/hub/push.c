/* push.c - the hub-independent half of `lynn push`: the plan (folder walk,
 * globs, LFS rule), streamed hashing with progress, parallel blob uploads
 * (basic, multipart, verify) and the entry point lynn_hub_push. */
#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hub_internal.h"
#include "lynn/fs.h"
#include "lynn/log.h"
#include "lynn/pool.h"
#include "lynn/sha256.h"
#include "lynn/util.h"

/* SPEC §7 */
static const char *const default_excludes[] = { "*.bak", "*.bak.*", "*.tmp", ".git*", "__pycache__",
						"*.pyc" };

/* modelscope hub/constants.py MODEL_LFS_SUFFIX (subset relevant to
 * checkpoints and archives; .gguf is not listed there). */
static const char *const ms_lfs_suffix[] = { ".safetensors", ".bin", ".pt", ".pth", ".onnx",
					     ".tar", ".gz", ".zip", ".h5", ".ckpt", ".pkl",
					     ".msgpack", ".npy", ".npz", ".model", ".tflite",
					     ".pb", ".ot", ".7z", ".bz2", ".xz", ".zst" };

struct plan_file {
	char *local;
	char *rpath;
	uint64_t size;
	bool lfs;
};

struct lynn_hub_plan {
	struct plan_file *v;
	size_t n, cap;
	uint64_t bytes;
};

bool lynn_hub_ms_is_lfs(const char *path, uint64_t size)
{
	size_t n = strlen(path);
	if (size > (1u << 20))
		return true;
	for (size_t i = 0; i < LYNN_ARRAY_LEN(ms_lfs_suffix); i++) {
		size_t k = strlen(ms_lfs_suffix[i]);
		if (n >= k && !strcasecmp(path + n - k, ms_lfs_suffix[i]))
			return true;
	}
	return false;
}

/* pattern vs the whole path or any one component */
static bool match_any_component(const char *pat, const char *rel)
{
	char comp[4096];
	const char *p = rel;
	if (!fnmatch(pat, rel, 0))
		return true;
	while (*p) {
		size_t k = strcspn(p, "/");
		if (k < sizeof comp) {
			memcpy(comp, p, k);
			comp[k] = '\0';
			if (!fnmatch(pat, comp, 0))
				return true;
		}
		p += k;
		if (*p == '/')
			p++;
	}
	return false;
}

bool lynn_hub_path_selected(const char *rel, const char *const *include, size_t n_include,
			    const char *const *exclude, size_t n_exclude)
{
	const char *base = lynn_path_base(rel);
	for (size_t i = 0; i < LYNN_ARRAY_LEN(default_excludes); i++)
		if (match_any_component(default_excludes[i], rel))
			return false;
	for (size_t i = 0; i < n_exclude; i++)
		if (match_any_component(exclude[i], rel))
			return false;
	if (n_include == 0)
		return true;
	for (size_t i = 0; i < n_include; i++)
		if (!fnmatch(include[i], rel, 0) || !fnmatch(include[i], base, 0))
			return true;
	return false;
}

static int cmp_plan(const void *a, const void *b)
{
	return strcmp(((const struct plan_file *)a)->rpath, ((const struct plan_file *)b)->rpath);
}

static int walk(struct lynn_hub_plan *pl, const struct lynn_hub_opts *o, const char *prefix,
		const char *dir, const char *rel, int depth, struct lynn_err *err)
{
	DIR *d = NULL;
	struct dirent *de;
	int rc = 0;

	if (depth > 64)
		return lynn_errf(err, -LYNN_EINVAL, "hub: '%s': folders nested too deep (a link loop?)",
				 dir);
	d = opendir(dir);
	if (!d)
		return lynn_errf(err, errno == ENOENT ? -LYNN_ENOTFOUND : -LYNN_EIO, "hub: '%s': %s",
				 dir, strerror(errno));
	while ((de = readdir(d))) {
		char *full = NULL, *r = NULL;
		struct stat st;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		full = lynn_path_join(dir, de->d_name);
		if (!full || asprintf(&r, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) < 0) {
			free(full);
			rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
			goto out;
		}
		if (stat(full, &st) < 0) {
			lynn_log_warn("push: skipping '%s': %s", full, strerror(errno));
		} else if (S_ISDIR(st.st_mode)) {
			/* a default-excluded folder is skipped whole */
			if (lynn_hub_path_selected(r, NULL, 0, o->exclude, o->n_exclude))
				rc = walk(pl, o, prefix, full, r, depth + 1, err);
		} else if (S_ISREG(st.st_mode) &&
			   lynn_hub_path_selected(r, o->include, o->n_include, o->exclude,
						  o->n_exclude)) {
			struct plan_file *pf;
			if (pl->n == pl->cap) {
				size_t nc = pl->cap ? pl->cap * 2 : 64;
				void *nv = realloc(pl->v, nc * sizeof *pl->v);
				if (!nv) {
					rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
					free(full);
					free(r);
					goto out;
				}
				pl->v = nv;
				pl->cap = nc;
			}
			pf = &pl->v[pl->n];
			memset(pf, 0, sizeof *pf);
			pf->local = full;
			full = NULL;
			if (asprintf(&pf->rpath, "%s%s", prefix, r) < 0) {
				free(pf->local);
				rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
				free(r);
				goto out;
			}
			pf->size = (uint64_t)st.st_size;
			pf->lfs = lynn_hub_ms_is_lfs(pf->rpath, pf->size);
			if (o->hub == LYNN_HUB_HUGGINGFACE)
				/* HF's hub decides; predict: over 10 MB or an LFS suffix */
				pf->lfs = pf->size > 10u * 1000 * 1000 || pf->lfs;
			pl->bytes += pf->size;
			pl->n++;
		}
		free(full);
		free(r);
		if (rc)
			goto out;
	}
out:
	closedir(d);
	return rc;
}

struct lynn_hub_plan *lynn_hub_plan_create(const struct lynn_hub_opts *o, struct lynn_err *err)
{
	struct lynn_hub_plan *pl = calloc(1, sizeof *pl);
	char prefix[1024] = "";
	const char *p = o->path_in_repo ? o->path_in_repo : "";

	if (!pl) {
		lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
		return NULL;
	}
	while (*p == '/')
		p++;
	if (*p) {
		size_t k = strlen(p);
		while (k > 0 && p[k - 1] == '/')
			k--;
		if (k + 2 > sizeof prefix || strstr(p, "..") || strstr(p, "//")) {
			lynn_errf(err, -LYNN_EINVAL, "hub: bad --path-in-repo '%s'", o->path_in_repo);
			goto fail;
		}
		memcpy(prefix, p, k);
		prefix[k] = '/';
		prefix[k + 1] = '\0';
	}
	if (!lynn_dir_exists(o->src)) {
		lynn_errf(err, -LYNN_ENOTFOUND, "hub: '%s': not a folder", o->src);
		goto fail;
	}
	if (walk(pl, o, prefix, o->src, "", 0, err))
		goto fail;
	if (pl->n)
		qsort(pl->v, pl->n, sizeof *pl->v, cmp_plan);
	return pl;
fail:
	lynn_hub_plan_free(pl);
	return NULL;
}

void lynn_hub_plan_free(struct lynn_hub_plan *pl)
{
	if (!pl)
		return;
	for (size_t i = 0; i < pl->n; i++) {
		free(pl->v[i].local);
		free(pl->v[i].rpath);
	}
	free(pl->v);
	free(pl);
}

size_t lynn_hub_plan_count(const struct lynn_hub_plan *pl)
{
	return pl->n;
}

uint64_t lynn_hub_plan_bytes(const struct lynn_hub_plan *pl)
{
	return pl->bytes;
}

void lynn_hub_plan_file(const struct lynn_hub_plan *pl, size_t i, const char **rpath,
			uint64_t *size, bool *lfs)
{
	if (rpath)
		*rpath = pl->v[i].rpath;
	if (size)
		*size = pl->v[i].size;
	if (lfs)
		*lfs = pl->v[i].lfs;
}

/* ===== hashing ===== */

struct hash_ctx {
	struct hub_job *j;
	pthread_mutex_t mu;
	uint64_t done, total;
	atomic_int failed;
	struct lynn_err err;
};

static void hash_one(void *ud, int64_t i, int tid)
{
	struct hash_ctx *h = ud;
	struct hub_file *f = &h->j->files[i];
	struct lynn_sha256 s = { 0 };
	EVP_MD_CTX *s1 = NULL;
	struct lynn_err e = { 0 };
	uint8_t dg[32], d1[20];
	unsigned int n1 = 0;
	uint8_t *buf = NULL;
	uint64_t got = 0;
	int fd = -1, rc = 0;
	(void)tid;

	if (atomic_load(&h->failed))
		return;
	fd = open(f->local, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = lynn_errf(&e, -LYNN_EIO, "hub: '%s': %s", f->local, strerror(errno));
		goto out;
	}
	buf = malloc(1 << 20);
	if (!buf) {
		rc = lynn_errf(&e, -LYNN_ENOMEM, "hub: out of memory");
		goto out;
	}
	rc = lynn_sha256_init(&s, &e);
	if (rc)
		goto out;
	if (f->size <= HUB_SHA1_MAX) {
		/* git blob id: sha1("blob <size>\0" + content) */
		char hdr[48];
		int k = snprintf(hdr, sizeof hdr, "blob %llu", (unsigned long long)f->size);
		s1 = EVP_MD_CTX_new();
		if (!s1 || EVP_DigestInit_ex(s1, EVP_sha1(), NULL) != 1 ||
		    EVP_DigestUpdate(s1, hdr, (size_t)k + 1) != 1) {
			rc = lynn_errf(&e, -LYNN_EIO, "hub: sha1 init failed");
			goto out;
		}
	}
	for (;;) {
		ssize_t r = read(fd, buf, 1 << 20);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = lynn_errf(&e, -LYNN_EIO, "hub: '%s': %s", f->local, strerror(errno));
			goto out;
		}
		if (r == 0)
			break;
		if (got < sizeof f->sample) {
			size_t k = LYNN_MIN((size_t)r, sizeof f->sample - (size_t)got);
			memcpy(f->sample + got, buf, k);
			f->sample_len = (size_t)got + k;
		}
		got += (uint64_t)r;
		rc = lynn_sha256_update(&s, buf, (size_t)r, &e);
		if (rc)
			goto out;
		if (s1 && EVP_DigestUpdate(s1, buf, (size_t)r) != 1) {
			rc = lynn_errf(&e, -LYNN_EIO, "hub: sha1 update failed");
			goto out;
		}
		pthread_mutex_lock(&h->mu);
		h->done += (uint64_t)r;
		if (h->j->o->hash_progress)
			h->j->o->hash_progress(h->j->o->hash_ud, h->done, h->total);
		pthread_mutex_unlock(&h->mu);
		if (atomic_load(&h->failed))
			goto out;
	}
	if (got != f->size) {
		rc = lynn_errf(&e, -LYNN_EIO, "hub: '%s' changed size while hashing (%llu, was %llu)",
			       f->local, (unsigned long long)got, (unsigned long long)f->size);
		goto out;
	}
	rc = lynn_sha256_final(&s, dg, &e);
	if (rc)
		goto out;
	lynn_sha256_hex(dg, f->sha256);
	if (s1) {
		if (EVP_DigestFinal_ex(s1, d1, &n1) != 1 || n1 != 20) {
			rc = lynn_errf(&e, -LYNN_EIO, "hub: sha1 final failed");
			goto out;
		}
		for (int k = 0; k < 20; k++)
			snprintf(f->sha1 + 2 * k, 3, "%02x", d1[k]);
	}
out:
	lynn_sha256_release(&s);
	EVP_MD_CTX_free(s1);
	free(buf);
	if (fd >= 0)
		close(fd);
	if (rc) {
		pthread_mutex_lock(&h->mu);
		if (!atomic_load(&h->failed))
			h->err = e;
		atomic_store(&h->failed, 1);
		pthread_mutex_unlock(&h->mu);
	}
}

static int run_pool(struct hub_job *j, size_t n, lynn_pool_fn fn, void *ud, struct lynn_err *err)
{
	int conns = j->o->connections > 0 ? j->o->connections : 4;
	struct lynn_pool *pool = NULL;
	if (n == 0)
		return 0;
	if (conns > 1 && n > 1) {
		pool = lynn_pool_create(LYNN_MIN(conns, (int)LYNN_MIN(n, 64)), err);
		if (!pool)
			return err ? err->code : -LYNN_ENOMEM;
	}
	lynn_pool_run(pool, (int64_t)n, fn, ud);
	lynn_pool_free(pool);
	return 0;
}

int hub_hash_files(struct hub_job *j, struct lynn_err *err)
{
	struct hash_ctx h = { .j = j };
	int rc;
	pthread_mutex_init(&h.mu, NULL);
	for (size_t i = 0; i < j->n; i++)
		h.total += j->files[i].size;
	rc = run_pool(j, j->n, hash_one, &h, err);
	pthread_mutex_destroy(&h.mu);
	if (rc)
		return rc;
	if (atomic_load(&h.failed)) {
		if (err)
			*err = h.err;
		return h.err.code;
	}
	return 0;
}

/* ===== uploads ===== */

struct up_ctx {
	struct hub_job *j;
	size_t *idx; /* files with a pending action */
	pthread_mutex_t mu;
	atomic_int failed;
	struct lynn_err err;
};

static int upload_one(struct hub_job *j, struct hub_file *f, struct lynn_err *err)
{
	struct hub_client *c = j->c;
	const struct hub_action *a = &f->act;
	struct hub_resp rs = { 0 };
	struct lynn_buf body = LYNN_BUF_INIT;
	bool own_host = j->c->kind == LYNN_HUB_MODELSCOPE;
	int rc = 0;

	if (a->kind == HUB_XFER_BASIC) {
		/* ModelScope wants the cookie and bearer on its own PUT (§3a);
		 * HF hrefs are presigned and get no token. */
		struct hub_req rq = { .method = "PUT", .url = a->href, .auth = own_host,
				      .extra = a->headers, .n_extra = a->n_headers,
				      .content_type = "application/octet-stream",
				      .file = f->local, .file_off = 0, .file_len = f->size,
				      .count_upload = true };
		rc = hub_http_ok(c, &rq, &rs, err);
		if (rc)
			goto out;
	} else if (a->kind == HUB_XFER_MULTIPART) {
		rc = lynn_buf_printf(&body, "{\"oid\":\"%s\",\"parts\":[", f->sha256);
		for (size_t p = 0; !rc && p < a->n_parts; p++) {
			uint64_t off = (uint64_t)p * a->chunk_size;
			struct hub_req rq = { .method = "PUT", .url = a->parts[p], .auth = false,
					      .file = f->local, .file_off = off,
					      .file_len = LYNN_MIN(a->chunk_size, f->size - off),
					      .count_upload = true };
			cJSON *et;
			char *ets;
			rc = hub_http_ok(c, &rq, &rs, err);
			if (rc)
				goto out;
			if (!rs.etag[0]) {
				rc = lynn_errf(err, -LYNN_EIO,
					       "hub: '%s': part %zu of the multipart upload has no ETag",
					       f->rpath, p + 1);
				goto out;
			}
			et = cJSON_CreateString(rs.etag);
			ets = et ? cJSON_PrintUnformatted(et) : NULL;
			cJSON_Delete(et);
			if (!ets) {
				rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
				goto out;
			}
			rc = lynn_buf_printf(&body, "%s{\"partNumber\":%zu,\"etag\":%s}", p ? "," : "",
					     p + 1, ets);
			free(ets);
		}
		if (!rc)
			rc = lynn_buf_puts(&body, "]}");
		if (rc) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
			goto out;
		}
		{
			struct hub_req rq = { .method = "POST", .url = a->href, .auth = false,
					      .content_type = "application/vnd.git-lfs+json",
					      .accept = "application/vnd.git-lfs+json",
					      .body = body.data, .body_len = body.len };
			rc = hub_http_ok(c, &rq, &rs, err);
			if (rc)
				goto out;
		}
	}
	if (a->verify_href) {
		char vb[160];
		int k = snprintf(vb, sizeof vb, "{\"oid\":\"%s\",\"size\":%llu}", f->sha256,
				 (unsigned long long)f->size);
		struct hub_req rq = { .method = "POST", .url = a->verify_href, .auth = true,
				      .extra = a->verify_headers, .n_extra = a->n_verify_headers,
				      .content_type = "application/vnd.git-lfs+json",
				      .accept = "application/vnd.git-lfs+json", .body = vb,
				      .body_len = (size_t)k };
		rc = hub_http_ok(c, &rq, &rs, err);
		if (rc)
			goto out;
	}
	lynn_log_debug("push: uploaded '%s' (%llu bytes)", f->rpath, (unsigned long long)f->size);
out:
	lynn_buf_release(&body);
	hub_resp_release(&rs);
	return rc;
}

static void upload_item(void *ud, int64_t i, int tid)
{
	struct up_ctx *u = ud;
	struct lynn_err e = { 0 };
	(void)tid;
	if (atomic_load(&u->failed))
		return;
	if (upload_one(u->j, &u->j->files[u->idx[i]], &e)) {
		pthread_mutex_lock(&u->mu);
		if (!atomic_load(&u->failed))
			u->err = e;
		atomic_store(&u->failed, 1);
		pthread_mutex_unlock(&u->mu);
	}
}

/* The LFS files still to upload, one per distinct blob (later copies get
 * `dup`): their indices into j->files go to idx (room for j->n). Returns
 * the count. */
static size_t lfs_pending(struct hub_job *j, size_t *idx)
{
	size_t n = 0;
	for (size_t i = 0; i < j->n; i++) {
		struct hub_file *f = &j->files[i];
		if (f->unchanged || !f->lfs)
			continue;
		for (size_t k = 0; k < n && !f->dup; k++)
			if (!strcmp(j->files[idx[k]].sha256, f->sha256))
				f->dup = true;
		if (!f->dup)
			idx[n++] = i;
	}
	return n;
}

/* Send one LFS batch request `rq` for the files idx[0..m) whose oids and
 * sizes are given, parse the reply into acts[0..m) and move each action
 * into its file. */
static int lfs_batch_send(struct hub_job *j, const struct hub_req *rq, bool ms,
			  const size_t *idx, size_t m, const char *const *oids,
			  const uint64_t *sizes, struct hub_action *acts, struct lynn_err *err)
{
	struct hub_resp rs = { 0 };
	int rc = hub_http_ok(j->c, rq, &rs, err);
	if (rc)
		goto out;
	rc = hub_parse_lfs_batch(ms, rs.body.data, rs.body.len, m, oids, sizes, acts, err);
	if (rc) {
		rc = hub_reply_error(err, rc);
		goto out;
	}
	for (size_t k = 0; k < m; k++) {
		struct hub_file *f = &j->files[idx[k]];
		f->act = acts[k];
		memset(&acts[k], 0, sizeof acts[k]);
		if (f->act.kind == HUB_XFER_NONE)
			j->res->n_blobs_present++;
	}
out:
	hub_resp_release(&rs);
	return rc;
}

int hub_lfs_batch_all(struct hub_job *j, const struct hub_lfs_ops *ops, struct lynn_err *err)
{
	size_t *idx = calloc(j->n ? j->n : 1, sizeof *idx), n = 0;
	const char **oids = calloc(ops->max_oids, sizeof *oids);
	uint64_t *sizes = calloc(ops->max_oids, sizeof *sizes);
	struct hub_action *acts = calloc(ops->max_oids, sizeof *acts);
	struct lynn_buf body = LYNN_BUF_INIT;
	int rc = 0;

	if (!idx || !oids || !sizes || !acts) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
		goto out;
	}
	n = lfs_pending(j, idx); /* one request per distinct blob */
	for (size_t s = 0; s < n; s += ops->max_oids) {
		size_t m = LYNN_MIN(n - s, ops->max_oids);
		struct hub_req rq = { .method = "POST", .url = ops->url, .auth = true,
				      .content_type = ops->content_type, .accept = ops->accept };
		for (size_t k = 0; k < m; k++) {
			oids[k] = j->files[idx[s + k]].sha256;
			sizes[k] = j->files[idx[s + k]].size;
		}
		lynn_buf_reset(&body);
		if (ops->build(j, idx + s, m, &body)) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
			goto out;
		}
		rq.body = body.data;
		rq.body_len = body.len;
		rc = lfs_batch_send(j, &rq, ops->ms, idx + s, m, oids, sizes, acts, err);
		if (rc)
			goto out;
	}
out:
	free(idx);
	free(oids);
	free(sizes);
	free(acts);
	lynn_buf_release(&body);
	return rc;
}

int hub_upload_blobs(struct hub_job *j, struct lynn_err *err)
{
	struct up_ctx u = { .j = j };
	size_t n = 0;
	int rc = 0;

	u.idx = calloc(j->n ? j->n : 1, sizeof *u.idx);
	if (!u.idx)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
	j->c->up_total = 0;
	j->c->up_done = 0;
	for (size_t i = 0; i < j->n; i++)
		if (j->files[i].act.kind != HUB_XFER_NONE) {
			u.idx[n++] = i;
			j->c->up_total += j->files[i].size;
		}
	pthread_mutex_init(&u.mu, NULL);
	if (n)
		lynn_log_info("push: uploading %zu blob(s), %.1f MB", n,
			      (double)j->c->up_total / 1e6);
	rc = run_pool(j, n, upload_item, &u, err);
	pthread_mutex_destroy(&u.mu);
	if (!rc && atomic_load(&u.failed)) {
		if (err)
			*err = u.err;
		rc = u.err.code;
	}
	if (!rc) {
		j->res->n_blobs_uploaded += n;
		j->res->bytes_uploaded += j->c->up_total;
	}
	free(u.idx);
	return rc;
}

int hub_read_small(const char *path, uint64_t size, char **out, struct lynn_err *err)
{
	size_t len = 0;
	int rc = lynn_file_read(path, (size_t)size + 1, out, &len, err);
	if (rc)
		return rc;
	if (len != size) {
		free(*out);
		*out = NULL;
		return lynn_errf(err, -LYNN_EIO, "hub: '%s' changed size since it was hashed", path);
	}
	return 0;
}

int hub_b64_append(struct lynn_buf *b, const void *data, size_t len)
{
	size_t need = 4 * ((len + 2) / 3);
	int rc = lynn_buf_reserve(b, need + 1);
	if (rc)
		return rc;
	if (len)
		EVP_EncodeBlock((unsigned char *)b->data + b->len, data, (int)len);
	b->len += need;
	b->data[b->len] = '\0';
	return 0;
}

/* ===== entry ===== */

static int check_repo_id(const char *repo, char *owner, size_t co, char *name, size_t cn,
			 struct lynn_err *err)
{
	const char *slash = repo ? strchr(repo, '/') : NULL;
	size_t lo, ln;
	if (!slash)
		goto bad;
	lo = (size_t)(slash - repo);
	ln = strlen(slash + 1);
	if (lo == 0 || ln == 0 || lo >= co || ln >= cn)
		goto bad;
	for (const char *p = repo; *p; p++)
		if (p != slash && !isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
			goto bad;
	if (!strcmp(slash + 1, ".") || !strcmp(slash + 1, "..") || repo[0] == '.')
		goto bad;
	memcpy(owner, repo, lo);
	owner[lo] = '\0';
	memcpy(name, slash + 1, ln + 1);
	return 0;
bad:
	return lynn_errf(err, -LYNN_EINVAL, "hub: bad --repo '%s' (expected OWNER/NAME)",
			 repo ? repo : "");
}

/* A hub could echo a header back in an error body: never let the token
 * reach a message. */
static void redact(char *msg, const char *token)
{
	size_t tl = strlen(token);
	char *p;
	if (tl < 4)
		return;
	while ((p = strstr(msg, token))) {
		memcpy(p, "***", 3);
		memmove(p + 3, p + tl, strlen(p + tl) + 1);
	}
}

/* The hubs' documented limits, checked before any byte is hashed. */
static int check_limits(const struct hub_job *j, struct lynn_err *err)
{
	if (j->o->hub == LYNN_HUB_MODELSCOPE) {
		if (j->n > 100000)
			return lynn_errf(err, -LYNN_EINVAL,
					 "hub: %zu files; modelscope takes at most 100000 per repo", j->n);
		return 0;
	}
	for (size_t i = 0; i < j->n; i++) {
		if (j->files[i].size > 50ull * 1000 * 1000 * 1000)
			return lynn_errf(err, -LYNN_EINVAL,
					 "hub: '%s' is %llu bytes; huggingface takes at most 50 GB per file",
					 j->files[i].rpath, (unsigned long long)j->files[i].size);
		if (j->files[i].size > 20ull * 1000 * 1000 * 1000)
			lynn_log_warn("push: '%s' is over 20 GB, the size huggingface recommends at most",
				      j->files[i].rpath);
	}
	return 0;
}

int lynn_hub_push(const struct lynn_hub_opts *o, const struct lynn_hub_plan *pl,
		  struct lynn_hub_result *res, struct lynn_err *err)
{
	struct hub_client c = { 0 };
	struct hub_job j = { .o = o, .c = &c, .res = res };
	const char *ep, *bo;
	size_t k;
	int rc = 0;

	memset(res, 0, sizeof *res);
	res->n_files = pl->n;
	if (!o->token || !o->token[0])
		return lynn_errf(err, -LYNN_EINVAL, "hub: no token");
	for (const char *t = o->token; *t; t++)
		if ((unsigned char)*t < 0x21 || (unsigned char)*t > 0x7e)
			return lynn_errf(err, -LYNN_EINVAL,
					 "hub: the token contains spaces or control characters");
	rc = check_repo_id(o->repo, j.owner, sizeof j.owner, j.name, sizeof j.name, err);
	if (rc)
		return rc;
	ep = o->endpoint ? o->endpoint
	     : o->hub == LYNN_HUB_MODELSCOPE ? "https://www.modelscope.cn"
					     : "https://huggingface.co";
	if (strncmp(ep, "http://", 7) && strncmp(ep, "https://", 8))
		return lynn_errf(err, -LYNN_EINVAL, "hub: --endpoint '%s' is not an http(s) URL", ep);
	k = strlen(ep);
	while (k > 0 && ep[k - 1] == '/')
		k--;
	if (k >= sizeof j.base || strpbrk(ep, "?#@ "))
		return lynn_errf(err, -LYNN_EINVAL, "hub: bad --endpoint '%s'", ep);
	memcpy(j.base, ep, k);
	j.base[k] = '\0';
	j.rev = o->revision ? o->revision : o->hub == LYNN_HUB_MODELSCOPE ? "master" : "main";
	if (!j.rev[0])
		return lynn_errf(err, -LYNN_EINVAL, "hub: empty --revision");

	c.kind = o->hub;
	c.token = o->token;
	c.token_var = o->hub == LYNN_HUB_MODELSCOPE ? "MS_TOKEN/MODELSCOPE_API_TOKEN" : "HF_TOKEN";
	c.backoff_base = 1.0;
	bo = getenv("LYNN_HUB_BACKOFF_MS");
	if (bo && *bo) {
		char *end;
		double v = strtod(bo, &end);
		if (!*end && v >= 0 && v <= 60000)
			c.backoff_base = v / 1000.0;
	}
	c.up_fn = o->upload_progress;
	c.up_ud = o->upload_progress ? o->upload_ud : NULL;
	pthread_mutex_init(&c.mu, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);

	j.rev_esc = hub_escape(j.rev);
	j.n = pl->n;
	j.files = calloc(pl->n ? pl->n : 1, sizeof *j.files);
	if (!j.files || !j.rev_esc) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
		goto out;
	}
	for (size_t i = 0; i < pl->n; i++) {
		j.files[i].local = pl->v[i].local;
		j.files[i].rpath = pl->v[i].rpath;
		j.files[i].size = pl->v[i].size;
		j.files[i].ms_lfs = lynn_hub_ms_is_lfs(pl->v[i].rpath, pl->v[i].size);
	}
	rc = check_limits(&j, err);
	if (!rc)
		rc = o->hub == LYNN_HUB_MODELSCOPE ? hub_ms_push(&j, err) : hub_hf_push(&j, err);
	if (rc && err)
		redact(err->msg, o->token);
out:
	for (size_t i = 0; j.files && i < j.n; i++)
		hub_action_release(&j.files[i].act);
	free(j.files);
	free(j.rev_esc);
	pthread_mutex_destroy(&c.mu);
	return rc;
}

/* ===== commits ===== */

int hub_reply_error(struct lynn_err *err, int rc)
{
	if (rc == -LYNN_EFORMAT) {
		rc = -LYNN_EIO;
		if (err)
			err->code = rc;
	}
	return rc;
}

static bool try_again_msg(const char *m)
{
	return strcasestr(m, "try again") || strcasestr(m, "could not update refs") ||
	       strcasestr(m, "conflicting operation in progress");
}

static int commit_batch(struct hub_job *j, const struct hub_commit_ops *ops, const size_t *idx,
			size_t n, bool first, struct lynn_err *err)
{
	struct lynn_buf body = LYNN_BUF_INIT;
	struct hub_resp rs = { 0 };
	struct hub_req rq = { .method = "POST", .url = ops->url, .auth = true,
			      .content_type = ops->content_type };
	char path[256];
	int rc;

	hub_url_path(ops->url, path, sizeof path);
	rc = ops->build(j, idx, n, first, &body, err);
	if (rc)
		goto out;
	rq.body = body.data;
	rq.body_len = body.len;
	for (int a = 0;; a++) {
		bool lost = false, landed = false;
		struct lynn_err e2 = { 0 };
		char msg[160] = "";
		rc = hub_http(j->c, &rq, &rs, HUB_RETRY_NONE, err);
		if (rc && rc != -LYNN_ENET)
			goto out;
		if (rc) {
			lost = true;
		} else if (rs.status >= 200 && rs.status < 300) {
			rc = ops->parse(rs.body.data, rs.body.len, j->res->commit_id,
					sizeof j->res->commit_id, &e2);
			if (!rc) {
				j->res->n_commits++;
				lynn_log_info("push: committed %zu file(s)%s%s",
					      n + (first && j->ms_add_config),
					      j->res->commit_id[0] ? " as " : "", j->res->commit_id);
				goto out;
			}
			if (!try_again_msg(e2.msg)) {
				if (err)
					*err = e2;
				rc = hub_reply_error(err, rc);
				goto out;
			}
			lost = true; /* refused with "try again": check, then retry */
		} else if (rs.status == 429) {
			/* rejected unprocessed: safe to send again */
		} else if (rs.status == 408 || rs.status >= 500) {
			lost = true;
		} else {
			hub_body_message(rs.body.data, rs.body.len, msg, sizeof msg);
			if (rs.status == 401 || rs.status == 403 || !try_again_msg(msg)) {
				rc = hub_status_error(j->c, &rq, &rs, err);
				goto out;
			}
			lost = true;
		}
		if (a + 1 >= HUB_TRIES) {
			if (rc)
				rc = lynn_errf(err, -LYNN_ENET, "hub: POST %s: %s (after %d tries)", path,
					       rs.curl_msg, HUB_TRIES);
			else if (rs.status >= 200 && rs.status < 300) {
				if (err)
					*err = e2;
				rc = hub_reply_error(err, e2.code ? e2.code : -LYNN_EIO);
			} else
				rc = hub_status_error(j->c, &rq, &rs, err);
			goto out;
		}
		rc = 0;
		if (lost) {
			/* the reply may have been lost after the hub applied the
			 * commit: read the state back before sending it again */
			hub_backoff(j->c, a, rs.status ? rs.retry_after : -1);
			rc = ops->landed(j, idx, n, &landed, err);
			if (rc)
				goto out;
			if (landed) {
				lynn_log_info("push: the commit of %zu file(s) landed (reply was lost)",
					      n);
				j->res->n_commits++;
				goto out;
			}
			lynn_log_warn("push: commit %s did not land; sending it again (%d/%d)", path,
				      a + 2, HUB_TRIES);
		} else {
			lynn_log_warn("push: commit %s: HTTP 429; retrying (%d/%d)", path, a + 2,
				      HUB_TRIES);
			hub_backoff(j->c, a, rs.retry_after);
		}
	}
out:
	lynn_buf_release(&body);
	hub_resp_release(&rs);
	return rc;
}

int hub_commit_all(struct hub_job *j, const struct hub_commit_ops *ops, struct lynn_err *err)
{
	size_t *idx = calloc(j->n ? j->n : 1, sizeof *idx), n = 0, start = 0;
	bool first = true;
	int rc = 0;
	if (!idx)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
	for (size_t i = 0; i < j->n; i++)
		if (!j->files[i].unchanged)
			idx[n++] = i;
	while (start < n || (first && j->ms_add_config)) {
		size_t end = start;
		uint64_t inline_bytes = 0;
		size_t cap = ops->max_files - (first && j->ms_add_config ? 1 : 0);
		while (end < n && end - start < cap) {
			const struct hub_file *f = &j->files[idx[end]];
			if (!f->lfs) {
				if (end > start && inline_bytes + f->size > ops->max_inline)
					break;
				inline_bytes += f->size;
			}
			end++;
		}
		rc = commit_batch(j, ops, idx + start, end - start, first, err);
		if (rc)
			break;
		first = false;
		start = end;
	}
	free(idx);
	return rc;
}

int hub_push_finish(struct hub_job *j, int (*lfs)(struct hub_job *j, struct lynn_err *err),
		    const char *api, const struct hub_commit_ops *ops, struct lynn_err *err)
{
	struct hub_commit_ops o = *ops;
	char *url = NULL;
	int rc;

	if (j->res->n_unchanged)
		lynn_log_info("push: %zu file(s) already in the repo", j->res->n_unchanged);
	rc = lfs(j, err);
	if (!rc)
		rc = hub_upload_blobs(j, err);
	if (rc)
		return rc;
	if (asprintf(&url, "%s/%s/%s/%s/commit/%s", j->base, api, j->owner, j->name, j->rev_esc) <
	    0)
		return lynn_errf(err, -LYNN_ENOMEM, "hub: out of memory");
	o.url = url;
	rc = hub_commit_all(j, &o, err);
	free(url);
	return rc;
}
