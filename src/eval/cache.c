/*
 * cache.c - append-only zstd-framed JSONL (see cache.h for the contract).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "lynn/cache.h"
#include "lynn/fs.h"
#include "lynn/log.h"
#include "lynn/progress.h"
#include "lynn/sha256.h"

#define CACHE_MAX_FILE (4ull << 30)
#define CACHE_MAX_RECORD (64u << 20)
#define CACHE_SYNC_S 1.0

struct entry {
	const char *key; /* borrowed from rec */
	cJSON *rec;
};

struct lynn_cache {
	char *path;
	int fd;
	struct entry *e;
	size_t n, cap; /* open-addressing table, cap a power of two */
	size_t n_loaded, n_dropped;
	double t_sync; /* last fdatasync (lynn_now) */
	bool dirty;
};

static size_t hash_key(const char *k)
{
	size_t h = 1469598103934665603ull;
	for (; *k; k++)
		h = (h ^ (unsigned char)*k) * 1099511628211ull;
	return h;
}

static int table_put(struct lynn_cache *c, cJSON *rec, const char *key)
{
	size_t i;
	if ((c->n + 1) * 2 > c->cap) {
		size_t ncap = c->cap ? c->cap * 2 : 64;
		struct entry *ne = calloc(ncap, sizeof(*ne));
		if (!ne)
			return -LYNN_ENOMEM;
		for (size_t k = 0; k < c->cap; k++) {
			if (!c->e[k].key)
				continue;
			for (i = hash_key(c->e[k].key) & (ncap - 1); ne[i].key; i = (i + 1) & (ncap - 1))
				;
			ne[i] = c->e[k];
		}
		free(c->e);
		c->e = ne;
		c->cap = ncap;
	}
	for (i = hash_key(key) & (c->cap - 1); c->e[i].key; i = (i + 1) & (c->cap - 1)) {
		if (!strcmp(c->e[i].key, key)) {
			cJSON_Delete(c->e[i].rec);
			c->e[i].rec = rec;
			c->e[i].key = key;
			return 0;
		}
	}
	c->e[i].key = key;
	c->e[i].rec = rec;
	c->n++;
	return 0;
}

const cJSON *lynn_cache_get(const struct lynn_cache *c, const char *key)
{
	if (!c || !c->cap)
		return NULL;
	for (size_t i = hash_key(key) & (c->cap - 1); c->e[i].key; i = (i + 1) & (c->cap - 1))
		if (!strcmp(c->e[i].key, key))
			return c->e[i].rec;
	return NULL;
}

static int add_record(struct lynn_cache *c, cJSON *rec)
{
	cJSON *k = cJSON_GetObjectItemCaseSensitive(rec, "key");
	if (!cJSON_IsString(k)) {
		cJSON_Delete(rec);
		return 1; /* not ours: skip */
	}
	if (table_put(c, rec, k->valuestring)) {
		cJSON_Delete(rec);
		return -LYNN_ENOMEM;
	}
	return 0;
}

/* Read every complete frame; return the offset after the last good one. */
static int load(struct lynn_cache *c, size_t *good_end, struct lynn_err *err)
{
	char *data = NULL;
	size_t len = 0, off = 0;
	int rc;

	*good_end = 0;
	if (!lynn_file_exists(c->path))
		return 0;
	rc = lynn_file_read(c->path, CACHE_MAX_FILE, &data, &len, err);
	if (rc)
		return rc;
	while (off < len) {
		size_t fsz = ZSTD_findFrameCompressedSize(data + off, len - off);
		unsigned long long usz;
		char *line;
		cJSON *rec;
		if (ZSTD_isError(fsz))
			break; /* torn tail */
		usz = ZSTD_getFrameContentSize(data + off, fsz);
		if (usz == ZSTD_CONTENTSIZE_ERROR || usz == ZSTD_CONTENTSIZE_UNKNOWN ||
		    usz > CACHE_MAX_RECORD)
			break;
		line = malloc(usz + 1);
		if (!line) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "cache: out of memory reading '%s'", c->path);
			goto out;
		}
		if (ZSTD_isError(ZSTD_decompress(line, usz, data + off, fsz))) {
			free(line);
			break;
		}
		line[usz] = 0;
		rec = cJSON_ParseWithLength(line, usz);
		free(line);
		if (!rec)
			break;
		rc = add_record(c, rec);
		if (rc < 0) {
			rc = lynn_errf(err, rc, "cache: out of memory reading '%s'", c->path);
			goto out;
		}
		rc = 0;
		c->n_loaded++;
		off += fsz;
		*good_end = off;
	}
	if (off < len) {
		c->n_dropped++;
		lynn_log_warn("cache: '%s': dropping a torn record at byte %zu (%zu bytes)", c->path, off,
			      len - off);
	}
out:
	free(data);
	return rc;
}

struct lynn_cache *lynn_cache_open(const char *path, bool resume, struct lynn_err *err)
{
	struct lynn_cache *c = calloc(1, sizeof(*c));
	size_t good_end = 0;

	if (!c || !(c->path = strdup(path))) {
		free(c);
		lynn_errf(err, -LYNN_ENOMEM, "cache: out of memory");
		return NULL;
	}
	c->fd = -1;
	c->t_sync = lynn_now();
	if (resume && load(c, &good_end, err))
		goto fail;
	c->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (c->fd < 0) {
		lynn_errf(err, -LYNN_EIO, "cache: cannot open '%s': %s", path, strerror(errno));
		goto fail;
	}
	if (ftruncate(c->fd, (off_t)good_end) || lseek(c->fd, 0, SEEK_END) < 0) {
		lynn_errf(err, -LYNN_EIO, "cache: '%s': %s", path, strerror(errno));
		goto fail;
	}
	return c;
fail:
	lynn_cache_close(c);
	return NULL;
}

void lynn_cache_close(struct lynn_cache *c)
{
	if (!c)
		return;
	if (c->fd >= 0) {
		if (c->dirty)
			fdatasync(c->fd);
		close(c->fd);
	}
	for (size_t i = 0; i < c->cap; i++)
		cJSON_Delete(c->e[i].rec);
	free(c->e);
	free(c->path);
	free(c);
}

int lynn_cache_put(struct lynn_cache *c, const cJSON *rec, struct lynn_err *err)
{
	char *line = cJSON_PrintUnformatted(rec);
	size_t n, bound, csz, done = 0;
	void *frame = NULL;
	cJSON *copy = NULL;
	int rc = 0;

	if (!line)
		return lynn_errf(err, -LYNN_ENOMEM, "cache: out of memory");
	if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(rec, "key"))) {
		rc = lynn_errf(err, -LYNN_EINVAL, "cache: record without a key");
		goto out;
	}
	n = strlen(line);
	line[n] = '\n'; /* the frame holds "json\n" (the NUL is overwritten) */
	bound = ZSTD_compressBound(n + 1);
	frame = malloc(bound);
	if (!frame) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "cache: out of memory");
		goto out;
	}
	csz = ZSTD_compress(frame, bound, line, n + 1, 3);
	if (ZSTD_isError(csz)) {
		rc = lynn_errf(err, -LYNN_EIO, "cache: zstd: %s", ZSTD_getErrorName(csz));
		goto out;
	}
	while (done < csz) {
		ssize_t w = write(c->fd, (char *)frame + done, csz - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			rc = lynn_errf(err, -LYNN_EIO, "cache: write '%s': %s", c->path, strerror(errno));
			goto out;
		}
		done += (size_t)w;
	}
	/* The record is in the kernel once write() returns, so killing lynn
	 * loses nothing; fdatasync (for power loss) runs at most every
	 * CACHE_SYNC_S and at close, not per record: it would cost more than
	 * the requests on a fast endpoint. */
	c->dirty = true;
	if (lynn_now() - c->t_sync >= CACHE_SYNC_S) {
		if (fdatasync(c->fd)) {
			rc = lynn_errf(err, -LYNN_EIO, "cache: sync '%s': %s", c->path, strerror(errno));
			goto out;
		}
		c->t_sync = lynn_now();
		c->dirty = false;
	}
	copy = cJSON_Duplicate(rec, 1);
	if (!copy || add_record(c, copy) < 0)
		rc = lynn_errf(err, -LYNN_ENOMEM, "cache: out of memory");
out:
	free(frame);
	free(line);
	return rc;
}

size_t lynn_cache_n_loaded(const struct lynn_cache *c)
{
	return c->n_loaded;
}

size_t lynn_cache_n_dropped(const struct lynn_cache *c)
{
	return c->n_dropped;
}

void lynn_cache_key(char key[65], const char *model, const char *adapter, const char *prompt,
		    const cJSON *tools, int max_tokens, bool think)
{
	cJSON *a = cJSON_CreateArray();
	uint8_t d[32];
	struct lynn_sha256 h = { 0 };
	char *s;

	cJSON_AddItemToArray(a, cJSON_CreateString(model ? model : ""));
	cJSON_AddItemToArray(a, cJSON_CreateString(adapter ? adapter : ""));
	cJSON_AddItemToArray(a, cJSON_CreateString(prompt ? prompt : ""));
	cJSON_AddItemToArray(a, tools ? cJSON_Duplicate(tools, 1) : cJSON_CreateNull());
	cJSON_AddItemToArray(a, cJSON_CreateNumber(max_tokens));
	cJSON_AddItemToArray(a, cJSON_CreateNumber(0));
	cJSON_AddItemToArray(a, cJSON_CreateBool(think));
	s = cJSON_PrintUnformatted(a);
	cJSON_Delete(a);
	memset(d, 0, sizeof(d));
	if (s && !lynn_sha256_init(&h, NULL) && !lynn_sha256_update(&h, s, strlen(s), NULL))
		lynn_sha256_final(&h, d, NULL);
	else
		lynn_sha256_release(&h);
	free(s);
	lynn_sha256_hex(d, key);
}
