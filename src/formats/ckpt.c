/*
 * ckpt.c - checkpoints: one .safetensors file, or a model folder
 * (include/lynn/st.h).
 *
 * Folder rules follow transformers' loader: `model.safetensors` wins when
 * present; else `model.safetensors.index.json` ({"metadata": {...},
 * "weight_map": {tensor: shard}}, huggingface_hub serialization/_base.py)
 * and every shard it names. Index and shards must agree both ways (SPEC §3
 * gate 3): every named shard exists and is valid, every mapped tensor is in
 * its shard, every shard tensor is mapped to that shard (so none is in two
 * shards). total_size is not checked: NVIDIA's tools write file sizes there.
 * A folder with neither file but other *.safetensors (e.g. layers-N.*) opens
 * all of them, in name order, and requires every name to be unique.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>

#include "formats/st_internal.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/st.h"

struct lynn_ckpt {
	char *dir;
	char *index_path;
	int n_files;
	struct lynn_st_file **files;
	int64_t n;
	const struct lynn_tensor **tensors; /* file order, then data order */
	struct lynn_name_index index;
};

static const char *ptr_name_of(const void *ctx, int64_t i)
{
	return ((const struct lynn_tensor *const *)ctx)[i]->name;
}

static const char *str_name_of(const void *ctx, int64_t i)
{
	return ((const char *const *)ctx)[i];
}

static bool ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

static int add_file(struct lynn_ckpt *c, const char *path, struct lynn_err *err)
{
	struct lynn_st_file **nf = realloc(c->files, ((size_t)c->n_files + 1) * sizeof *nf);
	if (!nf)
		return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
	c->files = nf;
	c->files[c->n_files] = lynn_st_open(path, err);
	if (!c->files[c->n_files])
		return err ? err->code : -LYNN_EFORMAT;
	c->n_files++;
	return 0;
}

/* Gather every tensor of every file and index them; names must be unique. */
static int build_index(struct lynn_ckpt *c, struct lynn_err *err)
{
	int64_t total = 0, k = 0;

	for (int i = 0; i < c->n_files; i++)
		total += lynn_st_n_tensors(c->files[i]);
	c->tensors = calloc((size_t)total + 1, sizeof *c->tensors);
	if (!c->tensors ||
	    lynn_name_index_init(&c->index, (size_t)total, ptr_name_of, c->tensors) < 0)
		return lynn_errf(err, -LYNN_ENOMEM, "st: out of memory for %lld tensors",
				 (long long)total);
	for (int i = 0; i < c->n_files; i++)
		for (int64_t j = 0; j < lynn_st_n_tensors(c->files[i]); j++) {
			int64_t prev;
			c->tensors[k] = lynn_st_tensor(c->files[i], j);
			prev = lynn_name_index_put(&c->index, k);
			if (prev >= 0)
				return lynn_errf(err, -LYNN_EFORMAT,
						 "st: tensor '%s' is in both '%s' and '%s'",
						 c->tensors[k]->name, c->tensors[prev]->file,
						 c->tensors[k]->file);
			k++;
		}
	c->n = k;
	return 0;
}

/* A shard name from an index must be a plain file name in the folder. */
static bool safe_shard_name(const char *s)
{
	return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int open_index(struct lynn_ckpt *c, struct lynn_err *err)
{
	const char *ip = c->index_path;
	cJSON *root = lynn_json_load(ip, LYNN_JSON_MAX_SIZE, err);
	const cJSON *wm, *e;
	char **shards = NULL;
	int n_shards = 0, rc = 0;

	if (!root)
		return err ? err->code : -LYNN_EFORMAT;
	wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
	if (!cJSON_IsObject(root) || !cJSON_IsObject(wm)) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "st: '%s': missing object field 'weight_map'", ip);
		goto out;
	}
	/* the distinct shard names, in order of first appearance */
	cJSON_ArrayForEach(e, wm) {
		bool seen = false;
		if (!cJSON_IsString(e)) {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "st: '%s': weight_map entry '%s' is not a string", ip, e->string);
			goto out;
		}
		if (!safe_shard_name(e->valuestring)) {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "st: '%s': tensor '%s' maps to '%s', not a file in the folder",
				       ip, e->string, e->valuestring);
			goto out;
		}
		for (int i = n_shards - 1; i >= 0 && !seen; i--)
			seen = !strcmp(shards[i], e->valuestring);
		if (!seen) {
			char **ns = realloc(shards, ((size_t)n_shards + 1) * sizeof *ns);
			if (!ns) {
				rc = lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
				goto out;
			}
			shards = ns;
			shards[n_shards++] = e->valuestring;
		}
	}
	if (!n_shards) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "st: '%s': weight_map is empty", ip);
		goto out;
	}
	qsort(shards, (size_t)n_shards, sizeof *shards, cmp_str); /* files in name order */
	for (int i = 0; i < n_shards; i++) {
		char *sp = lynn_path_join(c->dir, shards[i]);
		if (!sp) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
			goto out;
		}
		if (!lynn_file_exists(sp)) {
			rc = lynn_errf(err, -LYNN_ENOTFOUND,
				       "st: '%s': names shard '%s', which is missing", ip, shards[i]);
			free(sp);
			goto out;
		}
		rc = add_file(c, sp, err);
		free(sp);
		if (rc)
			goto out;
	}
	rc = build_index(c, err);
	if (rc)
		goto out;
	/* index -> shards: each mapped tensor is in the shard it names */
	cJSON_ArrayForEach(e, wm) {
		const struct lynn_tensor *t = lynn_ckpt_find(c, e->string);
		if (!t) {
			rc = lynn_errf(err, -LYNN_ENOTFOUND,
				       "st: '%s': tensor '%s' is mapped to '%s' but no shard has it",
				       ip, e->string, e->valuestring);
			goto out;
		}
		if (!ends_with(t->file, e->valuestring) ||
		    t->file[strlen(t->file) - strlen(e->valuestring) - 1] != '/') {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "st: '%s': tensor '%s' is mapped to '%s' but is in '%s'", ip,
				       e->string, e->valuestring, t->file);
			goto out;
		}
	}
	/* shards -> index: every tensor is mapped (and no key is repeated) */
	{
		int64_t m = cJSON_GetArraySize(wm), k = 0;
		const char **keys = calloc((size_t)m + 1, sizeof *keys);
		struct lynn_name_index kx = { 0 };
		if (!keys || lynn_name_index_init(&kx, (size_t)m, str_name_of, keys) < 0) {
			free(keys);
			rc = lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
			goto out;
		}
		cJSON_ArrayForEach(e, wm) {
			keys[k] = e->string;
			if (lynn_name_index_put(&kx, k++) >= 0 && !rc)
				rc = lynn_errf(err, -LYNN_EFORMAT,
					       "st: '%s': weight_map names tensor '%s' twice", ip,
					       e->string);
		}
		for (int64_t i = 0; i < c->n && !rc; i++)
			if (lynn_name_index_get(&kx, c->tensors[i]->name) < 0)
				rc = lynn_errf(err, -LYNN_EFORMAT,
					       "st: '%s': tensor '%s' of shard '%s' is not in the index",
					       ip, c->tensors[i]->name, c->tensors[i]->file);
		lynn_name_index_release(&kx);
		free(keys);
	}
out:
	free(shards);
	cJSON_Delete(root);
	return rc;
}

/* No model.safetensors and no index: every *.safetensors in the folder. */
static int open_glob(struct lynn_ckpt *c, struct lynn_err *err)
{
	DIR *d = opendir(c->dir);
	struct dirent *de;
	char **names = NULL;
	int n = 0, rc = 0;

	if (!d)
		return lynn_errf(err, -LYNN_EIO, "st: '%s': cannot list the folder", c->dir);
	while ((de = readdir(d))) {
		char **nn;
		if (de->d_name[0] == '.' || !ends_with(de->d_name, ".safetensors") ||
		    !strncmp(de->d_name, "adapter_model", 13))
			continue;
		nn = realloc(names, ((size_t)n + 1) * sizeof *nn);
		if (!nn || !(nn[n] = strdup(de->d_name))) {
			names = nn ? nn : names;
			rc = lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
			goto out;
		}
		names = nn;
		n++;
	}
	if (!n) {
		rc = lynn_errf(err, -LYNN_ENOTFOUND,
			       "st: '%s': no model.safetensors, model.safetensors.index.json or *.safetensors",
			       c->dir);
		goto out;
	}
	qsort(names, (size_t)n, sizeof *names, cmp_str);
	for (int i = 0; i < n && !rc; i++) {
		char *p = lynn_path_join(c->dir, names[i]);
		rc = p ? add_file(c, p, err) : lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
		free(p);
	}
	if (!rc)
		rc = build_index(c, err);
out:
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
	return rc;
}

struct lynn_ckpt *lynn_ckpt_open(const char *path, struct lynn_err *err)
{
	struct lynn_ckpt *c = calloc(1, sizeof *c);
	char *single = NULL;
	int rc = 0;

	if (!c) {
		lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
		return NULL;
	}
	if (lynn_dir_exists(path)) {
		c->dir = strdup(path);
		single = lynn_path_join(path, "model.safetensors");
		c->index_path = lynn_path_join(path, "model.safetensors.index.json");
		if (!c->dir || !single || !c->index_path) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
			goto out;
		}
		if (lynn_file_exists(single)) {
			free(c->index_path);
			c->index_path = NULL;
			rc = add_file(c, single, err);
			if (!rc)
				rc = build_index(c, err);
		} else if (lynn_file_exists(c->index_path)) {
			rc = open_index(c, err);
		} else {
			free(c->index_path);
			c->index_path = NULL;
			rc = open_glob(c, err);
		}
	} else if (lynn_file_exists(path)) {
		const char *slash = strrchr(path, '/');
		c->dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
		if (!c->dir) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
			goto out;
		}
		rc = add_file(c, path, err);
		if (!rc)
			rc = build_index(c, err);
	} else {
		rc = lynn_errf(err, -LYNN_ENOTFOUND, "st: '%s': no such file or folder", path);
	}
out:
	free(single);
	if (rc) {
		lynn_ckpt_close(c);
		return NULL;
	}
	return c;
}

void lynn_ckpt_close(struct lynn_ckpt *c)
{
	if (!c)
		return;
	lynn_name_index_release(&c->index);
	free(c->tensors);
	for (int i = 0; i < c->n_files; i++)
		lynn_st_close(c->files[i]);
	free(c->files);
	free(c->dir);
	free(c->index_path);
	free(c);
}

int64_t lynn_ckpt_n_tensors(const struct lynn_ckpt *c) { return c->n; }

const struct lynn_tensor *lynn_ckpt_tensor(const struct lynn_ckpt *c, int64_t i)
{
	return i >= 0 && i < c->n ? c->tensors[i] : NULL;
}

const struct lynn_tensor *lynn_ckpt_find(const struct lynn_ckpt *c, const char *name)
{
	int64_t i = lynn_name_index_get(&c->index, name);
	return i >= 0 ? c->tensors[i] : NULL;
}

int lynn_ckpt_n_files(const struct lynn_ckpt *c) { return c->n_files; }

const char *lynn_ckpt_file(const struct lynn_ckpt *c, int i)
{
	return i >= 0 && i < c->n_files ? lynn_st_path(c->files[i]) : NULL;
}

const struct lynn_st_file *lynn_ckpt_st(const struct lynn_ckpt *c, int i)
{
	return i >= 0 && i < c->n_files ? c->files[i] : NULL;
}

const char *lynn_ckpt_dir(const struct lynn_ckpt *c) { return c->dir; }
const char *lynn_ckpt_index_path(const struct lynn_ckpt *c) { return c->index_path; }

const struct lynn_tensor *lynn_ckpt_find_decoder(const struct lynn_ckpt *c, const char *name)
{
	static const char *const body[] = { "model.language_model.", "model.", "" };
	static const char *const head[] = { "", "model.", "model.language_model." };
	const char *const *pre = strncmp(name, "lm_head.", 8) ? body : head;
	int n_pre = strncmp(name, "lm_head.", 8) ? 2 : 3;
	char buf[512];

	for (int i = 0; i < n_pre; i++) {
		const struct lynn_tensor *t;
		int w = snprintf(buf, sizeof buf, "%s%s", pre[i], name);
		if (w < 0 || (size_t)w >= sizeof buf)
			return NULL;
		t = lynn_ckpt_find(c, buf);
		if (t)
			return t;
	}
	return NULL;
}
