/*
 * seqmatch.c - difflib.SequenceMatcher(None, a, b).ratio() (CPython
 * Lib/difflib.py) over code points.
 *
 * b2j maps each element of b to its positions; with autojunk (|b| ≥ 200)
 * elements occurring more than |b|/100 + 1 times are "popular" and dropped
 * from b2j. find_longest_match scans a[alo:ahi] keeping, per position j of b,
 * the length of the match ending at (i, j) (difflib's j2len dict, here two
 * stamped arrays), keeps the first longest match (lowest i, then lowest j),
 * then extends it on both sides by equal elements (popular ones included).
 * get_matching_blocks splits around each match with an explicit stack; the
 * ratio is 2·M/(|a|+|b|), M the summed block sizes, or 1.0 when both are
 * empty.
 */
#include <stdlib.h>
#include <string.h>

#include "lynn/score.h"
#include "score/score_internal.h"

struct sm {
	const uint32_t *a, *b;
	size_t la, lb;
	/* b2j in CSR form: hash cp → slot, positions pos[start[slot] .. start[slot+1]) */
	uint64_t *tab; /* (cp << 32 | slot+1), 0 = empty */
	size_t tmask;
	uint32_t *start, *pos;
	/* j2len: two rows of (len, stamp) */
	uint32_t *len0, *len1;
	uint64_t *st0, *st1;
	uint64_t gen;
};

static const uint32_t *b2j_get(const struct sm *m, uint32_t cp, size_t *n)
{
	size_t p = (size_t)mix64(cp) & m->tmask;
	for (;;) {
		uint64_t e = m->tab[p];
		if (!e)
			break;
		if ((uint32_t)(e >> 32) == cp) {
			uint32_t s = (uint32_t)(e & 0xFFFFFFFFu) - 1;
			*n = m->start[s + 1] - m->start[s];
			return m->pos + m->start[s];
		}
		p = (p + 1) & m->tmask;
	}
	*n = 0;
	return NULL;
}

static void longest(struct sm *m, size_t alo, size_t ahi, size_t blo, size_t bhi, size_t *bi,
		    size_t *bj, size_t *bk)
{
	size_t besti = alo, bestj = blo, bestsize = 0;
	uint32_t *plen = m->len0, *clen = m->len1;
	uint64_t *pst = m->st0, *cst = m->st1;

	m->gen += 2; /* rows of an earlier call never look like the previous row */
	for (size_t i = alo; i < ahi; i++) {
		size_t n;
		const uint32_t *js = b2j_get(m, m->a[i], &n);
		uint64_t g = ++m->gen;
		for (size_t q = 0; q < n; q++) {
			size_t j = js[q], k;
			if (j < blo)
				continue;
			if (j >= bhi)
				break;
			k = (j > 0 && pst[j - 1] == g - 1 ? plen[j - 1] : 0) + 1;
			clen[j] = (uint32_t)k;
			cst[j] = g;
			if (k > bestsize) {
				besti = i - k + 1;
				bestj = j - k + 1;
				bestsize = k;
			}
		}
		{
			uint32_t *t = plen;
			uint64_t *ts = pst;
			plen = clen;
			clen = t;
			pst = cst;
			cst = ts;
		}
	}
	/* no junk function: extend by equal elements on each side */
	while (besti > alo && bestj > blo && m->a[besti - 1] == m->b[bestj - 1]) {
		besti--;
		bestj--;
		bestsize++;
	}
	while (besti + bestsize < ahi && bestj + bestsize < bhi &&
	       m->a[besti + bestsize] == m->b[bestj + bestsize])
		bestsize++;
	*bi = besti;
	*bj = bestj;
	*bk = bestsize;
}

int lynn_seq_ratio_cp(struct lynn_score_ctx *ctx_in, const uint32_t *a, size_t la,
		      const uint32_t *b, size_t lb, double *ratio, struct lynn_err *err)
{
	struct lynn_score_ctx tmp, *ctx = score_ctx_get(ctx_in, &tmp);
	struct sm m = { 0 };
	size_t cap, nd = 0, matches = 0, top = 0;
	uint32_t *cnt = NULL, *slot_of;
	size_t (*stack)[4];
	int rc = -LYNN_ENOMEM;

	if (la + lb == 0) {
		*ratio = 1.0;
		rc = 0;
		goto out;
	}
	m.a = a;
	m.b = b;
	m.la = la;
	m.lb = lb;
	cap = pow2_at_least(2 * lb + 2);
	m.tmask = cap - 1;
	m.tab = score_buf(ctx, SLOT_SM_B2J, cap * sizeof *m.tab, err);
	/* start (lb+2), pos (lb), slot_of (lb), cnt (lb+1) */
	m.start = score_buf(ctx, SLOT_SM_IDX, (4 * lb + 4) * sizeof *m.start, err);
	m.len0 = score_buf(ctx, SLOT_SM_LEN, (2 * lb + 2) * (sizeof(uint32_t) + sizeof(uint64_t)),
			   err);
	stack = score_buf(ctx, SLOT_SM_QUEUE, (2 * (la + lb) + 4) * sizeof *stack, err);
	if (!m.tab || !m.start || !m.len0 || !stack)
		goto out;
	m.pos = m.start + lb + 2;
	slot_of = m.pos + lb;
	cnt = slot_of + lb;
	m.len1 = m.len0 + lb + 1;
	m.st0 = (uint64_t *)(void *)(m.len1 + lb + 1);
	m.st1 = m.st0 + lb + 1;
	memset(m.st0, 0, 2 * (lb + 1) * sizeof *m.st0);
	memset(m.tab, 0, cap * sizeof *m.tab);

	/* distinct elements of b, their counts */
	for (size_t j = 0; j < lb; j++) {
		size_t p = (size_t)mix64(b[j]) & m.tmask;
		for (;;) {
			uint64_t e = m.tab[p];
			if (!e) {
				m.tab[p] = ((uint64_t)b[j] << 32) | (uint64_t)(nd + 1);
				cnt[nd] = 1;
				slot_of[j] = (uint32_t)nd++;
				break;
			}
			if ((uint32_t)(e >> 32) == b[j]) {
				uint32_t s = (uint32_t)(e & 0xFFFFFFFFu) - 1;
				cnt[s]++;
				slot_of[j] = s;
				break;
			}
			p = (p + 1) & m.tmask;
		}
	}
	/* autojunk: popular elements keep an empty position list */
	if (lb >= 200) {
		size_t ntest = lb / 100 + 1;
		for (size_t s = 0; s < nd; s++)
			if (cnt[s] > ntest)
				cnt[s] = 0;
	}
	m.start[0] = 0;
	for (size_t s = 0; s < nd; s++)
		m.start[s + 1] = m.start[s] + cnt[s];
	for (size_t s = 0; s < nd; s++)
		cnt[s] = m.start[s]; /* fill cursor; popular ones have an empty range */
	for (size_t j = 0; j < lb; j++) {
		uint32_t s = slot_of[j];
		if (cnt[s] < m.start[s + 1])
			m.pos[cnt[s]++] = (uint32_t)j;
	}

	stack[top][0] = 0;
	stack[top][1] = la;
	stack[top][2] = 0;
	stack[top++][3] = lb;
	while (top) {
		size_t alo, ahi, blo, bhi, i, j, k;
		top--;
		alo = stack[top][0];
		ahi = stack[top][1];
		blo = stack[top][2];
		bhi = stack[top][3];
		longest(&m, alo, ahi, blo, bhi, &i, &j, &k);
		if (!k)
			continue;
		matches += k;
		if (alo < i && blo < j) {
			stack[top][0] = alo;
			stack[top][1] = i;
			stack[top][2] = blo;
			stack[top++][3] = j;
		}
		if (i + k < ahi && j + k < bhi) {
			stack[top][0] = i + k;
			stack[top][1] = ahi;
			stack[top][2] = j + k;
			stack[top++][3] = bhi;
		}
	}
	*ratio = 2.0 * (double)matches / (double)(la + lb);
	rc = 0;
out:
	score_ctx_done(ctx, &tmp);
	return rc;
}

int lynn_seq_ratio(struct lynn_score_ctx *ctx_in, const char *a, size_t a_len, const char *b,
		   size_t b_len, size_t max_chars, double *ratio, struct lynn_err *err)
{
	struct lynn_score_ctx tmp, *ctx = score_ctx_get(ctx_in, &tmp);
	uint32_t *ca = score_buf(ctx, SLOT_CP_C, (a_len + 1) * sizeof *ca, err);
	uint32_t *cb = score_buf(ctx, SLOT_CP_D, (b_len + 1) * sizeof *cb, err);
	size_t na, nb;
	int rc = -LYNN_ENOMEM;

	if (!ca || !cb)
		goto out;
	na = utf8_decode(a, a_len, ca);
	nb = utf8_decode(b, b_len, cb);
	if (max_chars) {
		na = na < max_chars ? na : max_chars;
		nb = nb < max_chars ? nb : max_chars;
	}
	rc = lynn_seq_ratio_cp(ctx, ca, na, cb, nb, ratio, err);
out:
	score_ctx_done(ctx, &tmp);
	return rc;
}
