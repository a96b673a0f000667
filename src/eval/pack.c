/*
 * pack.c - the ship gate (include/lynn/pack.h, SPEC §3): the copy step, the
 * index rebuilt from shard headers, gate 1 (files) and the report. Gate 2 is
 * pack_tok.c, gate 3 pack_weights.c.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "eval/pack_internal.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/pack.h"
#include "lynn/st.h"

const char *const lynn_pack_copy_files[] = {
	"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
	"generation_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
	"preprocessor_config.json", "video_preprocessor_config.json", NULL,
};

/* ===== gates and reasons (pack_internal.h) ===== */

void pack_gate_init(struct pack_gate *g, cJSON *obj)
{
	g->obj = obj;
	g->reasons = cJSON_CreateArray();
	g->n = g->dropped = 0;
}

void pack_reason(struct pack_gate *g, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	if (g->n >= PACK_MAX_REASONS) {
		g->dropped++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	cJSON_AddItemToArray(g->reasons, cJSON_CreateString(buf));
	g->n++;
}

bool pack_gate_finish(struct pack_gate *g)
{
	bool pass = g->n == 0 && g->dropped == 0;
	if (g->dropped) {
		char buf[64];
		snprintf(buf, sizeof buf, "... and %d more problems", g->dropped);
		cJSON_AddItemToArray(g->reasons, cJSON_CreateString(buf));
	}
	cJSON_AddItemToObject(g->obj, "reasons", g->reasons);
	cJSON_AddBoolToObject(g->obj, "pass", pass);
	g->reasons = NULL;
	return pass;
}

/* ===== where a file is, dry run included ===== */

struct pctx {
	const char *src, *dst;
	bool dry;
	cJSON *copied; /* names copied (or, dry, to be copied) */
};

static bool in_list(const cJSON *list, const char *name)
{
	const cJSON *e;
	cJSON_ArrayForEach(e, list)
		if (cJSON_IsString(e) && !strcmp(e->valuestring, name))
			return true;
	return false;
}

/* The path of `name` as the target will have it: in a dry run a file that
 * would be copied is read from the source. Caller frees. */
static char *resolve(const void *vctx, const char *name)
{
	const struct pctx *c = vctx;
	if (c->dry && in_list(c->copied, name))
		return lynn_path_join(c->src, name);
	return lynn_path_join(c->dst, name);
}

static bool has(const struct pctx *c, const char *name)
{
	char *p = resolve(c, name);
	bool ok = p && lynn_file_exists(p);
	free(p);
	return ok;
}

/* ===== the copy step ===== */

static int copy_step(struct pctx *c, struct lynn_err *err)
{
	for (int i = 0; lynn_pack_copy_files[i]; i++) {
		const char *n = lynn_pack_copy_files[i];
		char *s = lynn_path_join(c->src, n), *d = lynn_path_join(c->dst, n);
		if (!s || !d) {
			free(s);
			free(d);
			return lynn_errf(err, -LYNN_ENOMEM, "pack: out of memory");
		}
		if (!lynn_file_exists(d) && lynn_file_exists(s))
			cJSON_AddItemToArray(c->copied, cJSON_CreateString(n));
		free(s);
		free(d);
	}
	if (c->dry || !cJSON_GetArraySize(c->copied))
		return 0;
	{
		/* probe with a real file: access(W_OK) says yes to root on a
		 * read-only mount or an immutable folder */
		char *probe = lynn_path_join(c->dst, ".lynn-pack-probe-XXXXXX");
		int fd = probe ? mkstemp(probe) : -1;
		int e = errno;
		if (fd >= 0) {
			close(fd);
			unlink(probe);
		}
		free(probe);
		if (fd < 0)
			return lynn_errf(err, -LYNN_EIO, "pack: cannot write into '%s': %s", c->dst,
					 strerror(e));
	}
	{
		const cJSON *e;
		cJSON_ArrayForEach(e, c->copied) {
			char *s = lynn_path_join(c->src, e->valuestring);
			char *d = lynn_path_join(c->dst, e->valuestring);
			int rc = s && d ? lynn_file_copy(s, d, err)
					: lynn_errf(err, -LYNN_ENOMEM, "pack: out of memory");
			free(s);
			free(d);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* ===== --write-index: the index from the target's own shard headers ===== */

static int cmp_cstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_tensor_name(const void *a, const void *b)
{
	return strcmp((*(const struct lynn_tensor *const *)a)->name,
		      (*(const struct lynn_tensor *const *)b)->name);
}

/* Returns 1 written (or would be), 0 not needed / unchanged, negative on an
 * error (a bad shard: gate 3 reports it; `why` says what happened). */
static int write_index(const struct pctx *c, char *why, size_t why_cap, struct lynn_err *err)
{
	DIR *d;
	struct dirent *de;
	char **names = NULL;
	int n = 0, rc = 0;
	cJSON *root = NULL, *wm, *meta, *old = NULL;
	char *ip = lynn_path_join(c->dst, "model.safetensors.index.json");
	struct lynn_st_file **files = NULL;
	uint64_t total = 0;

	snprintf(why, why_cap, "not needed");
	if (has(c, "model.safetensors"))
		goto out;
	d = opendir(c->dst);
	if (!d) {
		rc = lynn_errf(err, -LYNN_EIO, "pack: '%s': cannot list the folder", c->dst);
		goto out;
	}
	while ((de = readdir(d))) {
		char **nn;
		size_t l = strlen(de->d_name);
		if (de->d_name[0] == '.' || l < 12 || strcmp(de->d_name + l - 12, ".safetensors") ||
		    !strncmp(de->d_name, "adapter_model", 13))
			continue;
		nn = realloc(names, ((size_t)n + 1) * sizeof *nn);
		if (!nn)
			break;
		names = nn;
		if ((names[n] = strdup(de->d_name)))
			n++;
	}
	closedir(d);
	if (!n) {
		snprintf(why, why_cap, "no shards in the target");
		goto out;
	}
	qsort(names, (size_t)n, sizeof *names, cmp_cstr);
	files = calloc((size_t)n, sizeof *files);
	root = cJSON_CreateObject();
	meta = cJSON_AddObjectToObject(root, "metadata");
	wm = cJSON_AddObjectToObject(root, "weight_map");
	if (!files || !meta || !wm) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "pack: out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		char *p = lynn_path_join(c->dst, names[i]);
		files[i] = p ? lynn_st_open(p, err) : NULL;
		free(p);
		if (!files[i]) {
			snprintf(why, why_cap, "not written: %s", err->msg);
			rc = -LYNN_EFORMAT;
			goto out;
		}
	}
	{
		/* weight_map sorted by name, as huggingface_hub writes it */
		int64_t total_n = 0, k = 0;
		const struct lynn_tensor **all;
		for (int i = 0; i < n; i++)
			total_n += lynn_st_n_tensors(files[i]);
		all = calloc((size_t)total_n + 1, sizeof *all);
		if (!all) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "pack: out of memory");
			goto out;
		}
		for (int i = 0; i < n; i++)
			for (int64_t j = 0; j < lynn_st_n_tensors(files[i]); j++) {
				all[k] = lynn_st_tensor(files[i], j);
				total += all[k++]->nbytes;
			}
		qsort(all, (size_t)total_n, sizeof *all, cmp_tensor_name);
		for (int64_t i = 0; i < total_n; i++) {
			if (i && !strcmp(all[i]->name, all[i - 1]->name)) {
				snprintf(why, why_cap, "not written: tensor '%s' is in two shards",
					 all[i]->name);
				free(all);
				rc = -LYNN_EFORMAT;
				goto out;
			}
			cJSON_AddStringToObject(wm, all[i]->name, strrchr(all[i]->file, '/') + 1);
		}
		free(all);
	}
	cJSON_AddNumberToObject(meta, "total_size", (double)total);
	if (lynn_file_exists(ip)) {
		old = lynn_json_load(ip, LYNN_JSON_MAX_SIZE, NULL);
		if (old && cJSON_Compare(cJSON_GetObjectItemCaseSensitive(old, "weight_map"), wm, 1)) {
			snprintf(why, why_cap, "the existing index already matches the shards");
			goto out;
		}
	}
	if (c->dry) {
		snprintf(why, why_cap, "would be written (dry run)");
		rc = 1;
		goto out;
	}
	rc = lynn_json_write(ip, root, err);
	if (!rc) {
		snprintf(why, why_cap, "written from %d shard headers", n);
		rc = 1;
	}
out:
	for (int i = 0; files && i < n; i++)
		lynn_st_close(files[i]);
	free(files);
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	cJSON_Delete(root);
	cJSON_Delete(old);
	free(ip);
	return rc;
}

/* ===== gate 1: files ===== */

static bool gate_files(const struct pctx *c, cJSON *gate)
{
	static const char *const need[] = { "config.json", "generation_config.json",
					    "tokenizer.json", "tokenizer_config.json" };
	struct pack_gate g;
	cJSON *present = cJSON_AddArrayToObject(gate, "present");

	pack_gate_init(&g, gate);
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
		if (has(c, need[i]))
			cJSON_AddItemToArray(present, cJSON_CreateString(need[i]));
		else
			pack_reason(&g, "missing %s", need[i]);
	}
	/* a chat template: the file, or chat_template in tokenizer_config.json */
	if (has(c, "chat_template.jinja")) {
		cJSON_AddItemToArray(present, cJSON_CreateString("chat_template.jinja"));
	} else {
		char *p = resolve(c, "tokenizer_config.json");
		cJSON *tc = p && lynn_file_exists(p) ? lynn_json_load(p, LYNN_JSON_MAX_SIZE, NULL) : NULL;
		const cJSON *t = tc ? cJSON_GetObjectItemCaseSensitive(tc, "chat_template") : NULL;
		if ((cJSON_IsString(t) && t->valuestring[0]) || (cJSON_IsArray(t) && cJSON_GetArraySize(t)))
			cJSON_AddItemToArray(present,
					     cJSON_CreateString("tokenizer_config.json:chat_template"));
		else
			pack_reason(&g, "missing a chat template (chat_template.jinja, or chat_template in tokenizer_config.json)");
		cJSON_Delete(tc);
		free(p);
	}
	/* weights: model.safetensors, or an index and every shard it names */
	if (has(c, "model.safetensors")) {
		cJSON_AddItemToArray(present, cJSON_CreateString("model.safetensors"));
	} else if (has(c, "model.safetensors.index.json")) {
		char *p = lynn_path_join(c->dst, "model.safetensors.index.json");
		struct lynn_err e;
		cJSON *ix = lynn_json_load(p, LYNN_JSON_MAX_SIZE, &e);
		const cJSON *wm = ix ? cJSON_GetObjectItemCaseSensitive(ix, "weight_map") : NULL, *x;
		cJSON_AddItemToArray(present, cJSON_CreateString("model.safetensors.index.json"));
		if (!ix)
			pack_reason(&g, "%s", e.msg);
		else if (!cJSON_IsObject(wm))
			pack_reason(&g, "'%s': missing object field 'weight_map'", p);
		else {
			int n_missing = 0;
			cJSON *seen = cJSON_CreateObject();
			cJSON_ArrayForEach(x, wm) {
				char *sp;
				if (!cJSON_IsString(x) || cJSON_GetObjectItemCaseSensitive(seen, x->valuestring))
					continue;
				cJSON_AddTrueToObject(seen, x->valuestring);
				sp = strchr(x->valuestring, '/') ? NULL : lynn_path_join(c->dst, x->valuestring);
				if (!sp || !lynn_file_exists(sp)) {
					pack_reason(&g, "missing shard %s (named by model.safetensors.index.json)",
						    x->valuestring);
					n_missing++;
				}
				free(sp);
			}
			cJSON_AddNumberToObject(gate, "n_shards", cJSON_GetArraySize(seen));
			cJSON_Delete(seen);
		}
		cJSON_Delete(ix);
		free(p);
	} else {
		pack_reason(&g, "missing weights: no model.safetensors and no model.safetensors.index.json (--write-index builds the index from the shards)");
	}
	return pack_gate_finish(&g);
}

/* ===== the whole gate ===== */

int lynn_pack_run(const char *src, const char *dst, const struct lynn_pack_opts *opts,
		  cJSON **report, bool *pass, struct lynn_err *err)
{
	struct pctx c = { .src = src, .dst = dst, .dry = opts && opts->dry_run };
	cJSON *r = NULL, *gates, *g1, *g2, *g3;
	char why[512];
	struct stat a, b;
	int rc = 0;
	bool p1, p2, p3;

	*report = NULL;
	*pass = false;
	if (!lynn_dir_exists(src))
		return lynn_errf(err, -LYNN_ENOTFOUND, "pack: '%s': no such folder", src);
	if (!lynn_dir_exists(dst))
		return lynn_errf(err, -LYNN_ENOTFOUND, "pack: '%s': no such folder", dst);
	if (stat(src, &a) == 0 && stat(dst, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		return lynn_errf(err, -LYNN_EINVAL, "pack: '%s' and '%s' are the same folder", src, dst);
	r = lynn_json_report_new("lynn-pack-v1");
	if (!r)
		return lynn_errf(err, -LYNN_ENOMEM, "pack: out of memory");
	cJSON_AddStringToObject(r, "source", src);
	cJSON_AddStringToObject(r, "target", dst);
	cJSON_AddBoolToObject(r, "dry_run", c.dry);
	c.copied = cJSON_AddArrayToObject(r, "copied");
	rc = copy_step(&c, err);
	if (rc)
		goto out;
	if (opts && opts->write_index) {
		int w = write_index(&c, why, sizeof why, err);
		if (w < 0 && w != -LYNN_EFORMAT) {
			rc = w;
			goto out;
		}
		cJSON_AddBoolToObject(r, "index_written", w == 1 && !c.dry);
		cJSON_AddStringToObject(r, "index", why);
	}
	gates = cJSON_AddObjectToObject(r, "gates");
	g1 = cJSON_AddObjectToObject(gates, "files");
	g2 = cJSON_AddObjectToObject(gates, "tokenizer");
	g3 = cJSON_AddObjectToObject(gates, "weights");
	if (!g1 || !g2 || !g3) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "pack: out of memory");
		goto out;
	}
	p1 = gate_files(&c, g1);
	p2 = pack_gate_tokenizer(resolve, &c, g2);
	p3 = lynn_pack_gate_weights(dst, opts && opts->scan_scales, g3);
	*pass = p1 && p2 && p3;
	cJSON_AddBoolToObject(r, "pass", *pass);
out:
	if (rc) {
		cJSON_Delete(r);
		return rc;
	}
	*report = r;
	return 0;
}
