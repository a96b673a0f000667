/*
 * st_writer.c - streaming safetensors writer with Hugging Face sharding
 * (include/lynn/st.h).
 *
 * Tensors are declared up front; the first write plans the shards the way
 * huggingface_hub's split_state_dict_into_shards does (in order, a new shard
 * when the next tensor would push the current one past max_shard_bytes; a
 * tensor larger than the limit gets a shard of its own). Each shard's header
 * is the JSON object padded with spaces to a multiple of 8 bytes (as the
 * reference writer's prepare(), so data starts 8-aligned); tensor bytes follow
 * back-to-back in declaration order. Each shard is committed atomically as
 * soon as its last tensor is complete, the index last; an unfinished writer
 * removes what it committed when freed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "formats/st_internal.h"
#include "lynn/buf.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/st.h"

struct decl {
	char *name;
	enum lynn_dtype dtype;
	int n_dims;
	int64_t shape[LYNN_MAX_DIMS];
	uint64_t nbytes;
	int shard;
	uint64_t off; /* within its shard's buffer */
};

struct lynn_st_writer {
	char *dir;
	uint64_t max_shard;
	struct decl *d;
	int64_t n, cap;
	struct lynn_name_index ix;
	int n_meta;
	char **mkeys, **mvals;
	bool planned, finished, failed;
	int n_shards;
	char **shard_names; /* file names inside dir */
	int64_t cur;        /* tensor being written */
	uint64_t cur_done;  /* its bytes so far */
	int open_shard;     /* shard whose afile is open, or -1 */
	struct lynn_afile af;
	char **committed;
	int n_committed;
};

static const char *decl_name_of(const void *ctx, int64_t i)
{
	return (*(struct decl *const *)ctx)[i].name;
}

struct lynn_st_writer *lynn_st_writer_create(const char *dir, uint64_t max_shard_bytes,
					     struct lynn_err *err)
{
	struct lynn_st_writer *w = calloc(1, sizeof *w);

	if (!w || !(w->dir = strdup(dir))) {
		free(w);
		lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
		return NULL;
	}
	if (!lynn_dir_exists(dir) && mkdir(dir, 0777) < 0) {
		lynn_errf(err, -LYNN_EIO, "st: '%s': cannot create the folder: %s", dir,
			  strerror(errno));
		free(w->dir);
		free(w);
		return NULL;
	}
	w->max_shard = max_shard_bytes;
	w->open_shard = -1;
	return w;
}

int lynn_st_writer_set_metadata(struct lynn_st_writer *w, const char *key, const char *value,
				struct lynn_err *err)
{
	char **nk, **nv;

	if (w->planned)
		return lynn_errf(err, -LYNN_EINVAL, "st: metadata '%s' set after writing began", key);
	if (lynn_utf8_check((const uint8_t *)key, strlen(key)) != strlen(key) ||
	    lynn_utf8_check((const uint8_t *)value, strlen(value)) != strlen(value))
		return lynn_errf(err, -LYNN_EINVAL, "st: metadata '%s' is not valid UTF-8", key);
	for (int i = 0; i < w->n_meta; i++)
		if (!strcmp(w->mkeys[i], key)) {
			char *v = strdup(value);
			if (!v)
				return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
			free(w->mvals[i]);
			w->mvals[i] = v;
			return 0;
		}
	nk = realloc(w->mkeys, ((size_t)w->n_meta + 1) * sizeof *nk);
	if (nk)
		w->mkeys = nk;
	nv = realloc(w->mvals, ((size_t)w->n_meta + 1) * sizeof *nv);
	if (nv)
		w->mvals = nv;
	if (!nk || !nv)
		return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
	w->mkeys[w->n_meta] = strdup(key);
	w->mvals[w->n_meta] = strdup(value);
	w->n_meta++;
	if (!w->mkeys[w->n_meta - 1] || !w->mvals[w->n_meta - 1])
		return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
	return 0;
}

static int grow_index(struct lynn_st_writer *w, struct lynn_err *err)
{
	lynn_name_index_release(&w->ix);
	if (lynn_name_index_init(&w->ix, (size_t)w->cap, decl_name_of, &w->d) < 0)
		return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
	for (int64_t i = 0; i < w->n; i++)
		lynn_name_index_put(&w->ix, i);
	return 0;
}

int lynn_st_writer_declare(struct lynn_st_writer *w, const char *name, enum lynn_dtype dtype,
			   int n_dims, const int64_t *shape, struct lynn_err *err)
{
	struct decl *t;
	uint64_t n = 1;
	size_t esz = lynn_dtype_size(dtype);

	if (w->planned)
		return lynn_errf(err, -LYNN_EINVAL, "st: tensor '%s' declared after writing began",
				 name);
	if (!esz)
		return lynn_errf(err, -LYNN_EINVAL, "st: tensor '%s': invalid dtype %d", name,
				 (int)dtype);
	if (!name[0] || !strcmp(name, "__metadata__") ||
	    lynn_utf8_check((const uint8_t *)name, strlen(name)) != strlen(name))
		return lynn_errf(err, -LYNN_EINVAL, "st: tensor name '%s' is not allowed", name);
	if (n_dims < 0 || n_dims > LYNN_MAX_DIMS)
		return lynn_errf(err, -LYNN_EINVAL, "st: tensor '%s': %d dimensions", name, n_dims);
	for (int i = 0; i < n_dims; i++) {
		if (shape[i] < 0 || (shape[i] && n > (uint64_t)INT64_MAX / (uint64_t)shape[i]))
			return lynn_errf(err, -LYNN_EINVAL, "st: tensor '%s': bad shape", name);
		n *= (uint64_t)shape[i];
	}
	if (n > ((uint64_t)1 << 53) / esz)
		return lynn_errf(err, -LYNN_EINVAL, "st: tensor '%s': too large", name);
	if (w->n == w->cap) {
		int64_t nc = w->cap ? 2 * w->cap : 64;
		struct decl *nd = realloc(w->d, (size_t)nc * sizeof *nd);
		if (!nd)
			return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
		w->d = nd;
		w->cap = nc;
		if (grow_index(w, err))
			return -LYNN_ENOMEM;
	}
	t = &w->d[w->n];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	if (!t->name)
		return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
	if (lynn_name_index_put(&w->ix, w->n) >= 0) {
		free(t->name);
		return lynn_errf(err, -LYNN_EINVAL, "st: tensor '%s' declared twice", name);
	}
	t->dtype = dtype;
	t->n_dims = n_dims;
	for (int i = 0; i < n_dims; i++)
		t->shape[i] = shape[i];
	t->nbytes = n * esz;
	w->n++;
	return 0;
}

/* ===== planning and headers ===== */

static int plan(struct lynn_st_writer *w, struct lynn_err *err)
{
	uint64_t size = 0;
	int shard = 0;

	for (int64_t i = 0; i < w->n; i++) {
		struct decl *t = &w->d[i];
		if (w->max_shard && size > 0 && size + t->nbytes > w->max_shard) {
			shard++;
			size = 0;
		}
		t->shard = shard;
		t->off = size;
		size += t->nbytes;
	}
	w->n_shards = shard + 1;
	w->shard_names = calloc((size_t)w->n_shards, sizeof *w->shard_names);
	if (!w->shard_names)
		return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
	for (int s = 0; s < w->n_shards; s++) {
		char buf[64];
		if (w->n_shards == 1)
			snprintf(buf, sizeof buf, "model.safetensors");
		else
			snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", s + 1,
				 w->n_shards);
		w->shard_names[s] = strdup(buf);
		if (!w->shard_names[s])
			return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
	}
	w->planned = true;
	return 0;
}

static int put_json_str(struct lynn_buf *b, const char *s)
{
	int rc = lynn_buf_putc(b, '"');
	for (; *s && !rc; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			rc = lynn_buf_printf(b, "\\%c", c);
		else if (c < 0x20)
			rc = lynn_buf_printf(b, "\\u%04x", c);
		else
			rc = lynn_buf_putc(b, (char)c);
	}
	return rc ? rc : lynn_buf_putc(b, '"');
}

/* The header of shard s: JSON object, padded with spaces to a multiple of 8. */
static int shard_header(struct lynn_st_writer *w, int s, struct lynn_buf *b)
{
	int rc = lynn_buf_putc(b, '{');
	bool first = true;

	if (w->n_meta && !rc) {
		rc = lynn_buf_puts(b, "\"__metadata__\":{");
		for (int i = 0; i < w->n_meta && !rc; i++) {
			if (i)
				rc = lynn_buf_putc(b, ',');
			rc = rc ? rc : put_json_str(b, w->mkeys[i]);
			rc = rc ? rc : lynn_buf_putc(b, ':');
			rc = rc ? rc : put_json_str(b, w->mvals[i]);
		}
		rc = rc ? rc : lynn_buf_putc(b, '}');
		first = false;
	}
	for (int64_t i = 0; i < w->n && !rc; i++) {
		const struct decl *t = &w->d[i];
		if (t->shard != s)
			continue;
		if (!first)
			rc = lynn_buf_putc(b, ',');
		first = false;
		rc = rc ? rc : put_json_str(b, t->name);
		rc = rc ? rc : lynn_buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[",
					       lynn_dtype_name(t->dtype));
		for (int d = 0; d < t->n_dims && !rc; d++)
			rc = lynn_buf_printf(b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
		rc = rc ? rc : lynn_buf_printf(b, "],\"data_offsets\":[%llu,%llu]}",
					       (unsigned long long)t->off,
					       (unsigned long long)(t->off + t->nbytes));
	}
	rc = rc ? rc : lynn_buf_putc(b, '}');
	while (!rc && b->len % 8)
		rc = lynn_buf_putc(b, ' ');
	return rc;
}

static int open_shard(struct lynn_st_writer *w, int s, struct lynn_err *err)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	char *path = lynn_path_join(w->dir, w->shard_names[s]);
	uint8_t len8[8];
	int rc = 0;

	if (!path || shard_header(w, s, &b)) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
		goto out;
	}
	rc = lynn_afile_open(&w->af, path, err);
	if (rc)
		goto out;
	w->open_shard = s;
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)b.len >> (8 * i));
	if (fwrite(len8, 1, 8, w->af.f) != 8 || fwrite(b.data, 1, b.len, w->af.f) != b.len)
		rc = lynn_errf(err, -LYNN_EIO, "st: '%s': write failed: %s", path, strerror(errno));
out:
	lynn_buf_release(&b);
	free(path);
	return rc;
}

static int commit_shard(struct lynn_st_writer *w, struct lynn_err *err)
{
	char *final = strdup(w->af.final_path);
	char **nc;
	int rc;

	w->open_shard = -1;
	rc = lynn_afile_commit(&w->af, err);
	if (rc || !final) {
		free(final);
		return rc ? rc : lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
	}
	nc = realloc(w->committed, ((size_t)w->n_committed + 1) * sizeof *nc);
	if (!nc) {
		unlink(final);
		free(final);
		return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
	}
	w->committed = nc;
	w->committed[w->n_committed++] = final;
	return 0;
}

/* Move past complete tensors, opening and committing shards on the way. */
static int advance(struct lynn_st_writer *w, struct lynn_err *err)
{
	for (;;) {
		int rc;
		if (w->cur < w->n && w->open_shard != w->d[w->cur].shard) {
			rc = open_shard(w, w->d[w->cur].shard, err);
			if (rc)
				return rc;
		}
		if (w->cur >= w->n || w->cur_done < w->d[w->cur].nbytes)
			return 0;
		w->cur++;
		w->cur_done = 0;
		if (w->cur == w->n || w->d[w->cur].shard != w->d[w->cur - 1].shard) {
			rc = commit_shard(w, err);
			if (rc)
				return rc;
		}
	}
}

static int start(struct lynn_st_writer *w, struct lynn_err *err)
{
	int rc;
	if (w->failed)
		return lynn_errf(err, -LYNN_EINVAL, "st: writer for '%s' already failed", w->dir);
	if (w->planned)
		return 0;
	rc = plan(w, err);
	if (!rc && w->n == 0) { /* an empty checkpoint: one file with "{}" */
		rc = open_shard(w, 0, err);
		rc = rc ? rc : commit_shard(w, err);
	}
	return rc;
}

int lynn_st_writer_write(struct lynn_st_writer *w, const void *data, size_t len,
			 struct lynn_err *err)
{
	const uint8_t *p = data;
	int rc = start(w, err);

	while (!rc) {
		uint64_t room;
		size_t k;
		rc = advance(w, err);
		if (rc || !len)
			break;
		if (w->cur >= w->n) {
			rc = lynn_errf(err, -LYNN_EINVAL,
				       "st: %zu bytes written past the last declared tensor", len);
			break;
		}
		room = w->d[w->cur].nbytes - w->cur_done;
		k = room < len ? (size_t)room : len;
		if (fwrite(p, 1, k, w->af.f) != k) {
			rc = lynn_errf(err, -LYNN_EIO, "st: '%s': write failed: %s",
				       w->af.final_path, strerror(errno));
			break;
		}
		w->cur_done += k;
		p += k;
		len -= k;
	}
	if (rc)
		w->failed = true;
	return rc;
}

static int cmp_decl_name(const void *a, const void *b)
{
	return strcmp((*(struct decl *const *)a)->name, (*(struct decl *const *)b)->name);
}

static int write_index(struct lynn_st_writer *w, struct lynn_err *err)
{
	cJSON *root = cJSON_CreateObject(), *meta, *wm;
	struct decl **sorted = NULL;
	uint64_t total = 0;
	char *path = NULL;
	int rc = 0;

	meta = cJSON_AddObjectToObject(root, "metadata");
	wm = cJSON_AddObjectToObject(root, "weight_map");
	sorted = calloc((size_t)w->n + 1, sizeof *sorted);
	path = lynn_path_join(w->dir, "model.safetensors.index.json");
	if (!root || !meta || !wm || !sorted || !path) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
		goto out;
	}
	for (int64_t i = 0; i < w->n; i++) {
		total += w->d[i].nbytes;
		sorted[i] = &w->d[i];
	}
	/* huggingface_hub writes the weight_map sorted by name */
	qsort(sorted, (size_t)w->n, sizeof *sorted, cmp_decl_name);
	if (!cJSON_AddNumberToObject(meta, "total_size", (double)total)) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
		goto out;
	}
	for (int64_t i = 0; i < w->n; i++)
		if (!cJSON_AddStringToObject(wm, sorted[i]->name,
					     w->shard_names[sorted[i]->shard])) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
			goto out;
		}
	rc = lynn_json_write(path, root, err);
out:
	free(path);
	free(sorted);
	cJSON_Delete(root);
	return rc;
}

int lynn_st_writer_finish(struct lynn_st_writer *w, struct lynn_err *err)
{
	int rc = start(w, err);

	rc = rc ? rc : advance(w, err);
	if (!rc && w->cur < w->n)
		rc = lynn_errf(err, -LYNN_EINVAL, "st: tensor '%s' got %llu of its %llu bytes",
			       w->d[w->cur].name, (unsigned long long)w->cur_done,
			       (unsigned long long)w->d[w->cur].nbytes);
	if (!rc && w->n_shards > 1)
		rc = write_index(w, err);
	if (rc)
		w->failed = true;
	else
		w->finished = true;
	return rc;
}

void lynn_st_writer_free(struct lynn_st_writer *w)
{
	if (!w)
		return;
	if (w->open_shard >= 0)
		lynn_afile_abort(&w->af);
	for (int i = 0; i < w->n_committed; i++) {
		if (!w->finished)
			unlink(w->committed[i]);
		free(w->committed[i]);
	}
	free(w->committed);
	for (int64_t i = 0; i < w->n; i++)
		free(w->d[i].name);
	free(w->d);
	lynn_name_index_release(&w->ix);
	for (int i = 0; i < w->n_meta; i++) {
		free(w->mkeys[i]);
		free(w->mvals[i]);
	}
	free(w->mkeys);
	free(w->mvals);
	if (w->shard_names)
		for (int s = 0; s < w->n_shards; s++)
			free(w->shard_names[s]);
	free(w->shard_names);
	free(w->dir);
	free(w);
}
