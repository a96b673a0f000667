/*
 * st_writer.c - streaming safetensors writer with Hugging Face sharding
 * (include/lynn/st.h).
 *
 * Tensors are declared up front; the first write plans the shards much as
 * huggingface_hub's split_state_dict_into_shards does: in declaration order,
 * a new shard when the next tensor would push the current one past
 * max_shard_bytes. Two differences, both still valid checkpoints: a tensor
 * larger than the limit closes the current shard and stands alone (the hub
 * files it separately and keeps filling the current shard), and sizes are a
 * tensor's own bytes (the hub counts a view as its whole storage). Each shard is laid
 * out as the reference writer's prepare() does (safetensors tensor.rs):
 * tensors sorted by dtype, widest enum rank first, then by name, packed
 * back-to-back, the header JSON padded with spaces to a multiple of 8 bytes
 * so data starts 8-aligned. The caller still streams in declaration order:
 * each tensor's bytes go to its planned offset (a seek per tensor), so the
 * files are byte-identical to what Hugging Face writes for the same tensors
 * and metadata. Each shard is committed atomically as
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
	int64_t *order;     /* decl indices by shard, then file order */
	int64_t *shard_first; /* n_shards + 1 starts into order */
	uint64_t data_start; /* 8 + header length of the open shard */
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

/* Rank of a dtype in the reference writer's Dtype enum (safetensors
 * tensor.rs: BOOL F4 F6_E2M3 F6_E3M2 U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 ... I16
 * U16 F16 BF16 I32 U32 F32 C64 F64 I64 U64). */
static int dtype_rank(enum lynn_dtype dt)
{
	static const int rank[LYNN_DTYPE_COUNT] = {
		[LYNN_DTYPE_BOOL] = 0, [LYNN_DTYPE_U8] = 4,       [LYNN_DTYPE_I8] = 5,
		[LYNN_DTYPE_F8_E5M2] = 6, [LYNN_DTYPE_F8_E4M3] = 7, [LYNN_DTYPE_I16] = 11,
		[LYNN_DTYPE_U16] = 12, [LYNN_DTYPE_F16] = 13,     [LYNN_DTYPE_BF16] = 14,
		[LYNN_DTYPE_I32] = 15, [LYNN_DTYPE_U32] = 16,     [LYNN_DTYPE_F32] = 17,
		[LYNN_DTYPE_F64] = 19, [LYNN_DTYPE_I64] = 20,     [LYNN_DTYPE_U64] = 21,
	};
	return rank[dt];
}

struct ord {
	int shard, rank;
	const char *name;
	int64_t i;
};

/* The reference writer's file order: shard, then dtype descending, then name. */
static int cmp_file_order(const void *a, const void *b)
{
	const struct ord *x = a, *y = b;
	if (x->shard != y->shard)
		return x->shard < y->shard ? -1 : 1;
	if (x->rank != y->rank)
		return y->rank - x->rank;
	return strcmp(x->name, y->name);
}

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
		size += t->nbytes;
	}
	w->n_shards = shard + 1;
	w->shard_names = calloc((size_t)w->n_shards, sizeof *w->shard_names);
	w->order = calloc((size_t)w->n + 1, sizeof *w->order);
	w->shard_first = calloc((size_t)w->n_shards + 1, sizeof *w->shard_first);
	if (!w->shard_names || !w->order || !w->shard_first)
		return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
	{
		struct ord *o = calloc((size_t)w->n + 1, sizeof *o);
		if (!o)
			return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
		for (int64_t i = 0; i < w->n; i++)
			o[i] = (struct ord){ w->d[i].shard, dtype_rank(w->d[i].dtype), w->d[i].name,
					     i };
		qsort(o, (size_t)w->n, sizeof *o, cmp_file_order);
		for (int64_t i = 0; i < w->n; i++)
			w->order[i] = o[i].i;
		free(o);
	}
	size = 0;
	for (int64_t k = 0, s = -1; k < w->n; k++) {
		struct decl *t = &w->d[w->order[k]];
		while (s < t->shard) {
			w->shard_first[++s] = k;
			size = 0;
		}
		t->off = size;
		size += t->nbytes;
	}
	w->shard_first[w->n_shards] = w->n; /* the greedy split leaves no shard empty */
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
	for (int64_t k = w->shard_first[s]; k < w->shard_first[s + 1] && !rc; k++) {
		const struct decl *t = &w->d[w->order[k]];
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
	w->data_start = 8 + b.len;
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
		if (w->cur_done == 0 &&
		    fseeko(w->af.f, (off_t)(w->data_start + w->d[w->cur].off), SEEK_SET) < 0) {
			rc = lynn_errf(err, -LYNN_EIO, "st: '%s': seek failed: %s",
				       w->af.final_path, strerror(errno));
			break;
		}
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
	free(w->order);
	free(w->shard_first);
	free(w->dir);
	free(w);
}
