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

struct ngram_ent {
	uint64_t h;          /* n-gram hash, UINT64_MAX = empty slot marker via p */
	const uint32_t *p;   /* the n-gram's first item (NULL = empty slot) */
	uint32_t cref, chyp;
};

static inline uint64_t hstep(uint64_t h, uint32_t x)
{
	return (h ^ (x + 0x9E3779B97F4A7C15ULL)) * 0x100000001B3ULL + 0x632BE59BD9B4E019ULL;
}

/* Counts [hyp, ref, match] for orders 1..max_order of two item sequences. */
static int ngram_stats(struct lynn_score_ctx *ctx, const uint32_t *hyp, size_t nh,
		       const uint32_t *ref, size_t nr, int max_order, int64_t *v,
		       struct lynn_err *err)
{
	uint64_t *hh, *hr;
	struct ngram_ent *t;
	size_t cap, mask;

	memset(v, 0, 3 * (size_t)max_order * sizeof *v);
	if (nr == 0)
		return 0; /* no reference n-gram of any order: all counts 0 */
	hh = score_buf(ctx, SLOT_HASH_A, (nh + 1) * sizeof *hh, err);
	hr = score_buf(ctx, SLOT_HASH_B, (nr + 1) * sizeof *hr, err);
	cap = pow2_at_least(2 * nr + 2);
	mask = cap - 1;
	t = score_buf(ctx, SLOT_TABLE, cap * sizeof *t, err);
	if (!hh || !hr || !t)
		return -LYNN_ENOMEM;
	for (size_t i = 0; i < nh; i++)
		hh[i] = 0xCBF29CE484222325ULL;
	for (size_t i = 0; i < nr; i++)
		hr[i] = 0xCBF29CE484222325ULL;

	for (int n = 1; n <= max_order; n++) {
		size_t cr = nr >= (size_t)n ? nr - (size_t)n + 1 : 0;
		size_t ch = nh >= (size_t)n ? nh - (size_t)n + 1 : 0;
		int64_t match = 0;

		if (cr == 0)
			break; /* this and higher orders: reference empty → (0, 0, 0) */
		for (size_t i = 0; i < cr; i++)
			hr[i] = hstep(hr[i], ref[i + (size_t)n - 1]);
		for (size_t i = 0; i < ch; i++)
			hh[i] = hstep(hh[i], hyp[i + (size_t)n - 1]);
		memset(t, 0, cap * sizeof *t);
		for (size_t i = 0; i < cr; i++) {
			uint64_t h = hr[i];
			size_t pos = (size_t)mix64(h) & mask;
			for (;;) {
				struct ngram_ent *e = &t[pos];
				if (!e->p) {
					e->h = h;
					e->p = ref + i;
					e->cref = 1;
					break;
				}
				if (e->h == h && !memcmp(e->p, ref + i, (size_t)n * sizeof *ref)) {
					e->cref++;
					break;
				}
				pos = (pos + 1) & mask;
			}
		}
		for (size_t i = 0; i < ch; i++) {
			uint64_t h = hh[i];
			size_t pos = (size_t)mix64(h) & mask;
			for (;;) {
				struct ngram_ent *e = &t[pos];
				if (!e->p)
					break;
				if (e->h == h && !memcmp(e->p, hyp + i, (size_t)n * sizeof *hyp)) {
					if (e->chyp < e->cref)
						match++;
					e->chyp++;
					break;
				}
				pos = (pos + 1) & mask;
			}
		}
		v[3 * (n - 1)] = (int64_t)ch;
		v[3 * (n - 1) + 1] = (int64_t)cr;
		v[3 * (n - 1) + 2] = match;
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
