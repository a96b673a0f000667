/*
 * rouge.c - ROUGE-L as Google rouge-score computes it (rouge/tokenize.py,
 * rouge/rouge_scorer.py _score_lcs, scoring.fmeasure), extended per SPEC §6.
 *
 * Tokens: ASCII letters are lowercased; a token is a maximal run of
 * [a-z0-9]; every non-ASCII code point whose general category is a letter
 * (L*) and whose script is not Latin is a token of its own (each CJK
 * ideograph, kana, Hangul syllable, Cyrillic or Greek letter...). Everything
 * else separates tokens, including Latin letters with diacritics ("café" →
 * "caf", as rouge-score) and non-ASCII digits. With LYNN_ROUGE_F_ASCII_ONLY
 * non-ASCII letters are dropped too, which is rouge-score exactly (its
 * str.lower() also turns U+0130 into "i" + a combining dot and the Kelvin
 * sign U+212A into "k"; that mode does the same). With LYNN_ROUGE_F_STEM,
 * [a-z0-9] tokens longer than 3 characters go through NLTK's Porter stemmer.
 *
 * The LCS length uses the bit-parallel algorithm of Allison-Dix / Hyyrö
 * (one machine word covers 64 tokens), in blocks so that memory stays small.
 */
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/score.h"
#include "score/score_internal.h"

#define STEM_MAX 256

/* Lowercased ASCII word character for a byte, or 0 (bytes ≥ 0x80 too). */
static const unsigned char word_ascii[256] = {
	['0'] = '0', ['1'] = '1', ['2'] = '2', ['3'] = '3', ['4'] = '4',
	['5'] = '5', ['6'] = '6', ['7'] = '7', ['8'] = '8', ['9'] = '9',
#define W(x) [x] = x, [x - 32] = x
	W('a'), W('b'), W('c'), W('d'), W('e'), W('f'), W('g'), W('h'), W('i'),
	W('j'), W('k'), W('l'), W('m'), W('n'), W('o'), W('p'), W('q'), W('r'),
	W('s'), W('t'), W('u'), W('v'), W('w'), W('x'), W('y'), W('z'),
#undef W
};

/* The code point at byte i of s (decoded as lynn_utf8_decode does) with the
 * index after it in *ni. */
static inline uint32_t cp_at(const unsigned char *s, size_t n, size_t i, size_t *ni)
{
	uint32_t c = s[i];
	if (c < 0x80) {
		*ni = i + 1;
		return c;
	}
	if (c >= 0xC2 && c <= 0xDF && i + 1 < n && (s[i + 1] & 0xC0) == 0x80) {
		*ni = i + 2;
		return (c & 0x1F) << 6 | (s[i + 1] & 0x3Fu);
	}
	if (c >= 0xE1 && c <= 0xEF && c != 0xED && i + 2 < n && (s[i + 1] & 0xC0) == 0x80 &&
	    (s[i + 2] & 0xC0) == 0x80) {
		/* well-formed 3-byte form (E0 and ED: left to utf8_next) */
		*ni = i + 3;
		return (c & 0x0F) << 12 | (s[i + 1] & 0x3Fu) << 6 | (s[i + 2] & 0x3Fu);
	}
	*ni = i;
	return utf8_next(s, n, ni);
}

/* ASCII-only mode: ASCII as cp_at; at a byte ≥ 0x80, the only non-ASCII word characters
 * are U+0130 (C4 B0) and U+212A (E2 84 AA), and a lead byte is never part
 * of another sequence, so any other byte is skipped alone (it separates
 * tokens as the U+FFFD or code point utf8_next would make of it does).
 * Returns the code point (0x130, 0x212A or 0xFFFD) and the next index. */
static inline uint32_t cp_at_ascii(const unsigned char *s, size_t n, size_t i, size_t *ni)
{
	if (s[i] < 0x80) {
		*ni = i + 1;
		return s[i];
	}
	if (s[i] == 0xC4 && i + 1 < n && s[i + 1] == 0xB0) {
		*ni = i + 2;
		return 0x130;
	}
	if (s[i] == 0xE2 && i + 2 < n && s[i + 1] == 0x84 && s[i + 2] == 0xAA) {
		*ni = i + 3;
		return 0x212A;
	}
	*ni = i + 1;
	return 0xFFFD;
}

/* Word character (lowercased) of code point c, or 0; *dot set when c is
 * U+0130 in ASCII-only mode ("İ".lower() is "i" + U+0307, ending the token). */
static inline uint32_t word_char(uint32_t c, bool ascii_only, bool *dot)
{
	*dot = false;
	if (c < 0x80)
		return word_ascii[c];
	if (ascii_only && (c == 0x130 || c == 0x212A)) {
		*dot = c == 0x130;
		return *dot ? 'i' : 'k';
	}
	return 0;
}

#define TOK_H0 0x9E3779B97F4A7C15ULL

/* One character into a token's hash: rotate and xor (a short dependency
 * chain), mixed at the end; ids are dense in order of first appearance
 * and the text is compared on a hash match, so the hash affects speed only. */
static inline uint64_t tok_hash_add(uint64_t h, uint32_t w)
{
	return (h << 7 | h >> 57) ^ w;
}

/* Hash of a token's text (code points w[0..n)), as tokenize computes it. */
static inline uint64_t tok_hash_end(uint64_t h, size_t n)
{
	return mix64(h ^ n);
}

/* Tokenize the UTF-8 bytes s[0..n) appending token text (code points) to tok
 * at *nt, spans to off/len and, when hs is not NULL, each token's hash to hs.
 * Returns the number of tokens. */
static size_t tokenize(const unsigned char *s, size_t n, unsigned flags, uint32_t *tok,
		       size_t *nt, uint32_t *off, uint32_t *len, uint64_t *hs)
{
	size_t ntok = 0, i = 0, ni;
	bool ascii_only = flags & LYNN_ROUGE_F_ASCII_ONLY, dot;

	while (i < n) {
		uint32_t c, w;
		if (!word_ascii[s[i]] && s[i] < 0x80) {
			i++;
			continue;
		}
		c = ascii_only ? cp_at_ascii(s, n, i, &ni) : cp_at(s, n, i, &ni);
		w = word_char(c, ascii_only, &dot);
		if (w) {
			size_t st0 = *nt, k = st0;
			uint64_t h = TOK_H0;
			for (;;) {
				tok[k++] = w;
				h = tok_hash_add(h, w);
				i = ni;
				if (dot)
					break;
				/* the ASCII run of the token */
				while (i < n && (w = word_ascii[s[i]])) {
					tok[k++] = w;
					h = tok_hash_add(h, w);
					i++;
				}
				if (i >= n || s[i] < 0x80)
					break;
				c = ascii_only ? cp_at_ascii(s, n, i, &ni) : cp_at(s, n, i, &ni);
				if (!(w = word_char(c, ascii_only, &dot)))
					break;
			}
			*nt = k;
			if ((flags & LYNN_ROUGE_F_STEM) && *nt - st0 > 3 && *nt - st0 < STEM_MAX) {
				char wd[STEM_MAX], st[STEM_MAX + 8];
				size_t wl = *nt - st0;
				int sl;
				for (size_t q = 0; q < wl; q++)
					wd[q] = (char)tok[st0 + q];
				sl = lynn_porter_stem(wd, wl, st, sizeof st);
				if (sl >= 0 && (size_t)sl <= wl) {
					h = TOK_H0;
					for (int q = 0; q < sl; q++) {
						tok[st0 + (size_t)q] = (unsigned char)st[q];
						h = tok_hash_add(h, (unsigned char)st[q]);
					}
					*nt = st0 + (size_t)sl;
				}
			}
			if (*nt > st0) {
				if (hs)
					hs[ntok] = tok_hash_end(h, *nt - st0);
				off[ntok] = (uint32_t)st0;
				len[ntok++] = (uint32_t)(*nt - st0);
			}
			continue;
		}
		if (!ascii_only && c >= 0x80 && uc_is_letter(c) && !uc_is_latin(c)) {
			if (hs)
				hs[ntok] = tok_hash_end(tok_hash_add(TOK_H0, c), 1);
			off[ntok] = (uint32_t)*nt;
			len[ntok++] = 1;
			tok[(*nt)++] = c;
		}
		i = ni;
	}
	return ntok;
}

/*
 * The tokenizer above as a state machine without a branch per token (the
 * token ends of prose are unpredictable), for callers without stemming:
 * every byte stores its word character (0 for a separator) to tok and
 * advances only for a word character; a word character after a separator
 * starts a token; the running hash restarts from 0 after a separator. Only
 * bytes ≥ 0x80 branch off (tok_slow). Token t starts at off[t] (off[ntok]
 * is the end of the last one: len[t] = off[t+1] - off[t]); its unmixed
 * hash is hraw[t+1] (a separator writes the next, unused slot).
 */
struct tok_flat {
	uint32_t *tok, *off;
	uint64_t *hraw, h, prev; /* prev: 1 after a word character */
	size_t k, ntok;
};

static inline __attribute__((always_inline)) void tok_step(uint32_t w, uint64_t end, uint32_t *tok,
							    uint32_t *off, uint64_t *hraw,
							    uint64_t *h, uint64_t *prev,
							    size_t *k, size_t *ntok)
{
	uint64_t iw = w != 0;
	off[*ntok] = (uint32_t)*k;
	*ntok += iw & (*prev ^ 1);
	*h = tok_hash_add(*h & (0 - *prev), w);
	hraw[*ntok + 1 - iw] = *h;
	tok[*k] = w;
	*k += iw;
	*prev = iw & (end ^ 1);
}

/* One code point from byte i ≥ 0x80; returns the index after it. */
static __attribute__((noinline)) size_t tok_slow(const unsigned char *s, size_t n, size_t i,
						  bool ascii_only, struct tok_flat *f)
{
	size_t ni;
	uint32_t c;
	if (ascii_only) {
		/* "İ".lower() is "i" + U+0307: the dot ends the token */
		c = cp_at_ascii(s, n, i, &ni);
		tok_step(c == 0x130 ? 'i' : c == 0x212A ? 'k' : 0, c == 0x130, f->tok, f->off,
			 f->hraw, &f->h, &f->prev, &f->k, &f->ntok);
	} else {
		c = cp_at(s, n, i, &ni);
		if (uc_is_letter(c) && !uc_is_latin(c)) {
			f->prev = 0; /* a token of its own */
			tok_step(c, 1, f->tok, f->off, f->hraw, &f->h, &f->prev, &f->k, &f->ntok);
		} else {
			tok_step(0, 0, f->tok, f->off, f->hraw, &f->h, &f->prev, &f->k, &f->ntok);
		}
	}
	return ni;
}

static size_t tokenize_flat(const unsigned char *s, size_t n, bool ascii_only, uint32_t *tok,
			    size_t *nt, uint32_t *off, uint64_t *hraw)
{
	uint64_t h = 0, prev = 0;
	size_t k = *nt, ntok = 0, i = 0;
	while (i < n) {
		unsigned b = s[i];
		/* ASCII-only: bytes ≥ 0x80 separate (word_ascii is 0) except the
		 * leads of U+0130 and U+212A */
		if (b < 0x80 || (ascii_only && b != 0xC4 && b != 0xE2)) {
			tok_step(word_ascii[b], 0, tok, off, hraw, &h, &prev, &k, &ntok);
			i++;
		} else {
			struct tok_flat f = { tok, off, hraw, h, prev, k, ntok };
			i = tok_slow(s, n, i, ascii_only, &f);
			h = f.h;
			prev = f.prev;
			k = f.k;
			ntok = f.ntok;
		}
	}
	off[ntok] = (uint32_t)k;
	*nt = k;
	return ntok;
}

/* Lengths and mixed hashes of tokenize_flat's n tokens (hs[t] from the raw
 * hs[t + 1], in place). */
static void tokens_finish(const uint32_t *off, uint32_t *len, uint64_t *hs, size_t n)
{
	for (size_t t = 0; t < n; t++) {
		len[t] = off[t + 1] - off[t];
		hs[t] = tok_hash_end(hs[t + 1], len[t]);
	}
}

/* LCS length of a (length m) and b (length n), ids < nid.
 *
 * Hyyrö's bit-vector recurrence V' = (V + (V & M[b_j])) | (V & ~M[b_j]) over
 * the positions of a, processed in blocks of LCS_BLOCK_WORDS machine words:
 * each block runs over all of b, taking the carry into its lowest bit at
 * step j from the previous block (kept, one byte per step of b). The result
 * is the number of zero bits of the final V. Memory stays bounded (masks of
 * one block) whatever the lengths; time is O(m·n/64). */
#define LCS_BLOCK_WORDS 64

static int lcs_length(struct lynn_score_ctx *ctx, const uint32_t *a, size_t m, const uint32_t *b,
		      size_t n, size_t nid, size_t *out, struct lynn_err *err)
{
	int32_t *slot;
	uint8_t *carry;
	uint64_t *masks, *v;
	size_t zeros = 0, bw_max = (m + 63) / 64;

	if (m <= 64) {
		/* one word: a mask per id, no carries between words */
		uint64_t *mk = score_buf(ctx, SLOT_BITS, (nid + 1) * sizeof *mk, err), vv = ~0ULL;
		if (!mk)
			return -LYNN_ENOMEM;
		memset(mk, 0, nid * sizeof *mk);
		for (size_t i = 0; i < m; i++)
			mk[a[i]] |= 1ULL << i;
		for (size_t j = 0; j < n; j++) {
			uint64_t u = vv & mk[b[j]];
			vv = (vv + u) | (vv - u);
		}
		vv = ~vv;
		if (m < 64)
			vv &= (1ULL << m) - 1;
		*out = (size_t)__builtin_popcountll(vv);
		return 0;
	}
	if (bw_max > LCS_BLOCK_WORDS)
		bw_max = LCS_BLOCK_WORDS;
	slot = score_buf(ctx, SLOT_IDS_B, nid * sizeof *slot + n + 1, err);
	masks = score_buf(ctx, SLOT_BITS, (64 * bw_max + 1) * bw_max * sizeof *masks, err);
	if (!slot || !masks)
		return -LYNN_ENOMEM;
	carry = (uint8_t *)(slot + nid);
	memset(carry, 0, n);
	for (size_t k = 0; k < nid; k++)
		slot[k] = -1;

	for (size_t s0 = 0; s0 < m; s0 += 64 * LCS_BLOCK_WORDS) {
		size_t bl = m - s0 < 64 * LCS_BLOCK_WORDS ? m - s0 : 64 * LCS_BLOCK_WORDS;
		size_t bw = (bl + 63) / 64, nda = 0;
		const uint32_t *ab = a + s0;

		for (size_t i = 0; i < bl; i++)
			if (slot[ab[i]] < 0)
				slot[ab[i]] = (int32_t)nda++;
		v = masks + nda * bw;
		memset(masks, 0, nda * bw * sizeof *masks);
		for (size_t i = 0; i < bl; i++)
			masks[(size_t)slot[ab[i]] * bw + i / 64] |= 1ULL << (i % 64);
		for (size_t k = 0; k < bw; k++)
			v[k] = ~0ULL;
		for (size_t j = 0; j < n; j++) {
			int32_t sl = slot[b[j]];
			unsigned c = carry[j];
			if (sl < 0) {
				/* no match in this block: V' = V | (V + carry) */
				for (size_t k = 0; k < bw && c; k++) {
					uint64_t vv = v[k];
					v[k] = vv | (vv + 1);
					c = vv == ~0ULL;
				}
			} else {
				const uint64_t *mk = masks + (size_t)sl * bw;
				for (size_t k = 0; k < bw; k++) {
					uint64_t vv = v[k], u = vv & mk[k];
					uint64_t sum = vv + u, s2 = sum + c;
					unsigned c1 = sum < vv, c2 = s2 < sum;
					v[k] = s2 | (vv & ~u);
					c = c1 | c2;
				}
			}
			carry[j] = (uint8_t)c;
		}
		for (size_t k = 0; k < bw; k++) {
			uint64_t x = ~v[k];
			if (k == bw - 1 && bl % 64)
				x &= (1ULL << (bl % 64)) - 1;
			zeros += (size_t)__builtin_popcountll(x);
		}
		for (size_t i = 0; i < bl; i++)
			slot[ab[i]] = -1;
	}
	*out = zeros;
	return 0;
}

int lynn_rouge_l(struct lynn_score_ctx *ctx_in, const char *hyp, size_t hyp_len,
		 const char *ref, size_t ref_len, unsigned flags, struct lynn_rouge *out,
		 struct lynn_err *err)
{
	struct lynn_score_ctx tmp, *ctx = score_ctx_get(ctx_in, &tmp);
	size_t tot = hyp_len + ref_len, nt = 0, nth, ntr, nd, lcs;
	uint32_t *tok, *off, *len, *ids;
	uint64_t *hs;
	int rc = -LYNN_ENOMEM;

	memset(out, 0, sizeof *out);
	/* at most one token character and one token per input byte */
	tok = score_buf(ctx, SLOT_CP_B, (tot + 1) * sizeof *tok, err);
	off = score_buf(ctx, SLOT_IDS_A, 3 * (tot + 1) * sizeof *off, err);
	hs = score_buf(ctx, SLOT_HASH_A, (tot + 1) * sizeof *hs, err);
	if (!tok || !off || !hs)
		goto out;
	len = off + tot + 1;
	ids = len + tot + 1;
	if (flags & LYNN_ROUGE_F_STEM) {
		nth = tokenize((const unsigned char *)hyp, hyp_len, flags, tok, &nt, off, len, hs);
		ntr = tokenize((const unsigned char *)ref, ref_len, flags, tok, &nt, off + nth,
			       len + nth, hs + nth);
	} else {
		bool ascii_only = flags & LYNN_ROUGE_F_ASCII_ONLY;
		/* hyp's lengths before ref's first offset overwrites off[nth] */
		nth = tokenize_flat((const unsigned char *)hyp, hyp_len, ascii_only, tok, &nt, off,
				    hs);
		tokens_finish(off, len, hs, nth);
		ntr = tokenize_flat((const unsigned char *)ref, ref_len, ascii_only, tok, &nt,
				    off + nth, hs + nth);
		tokens_finish(off + nth, len + nth, hs + nth, ntr);
	}
	rc = 0;
	if (nth == 0 || ntr == 0)
		goto out;
	if ((rc = score_intern_hashed(ctx, SLOT_TABLE, tok, off, len, hs, nth + ntr, ids, &nd,
				       err)))
		goto out;
	/* the shorter side indexes the bit masks; LCS is symmetric */
	if (ntr <= nth)
		rc = lcs_length(ctx, ids + nth, ntr, ids, nth, nd, &lcs, err);
	else
		rc = lcs_length(ctx, ids, nth, ids + nth, ntr, nd, &lcs, err);
	if (rc)
		goto out;
	out->precision = (double)lcs / (double)nth;
	out->recall = (double)lcs / (double)ntr;
	if (out->precision + out->recall > 0)
		out->fmeasure = 2 * out->precision * out->recall / (out->precision + out->recall);
	else
		out->fmeasure = 0.0;
out:
	score_ctx_done(ctx, &tmp);
	return rc;
}

char *lynn_rouge_tokens(const char *text, size_t n, unsigned flags, struct lynn_err *err)
{
	uint32_t *tok = malloc((n + 1) * sizeof *tok);
	uint32_t *off = malloc((n + 1) * sizeof *off), *len = malloc((n + 1) * sizeof *len);
	struct lynn_buf b = LYNN_BUF_INIT;
	char *res = NULL;
	size_t nt = 0, ntok;

	if (!tok || !off || !len)
		goto out;
	ntok = tokenize((const unsigned char *)text, n, flags, tok, &nt, off, len, NULL);
	if (lynn_buf_puts(&b, ""))
		goto out;
	for (size_t k = 0; k < ntok; k++) {
		char u[4];
		if (k && lynn_buf_putc(&b, ' '))
			goto out;
		for (uint32_t q = 0; q < len[k]; q++)
			if (lynn_buf_append(&b, u, (size_t)utf8_put(tok[off[k] + q], u)))
				goto out;
	}
	res = lynn_buf_detach(&b);
out:
	if (!res)
		lynn_errf(err, -LYNN_ENOMEM, "rouge: out of memory");
	lynn_buf_release(&b);
	free(tok);
	free(off);
	free(len);
	return res;
}

int lynn_similarity(struct lynn_score_ctx *ctx, const char *hyp, size_t hyp_len,
		    const char *ref, size_t ref_len, int chrf_word_order, unsigned rouge_flags,
		    struct lynn_similarity *out, struct lynn_err *err)
{
	struct lynn_chrf_opts o = LYNN_CHRF_OPTS_DEFAULT;
	struct lynn_rouge r;
	int rc;

	o.word_order = chrf_word_order;
	if ((rc = lynn_chrf_sentence(ctx, &o, hyp, hyp_len, ref, ref_len, &out->chrf, err)))
		return rc;
	if ((rc = lynn_rouge_l(ctx, hyp, hyp_len, ref, ref_len, rouge_flags, &r, err)))
		return rc;
	out->rouge_l = r.fmeasure;
	out->score = 0.5 * out->chrf / 100.0 + 0.5 * out->rouge_l;
	return 0;
}
