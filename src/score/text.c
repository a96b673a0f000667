/* text.c - UTF-8 decoding, Python's character classes, the scratch context,
 * Python round() and span interning for src/score. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "lynn/score.h"
#include "score/score_internal.h"

/* ===== scratch context ===== */

struct lynn_score_ctx *lynn_score_ctx_create(struct lynn_err *err)
{
	struct lynn_score_ctx *c = calloc(1, sizeof *c);
	if (!c)
		lynn_errf(err, -LYNN_ENOMEM, "score: out of memory");
	return c;
}

void lynn_score_ctx_free(struct lynn_score_ctx *ctx)
{
	if (!ctx)
		return;
	for (int i = 0; i < SLOT_N; i++)
		free(ctx->buf[i]);
	free(ctx);
}

void *score_buf(struct lynn_score_ctx *ctx, enum score_slot slot, size_t bytes,
		struct lynn_err *err)
{
	if (bytes == 0)
		bytes = 1;
	if (ctx->cap[slot] < bytes) {
		size_t cap = ctx->cap[slot] ? ctx->cap[slot] : 256;
		void *p;
		while (cap < bytes)
			cap = cap > SIZE_MAX / 2 ? bytes : cap * 2;
		/* the old contents are scratch: free first so peak memory stays low */
		free(ctx->buf[slot]);
		ctx->buf[slot] = NULL;
		ctx->cap[slot] = 0;
		p = malloc(cap);
		if (!p) {
			lynn_errf(err, -LYNN_ENOMEM, "score: out of memory (%zu bytes)", bytes);
			return NULL;
		}
		ctx->buf[slot] = p;
		ctx->cap[slot] = cap;
	}
	return ctx->buf[slot];
}

struct lynn_score_ctx *score_ctx_get(struct lynn_score_ctx *ctx, struct lynn_score_ctx *tmp)
{
	if (ctx)
		return ctx;
	memset(tmp, 0, sizeof *tmp);
	return tmp;
}

void score_ctx_done(struct lynn_score_ctx *used, struct lynn_score_ctx *tmp)
{
	if (used != tmp)
		return;
	for (int i = 0; i < SLOT_N; i++)
		free(tmp->buf[i]);
	memset(tmp, 0, sizeof *tmp);
}

/* ===== Python round(x, n) ===== */

double lynn_score_round(double x, int ndigits)
{
	/* glibc's printf rounds the exact binary value half-even, which is what
	 * CPython's round() computes with its correctly rounded dtoa. */
	char buf[400];
	if (ndigits < 0 || ndigits > 30 || x != x)
		return x;
	snprintf(buf, sizeof buf, "%.*f", ndigits, x);
	return strtod(buf, NULL);
}

/* ===== UTF-8 ===== */

uint32_t utf8_next(const unsigned char *s, size_t len, size_t *i)
{
	size_t p = *i;
	unsigned c = s[p];
	uint32_t cp;
	int need;
	unsigned lo = 0x80, hi = 0xBF;

	if (c < 0x80) {
		*i = p + 1;
		return c;
	}
	if (c >= 0xC2 && c <= 0xDF) {
		need = 1;
		cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		cp = c & 0x0F;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		cp = c & 0x07;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		*i = p + 1;
		return 0xFFFD;
	}
	p++;
	for (int k = 0; k < need; k++, p++) {
		unsigned d;
		if (p >= len) {
			*i = p;
			return 0xFFFD;
		}
		d = s[p];
		if (d < lo || d > hi) {
			*i = p; /* resume at the offending byte */
			return 0xFFFD;
		}
		lo = 0x80;
		hi = 0xBF;
		cp = (cp << 6) | (d & 0x3F);
	}
	*i = p;
	return cp;
}

size_t utf8_decode(const char *s, size_t len, uint32_t *cps)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, n = 0;
	while (i < len) {
		if (u[i] < 0x80)
			cps[n++] = u[i++];
		else
			cps[n++] = utf8_next(u, len, &i);
	}
	return n;
}

int utf8_put(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* ===== character classes ===== */

bool py_isspace_nonascii(uint32_t c)
{
	switch (c) {
	case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F:
	case 0x205F: case 0x3000:
		return true;
	default:
		return c >= 0x2000 && c <= 0x200A;
	}
}

bool py_isdecimal(uint32_t c)
{
	if (c < 0x80)
		return c >= '0' && c <= '9';
	if (c > 0x10FFFF)
		return false;
	return utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_ND;
}

bool uc_is_letter(uint32_t c)
{
	utf8proc_category_t k;
	if (c < 0x80)
		return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
	if (c > 0x10FFFF)
		return false;
	k = utf8proc_category((utf8proc_int32_t)c);
	return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

/* Script=Latin ranges, Unicode 14.0 Scripts.txt (inclusive). */
static const uint32_t latin_ranges[][2] = {
	{ 0x0041, 0x005A }, { 0x0061, 0x007A }, { 0x00AA, 0x00AA }, { 0x00BA, 0x00BA },
	{ 0x00C0, 0x00D6 }, { 0x00D8, 0x00F6 }, { 0x00F8, 0x02B8 }, { 0x02E0, 0x02E4 },
	{ 0x1D00, 0x1D25 }, { 0x1D2C, 0x1D5C }, { 0x1D62, 0x1D65 }, { 0x1D6B, 0x1D77 },
	{ 0x1D79, 0x1DBE }, { 0x1E00, 0x1EFF }, { 0x2071, 0x2071 }, { 0x207F, 0x207F },
	{ 0x2090, 0x209C }, { 0x212A, 0x212B }, { 0x2132, 0x2132 }, { 0x214E, 0x214E },
	{ 0x2160, 0x2188 }, { 0x2C60, 0x2C7F }, { 0xA722, 0xA787 }, { 0xA78B, 0xA7CA },
	{ 0xA7D0, 0xA7D1 }, { 0xA7D3, 0xA7D3 }, { 0xA7D5, 0xA7D9 }, { 0xA7F2, 0xA7FF },
	{ 0xAB30, 0xAB5A }, { 0xAB5C, 0xAB64 }, { 0xAB66, 0xAB69 }, { 0xFB00, 0xFB06 },
	{ 0xFF21, 0xFF3A }, { 0xFF41, 0xFF5A }, { 0x10780, 0x10785 }, { 0x10787, 0x107B0 },
	{ 0x107B2, 0x107BA }, { 0x1DF00, 0x1DF1E },
};

bool uc_is_latin(uint32_t c)
{
	size_t lo = 0, hi = sizeof latin_ranges / sizeof latin_ranges[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < latin_ranges[mid][0])
			hi = mid;
		else if (c > latin_ranges[mid][1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* ===== interning ===== */

int score_intern(struct lynn_score_ctx *ctx, enum score_slot slot, const uint32_t *cps,
		 const uint32_t *off, const uint32_t *wlen, size_t n, uint32_t *ids,
		 size_t *n_distinct, struct lynn_err *err)
{
	/* table entry: (hash, index of the first span with it) */
	size_t cap = pow2_at_least(2 * n + 2), mask = cap - 1, nd = 0;
	struct ent { uint64_t h; uint32_t first; uint32_t id; } *t;

	t = score_buf(ctx, slot, cap * sizeof *t, err);
	if (!t)
		return -LYNN_ENOMEM;
	memset(t, 0xFF, cap * sizeof *t);
	for (size_t k = 0; k < n; k++) {
		uint64_t h = 0x9E3779B97F4A7C15ULL ^ wlen[k];
		const uint32_t *w = cps + off[k];
		size_t pos;
		for (uint32_t q = 0; q < wlen[k]; q++)
			h = (h ^ w[q]) * 0x100000001B3ULL;
		h = mix64(h);
		pos = (size_t)h & mask;
		for (;;) {
			if (t[pos].first == UINT32_MAX) {
				t[pos].h = h;
				t[pos].first = (uint32_t)k;
				t[pos].id = (uint32_t)nd;
				ids[k] = (uint32_t)nd++;
				break;
			}
			if (t[pos].h == h && wlen[t[pos].first] == wlen[k] &&
			    !memcmp(cps + off[t[pos].first], w, wlen[k] * sizeof *w)) {
				ids[k] = t[pos].id;
				break;
			}
			pos = (pos + 1) & mask;
		}
	}
	*n_distinct = nd;
	return 0;
}
