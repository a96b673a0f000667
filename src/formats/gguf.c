/*
 * gguf.c - strict GGUF reader (include/lynn/gguf.h).
 *
 * Layout (ggml docs/gguf.md): "GGUF", u32 version, u64 n_tensors, u64 n_kv;
 * n_kv × (string key, u32 type, value); n_tensors × (string name, u32 n_dims,
 * u64 ne[n_dims], u32 type, u64 offset); padding to general.alignment
 * (default 32); the data section. Strings are u64 length + bytes. Arrays are
 * u32 element type + u64 count + elements.
 */
#include "lynn/gguf.h"

#include <stdlib.h>
#include <string.h>

#include "lynn/fs.h"

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGN 32

struct kv {
	char *key;
	enum lynn_gguf_type type;
	const uint8_t *val; /* scalar bytes, string (len prefix), or array header */
	struct lynn_gguf_arr arr;
};

struct lynn_gguf {
	struct lynn_map map;
	bool mapped;
	const uint8_t *base;
	size_t size;
	char what[300];
	uint32_t version, align;
	struct kv *kv;
	size_t n_kv;
	struct lynn_gguf_tensor *t;
	size_t n_t;
};

/* ===== ggml types ===== */

static const struct {
	const char *name;
	uint32_t blck, bytes;
} TYPES[] = {
	[0] = { "F32", 1, 4 },        [1] = { "F16", 1, 2 },        [2] = { "Q4_0", 32, 18 },
	[3] = { "Q4_1", 32, 20 },     [6] = { "Q5_0", 32, 22 },     [7] = { "Q5_1", 32, 24 },
	[8] = { "Q8_0", 32, 34 },     [9] = { "Q8_1", 32, 36 },     [10] = { "Q2_K", 256, 84 },
	[11] = { "Q3_K", 256, 110 },  [12] = { "Q4_K", 256, 144 },  [13] = { "Q5_K", 256, 176 },
	[14] = { "Q6_K", 256, 210 },  [15] = { "Q8_K", 256, 292 },  [16] = { "IQ2_XXS", 256, 66 },
	[17] = { "IQ2_XS", 256, 74 }, [18] = { "IQ3_XXS", 256, 98 }, [19] = { "IQ1_S", 256, 50 },
	[20] = { "IQ4_NL", 32, 18 },  [21] = { "IQ3_S", 256, 110 }, [22] = { "IQ2_S", 256, 82 },
	[23] = { "IQ4_XS", 256, 136 }, [24] = { "I8", 1, 1 },       [25] = { "I16", 1, 2 },
	[26] = { "I32", 1, 4 },       [27] = { "I64", 1, 8 },       [28] = { "F64", 1, 8 },
	[29] = { "IQ1_M", 256, 56 },  [30] = { "BF16", 1, 2 },      [34] = { "TQ1_0", 256, 54 },
	[35] = { "TQ2_0", 256, 66 },  [39] = { "MXFP4", 32, 17 },   [40] = { "NVFP4", 64, 36 },
	[41] = { "Q1_0", 128, 18 },   [42] = { "Q2_0", 64, 18 },
};

const char *lynn_gguf_type_name(uint32_t type)
{
	return type < sizeof TYPES / sizeof TYPES[0] ? TYPES[type].name : NULL;
}

bool lynn_gguf_type_size(uint32_t type, uint32_t *blck, uint32_t *bytes)
{
	if (!lynn_gguf_type_name(type))
		return false;
	*blck = TYPES[type].blck;
	*bytes = TYPES[type].bytes;
	return true;
}

/* ===== a bounded cursor ===== */

struct cur {
	const uint8_t *p, *end;
	struct lynn_gguf *g;
	struct lynn_err *err;
};

static int cfail(struct cur *c, const char *fmt, const char *sub)
{
	char m[200];
	snprintf(m, sizeof m, fmt, sub ? sub : "");
	return lynn_errf(c->err, -LYNN_EFORMAT, "gguf: %s: %s (at byte %zu)", c->g->what, m,
			 (size_t)(c->p - c->g->base));
}

static int take(struct cur *c, size_t n, const uint8_t **out, const char *what)
{
	*out = c->p;
	if ((size_t)(c->end - c->p) < n)
		return cfail(c, "truncated %s", what);
	*out = c->p;
	c->p += n;
	return 0;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static uint32_t rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static int get_u32(struct cur *c, uint32_t *v, const char *what)
{
	const uint8_t *p;
	if (take(c, 4, &p, what))
		return -LYNN_EFORMAT;
	*v = rd32(p);
	return 0;
}

static int get_u64(struct cur *c, uint64_t *v, const char *what)
{
	const uint8_t *p;
	if (take(c, 8, &p, what))
		return -LYNN_EFORMAT;
	*v = rd64(p);
	return 0;
}

static int get_str(struct cur *c, const uint8_t **s, uint64_t *n, const char *what)
{
	if (get_u64(c, n, what))
		return -LYNN_EFORMAT;
	if (*n > (uint64_t)(c->end - c->p))
		return cfail(c, "%s length exceeds the file", what);
	*s = c->p;
	c->p += *n;
	return 0;
}

static size_t scalar_size(enum lynn_gguf_type t)
{
	switch (t) {
	case LYNN_GGUF_UINT8: case LYNN_GGUF_INT8: case LYNN_GGUF_BOOL: return 1;
	case LYNN_GGUF_UINT16: case LYNN_GGUF_INT16: return 2;
	case LYNN_GGUF_UINT32: case LYNN_GGUF_INT32: case LYNN_GGUF_FLOAT32: return 4;
	case LYNN_GGUF_UINT64: case LYNN_GGUF_INT64: case LYNN_GGUF_FLOAT64: return 8;
	default: return 0;
	}
}

static int parse_kv(struct cur *c, struct kv *kv)
{
	const uint8_t *ks;
	uint64_t kn;
	uint32_t ty;

	if (get_str(c, &ks, &kn, "key"))
		return -LYNN_EFORMAT;
	if (kn > 65535)
		return cfail(c, "key longer than 65535 bytes", NULL);
	if (!(kv->key = strndup((const char *)ks, kn)))
		return lynn_errf(c->err, -LYNN_ENOMEM, "gguf: out of memory");
	if (strlen(kv->key) != kn)
		return cfail(c, "key '%s' holds a NUL byte", kv->key);
	if (get_u32(c, &ty, kv->key))
		return -LYNN_EFORMAT;
	kv->type = (enum lynn_gguf_type)ty;
	kv->val = c->p;
	if (ty == LYNN_GGUF_STRING) {
		const uint8_t *s;
		uint64_t n;
		return get_str(c, &s, &n, kv->key);
	}
	if (ty == LYNN_GGUF_ARRAY) {
		uint32_t et;
		uint64_t n;
		if (get_u32(c, &et, kv->key) || get_u64(c, &n, kv->key))
			return -LYNN_EFORMAT;
		kv->arr.type = (enum lynn_gguf_type)et;
		kv->arr.n = n;
		kv->arr.data = c->p;
		if (et == LYNN_GGUF_STRING) {
			/* each element needs at least its 8-byte length */
			if (n > (uint64_t)(c->end - c->p) / 8)
				return cfail(c, "array '%s' count exceeds the file", kv->key);
			uint64_t *off = malloc((size_t)(n ? n : 1) * sizeof *off);
			if (!off)
				return lynn_errf(c->err, -LYNN_ENOMEM, "gguf: out of memory");
			kv->arr.str_off = off;
			for (uint64_t j = 0; j < n; j++) {
				const uint8_t *s;
				uint64_t sl;
				off[j] = (uint64_t)(c->p - kv->arr.data);
				if (get_str(c, &s, &sl, kv->key))
					return -LYNN_EFORMAT;
			}
			return 0;
		}
		size_t es = scalar_size((enum lynn_gguf_type)et);
		if (!es)
			return cfail(c, et == LYNN_GGUF_ARRAY ? "array '%s' nests arrays (unsupported)"
							      : "array '%s' has an unknown element type",
				     kv->key);
		if (n > (uint64_t)(c->end - c->p) / es)
			return cfail(c, "array '%s' exceeds the file", kv->key);
		c->p += n * es;
		return 0;
	}
	size_t es = scalar_size(kv->type);
	if (!es)
		return cfail(c, "key '%s' has an unknown value type", kv->key);
	const uint8_t *p;
	return take(c, es, &p, kv->key);
}

static int parse_tensor(struct cur *c, struct lynn_gguf_tensor *t)
{
	const uint8_t *ns;
	uint64_t nn;
	uint32_t nd, blck, bytes;

	if (get_str(c, &ns, &nn, "tensor name"))
		return -LYNN_EFORMAT;
	if (nn > 65535)
		return cfail(c, "tensor name longer than 65535 bytes", NULL);
	if (!(t->name = strndup((const char *)ns, nn)))
		return lynn_errf(c->err, -LYNN_ENOMEM, "gguf: out of memory");
	if (get_u32(c, &nd, t->name))
		return -LYNN_EFORMAT;
	if (nd < 1 || nd > GGUF_MAX_DIMS)
		return cfail(c, "tensor '%s': n_dims out of 1..4", t->name);
	t->n_dims = nd;
	uint64_t nel = 1;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = 1;
		if (d < nd && get_u64(c, &t->ne[d], t->name))
			return -LYNN_EFORMAT;
		if (t->ne[d] && nel > UINT64_MAX / t->ne[d])
			return cfail(c, "tensor '%s': element count overflows", t->name);
		nel *= t->ne[d];
	}
	if (get_u32(c, &t->type, t->name) || get_u64(c, &t->offset, t->name))
		return -LYNN_EFORMAT;
	if (!lynn_gguf_type_size(t->type, &blck, &bytes))
		return cfail(c, "tensor '%s': unknown ggml type", t->name);
	if (t->ne[0] % blck)
		return cfail(c, "tensor '%s': first dimension not a multiple of the block size",
			     t->name);
	if (nel / blck > UINT64_MAX / bytes)
		return cfail(c, "tensor '%s': size overflows", t->name);
	t->size = nel / blck * bytes;
	return 0;
}

static int parse(struct lynn_gguf *g, struct lynn_err *err)
{
	struct cur c = { g->base, g->base + g->size, g, err };
	const uint8_t *magic;
	uint64_t nt, nkv;
	int rc;

	if (take(&c, 4, &magic, "header") || memcmp(magic, "GGUF", 4))
		return lynn_errf(err, -LYNN_EFORMAT, "gguf: %s: not a GGUF file (bad magic)", g->what);
	if (get_u32(&c, &g->version, "header"))
		return -LYNN_EFORMAT;
	if (g->version != 2 && g->version != 3)
		return lynn_errf(err, -LYNN_EUNSUPPORTED, "gguf: %s: version %u is not supported",
				 g->what, g->version);
	if (get_u64(&c, &nt, "header") || get_u64(&c, &nkv, "header"))
		return -LYNN_EFORMAT;
	/* a KV takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8 */
	if (nkv > g->size / 13 || nt > g->size / 32)
		return lynn_errf(err, -LYNN_EFORMAT,
				 "gguf: %s: %llu keys / %llu tensors cannot fit in %zu bytes", g->what,
				 (unsigned long long)nkv, (unsigned long long)nt, g->size);
	g->kv = calloc((size_t)nkv + 1, sizeof *g->kv);
	g->t = calloc((size_t)nt + 1, sizeof *g->t);
	if (!g->kv || !g->t)
		return lynn_errf(err, -LYNN_ENOMEM, "gguf: out of memory");
	for (uint64_t i = 0; i < nkv; i++) {
		rc = parse_kv(&c, &g->kv[i]);
		g->n_kv = (size_t)i + 1;
		if (rc)
			return rc;
		for (uint64_t k = 0; k < i; k++)
			if (!strcmp(g->kv[k].key, g->kv[i].key))
				return cfail(&c, "duplicate key '%s'", g->kv[i].key);
	}
	g->align = GGUF_DEFAULT_ALIGN;
	int64_t ai = lynn_gguf_find_kv(g, "general.alignment");
	if (ai >= 0) {
		int64_t a;
		if ((rc = lynn_gguf_get_int(g, "general.alignment", true, &a, err)))
			return rc;
		if (a <= 0 || a > (1 << 20) || (a & (a - 1)))
			return lynn_errf(err, -LYNN_EFORMAT,
					 "gguf: %s: general.alignment %lld is not a power of two",
					 g->what, (long long)a);
		g->align = (uint32_t)a;
	}
	for (uint64_t i = 0; i < nt; i++) {
		rc = parse_tensor(&c, &g->t[i]);
		g->n_t = (size_t)i + 1;
		if (rc)
			return rc;
	}
	size_t data = (size_t)(c.p - g->base);
	data = (data + g->align - 1) / g->align * g->align;
	if (nt && data > g->size)
		return lynn_errf(err, -LYNN_EFORMAT, "gguf: %s: data section starts past the end",
				 g->what);
	for (size_t i = 0; i < g->n_t; i++) {
		struct lynn_gguf_tensor *t = &g->t[i];
		if (t->offset % g->align)
			return lynn_errf(err, -LYNN_EFORMAT, "gguf: %s: tensor '%s': offset not aligned",
					 g->what, t->name);
		if (t->offset > g->size - data || t->size > g->size - data - t->offset)
			return lynn_errf(err, -LYNN_EFORMAT,
					 "gguf: %s: tensor '%s': data exceeds the file", g->what,
					 t->name);
		t->data = g->base + data + t->offset;
		for (size_t k = 0; k < i; k++)
			if (!strcmp(g->t[k].name, t->name))
				return lynn_errf(err, -LYNN_EFORMAT,
						 "gguf: %s: duplicate tensor '%s'", g->what, t->name);
	}
	return 0;
}

static struct lynn_gguf *finish_open(struct lynn_gguf *g, struct lynn_err *err)
{
	if (parse(g, err)) {
		if (err && !err->code)
			lynn_errf(err, -LYNN_EFORMAT, "gguf: %s: malformed", g->what);
		lynn_gguf_close(g);
		return NULL;
	}
	return g;
}

struct lynn_gguf *lynn_gguf_open_mem(const char *what, const void *data, size_t size,
				     struct lynn_err *err)
{
	struct lynn_gguf *g = calloc(1, sizeof *g);
	if (!g) {
		lynn_errf(err, -LYNN_ENOMEM, "gguf: out of memory");
		return NULL;
	}
	snprintf(g->what, sizeof g->what, "%s", what);
	g->base = data;
	g->size = size;
	return finish_open(g, err);
}

struct lynn_gguf *lynn_gguf_open(const char *path, struct lynn_err *err)
{
	struct lynn_gguf *g = calloc(1, sizeof *g);
	if (!g) {
		lynn_errf(err, -LYNN_ENOMEM, "gguf: out of memory");
		return NULL;
	}
	snprintf(g->what, sizeof g->what, "'%s'", path);
	if (lynn_map_open(&g->map, path, err)) {
		free(g);
		return NULL;
	}
	g->mapped = true;
	g->base = g->map.data;
	g->size = g->map.size;
	return finish_open(g, err);
}

void lynn_gguf_close(struct lynn_gguf *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n_kv; i++) {
		free(g->kv[i].key);
		free((void *)g->kv[i].arr.str_off);
	}
	free(g->kv);
	for (size_t i = 0; i < g->n_t; i++)
		free((void *)g->t[i].name);
	free(g->t);
	if (g->mapped)
		lynn_map_close(&g->map);
	free(g);
}

/* ===== accessors ===== */

uint32_t lynn_gguf_version(const struct lynn_gguf *g) { return g->version; }
uint32_t lynn_gguf_alignment(const struct lynn_gguf *g) { return g->align; }
size_t lynn_gguf_n_kv(const struct lynn_gguf *g) { return g->n_kv; }
const char *lynn_gguf_kv_key(const struct lynn_gguf *g, size_t i) { return g->kv[i].key; }
enum lynn_gguf_type lynn_gguf_kv_type(const struct lynn_gguf *g, size_t i) { return g->kv[i].type; }

int64_t lynn_gguf_find_kv(const struct lynn_gguf *g, const char *key)
{
	for (size_t i = 0; i < g->n_kv; i++)
		if (g->kv[i].key && !strcmp(g->kv[i].key, key))
			return (int64_t)i;
	return -1;
}

static const struct kv *lookup(const struct lynn_gguf *g, const char *key, bool required,
			       int *rc, struct lynn_err *err)
{
	int64_t i = lynn_gguf_find_kv(g, key);
	*rc = 0;
	if (i < 0) {
		if (required)
			*rc = lynn_errf(err, -LYNN_ENOTFOUND, "gguf: %s: missing key '%s'", g->what,
					key);
		return NULL;
	}
	return &g->kv[i];
}

static int wrong_type(const struct lynn_gguf *g, const char *key, const char *want,
		      struct lynn_err *err)
{
	return lynn_errf(err, -LYNN_EFORMAT, "gguf: %s: key '%s' is not %s", g->what, key, want);
}

static bool read_int(enum lynn_gguf_type t, const uint8_t *p, int64_t *out)
{
	switch (t) {
	case LYNN_GGUF_UINT8: case LYNN_GGUF_BOOL: *out = p[0]; return true;
	case LYNN_GGUF_INT8: *out = (int8_t)p[0]; return true;
	case LYNN_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
	case LYNN_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); *out = v; return true; }
	case LYNN_GGUF_UINT32: *out = rd32(p); return true;
	case LYNN_GGUF_INT32: *out = (int32_t)rd32(p); return true;
	case LYNN_GGUF_INT64: *out = (int64_t)rd64(p); return true;
	case LYNN_GGUF_UINT64: {
		uint64_t v = rd64(p);
		if (v > INT64_MAX)
			return false;
		*out = (int64_t)v;
		return true;
	}
	default: return false;
	}
}

int lynn_gguf_get_int(const struct lynn_gguf *g, const char *key, bool required, int64_t *out,
		      struct lynn_err *err)
{
	int rc;
	const struct kv *kv = lookup(g, key, required, &rc, err);
	if (!kv)
		return rc;
	if (!read_int(kv->type, kv->val, out))
		return wrong_type(g, key, "an integer", err);
	return 0;
}

int lynn_gguf_get_float(const struct lynn_gguf *g, const char *key, bool required, double *out,
			struct lynn_err *err)
{
	int rc;
	const struct kv *kv = lookup(g, key, required, &rc, err);
	if (!kv)
		return rc;
	if (kv->type == LYNN_GGUF_FLOAT32) {
		float f;
		memcpy(&f, kv->val, 4);
		*out = f;
	} else if (kv->type == LYNN_GGUF_FLOAT64) {
		memcpy(out, kv->val, 8);
	} else {
		return wrong_type(g, key, "a float", err);
	}
	return 0;
}

int lynn_gguf_get_bool(const struct lynn_gguf *g, const char *key, bool required, bool *out,
		       struct lynn_err *err)
{
	int rc;
	const struct kv *kv = lookup(g, key, required, &rc, err);
	if (!kv)
		return rc;
	if (kv->type != LYNN_GGUF_BOOL)
		return wrong_type(g, key, "a bool", err);
	*out = kv->val[0] != 0;
	return 0;
}

int lynn_gguf_get_str(const struct lynn_gguf *g, const char *key, bool required,
		      const char **s, size_t *len, struct lynn_err *err)
{
	int rc;
	const struct kv *kv = lookup(g, key, required, &rc, err);
	if (!kv)
		return rc;
	if (kv->type != LYNN_GGUF_STRING)
		return wrong_type(g, key, "a string", err);
	*len = (size_t)rd64(kv->val);
	*s = (const char *)kv->val + 8;
	return 0;
}

int lynn_gguf_get_arr(const struct lynn_gguf *g, const char *key, bool required,
		      struct lynn_gguf_arr *out, struct lynn_err *err)
{
	int rc;
	const struct kv *kv = lookup(g, key, required, &rc, err);
	if (!kv)
		return rc;
	if (kv->type != LYNN_GGUF_ARRAY)
		return wrong_type(g, key, "an array", err);
	*out = kv->arr;
	return 0;
}

void lynn_gguf_arr_str(const struct lynn_gguf_arr *a, uint64_t j, const char **s, size_t *len)
{
	const uint8_t *p = a->data + a->str_off[j];
	*len = (size_t)rd64(p);
	*s = (const char *)p + 8;
}

int64_t lynn_gguf_arr_int(const struct lynn_gguf_arr *a, uint64_t j)
{
	int64_t v = 0;
	size_t es = scalar_size(a->type);
	if (es)
		read_int(a->type, a->data + j * es, &v);
	return v;
}

size_t lynn_gguf_n_tensors(const struct lynn_gguf *g) { return g->n_t; }

const struct lynn_gguf_tensor *lynn_gguf_tensor(const struct lynn_gguf *g, size_t i)
{
	return i < g->n_t ? &g->t[i] : NULL;
}

const struct lynn_gguf_tensor *lynn_gguf_find_tensor(const struct lynn_gguf *g, const char *name)
{
	for (size_t i = 0; i < g->n_t; i++)
		if (!strcmp(g->t[i].name, name))
			return &g->t[i];
	return NULL;
}
