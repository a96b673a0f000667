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
 * (one machine word covers 64 reference tokens), falling back to the
 * two-row dynamic programme when the bit masks would be large.
 */
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/score.h"
#include "score/score_internal.h"

/* Bit masks larger than this many words use the O(n·m) programme. */
#define ROUGE_MAX_MASK_WORDS (1u << 22)
#define STEM_MAX 256

/* Tokenize cps[0..n) appending token text (code points) to tok at *nt and
 * spans to off/len. Returns the number of tokens. */
static size_t tokenize(const uint32_t *cps, size_t n, unsigned flags, uint32_t *tok,
		       size_t *nt, uint32_t *off, uint32_t *len)
{
	size_t ntok = 0, i = 0;
	bool ascii_only = flags & LYNN_ROUGE_F_ASCII_ONLY;

	while (i < n) {
		uint32_t c = cps[i];
		if (ascii_only && (c == 0x130 || c == 0x212A))
			c = c == 0x130 ? 'i' : 'k';
		if (c >= 'A' && c <= 'Z')
			c += 32;
		if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
			size_t s = *nt;
			while (i < n) {
				bool dot = false;
				c = cps[i];
				if (ascii_only && (c == 0x130 || c == 0x212A)) {
					/* "İ".lower() is "i" + U+0307, which ends the token */
					dot = c == 0x130;
					c = dot ? 'i' : 'k';
				}
				if (c >= 'A' && c <= 'Z')
					c += 32;
				if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
					break;
				tok[(*nt)++] = c;
				i++;
				if (dot)
					break;
			}
			if ((flags & LYNN_ROUGE_F_STEM) && *nt - s > 3 && *nt - s < STEM_MAX) {
				char w[STEM_MAX], st[STEM_MAX + 8];
				size_t wl = *nt - s;
				int sl;
				for (size_t q = 0; q < wl; q++)
					w[q] = (char)tok[s + q];
				sl = lynn_porter_stem(w, wl, st, sizeof st);
				if (sl >= 0 && (size_t)sl <= wl) {
					for (int q = 0; q < sl; q++)
						tok[s + (size_t)q] = (unsigned char)st[q];
					*nt = s + (size_t)sl;
				}
			}
			if (*nt > s) {
				off[ntok] = (uint32_t)s;
				len[ntok++] = (uint32_t)(*nt - s);
			}
			continue;
		}
		if (!ascii_only && c >= 0x80 && uc_is_letter(c) && !uc_is_latin(c)) {
			off[ntok] = (uint32_t)*nt;
			len[ntok++] = 1;
			tok[(*nt)++] = c;
		}
		i++;
	}
	return ntok;
}

/* LCS length of a (length m) and b (length n), ids < nid. */
static int lcs_length(struct lynn_score_ctx *ctx, const uint32_t *a, size_t m, const uint32_t *b,
		      size_t n, size_t nid, size_t *out, struct lynn_err *err)
{
	size_t w = (m + 63) / 64, nda = 0;
	int32_t *slot;
	uint64_t *masks, *v;

	slot = score_buf(ctx, SLOT_IDS_B, nid * sizeof *slot, err);
	if (!slot)
		return -LYNN_ENOMEM;
	for (size_t k = 0; k < nid; k++)
		slot[k] = -1;
	for (size_t i = 0; i < m; i++)
		if (slot[a[i]] < 0)
			slot[a[i]] = (int32_t)nda++;
	if ((nda + 1) * w <= ROUGE_MAX_MASK_WORDS) {
		masks = score_buf(ctx, SLOT_BITS, (nda + 1) * w * sizeof *masks, err);
		if (!masks)
			return -LYNN_ENOMEM;
		memset(masks, 0, (nda + 1) * w * sizeof *masks);
		v = masks + nda * w;
		for (size_t i = 0; i < m; i++)
			masks[(size_t)slot[a[i]] * w + i / 64] |= 1ULL << (i % 64);
		for (size_t k = 0; k < w; k++)
			v[k] = ~0ULL;
		for (size_t j = 0; j < n; j++) {
			int32_t s = slot[b[j]];
			const uint64_t *mk;
			unsigned carry = 0;
			if (s < 0)
				continue;
			mk = masks + (size_t)s * w;
			for (size_t k = 0; k < w; k++) {
				uint64_t vv = v[k], u = vv & mk[k];
				uint64_t sum = vv + u, s2 = sum + carry;
				unsigned c1 = sum < vv, c2 = s2 < sum;
				v[k] = s2 | (vv & ~u);
				carry = c1 | c2;
			}
		}
		{
			size_t zeros = 0;
			for (size_t k = 0; k < w; k++) {
				uint64_t x = ~v[k];
				if (k == w - 1 && m % 64)
					x &= (1ULL << (m % 64)) - 1;
				zeros += (size_t)__builtin_popcountll(x);
			}
			*out = zeros;
		}
		return 0;
	}
	/* two-row dynamic programme, as rouge-score's _lcs_table */
	{
		uint32_t *row = score_buf(ctx, SLOT_BITS, 2 * (n + 1) * sizeof *row, err);
		uint32_t *prev, *cur;
		if (!row)
			return -LYNN_ENOMEM;
		prev = row;
		cur = row + n + 1;
		memset(prev, 0, (n + 1) * sizeof *prev);
		for (size_t i = 1; i <= m; i++) {
			uint32_t *t;
			cur[0] = 0;
			for (size_t j = 1; j <= n; j++)
				cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1
				       : (prev[j] > cur[j - 1] ? prev[j] : cur[j - 1]);
			t = prev;
			prev = cur;
			cur = t;
		}
		*out = prev[n];
	}
	return 0;
}

int lynn_rouge_l(struct lynn_score_ctx *ctx_in, const char *hyp, size_t hyp_len,
		 const char *ref, size_t ref_len, unsigned flags, struct lynn_rouge *out,
		 struct lynn_err *err)
{
	struct lynn_score_ctx tmp, *ctx = score_ctx_get(ctx_in, &tmp);
	size_t tot = hyp_len + ref_len, nh, nr, nt = 0, nth, ntr, nd, lcs;
	uint32_t *cps, *tok, *off, *len, *ids;
	int rc = -LYNN_ENOMEM;

	memset(out, 0, sizeof *out);
	cps = score_buf(ctx, SLOT_CP_A, (tot + 1) * sizeof *cps, err);
	tok = score_buf(ctx, SLOT_CP_B, (tot + 1) * sizeof *tok, err);
	off = score_buf(ctx, SLOT_IDS_A, 3 * (tot + 1) * sizeof *off, err);
	if (!cps || !tok || !off)
		goto out;
	len = off + tot + 1;
	ids = len + tot + 1;
	nh = utf8_decode(hyp, hyp_len, cps);
	nr = utf8_decode(ref, ref_len, cps + nh);
	nth = tokenize(cps, nh, flags, tok, &nt, off, len);
	ntr = tokenize(cps + nh, nr, flags, tok, &nt, off + nth, len + nth);
	rc = 0;
	if (nth == 0 || ntr == 0)
		goto out;
	if ((rc = score_intern(ctx, SLOT_TABLE, tok, off, len, nth + ntr, ids, &nd, err)))
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
	uint32_t *cps = malloc((n + 1) * sizeof *cps), *tok = malloc((n + 1) * sizeof *tok);
	uint32_t *off = malloc((n + 1) * sizeof *off), *len = malloc((n + 1) * sizeof *len);
	struct lynn_buf b = LYNN_BUF_INIT;
	char *res = NULL;
	size_t nc, nt = 0, ntok;

	if (!cps || !tok || !off || !len)
		goto out;
	nc = utf8_decode(text, n, cps);
	ntok = tokenize(cps, nc, flags, tok, &nt, off, len);
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
	free(cps);
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
