/*
 * score_internal.h - shared by src/score: short names for lynn/utf8.h, the
 * scratch context, small hash helpers.
 */
#ifndef LYNN_SCORE_INTERNAL_H
#define LYNN_SCORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lynn/err.h"
#include "lynn/score.h"
#include "lynn/utf8.h"

/* Scratch slots of a context: each is one growable buffer. */
enum score_slot {
	SLOT_CP_A, SLOT_CP_B, SLOT_CP_C, SLOT_CP_D,
	SLOT_HASH_A, SLOT_HASH_B, SLOT_TABLE, SLOT_IDS_A, SLOT_IDS_B, SLOT_BITS,
	SLOT_SM_B2J, SLOT_SM_IDX, SLOT_SM_LEN, SLOT_SM_QUEUE, SLOT_NGRAM, SLOT_CHRF_CP, SLOT_CHRF_CLS,
	SLOT_CHRF_WORD, SLOT_CHRF_T,
	SLOT_N
};

struct lynn_score_ctx {
	void *buf[SLOT_N];
	size_t cap[SLOT_N];
};

/* A buffer of at least `bytes` in `slot` (contents not kept), or NULL with
 * err filled on out-of-memory. */
void *score_buf(struct lynn_score_ctx *ctx, enum score_slot slot, size_t bytes,
		struct lynn_err *err);

/* Use ctx, or a temporary one when ctx is NULL (released by score_ctx_done). */
struct lynn_score_ctx *score_ctx_get(struct lynn_score_ctx *ctx, struct lynn_score_ctx *tmp);
void score_ctx_done(struct lynn_score_ctx *used, struct lynn_score_ctx *tmp);

/* Short names used across src/score for include/lynn/utf8.h. */
static inline uint32_t utf8_next(const unsigned char *s, size_t len, size_t *i)
{
	return lynn_utf8_next(s, len, i);
}
static inline size_t utf8_decode(const char *s, size_t len, uint32_t *cps)
{
	return lynn_utf8_decode(s, len, cps);
}
static inline int utf8_put(uint32_t cp, char *out) { return lynn_utf8_put(cp, out); }
static inline bool py_isspace(uint32_t c) { return lynn_uc_isspace(c); }
static inline bool py_isspace_nonascii(uint32_t c) { return lynn_uc_isspace_nonascii(c); }
static inline bool py_isdecimal(uint32_t c) { return lynn_uc_isdecimal(c); }
static inline bool uc_is_letter(uint32_t c) { return lynn_uc_is_letter(c); }
static inline bool uc_is_latin(uint32_t c) { return lynn_uc_is_latin(c); }
/* U+4E00..U+9FFF, the toolkit's "CJK" class [一-鿿]. */
static inline bool is_cjk_basic(uint32_t c) { return c >= 0x4E00 && c <= 0x9FFF; }

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* Smallest power of two ≥ n and ≥ 16 (n ≤ 2^63): no loop, so no exit
 * branch to mispredict. */
static inline size_t pow2_at_least(size_t n)
{
	unsigned long long m = (unsigned long long)(n > 16 ? n : 16) - 1;
	return (size_t)1 << (64 - __builtin_clzll(m));
}

/* Intern n spans of cps (start off[k], length wlen[k]) into dense ids
 * 0..*n_distinct-1 written to ids[k], using `slot` for the hash table. */
int score_intern(struct lynn_score_ctx *ctx, enum score_slot slot, const uint32_t *cps,
		 const uint32_t *off, const uint32_t *wlen, size_t n, uint32_t *ids,
		 size_t *n_distinct, struct lynn_err *err);

/* score_intern with the spans' hashes given (hs[k], any function of the
 * span's items that equal spans share; the low bits pick the slot). */
int score_intern_hashed(struct lynn_score_ctx *ctx, enum score_slot slot, const uint32_t *cps,
			const uint32_t *off, const uint32_t *wlen, const uint64_t *hs, size_t n,
			uint32_t *ids, size_t *n_distinct, struct lynn_err *err);

/* Style rules on decoded output (shared by style and refsim). */
void style_rules_cp(const struct lynn_style_opts *o, const uint32_t *p, size_t np,
		    const char *prompt, size_t prompt_len, const uint32_t *t, size_t nt,
		    const char *output, size_t output_len, struct lynn_style_result *out);

#endif
