/* util.c - sizes, id lists, edit distance, name index, module-list regexes
 * (include/lynn/util.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "lynn/util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <pcre2.h>

int lynn_parse_size(const char *s, uint64_t *out, struct lynn_err *err)
{
	static const struct { const char *u; double m; } units[] = {
		{ "", 1 }, { "b", 1 },
		{ "k", 1e3 }, { "kb", 1e3 }, { "m", 1e6 }, { "mb", 1e6 },
		{ "g", 1e9 }, { "gb", 1e9 }, { "t", 1e12 }, { "tb", 1e12 },
		{ "kib", 1024.0 }, { "mib", 1048576.0 }, { "gib", 1073741824.0 },
		{ "tib", 1099511627776.0 },
	};
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || !(v >= 0) || !isfinite(v))
		return lynn_errf(err, -LYNN_EINVAL, "size: '%s' is not a size", s);
	while (*end == ' ')
		end++;
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (!strcasecmp(end, units[i].u)) {
			double b = v * units[i].m;
			if (b >= 1.8e19)
				return lynn_errf(err, -LYNN_EINVAL, "size: '%s' is too large", s);
			*out = (uint64_t)b;
			return 0;
		}
	}
	return lynn_errf(err, -LYNN_EINVAL, "size: '%s': unknown unit '%s'", s, end);
}

int lynn_parse_ids(const char *s, int32_t **ids, size_t *n, struct lynn_err *err)
{
	size_t cap = 16, k = 0;
	int32_t *v = malloc(cap * sizeof *v);
	const char *p = s;

	*ids = NULL;
	*n = 0;
	if (!v)
		return lynn_errf(err, -LYNN_ENOMEM, "ids: out of memory");
	for (;;) {
		char *end;
		long long x;
		while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '\r' ||
		       *p == '[' || *p == ']')
			p++;
		if (!*p)
			break;
		errno = 0;
		x = strtoll(p, &end, 10);
		if (end == p || errno || x < 0 || x > INT32_MAX) {
			free(v);
			return lynn_errf(err, -LYNN_EINVAL, "ids: '%.20s' is not a token id", p);
		}
		if (k == cap) {
			int32_t *nv = realloc(v, 2 * cap * sizeof *v);
			if (!nv) {
				free(v);
				return lynn_errf(err, -LYNN_ENOMEM, "ids: out of memory");
			}
			v = nv;
			cap *= 2;
		}
		v[k++] = (int32_t)x;
		p = end;
	}
	*ids = v;
	*n = k;
	return 0;
}

int lynn_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	int row[64];
	if (la > 63 || lb > 63)
		return 99;
	for (size_t j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (size_t i = 1; i <= la; i++) {
		int prev = row[0];
		row[0] = (int)i;
		for (size_t j = 1; j <= lb; j++) {
			int cur = row[j];
			int sub = prev + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
			int best = LYNN_MIN(row[j] + 1, row[j - 1] + 1);
			row[j] = LYNN_MIN(best, sub);
			prev = cur;
		}
	}
	return row[lb];
}

bool lynn_str_ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);
	return a >= b && !strcmp(s + a - b, suffix);
}

/* ===== name index ===== */

uint64_t lynn_hash_str(const char *s)
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
	size_t h = (size_t)lynn_hash_str(name) & ix->mask;
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
	h = (size_t)lynn_hash_str(name) & ix->mask;
	while (ix->slots[h] >= 0) {
		if (!strcmp(ix->name_of(ix->ctx, ix->slots[h]), name))
			return ix->slots[h];
		h = (h + 1) & ix->mask;
	}
	return -1;
}

struct lynn_re {
	pcre2_code *code;
};

struct lynn_re *lynn_re_compile(const char *pattern, char *msg, size_t cap)
{
	int ec;
	PCRE2_SIZE off;
	struct lynn_re *re = calloc(1, sizeof *re);
	if (!re) {
		snprintf(msg, cap, "out of memory");
		return NULL;
	}
	if (!(re->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &off, NULL))) {
		PCRE2_UCHAR m[120];
		pcre2_get_error_message(ec, m, sizeof m);
		snprintf(msg, cap, "%s at offset %zu", (const char *)m, (size_t)off);
		free(re);
		return NULL;
	}
	return re;
}

bool lynn_re_match(const struct lynn_re *re, const char *s)
{
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, NULL);
	int rc = md ? pcre2_match(re->code, (PCRE2_SPTR)s, strlen(s), 0, PCRE2_ANCHORED, md, NULL) : -1;
	pcre2_match_data_free(md);
	return rc >= 0;
}

void lynn_re_free(struct lynn_re *re)
{
	if (re)
		pcre2_code_free(re->code);
	free(re);
}
