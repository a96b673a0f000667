/* text.c - the scratch context, Python round() and span interning for
 * src/score (UTF-8 and character classes: include/lynn/utf8.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ===== interning ===== */

/* Table entry (8 bytes: less to clear per call): the high half of a span's
 * hash and the index of the first span with it (UINT32_MAX: empty). */
struct intern_ent {
	uint32_t hi, first;
};

/* Span k's id: the id of the first equal span already in the table, or the
 * next new id (linear probing from pos). */
static inline __attribute__((always_inline)) uint32_t intern_probe(struct intern_ent *t, size_t mask, size_t pos, uint32_t hi,
				    size_t k, const uint32_t *cps, const uint32_t *off,
				    const uint32_t *wlen, const uint32_t *ids, size_t *nd)
{
	const uint32_t *w = cps + off[k], l = wlen[k];
	for (;;) {
		uint32_t f = t[pos].first, q = 0;
		if (f == UINT32_MAX) {
			t[pos].hi = hi;
			t[pos].first = (uint32_t)k;
			return (uint32_t)(*nd)++;
		}
		if (t[pos].hi == hi && wlen[f] == l) {
			const uint32_t *v = cps + off[f];
			while (q < l && v[q] == w[q])
				q++;
			if (q == l)
				return ids[f];
		}
		pos = (pos + 1) & mask;
	}
}

/* An empty table for n spans (at most half full), in the context's slot. */
static inline __attribute__((always_inline)) struct intern_ent *intern_table(struct lynn_score_ctx *ctx, enum score_slot slot, size_t n,
				       size_t *mask, struct lynn_err *err)
{
	size_t cap = pow2_at_least(2 * n + 2);
	struct intern_ent *t = score_buf(ctx, slot, cap * sizeof *t, err);
	if (t)
		memset(t, 0xFF, cap * sizeof *t);
	*mask = cap - 1;
	return t;
}

int score_intern(struct lynn_score_ctx *ctx, enum score_slot slot, const uint32_t *cps,
		 const uint32_t *off, const uint32_t *wlen, size_t n, uint32_t *ids,
		 size_t *n_distinct, struct lynn_err *err)
{
	size_t mask, nd = 0;
	struct intern_ent *t = intern_table(ctx, slot, n, &mask, err);

	if (!t)
		return -LYNN_ENOMEM;
	for (size_t k = 0; k < n; k++) {
		/* rotate-xor over the span (one short dependency chain per
		 * item), mixed once: ids are in order of first appearance, so
		 * the hash affects the speed only */
		uint64_t h = 0x9E3779B97F4A7C15ULL ^ wlen[k];
		const uint32_t *w = cps + off[k];
		uint32_t l = wlen[k], hi;
		size_t pos;
		for (uint32_t q = 0; q < l; q++)
			h = (h << 21 | h >> 43) ^ w[q];
		h = mix64(h);
		hi = (uint32_t)(h >> 32);
		pos = (size_t)h & mask;
		ids[k] = intern_probe(t, mask, pos, hi, k, cps, off, wlen, ids, &nd);
	}
	*n_distinct = nd;
	return 0;
}

int score_intern_hashed(struct lynn_score_ctx *ctx, enum score_slot slot, const uint32_t *cps,
			const uint32_t *off, const uint32_t *wlen, const uint64_t *hs, size_t n,
			uint32_t *ids, size_t *n_distinct, struct lynn_err *err)
{
	size_t mask, nd = 0;
	struct intern_ent *t = intern_table(ctx, slot, n, &mask, err);

	if (!t)
		return -LYNN_ENOMEM;
	for (size_t k = 0; k < n; k++) /* slot: the hash's low bits; the entry keeps the high half */
		ids[k] = intern_probe(t, mask, (size_t)hs[k] & mask, (uint32_t)(hs[k] >> 32), k, cps, off,
				      wlen, ids, &nd);
	*n_distinct = nd;
	return 0;
}
