/*
 * chrf.c - chrF and chrF++ exactly as sacreBLEU 2.x computes them
 * (sacrebleu/metrics/chrf.py, Popović 2015 and 2017).
 *
 * Per order n, sacreBLEU counts the hypothesis n-grams, the reference
 * n-grams and the clipped matches Σ min(count_hyp, count_ref); the
 * hypothesis count is reported as 0 when the reference has no n-gram of that
 * order. Characters are code points with whitespace (Python str.isspace)
 * removed; words come from str.split() with one leading or trailing ASCII
 * punctuation mark split off. The f-score averages precision and recall
 * over the "effective" orders (both sides non-empty) and combines them with
 * β; the floating-point operations follow the Python source one for one so
 * that the results agree to the last bit.
 */
#include <stdlib.h>
#include <string.h>

#include "lynn/score.h"
#include "score/score_internal.h"

/*
 * Counting by prefix refinement: the n-gram at position i is identified by
 * the pair (id of the (n-1)-gram at i, item i+n-1), so each order is one
 * pass of 64-bit hash lookups with no string comparison. A position whose
 * (n-1)-gram does not occur on the other side cannot start a shared n-gram
 * either, so it drops out of the higher orders (its n-grams still count in
 * the totals, which are plain lengths).
 */
#define DEAD UINT32_MAX

struct ngram_ent {
	uint64_t key;  /* (prev id + 1) << 32 | item; 0 = empty slot */
	uint32_t cref, chyp;
};

static int ngram_stats(struct lynn_score_ctx *ctx, const uint32_t *hyp, size_t nh,
		       const uint32_t *ref, size_t nr, int max_order, int64_t *v,
		       struct lynn_err *err)
{
	/* alive positions and the slot id of their current n-gram */
	uint32_t *posh, *idh, *posr, *idr, *made;
	struct ngram_ent *t;
	size_t cap, nah = nh, nar = nr;
	unsigned shift;

	memset(v, 0, 3 * (size_t)max_order * sizeof *v);
	if (nr == 0)
		return 0; /* no reference n-gram of any order: all counts 0 */
	posh = score_buf(ctx, SLOT_HASH_A, 2 * (nh + 1) * sizeof *posh, err);
	posr = score_buf(ctx, SLOT_HASH_B, 3 * (nr + 1) * sizeof *posr, err);
	cap = pow2_at_least(2 * nr + 2);
	shift = 64 - (unsigned)__builtin_ctzll((unsigned long long)cap);
	/* The table lives in the context and is kept all-zero between calls
	 * (every slot filled is emptied again), so only a fresh buffer needs
	 * clearing. */
	{
		void *before = ctx->buf[SLOT_NGRAM];
		size_t before_cap = ctx->cap[SLOT_NGRAM];
		t = score_buf(ctx, SLOT_NGRAM, cap * sizeof *t, err);
		if (t && (t != before || ctx->cap[SLOT_NGRAM] != before_cap))
			memset(t, 0, ctx->cap[SLOT_NGRAM]);
	}
	if (!posh || !posr || !t)
		return -LYNN_ENOMEM;
	idh = posh + nh + 1;
	idr = posr + nr + 1;
	made = idr + nr + 1; /* slots filled this order, emptied after it */
	for (size_t i = 0; i < nh; i++) {
		posh[i] = (uint32_t)i;
		idh[i] = 0; /* the empty prefix */
	}
	for (size_t i = 0; i < nr; i++) {
		posr[i] = (uint32_t)i;
		idr[i] = 0;
	}

	for (int n = 1; n <= max_order; n++) {
		size_t cr = nr >= (size_t)n ? nr - (size_t)n + 1 : 0;
		size_t ch = nh >= (size_t)n ? nh - (size_t)n + 1 : 0;
		size_t nmade = 0, w;
		int64_t match = 0;

		if (cr == 0)
			break; /* this and higher orders: reference empty → (0, 0, 0) */
		v[3 * (n - 1)] = (int64_t)ch;
		v[3 * (n - 1) + 1] = (int64_t)cr;
		/* positions are ascending: the ones past the end drop off the tail */
		while (nar && posr[nar - 1] >= cr)
			nar--;
		while (nah && posh[nah - 1] >= ch)
			nah--;
		if (nar == 0 || nah == 0)
			continue; /* no shared (n-1)-gram left: no more matches */
		for (size_t k = 0; k < nar; k++) {
			uint64_t key = ((uint64_t)idr[k] + 1) << 32 | ref[posr[k] + (size_t)n - 1];
			size_t pos = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> shift);
			while (t[pos].key && t[pos].key != key)
				pos = (pos + 1) & (cap - 1);
			if (!t[pos].key) {
				t[pos].key = key;
				made[nmade++] = (uint32_t)pos;
			}
			t[pos].cref++;
			idr[k] = (uint32_t)pos;
		}
		w = 0;
		for (size_t k = 0; k < nah; k++) {
			uint64_t key = ((uint64_t)idh[k] + 1) << 32 | hyp[posh[k] + (size_t)n - 1];
			size_t pos = (size_t)((key * 0x9E3779B97F4A7C15ULL) >> shift);
			while (t[pos].key && t[pos].key != key)
				pos = (pos + 1) & (cap - 1);
			if (!t[pos].key)
				continue; /* not in the reference: drops out */
			match += t[pos].chyp < t[pos].cref;
			t[pos].chyp++;
			posh[w] = posh[k];
			idh[w++] = (uint32_t)pos;
		}
		nah = w;
		/* reference n-grams the hypothesis lacks cannot extend into matches */
		w = 0;
		for (size_t k = 0; k < nar; k++)
			if (t[idr[k]].chyp) {
				posr[w] = posr[k];
				idr[w++] = idr[k];
			}
		nar = w;
		v[3 * (n - 1) + 2] = match;
		/* ids are slot numbers, unique within an order; empty the slots
		 * for the next order (its keys embed these ids) */
		for (size_t k = 0; k < nmade; k++)
			t[made[k]] = (struct ngram_ent){ 0, 0, 0 };
	}
	return 0;
}

static bool is_punct(uint32_t c)
{
	return c < 0x80 && strchr("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", (int)c) && c != 0;
}

/* sacreBLEU _remove_punctuation: spans of the words of cps[0..n). */
static size_t split_words(const uint32_t *cps, size_t base, size_t n, uint32_t *off,
			  uint32_t *len)
{
	size_t nw = 0, i = 0;
	while (i < n) {
		size_t s, e;
		while (i < n && py_isspace(cps[base + i]))
			i++;
		if (i >= n)
			break;
		s = i;
		while (i < n && !py_isspace(cps[base + i]))
			i++;
		e = i;
		if (e - s == 1) {
			off[nw] = (uint32_t)(base + s);
			len[nw++] = 1;
		} else if (is_punct(cps[base + e - 1])) {
			off[nw] = (uint32_t)(base + s);
			len[nw++] = (uint32_t)(e - s - 1);
			off[nw] = (uint32_t)(base + e - 1);
			len[nw++] = 1;
		} else if (is_punct(cps[base + s])) {
			off[nw] = (uint32_t)(base + s);
			len[nw++] = 1;
			off[nw] = (uint32_t)(base + s + 1);
			len[nw++] = (uint32_t)(e - s - 1);
		} else {
			off[nw] = (uint32_t)(base + s);
			len[nw++] = (uint32_t)(e - s);
		}
	}
	return nw;
}

static int check_opts(const struct lynn_chrf_opts *o, struct lynn_err *err)
{
	if (o->char_order < 1 || o->char_order > LYNN_CHRF_MAX_CHAR_ORDER ||
	    o->word_order < 0 || o->word_order > LYNN_CHRF_MAX_WORD_ORDER || o->beta < 0)
		return lynn_errf(err, -LYNN_EINVAL,
				 "chrf: char order %d / word order %d / beta %d out of range",
				 o->char_order, o->word_order, o->beta);
	return 0;
}

int lynn_chrf_stats_compute(struct lynn_score_ctx *ctx_in, const struct lynn_chrf_opts *o,
			    const char *hyp, size_t hyp_len, const char *ref, size_t ref_len,
			    struct lynn_chrf_stats *out, struct lynn_err *err)
{
	struct lynn_score_ctx tmp, *ctx = score_ctx_get(ctx_in, &tmp);
	uint32_t *all, *ch, *cr;
	size_t nh, nr, mh = 0, mr = 0;
	int rc;

	if ((rc = check_opts(o, err)))
		return rc;
	memset(out, 0, sizeof *out);
	out->n_orders = o->char_order + o->word_order;
	rc = -LYNN_ENOMEM;
	/* hyp then ref code points, whitespace kept (words need it) */
	all = score_buf(ctx, SLOT_CP_A, (hyp_len + ref_len + 1) * sizeof *all, err);
	if (!all)
		goto out;
	nh = utf8_decode(hyp, hyp_len, all);
	nr = utf8_decode(ref, ref_len, all + nh);

	if (o->word_order > 0) {
		size_t ntot = nh + nr, nwh, nwr, nd;
		uint32_t *off, *len, *ids;
		off = score_buf(ctx, SLOT_IDS_A, 3 * (ntot + 1) * sizeof *off, err);
		if (!off)
			goto out;
		len = off + ntot + 1;
		ids = len + ntot + 1;
		nwh = split_words(all, 0, nh, off, len);
		nwr = split_words(all, nh, nr, off + nwh, len + nwh);
		if ((rc = score_intern(ctx, SLOT_TABLE, all, off, len, nwh + nwr, ids, &nd, err)))
			goto out;
		rc = ngram_stats(ctx, ids, nwh, ids + nwh, nwr, o->word_order,
				 out->v + 3 * o->char_order, err);
		if (rc)
			goto out;
		rc = -LYNN_ENOMEM;
	}

	ch = score_buf(ctx, SLOT_CP_C, (nh + 1) * sizeof *ch, err);
	cr = score_buf(ctx, SLOT_CP_D, (nr + 1) * sizeof *cr, err);
	if (!ch || !cr)
		goto out;
	for (size_t i = 0; i < nh; i++)
		if (o->whitespace || !py_isspace(all[i]))
			ch[mh++] = all[i];
	for (size_t i = 0; i < nr; i++)
		if (o->whitespace || !py_isspace(all[nh + i]))
			cr[mr++] = all[nh + i];
	rc = ngram_stats(ctx, ch, mh, cr, mr, o->char_order, out->v, err);
out:
	score_ctx_done(ctx, &tmp);
	return rc;
}

void lynn_chrf_stats_add(struct lynn_chrf_stats *acc, const struct lynn_chrf_stats *s)
{
	if (acc->n_orders == 0)
		acc->n_orders = s->n_orders;
	for (int i = 0; i < 3 * s->n_orders && i < LYNN_CHRF_MAX_STATS; i++)
		acc->v[i] += s->v[i];
}

double lynn_chrf_stats_score(const struct lynn_chrf_opts *o, const struct lynn_chrf_stats *s)
{
	/* sacreBLEU CHRF._compute_f_score, operation for operation */
	const double eps = 1e-16;
	double score = 0.0, avg_prec = 0.0, avg_rec = 0.0;
	double factor = (double)o->beta * (double)o->beta;
	int effective_order = 0, order = s->n_orders;

	for (int i = 0; i < order; i++) {
		int64_t n_hyp = s->v[3 * i], n_ref = s->v[3 * i + 1], n_match = s->v[3 * i + 2];
		double prec = n_hyp > 0 ? (double)n_match / (double)n_hyp : eps;
		double rec = n_ref > 0 ? (double)n_match / (double)n_ref : eps;
		double denom = factor * prec + rec;
		score += denom > 0 ? ((1 + factor) * prec * rec / denom) : eps;
		if (n_hyp > 0 && n_ref > 0) {
			avg_prec += prec;
			avg_rec += rec;
			effective_order++;
		}
	}
	if (o->eps_smoothing)
		return order ? 100 * score / order : 0.0;
	if (effective_order == 0) {
		avg_prec = avg_rec = 0.0;
	} else {
		avg_prec /= effective_order;
		avg_rec /= effective_order;
	}
	if (avg_prec + avg_rec != 0.0) {
		score = (1 + factor) * avg_prec * avg_rec;
		score /= ((factor * avg_prec) + avg_rec);
		return 100 * score;
	}
	return 0.0;
}

int lynn_chrf_sentence(struct lynn_score_ctx *ctx, const struct lynn_chrf_opts *o,
		       const char *hyp, size_t hyp_len, const char *ref, size_t ref_len,
		       double *score, struct lynn_err *err)
{
	struct lynn_chrf_stats st;
	int rc = lynn_chrf_stats_compute(ctx, o, hyp, hyp_len, ref, ref_len, &st, err);
	if (rc)
		return rc;
	*score = lynn_chrf_stats_score(o, &st);
	return 0;
}
