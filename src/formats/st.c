/*
 * st.c - strict safetensors reader (include/lynn/st.h).
 *
 * Layout (huggingface/safetensors README, safetensors/src/tensor.rs): u64
 * little-endian header length N, N bytes of UTF-8 JSON object, then the
 * byte buffer. Rules enforced, as the reference reader's read_metadata and
 * Metadata::validate (docs/reference weight-formats.md §1.3, SPEC §8):
 *   - at least 8 bytes; N <= 100,000,000; 8 + N within the file;
 *   - the header is strict UTF-8 and one JSON object (trailing whitespace
 *     only), every entry {dtype, shape, data_offsets} with a known dtype,
 *     non-negative integer dims and offsets, begin <= end;
 *   - product(shape) x dtype size, overflow-checked, equals end - begin;
 *   - sorted by offsets, the tensors tile the buffer from 0 with no gap or
 *     overlap, and the buffer ends exactly at the end of the file;
 *   - `__metadata__` is an object of strings; no name appears twice.
 * cJSON parses numbers as doubles, so integers must be below 2^53 (9 PB).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "formats/st_internal.h"
#include "lynn/fs.h"
#include "lynn/st.h"

struct lynn_st_file {
	char *path;
	struct lynn_map map;  /* unused (fd -1) for lynn_st_open_mem */
	const uint8_t *base;  /* whole file */
	uint64_t size;
	uint64_t header_n;    /* N */
	int64_t n;
	struct lynn_tensor *tensors; /* sorted by data offset */
	struct lynn_name_index index;
	int n_meta;
	char **meta_keys, **meta_vals;
};

/* ===== name index and UTF-8 (st_internal.h) ===== */

static uint64_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

int lynn_name_index_init(struct lynn_name_index *ix, size_t n,
			 const char *(*name_of)(const void *ctx, int64_t i), const void *ctx)
{
	size_t cap = 16;
	while (cap < 2 * n + 1)
		cap <<= 1;
	ix->slots = malloc(cap * sizeof *ix->slots);
	if (!ix->slots)
		return -1;
	for (size_t i = 0; i < cap; i++)
		ix->slots[i] = -1;
	ix->mask = cap - 1;
	ix->name_of = name_of;
	ix->ctx = ctx;
	return 0;
}

void lynn_name_index_release(struct lynn_name_index *ix)
{
	free(ix->slots);
	ix->slots = NULL;
}

int64_t lynn_name_index_put(struct lynn_name_index *ix, int64_t i)
{
	const char *name = ix->name_of(ix->ctx, i);
	size_t h = (size_t)hash_name(name) & ix->mask;
	while (ix->slots[h] >= 0) {
		if (!strcmp(ix->name_of(ix->ctx, ix->slots[h]), name))
			return ix->slots[h];
		h = (h + 1) & ix->mask;
	}
	ix->slots[h] = i;
	return -1;
}

int64_t lynn_name_index_get(const struct lynn_name_index *ix, const char *name)
{
	size_t h;
	if (!ix->slots)
		return -1;
	h = (size_t)hash_name(name) & ix->mask;
	while (ix->slots[h] >= 0) {
		if (!strcmp(ix->name_of(ix->ctx, ix->slots[h]), name))
			return ix->slots[h];
		h = (h + 1) & ix->mask;
	}
	return -1;
}

size_t lynn_utf8_check(const uint8_t *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
		uint8_t c = s[i];
		size_t n;
		uint32_t cp, min;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			n = 1; cp = c & 0x1f; min = 0x80;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2; cp = c & 0x0f; min = 0x800;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3; cp = c & 0x07; min = 0x10000;
		} else {
			return i;
		}
		if (len - i <= n)
			return i;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return i;
		i += n + 1;
	}
	return len;
}

/* ===== header parsing ===== */

static const char *tensor_name_of(const void *ctx, int64_t i)
{
	return ((const struct lynn_tensor *)ctx)[i].name;
}

/* A JSON number that is a non-negative integer below 2^53. */
static bool get_u53(const cJSON *v, uint64_t *out)
{
	double d;
	if (!cJSON_IsNumber(v))
		return false;
	d = v->valuedouble;
	if (!(d >= 0) || d >= 9007199254740992.0 || floor(d) != d)
		return false;
	*out = (uint64_t)d;
	return true;
}

struct span {
	uint64_t begin, end;
	int64_t i;
};

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return (x->i > y->i) - (x->i < y->i);
}

static void shape_str(const struct lynn_tensor *t, char *buf, size_t cap)
{
	size_t o = 0;
	o += (size_t)snprintf(buf + o, cap - o, "[");
	for (int d = 0; d < t->n_dims && o < cap; d++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "",
				      (long long)t->shape[d]);
	if (o < cap)
		snprintf(buf + o, cap - o, "]");
}

static int parse_meta(struct lynn_st_file *f, const cJSON *m, struct lynn_err *err)
{
	const cJSON *e;
	int n = 0, k = 0;

	if (!cJSON_IsObject(m))
		return lynn_errf(err, -LYNN_EFORMAT, "st: '%s': '__metadata__' is not an object",
				 f->path);
	cJSON_ArrayForEach(e, m)
		n++;
	f->meta_keys = calloc((size_t)n + 1, sizeof(char *));
	f->meta_vals = calloc((size_t)n + 1, sizeof(char *));
	if (!f->meta_keys || !f->meta_vals)
		return lynn_errf(err, -LYNN_ENOMEM, "st: '%s': out of memory", f->path);
	cJSON_ArrayForEach(e, m) {
		if (!cJSON_IsString(e))
			return lynn_errf(err, -LYNN_EFORMAT,
					 "st: '%s': '__metadata__' key '%s' is not a string",
					 f->path, e->string);
		for (int j = 0; j < k; j++)
			if (!strcmp(f->meta_keys[j], e->string))
				return lynn_errf(err, -LYNN_EFORMAT,
						 "st: '%s': '__metadata__' key '%s' appears twice",
						 f->path, e->string);
		f->meta_keys[k] = strdup(e->string);
		f->meta_vals[k] = strdup(e->valuestring);
		f->n_meta = ++k;
		if (!f->meta_keys[k - 1] || !f->meta_vals[k - 1])
			return lynn_errf(err, -LYNN_ENOMEM, "st: '%s': out of memory", f->path);
	}
	return 0;
}

/* Fill one tensor from its header entry (offsets relative to the buffer). */
static int parse_entry(struct lynn_st_file *f, const cJSON *e, struct lynn_tensor *t,
		       struct span *sp, struct lynn_err *err)
{
	const char *p = f->path, *nm = t->name;
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
	const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	const cJSON *v;
	uint64_t n = 1, b, en, nbytes;
	size_t esz;
	int d = 0;

	if (!cJSON_IsObject(e))
		return lynn_errf(err, -LYNN_EFORMAT, "st: '%s': tensor '%s': entry is not an object",
				 p, nm);
	if (!dt || !sh || !off)
		return lynn_errf(err, -LYNN_EFORMAT, "st: '%s': tensor '%s': missing field '%s'", p,
				 nm, !dt ? "dtype" : !sh ? "shape" : "data_offsets");
	if (!cJSON_IsString(dt) || !lynn_dtype_parse(dt->valuestring, &t->dtype)) {
		/* dtypes the reference knows (tensor.rs Dtype) that lynn does not read */
		static const char *const other[] = { "F4", "F6_E2M3", "F6_E3M2", "F8_E8M0",
						     "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64" };
		for (size_t i = 0; cJSON_IsString(dt) && i < sizeof other / sizeof other[0]; i++)
			if (!strcmp(dt->valuestring, other[i]))
				return lynn_errf(err, -LYNN_EUNSUPPORTED,
						 "st: '%s': tensor '%s': dtype '%s' is not supported by lynn",
						 p, nm, other[i]);
		return lynn_errf(err, -LYNN_EFORMAT, "st: '%s': tensor '%s': unknown dtype '%.40s'",
				 p, nm, cJSON_IsString(dt) ? dt->valuestring : "(not a string)");
	}
	if (!cJSON_IsArray(sh))
		return lynn_errf(err, -LYNN_EFORMAT, "st: '%s': tensor '%s': shape is not an array",
				 p, nm);
	cJSON_ArrayForEach(v, sh) {
		uint64_t dim;
		if (d >= LYNN_MAX_DIMS)
			return lynn_errf(err, -LYNN_EUNSUPPORTED,
					 "st: '%s': tensor '%s': more than %d dimensions", p, nm,
					 LYNN_MAX_DIMS);
		if (!get_u53(v, &dim))
			return lynn_errf(err, -LYNN_EFORMAT,
					 "st: '%s': tensor '%s': shape entry %d is not a non-negative integer below 2^53",
					 p, nm, d);
		if (dim && n > INT64_MAX / dim)
			return lynn_errf(err, -LYNN_EFORMAT,
					 "st: '%s': tensor '%s': shape overflows (element count above 2^63)",
					 p, nm);
		n *= dim;
		t->shape[d++] = (int64_t)dim;
	}
	t->n_dims = d;
	t->n_elems = (int64_t)n;
	esz = lynn_dtype_size(t->dtype);
	if (n > UINT64_MAX / esz)
		return lynn_errf(err, -LYNN_EFORMAT, "st: '%s': tensor '%s': byte size overflows", p,
				 nm);
	nbytes = n * esz;
	if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
	    !get_u53(cJSON_GetArrayItem(off, 0), &b) || !get_u53(cJSON_GetArrayItem(off, 1), &en))
		return lynn_errf(err, -LYNN_EFORMAT,
				 "st: '%s': tensor '%s': data_offsets must be [begin, end] integers",
				 p, nm);
	if (en < b)
		return lynn_errf(err, -LYNN_EFORMAT,
				 "st: '%s': tensor '%s': data_offsets [%llu, %llu] end before begin", p,
				 nm, (unsigned long long)b, (unsigned long long)en);
	if (en - b != nbytes) {
		char s[96];
		shape_str(t, s, sizeof s);
		return lynn_errf(err, -LYNN_EFORMAT,
				 "st: '%s': tensor '%s': shape %s of %s needs %llu bytes but data_offsets span %llu",
				 p, nm, s, lynn_dtype_name(t->dtype), (unsigned long long)nbytes,
				 (unsigned long long)(en - b));
	}
	t->nbytes = nbytes;
	sp->begin = b;
	sp->end = en;
	return 0;
}

static int parse_header(struct lynn_st_file *f, struct lynn_err *err)
{
	const char *p = f->path;
	const char *hdr, *end = NULL;
	cJSON *root = NULL;
	const cJSON *e;
	struct span *sp = NULL;
	struct lynn_tensor *tmp = NULL;
	int64_t n = 0, k = 0;
	uint64_t data_len, pos = 0;
	size_t bad;
	int rc = 0;

	if (f->size < 8)
		return lynn_errf(err, -LYNN_EFORMAT,
				 "st: '%s': %llu bytes is too small for a safetensors header", p,
				 (unsigned long long)f->size);
	for (int i = 7; i >= 0; i--)
		f->header_n = (f->header_n << 8) | f->base[i];
	if (f->header_n > LYNN_ST_MAX_HEADER)
		return lynn_errf(err, -LYNN_EFORMAT,
				 "st: '%s': header length %llu exceeds the limit of %llu", p,
				 (unsigned long long)f->header_n, LYNN_ST_MAX_HEADER);
	if (f->header_n > f->size - 8)
		return lynn_errf(err, -LYNN_EFORMAT,
				 "st: '%s': header length %llu runs past the end of the file (%llu bytes)",
				 p, (unsigned long long)f->header_n, (unsigned long long)f->size);
	hdr = (const char *)f->base + 8;
	bad = lynn_utf8_check((const uint8_t *)hdr, f->header_n);
	if (bad != f->header_n)
		return lynn_errf(err, -LYNN_EFORMAT,
				 "st: '%s': header is not valid UTF-8 (byte %zu of the header)", p, bad);
	/* Raw control characters are never valid JSON (outside strings only
	 * space, tab, CR, LF are whitespace); cJSON would accept some. */
	for (uint64_t i = 0; i < f->header_n; i++) {
		uint8_t c = (uint8_t)hdr[i];
		if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
			return lynn_errf(err, -LYNN_EFORMAT,
					 "st: '%s': header is not valid JSON (control byte 0x%02x at byte %llu)",
					 p, c, (unsigned long long)i);
	}
	root = cJSON_ParseWithLengthOpts(hdr, (size_t)f->header_n, &end, 0);
	if (!root) {
		const char *at = cJSON_GetErrorPtr();
		long off = at && at >= hdr && at <= hdr + f->header_n ? (long)(at - hdr) : -1;
		rc = lynn_errf(err, -LYNN_EFORMAT,
			       "st: '%s': header is not valid JSON (near byte %ld of the header)", p,
			       off);
		goto out;
	}
	for (const char *q = end; q && q < hdr + f->header_n; q++)
		if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "st: '%s': header has data after the JSON object (byte %ld)",
				       p, (long)(q - hdr));
			goto out;
		}
	if (!cJSON_IsObject(root)) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "st: '%s': header is not a JSON object", p);
		goto out;
	}
	cJSON_ArrayForEach(e, root)
		if (strcmp(e->string, "__metadata__"))
			n++;
	tmp = calloc((size_t)n + 1, sizeof *tmp);
	sp = calloc((size_t)n + 1, sizeof *sp);
	if (!tmp || !sp) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "st: '%s': out of memory for %lld tensors", p,
			       (long long)n);
		goto out;
	}
	for (int64_t i = 0; i < n; i++)
		tmp[i].file = f->path;
	if (lynn_name_index_init(&f->index, (size_t)n, tensor_name_of, tmp) < 0) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "st: '%s': out of memory", p);
		goto out;
	}
	cJSON_ArrayForEach(e, root) {
		if (!strcmp(e->string, "__metadata__")) {
			if (f->meta_keys) {
				rc = lynn_errf(err, -LYNN_EFORMAT,
					       "st: '%s': '__metadata__' appears twice", p);
				goto out;
			}
			rc = parse_meta(f, e, err);
			if (rc)
				goto out;
			continue;
		}
		tmp[k].name = strdup(e->string);
		if (!tmp[k].name) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "st: '%s': out of memory", p);
			goto out;
		}
		if (lynn_name_index_put(&f->index, k) >= 0) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "st: '%s': tensor '%s' appears twice", p,
				       tmp[k].name);
			k++;
			goto out;
		}
		sp[k].i = k;
		rc = parse_entry(f, e, &tmp[k], &sp[k], err);
		k++;
		if (rc)
			goto out;
	}
	cJSON_Delete(root);
	root = NULL;

	/* the tensors must tile [0, data_len) exactly */
	data_len = f->size - 8 - f->header_n;
	qsort(sp, (size_t)n, sizeof *sp, cmp_span);
	for (int64_t i = 0; i < n; i++) {
		const char *nm = tmp[sp[i].i].name;
		if (sp[i].begin > pos) {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "st: '%s': tensor '%s': data_offsets begin at %llu, leaving a gap after byte %llu",
				       p, nm, (unsigned long long)sp[i].begin, (unsigned long long)pos);
			goto out;
		}
		if (sp[i].begin < pos) {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "st: '%s': tensor '%s': data_offsets [%llu, %llu] overlap '%s'",
				       p, nm, (unsigned long long)sp[i].begin,
				       (unsigned long long)sp[i].end, tmp[sp[i - 1].i].name);
			goto out;
		}
		if (sp[i].end > data_len) {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "st: '%s': tensor '%s': data ends at byte %llu of a %llu-byte buffer (file truncated?)",
				       p, nm, (unsigned long long)sp[i].end,
				       (unsigned long long)data_len);
			goto out;
		}
		pos = sp[i].end;
	}
	if (pos != data_len) {
		rc = lynn_errf(err, -LYNN_EFORMAT,
			       "st: '%s': %llu trailing bytes after the last tensor%s%s%s", p,
			       (unsigned long long)(data_len - pos), n ? " '" : "",
			       n ? tmp[sp[n - 1].i].name : "", n ? "'" : "");
		goto out;
	}

	/* reorder into data-offset order and rebuild the index over it */
	f->tensors = calloc((size_t)n + 1, sizeof *f->tensors);
	if (!f->tensors) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "st: '%s': out of memory", p);
		goto out;
	}
	for (int64_t i = 0; i < n; i++) {
		f->tensors[i] = tmp[sp[i].i];
		f->tensors[i].data = f->base + 8 + f->header_n + sp[i].begin;
		tmp[sp[i].i].name = NULL;
	}
	f->n = n;
	lynn_name_index_release(&f->index);
	if (lynn_name_index_init(&f->index, (size_t)n, tensor_name_of, f->tensors) < 0) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "st: '%s': out of memory", p);
		goto out;
	}
	for (int64_t i = 0; i < n; i++)
		lynn_name_index_put(&f->index, i);
out:
	cJSON_Delete(root);
	if (tmp)
		for (int64_t i = 0; i < k; i++)
			free((char *)tmp[i].name);
	free(tmp);
	free(sp);
	return rc;
}

/* ===== open / close ===== */

static struct lynn_st_file *file_new(const char *path)
{
	struct lynn_st_file *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->map.fd = -1;
	f->path = strdup(path);
	if (!f->path) {
		free(f);
		return NULL;
	}
	return f;
}

struct lynn_st_file *lynn_st_open(const char *path, struct lynn_err *err)
{
	struct lynn_st_file *f = file_new(path);
	if (!f) {
		lynn_errf(err, -LYNN_ENOMEM, "st: '%s': out of memory", path);
		return NULL;
	}
	if (lynn_map_open(&f->map, path, err) < 0)
		goto fail;
	f->base = f->map.data;
	f->size = f->map.size;
	if (parse_header(f, err) < 0)
		goto fail;
	return f;
fail:
	lynn_st_close(f);
	return NULL;
}

struct lynn_st_file *lynn_st_open_mem(const void *data, uint64_t size, const char *name,
				      struct lynn_err *err)
{
	struct lynn_st_file *f = file_new(name ? name : "(memory)");
	if (!f) {
		lynn_errf(err, -LYNN_ENOMEM, "st: out of memory");
		return NULL;
	}
	f->base = data;
	f->size = size;
	if (parse_header(f, err) < 0) {
		lynn_st_close(f);
		return NULL;
	}
	return f;
}

void lynn_st_close(struct lynn_st_file *f)
{
	if (!f)
		return;
	if (f->tensors)
		for (int64_t i = 0; i < f->n; i++)
			free((char *)f->tensors[i].name);
	free(f->tensors);
	lynn_name_index_release(&f->index);
	for (int i = 0; i < f->n_meta; i++) {
		free(f->meta_keys[i]);
		free(f->meta_vals[i]);
	}
	free(f->meta_keys);
	free(f->meta_vals);
	if (f->map.fd >= 0 || f->map.data)
		lynn_map_close(&f->map);
	free(f->path);
	free(f);
}

/* ===== accessors ===== */

int64_t lynn_st_n_tensors(const struct lynn_st_file *f) { return f->n; }

const struct lynn_tensor *lynn_st_tensor(const struct lynn_st_file *f, int64_t i)
{
	return i >= 0 && i < f->n ? &f->tensors[i] : NULL;
}

const struct lynn_tensor *lynn_st_find(const struct lynn_st_file *f, const char *name)
{
	int64_t i = lynn_name_index_get(&f->index, name);
	return i >= 0 ? &f->tensors[i] : NULL;
}

const char *lynn_st_metadata(const struct lynn_st_file *f, const char *key)
{
	for (int i = 0; i < f->n_meta; i++)
		if (!strcmp(f->meta_keys[i], key))
			return f->meta_vals[i];
	return NULL;
}

int lynn_st_n_metadata(const struct lynn_st_file *f) { return f->n_meta; }

void lynn_st_metadata_at(const struct lynn_st_file *f, int i, const char **key,
			 const char **value)
{
	*key = i >= 0 && i < f->n_meta ? f->meta_keys[i] : NULL;
	*value = i >= 0 && i < f->n_meta ? f->meta_vals[i] : NULL;
}

uint64_t lynn_st_header_size(const struct lynn_st_file *f) { return 8 + f->header_n; }
uint64_t lynn_st_file_size(const struct lynn_st_file *f) { return f->size; }
const char *lynn_st_path(const struct lynn_st_file *f) { return f->path; }
