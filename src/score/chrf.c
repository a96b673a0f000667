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
 * Counting by prefix refinement. Items (characters or words) are dense
 * symbols; every order n gives each position a class number (its n-gram),
 * the class of order n being found from (class of the (n-1)-gram, item
 * i+n-1) with one 64-bit hash probe and no string comparison; the class is
 * the table slot, which holds both counts. Classes are created by the
 * reference side; the hypothesis only looks them up. Then:
 *  - a class on one side only cannot grow into a shared n-gram, so its
 *    positions drop out of the higher orders (the totals are plain lengths);
 *  - a class with exactly one position on each side (i in the hypothesis, j
 *    in the reference) is settled at once: its longer n-grams are the only
 *    ones of their kind on either side, so order m > n gains one match
 *    exactly when the items at i and j agree up to m; both positions drop
 *    out and the item comparison replaces the hash probes.
 * Most n-grams of order ≥ 2 end in one of the two cases, so few positions
 * reach the high orders. With ≤ DIRECT_SYMS symbols, orders 1 and 2 skip
 * the hashing (bigram records indexed directly); the alive classes of an
 * order are then numbered densely 0..m-1, and while m ≤ nsym the next
 * order is counted in the same records, indexed (dense class, next item),
 * with no hashing either (else hashed as above). A settled pair's agreement
 * is then found eight byte-symbols at a time, the two sides padded with two
 * different bytes that are no symbol (≤ 254 symbols) so that it stops at
 * either end. The hypothesis counts only n-grams the reference has, so
 * that only the reference's records need emptying. The last order needs no
 * compaction. The inner loops are branch-free apart from the (rare) probe
 * collisions.
 */
#define HASH_MUL 0x9E3779B97F4A7C15ULL

struct ngram_ent {
	uint64_t key; /* (prev class + 1) << 32 | item; 0 = empty slot */
	uint32_t r, h; /* the n-gram's counts: ref, hyp */
};

/* A buffer of `slot` that is all-zero whenever it is handed out: the caller
 * empties every entry it fills before returning, so only a fresh allocation
 * needs clearing (and any layout of the buffer works on the next call). */
static void *clean_buf(struct lynn_score_ctx *ctx, enum score_slot slot, size_t bytes,
		       struct lynn_err *err)
{
	void *before = ctx->buf[slot];
	size_t before_cap = ctx->cap[slot];
	void *p = score_buf(ctx, slot, bytes, err);
	if (p && (p != before || ctx->cap[slot] != before_cap))
		memset(p, 0, ctx->cap[slot]);
	return p;
}

/* The probe loops run while the slot holds neither the key nor 0. Keys are
 * below 2^63 (classes < 2^31: the caller keeps tables ≤ 2^30 slots), so x - 1 has its top
 * bit set exactly when x is 0: one test, no branch on which case ended it. */
static inline bool probe_on(uint64_t x, uint64_t key)
{
	return (int64_t)((x - 1) | ((x ^ key) - 1)) >= 0;
}

/* The slot of (class id, item): where the key is, or the empty slot that
 * ends its probe run (*x is then 0). */
static inline size_t probe_slot(const struct ngram_ent *t, size_t mask, unsigned shift,
				uint32_t id, uint32_t item, uint64_t *key, uint64_t *x)
{
	*key = ((uint64_t)id + 1) << 32 | item;
	size_t p = (size_t)((*key * HASH_MUL) >> shift);
	*x = t[p].key;
	while (probe_on(*x, *key)) {
		p = (p + 1) & mask;
		*x = t[p].key;
	}
	return p;
}

/* Order n on the reference side: each alive position's n-gram (prev class
 * id[k], item sym[pos[k]], sym = ref + n - 1) counted in its table slot,
 * whose index becomes the position's class. Returns the number of slots
 * filled, listed in made. */
static size_t probe_ref(struct ngram_ent *t, size_t mask, unsigned shift, const uint32_t *sym,
			const uint32_t *pos, uint32_t *id, size_t na, uint32_t *made)
{
	size_t nmade = 0;
	for (size_t k = 0; k < na; k++) {
		uint64_t key, x;
		size_t p = probe_slot(t, mask, shift, id[k], sym[pos[k]], &key, &x);
		t[p].key = key;
		t[p].r++;
		made[nmade] = (uint32_t)p;
		nmade += x == 0;
		id[k] = (uint32_t)p;
	}
	return nmade;
}

/* The hypothesis side: slots looked up (a miss goes to the sink slot
 * `sink`, whose ref count stays 0), clipped matches returned; hyp counts
 * in the slots, the last position of each slot in last. */
static int64_t probe_hyp(struct ngram_ent *t, size_t mask, unsigned shift, const uint32_t *sym,
			 const uint32_t *pos, uint32_t *id, size_t na, uint32_t *last, uint32_t sink)
{
	int64_t match = 0;
	for (size_t k = 0; k < na; k++) {
		uint64_t key, x;
		size_t p = probe_slot(t, mask, shift, id[k], sym[pos[k]], &key, &x);
		p = x == 0 ? sink : p;
		match += t[p].h < t[p].r;
		t[p].h++;
		last[p] = pos[k];
		id[k] = (uint32_t)p;
	}
	return match;
}

/* Bigram tables are direct-indexed (a * nsym + b) up to this many symbols. */
#define DIRECT_SYMS 256

/* A bigram's counts (zero between calls) and last hyp position, together
 * so that one cache line serves all three; dn: its dense class number + 1
 * once alive (see ngram_stats). The records also serve orders ≥ 3 while
 * those have few classes (index = dense class of the (n-1)-gram · nsym +
 * next symbol). */
struct bigram {
	uint32_t r, h, last, dn;
};

/* A reference n-gram of record g at position pos, after both sides were
 * counted: a class seen more than once on a side (h*r > 1) is alive and
 * gets its dense number 1..m on first sight (dn); one seen once on each
 * side is a settled pair, appended to (pi, pj). Returns whether it is alive
 * and stores its dense index in *id (meaningful only then). */
static inline uint32_t ref_class_step(struct bigram *g, uint32_t pos, size_t *m, uint32_t *pi,
				      uint32_t *pj, size_t *np, uint32_t *id)
{
	uint32_t d = g->dn;
	uint64_t hr = (uint64_t)g->h * g->r;
	uint32_t alive = hr > 1, nw = alive & (d == 0);
	*m += nw;
	d = nw ? (uint32_t)*m : d;
	g->dn = d;
	pi[*np] = g->last;
	pj[*np] = pos;
	*np += hr == 1;
	*id = d - 1;
	return alive;
}

/* Orders 1 and 2 (nr ≥ 2, nsym ≤ DIRECT_SYMS) into v[0..6): counts per
 * symbol in cr1/ch1 (cleared here), per bigram a * nsym + b in bg (counts
 * zero on entry; the caller empties them); the symbols as bytes to h8/r8,
 * the bigram indices of the positions to bih/bir (for the caller's passes). */
static void order12(const uint32_t *hyp, size_t nh, const uint32_t *ref, size_t nr, size_t nsym,
		    uint32_t *cr1, uint32_t *ch1, struct bigram *bg, uint8_t *h8, uint8_t *r8,
		    uint32_t *bih, uint32_t *bir, int64_t *v)
{
	int64_t m1 = 0, m2 = 0;
	uint32_t s = (uint32_t)nsym;
	size_t nr1 = nr - 1, nh1 = nh ? nh - 1 : 0; /* bigrams a side */
	memset(cr1, 0, nsym * sizeof *cr1);
	memset(ch1, 0, nsym * sizeof *ch1);
	for (size_t j = 0; j < nr1; j++) {
		uint32_t c = ref[j], b = c * s + ref[j + 1];
		r8[j] = (uint8_t)c;
		cr1[c]++;
		bir[j] = b;
		bg[b].r++;
	}
	r8[nr - 1] = (uint8_t)ref[nr - 1];
	cr1[ref[nr - 1]]++;
	for (size_t i = 0; i < nh1; i++) {
		uint32_t c = hyp[i], b = c * s + hyp[i + 1];
		struct bigram *g = bg + b;
		bih[i] = b;
		h8[i] = (uint8_t)c;
		m1 += ch1[c] < cr1[c];
		ch1[c]++;
		/* counted only when the reference has the bigram: the others
		 * keep zero counts (no emptying; a stale last is never read) */
		m2 += g->h < g->r;
		g->h += g->r != 0;
		g->last = (uint32_t)i;
	}
	if (nh) {
		h8[nh - 1] = (uint8_t)hyp[nh - 1];
		m1 += ch1[hyp[nh - 1]] < cr1[hyp[nh - 1]];
	}
	v[0] = (int64_t)nh;
	v[1] = (int64_t)nr;
	v[2] = m1;
	v[3] = nh >= 2 ? (int64_t)nh - 1 : 0;
	v[4] = (int64_t)nr - 1;
	v[5] = m2;
}

/* v[3(n-1)..] = (hyp n-grams, ref n-grams, clipped matches) for n = 1..max_order
 * over symbol sequences hyp[0..nh) and ref[0..nr), symbols < nsym. */
static int ngram_stats(struct lynn_score_ctx *ctx, const uint32_t *hyp, size_t nh,
		       const uint32_t *ref, size_t nr, size_t nsym, int max_order, int64_t *v,
		       struct lynn_err *err)
{
	/* alive positions and the class of their current n-gram */
	uint32_t *posh, *idh, *posr, *idr, *made, *cr, *chc, *hpos, *lastp, *pi, *pj, *bih;
	struct bigram *bg;
	uint8_t *h8, *r8;
	bool direct;
	int n0 = 2;
	struct ngram_ent *t;
	size_t ncls, tcap, nbg, nah = 0, nar = 0, np = 0; /* np settled pairs (pi[q], pj[q]) */
	size_t m = 0; /* direct orders: the alive classes of the last order, numbered 0..m-1 */
	int64_t match = 0, settled = 0, diff[LYNN_CHRF_MAX_CHAR_ORDER + 2] = {0};

	memset(v, 0, 3 * (size_t)max_order * sizeof *v);
	if (nr == 0)
		return 0; /* no reference n-gram of any order: all counts 0 */
	if (nr >= 0x1FFFFFF0 || nh >= 0x1FFFFFF0)
		return lynn_errf(err, -LYNN_EINVAL, "chrf: input of %zu items too long (2^29 at most)",
				 nr > nh ? nr : nh);
	/* orders 1 and 2 counted directly when bigrams fit a small table */
	direct = max_order >= 2 && nr >= 2 && nsym <= DIRECT_SYMS;
	ncls = (nsym > nr ? nsym : nr) + 2;
	/* table: ≤ 1/8 full, or ≤ 1/2 for very long inputs (memory); ≤ 2^30
	 * slots (slot numbers are classes) */
	tcap = pow2_at_least((nr <= 65536 ? 8 : 2) * nr + 8);
	/* one buffer: the hyp lists, its symbols as bytes (direct only,
	 * padded), the ref lists and bytes, then per symbol (order 1 without
	 * the direct path) and the last hyp position per table slot (and the
	 * sink slot tcap) */
	{
		size_t bh = (3 * (nh + 1) * sizeof *posh + nh + 16 + 3) & ~(size_t)3;
		size_t br = (5 * (nr + 1) * sizeof *posr + nr + 16 + 3) & ~(size_t)3;
		posh = score_buf(ctx, SLOT_HASH_A,
				 bh + br + (2 * ncls + (ncls > tcap ? ncls : tcap + 1)) * sizeof *cr,
				 err);
		if (!posh)
			return -LYNN_ENOMEM;
		posr = (uint32_t *)((char *)posh + bh);
		cr = (uint32_t *)((char *)posr + br);
	}
	/* the bigram records (direct only; counts zero between calls, last
	 * may be left from an earlier call where both counts are 0); the
	 * table (all zero between calls) is fetched when first needed */
	nbg = direct ? nsym * nsym : 0;
	bg = clean_buf(ctx, SLOT_NGRAM, nbg * sizeof *bg, err);
	if (!bg)
		return -LYNN_ENOMEM;
	t = NULL;
	idh = posh + nh + 1;
	idr = posr + nr + 1;
	made = idr + nr + 1; /* slots filled this order, emptied after it */
	pi = made + nr + 1;
	pj = pi + nr + 1;
	bih = idh + nh + 1;
	h8 = (uint8_t *)(bih + nh + 1);
	r8 = (uint8_t *)(pj + nr + 1);
	chc = cr + ncls;
	hpos = chc + ncls; /* order 1 (not direct) only, before lastp is used */
	lastp = hpos;

	if (direct) {
		n0 = 3;
		/* the ref bigram indices go to `made` (unused until order 3) */
		size_t nr1 = nr - 1, nh1 = nh ? nh - 1 : 0; /* bigrams a side */
		order12(hyp, nh, ref, nr, nsym, cr, chc, bg, h8, r8, bih, made, v);
		/* past the ends: two bytes that are no symbol and differ, so
		 * that an agreement stops at either end by itself (nsym ≤ 254) */
		memset(h8 + nh, 0xFF, 8);
		memset(r8 + nr, 0xFE, 8);
		/* alive bigrams and settled pairs, for the higher orders (none
		 * in chrF++'s word order 2); the alive classes numbered densely
		 * 0..m-1 (dn, first seen on the reference side) */
		for (size_t j = 0; max_order > 2 && j < nr1; j++) {
			posr[nar] = (uint32_t)j;
			nar += ref_class_step(bg + made[j], (uint32_t)j, &m, pi, pj, &np, idr + nar);
		}
		/* a class is alive on both sides: numbered (dn ≠ 0) just now */
		for (size_t i = 0; max_order > 2 && i < nh1; i++) {
			uint32_t d = bg[bih[i]].dn;
			posh[nah] = (uint32_t)i;
			idh[nah] = d - 1;
			nah += d != 0;
		}
		/* empty the bigram records again (the hypothesis changed
		 * only the reference's) */
		for (size_t j = 0; j < nr1; j++)
			bg[made[j]] = (struct bigram){ 0 };
	} else {
		/* order 1: the classes are the symbols themselves */
		memset(cr, 0, nsym * sizeof *cr);
		memset(chc, 0, nsym * sizeof *chc);
		for (size_t j = 0; j < nr; j++)
			cr[ref[j]]++;
		for (size_t i = 0; i < nh; i++) {
			uint32_t c = hyp[i];
			match += chc[c] < cr[c];
			chc[c]++;
			hpos[c] = (uint32_t)i;
		}
		v[0] = (int64_t)nh;
		v[1] = (int64_t)nr;
		v[2] = match;
		for (size_t j = 0; j < nr; j++) {
			uint32_t c = ref[j];
			uint64_t hr = (uint64_t)chc[c] * cr[c];
			posr[nar] = (uint32_t)j;
			idr[nar] = c;
			nar += hr > 1;
			pi[np] = hpos[c];
			pj[np] = (uint32_t)j;
			np += hr == 1;
		}
		for (size_t i = 0; i < nh; i++) {
			uint32_t c = hyp[i];
			posh[nah] = (uint32_t)i;
			idh[nah] = c;
			nah += (uint64_t)chc[c] * cr[c] > 1;
		}
	}

	for (int n = n0; n <= max_order; n++) {
		size_t cr_n = nr >= (size_t)n ? nr - (size_t)n + 1 : 0;
		size_t ch_n = nh >= (size_t)n ? nh - (size_t)n + 1 : 0;
		size_t nmade, w = 0, cap, mask;
		unsigned shift;

		if (cr_n == 0)
			break; /* this and higher orders: reference empty → (0, 0, 0) */
		v[3 * (n - 1)] = (int64_t)ch_n;
		v[3 * (n - 1) + 1] = (int64_t)cr_n;
		/* pairs settled at order n - 1: they agree on n - 1 items and gain
		 * one match per order while the items keep agreeing; their last
		 * order L is found at once (diff[n] += 1, diff[L + 1] -= 1) */
		if (direct && nsym <= 254) {
			/* symbols are bytes: eight compared at once (n ≥ 3, so at
			 * most max_order - n + 1 ≤ 8 are needed), no branch; the
			 * end bytes stop the agreement at the end of either side */
			size_t room = (size_t)max_order - ((size_t)n - 1);
			/* room ≤ 7: the bytes past room masked off and a stop bit
			 * at byte room, so the lowest set bit gives min(agree, room) */
			uint64_t keep = room < 8 ? (1ULL << (8 * room)) - 1 : ~0ULL;
			uint64_t stop = room < 8 ? 1ULL << (8 * room) : 1ULL << 63;
			int64_t *dn = diff + n;
			for (size_t q = 0; room < 8 && q < np; q++) {
				uint64_t x, y;
				memcpy(&x, h8 + pi[q] + (size_t)n - 1, 8);
				memcpy(&y, r8 + pj[q] + (size_t)n - 1, 8);
				dn[__builtin_ctzll(((x ^ y) & keep) | stop) >> 3]--;
			}
			for (size_t q = 0; room >= 8 && q < np; q++) {
				size_t agree;
				uint64_t x, y;
				memcpy(&x, h8 + pi[q] + (size_t)n - 1, 8);
				memcpy(&y, r8 + pj[q] + (size_t)n - 1, 8);
				x ^= y;
				agree = (size_t)(__builtin_ctzll(x | stop) >> 3) + (x == 0);
				dn[agree < room ? agree : room]--;
			}
			diff[n] += (int64_t)np;
		}
		for (size_t q = 0; direct && nsym > 254 && q < np; q++) {
			/* as above, the ends checked by the positions */
			size_t a = pi[q] + (size_t)n - 1, b = pj[q] + (size_t)n - 1, agree, room;
			uint64_t x, y;
			memcpy(&x, h8 + a, 8);
			memcpy(&y, r8 + b, 8);
			x ^= y;
			agree = (size_t)(__builtin_ctzll(x | 1ULL << 63) >> 3) + (x == 0);
			room = (size_t)max_order - ((size_t)n - 1);
			room = room < nh - a ? room : nh - a;
			room = room < nr - b ? room : nr - b;
			diff[n]++;
			diff[n + (agree < room ? agree : room)]--;
		}
		for (size_t q = 0; !direct && q < np; q++) {
			/* a fixed number of steps (the end of the agreement is
			 * unpredictable): reads past lim are clamped and ignored */
			size_t a = pi[q], b = pj[q], m = (size_t)n - 1, on = 1;
			size_t lim = (size_t)max_order;
			lim = lim < nh - a ? lim : nh - a;
			lim = lim < nr - b ? lim : nr - b;
			for (size_t j = (size_t)n - 1; j < (size_t)max_order; j++) {
				size_t in = j < lim, jj = in ? j : (size_t)n - 2;
				on &= in & (hyp[a + jj] == ref[b + jj]);
				m += on;
			}
			diff[n]++;
			diff[m + 1]--;
		}
		np = 0;
		settled += diff[n];
		v[3 * (n - 1) + 2] = settled;
		/* positions are ascending: the ones past the end drop off the tail */
		while (nar && posr[nar - 1] >= cr_n)
			nar--;
		while (nah && posh[nah - 1] >= ch_n)
			nah--;
		if (nar == 0 || nah == 0)
			continue; /* no shared (n-1)-gram left: no more matches */
		if (direct && m <= nsym) {
			/* few classes: the n-grams in the bigram records, index
			 * (dense class, next symbol), as orders 1-2 */
			size_t nar0 = nar, s = nsym;
			uint32_t *hmade = bih; /* free after order 2 */
			const uint32_t *rn = ref + n - 1, *hn = hyp + n - 1;
			match = 0;
			for (size_t k = 0; k < nar; k++) {
				uint32_t c = idr[k] * (uint32_t)s + rn[posr[k]];
				made[k] = c;
				bg[c].r++;
			}
			for (size_t k = 0; k < nah; k++) {
				uint32_t c = idh[k] * (uint32_t)s + hn[posh[k]];
				struct bigram *g = bg + c;
				hmade[k] = c;
				match += g->h < g->r;
				g->h += g->r != 0;
				g->last = posh[k];
			}
			v[3 * (n - 1) + 2] += match;
			m = 0;
			w = 0;
			for (size_t k = 0; n < max_order && k < nar; k++) {
				uint32_t pos = posr[k];
				posr[w] = pos;
				w += ref_class_step(bg + made[k], pos, &m, pi, pj, &np, idr + w);
			}
			nar = w;
			w = 0;
			for (size_t k = 0; n < max_order && k < nah; k++) {
				uint32_t d = bg[hmade[k]].dn;
				posh[w] = posh[k];
				idh[w] = d - 1;
				w += d != 0;
			}
			nah = w;
			for (size_t k = 0; k < nar0; k++)
				bg[made[k]] = (struct bigram){ 0 };
			continue;
		}
		if (!t) {
			/* the hashed orders' table: all zero between calls,
			 * whatever the layout of the previous call */
			t = clean_buf(ctx, SLOT_CHRF_T, (tcap + 1) * sizeof *t, err);
			if (!t)
				return -LYNN_ENOMEM;
		}
		cap = pow2_at_least(8 * nar + 8);
		if (cap > tcap)
			cap = tcap;
		mask = cap - 1;
		shift = 64 - (unsigned)__builtin_ctzll((unsigned long long)cap);
		nmade = probe_ref(t, mask, shift, ref + n - 1, posr, idr, nar, made);
		match = probe_hyp(t, mask, shift, hyp + n - 1, posh, idh, nah, lastp, (uint32_t)tcap);
		v[3 * (n - 1) + 2] += match;
		w = 0;
		/* the alive positions and settled pairs are for the next order */
		for (size_t k = 0; n < max_order && k < nar; k++) {
			uint32_t c = idr[k];
			uint64_t hr = (uint64_t)t[c].h * t[c].r;
			posr[w] = posr[k];
			idr[w] = c;
			w += hr > 1;
			pi[np] = lastp[c];
			pj[np] = posr[k];
			np += hr == 1;
		}
		nar = w;
		w = 0;
		for (size_t k = 0; n < max_order && k < nah; k++) {
			uint32_t c = idh[k];
			posh[w] = posh[k];
			idh[w] = c;
			w += (uint64_t)t[c].h * t[c].r > 1;
		}
		nah = w;
		/* slot numbers depend on the order's keys: empty the slots */
		for (size_t k = 0; k < nmade; k++)
			t[made[k]] = (struct ngram_ent){ 0 };
		t[tcap] = (struct ngram_ent){ 0 };
	}
	return 0;
}

/*
 * Characters of s[0..len) as symbols (whitespace dropped unless keep_ws):
 * ASCII code points are their own symbols, other code points get 128, 129, …
 * in order of first appearance through the table `tab` (cap entries, all
 * zero on entry and on return; `used` lists the slots filled). Returns the
 * count written to out.
 */
struct cp_ent {
	uint32_t cp; /* 0 = empty (never a non-ASCII code point) */
	uint32_t sym;
};

/* 1 for ASCII whitespace (Python str.isspace: 9..13, 28..32). */
static const unsigned char ascii_ws[128] = {
	[9] = 1, [10] = 1, [11] = 1, [12] = 1, [13] = 1,
	[28] = 1, [29] = 1, [30] = 1, [31] = 1, [32] = 1,
};

/* 1 for the ASCII code points kept as characters: [0] whitespace dropped
 * (not ascii_ws), [1] whitespace kept (all). */
#define ONES8 1, 1, 1, 1, 1, 1, 1, 1
#define ONES32 ONES8, ONES8, ONES8, ONES8
static const unsigned char ascii_keep[2][128] = {
	{ 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1,
	  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0,
	  0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	  ONES8, ONES8, ONES32, ONES32 },
	{ ONES32, ONES32, ONES32, ONES32 },
};
#undef ONES32
#undef ONES8

/* Word hashes: Horner with a rotation, h = rotl(h, 7) ^ item (injective
 * for ASCII words up to 9 symbols; mixed before use), so that a span's hash
 * is XOR_i rotl(w_i, 7(L-1-i)): the first or last item can be taken off in
 * O(1) (split_words). */
#define WORD_G(sym) ((uint64_t)(sym))
#define WORD_ROT 7u
static inline uint64_t rotl64(uint64_t x, unsigned r)
{
	r &= 63;
	return x << r | x >> ((64 - r) & 63);
}

/* With bnd not NULL, also the word boundaries of str.split(): bnd gets the
 * output index at every change between whitespace and not (starts and ends
 * alternate, a start first), *nb their count, always even on return; and
 * hw[2k+1] the (unmixed) hash of word k's symbols. With wsa not NULL, wsa[i]
 * = 1 when byte i belongs to a whitespace character, else 0 (written up to
 * 3 bytes past len), and *bad set when an invalid UTF-8 sequence was seen
 * (then equal words need not have equal bytes). pad: 7 when s is followed
 * by 7 dropped whitespace bytes (spaces, keep_ws false), so that the last
 * eight-byte run may reach past len; else 0. */
/* ASCII bytes of w8 (all < 0x80) that are whitespace (9..13, 28..32) as 0x01
 * bytes, the others 0: per byte, x ≥ 9 and x < 14, or x ≥ 28 and x < 33
 * (no carry between bytes: x + 0x77 < 0x100). */
static inline uint64_t ascii_ws8(uint64_t w8)
{
	const uint64_t ones = 0x0101010101010101ULL;
	uint64_t ge9 = w8 + 0x77 * ones, ge14 = w8 + 0x72 * ones;
	uint64_t ge28 = w8 + 0x64 * ones, ge33 = w8 + 0x5F * ones;
	return (((ge9 & ~ge14) | (ge28 & ~ge33)) >> 7) & ones;
}

static inline __attribute__((always_inline)) size_t
char_syms(const char *s, size_t len, bool keep_ws, struct cp_ent *tab, size_t cap, uint32_t *used,
	  size_t *nused, uint32_t *out, uint32_t *bnd, uint64_t *hw, size_t *nb, uint8_t *wsa,
	  unsigned *bad, size_t pad)
{
	const unsigned char *u = (const unsigned char *)s;
	const unsigned char *keep = ascii_keep[keep_ws];
	unsigned shift = 32 - (unsigned)__builtin_ctzll((unsigned long long)cap);
	size_t i = 0, n = 0, b = 0;
	unsigned prev_ws = 1;
	uint64_t wh = 0;
	/* one item (symbol sym_, whitespace ws_) into the word state: its
	 * output index at a change, the running hash (restarted after
	 * whitespace) at the current boundary count, no branch */
#define WORD_STEP(sym_, ws_)                                                    \
	do {                                                                    \
		if (bnd) {                                                      \
			bnd[b] = (uint32_t)n;                                   \
			wh = rotl64(wh & (0 - (uint64_t)(prev_ws ^ 1)), WORD_ROT) ^ WORD_G(sym_); \
			b += (ws_) ^ prev_ws;                                   \
			prev_ws = (ws_);                                        \
			hw[b] = wh;                                             \
		}                                                               \
	} while (0)
	while (i < len) {
		uint32_t c = u[i];
		size_t pos;
		unsigned ws;
		uint64_t w8;
		/* runs of eight ASCII bytes: no branch per byte (unrolled) */
		while (i + 8 <= len + pad && (memcpy(&w8, u + i, 8), !(w8 & 0x8080808080808080ULL))) {
			if (wsa) {
				uint64_t m = ascii_ws8(w8);
				memcpy(wsa + i, &m, 8);
			}
#define ONE_ASCII(q)                                       \
	do {                                               \
		c = (uint32_t)(w8 >> (8 * (q))) & 0xFF;    \
		out[n] = c;                                \
		if (bnd) {                                 \
			ws = ascii_ws[c];                  \
			WORD_STEP(c, ws);                  \
			n += keep_ws | (ws ^ 1);           \
		} else {                                   \
			n += keep[c];                      \
		}                                          \
	} while (0)
			ONE_ASCII(0);
			ONE_ASCII(1);
			ONE_ASCII(2);
			ONE_ASCII(3);
			ONE_ASCII(4);
			ONE_ASCII(5);
			ONE_ASCII(6);
			ONE_ASCII(7);
#undef ONE_ASCII
			i += 8;
		}
		if (i >= len)
			break;
		c = u[i];
		if (c < 0x80) {
			if (wsa)
				wsa[i] = ascii_ws[c];
			i++;
			out[n] = c;
			ws = ascii_ws[c];
			WORD_STEP(c, ws);
			n += keep_ws | (ws ^ 1);
			continue;
		}
		pos = i;
		if (c >= 0xC2 && c <= 0xDF && i + 1 < len && (u[i + 1] & 0xC0) == 0x80) {
			c = (c & 0x1F) << 6 | (u[i + 1] & 0x3Fu);
			i += 2;
		} else if (c >= 0xE1 && c <= 0xEF && c != 0xED && i + 2 < len &&
			   (u[i + 1] & 0xC0) == 0x80 && (u[i + 2] & 0xC0) == 0x80) {
			/* well-formed 3-byte form (E0 and ED have narrower second
			 * bytes: left to utf8_next) */
			c = (c & 0x0F) << 12 | (u[i + 1] & 0x3Fu) << 6 | (u[i + 2] & 0x3Fu);
			i += 3;
		} else {
			c = utf8_next(u, len, &i);
			if (wsa)
				*bad |= c == 0xFFFD;
		}
		/* the only non-ASCII whitespace is in U+0085..U+3000 */
		ws = c <= 0x3000 && py_isspace_nonascii(c);
		if (wsa) {
			/* the character's bytes (≤ 4; bytes past it are
			 * rewritten by the next character) */
			uint32_t m = ws * 0x01010101u;
			memcpy(wsa + pos, &m, 4);
		}
		if (!keep_ws && ws) {
			WORD_STEP(c, 1u);
			continue;
		}
		pos = (uint32_t)(c * 0x9E3779B1u) >> shift;
		while ((tab[pos].cp != c) & (tab[pos].cp != 0))
			pos = (pos + 1) & (cap - 1);
		if (!tab[pos].cp) {
			tab[pos].cp = c;
			tab[pos].sym = 128 + (uint32_t)*nused;
			used[(*nused)++] = (uint32_t)pos;
		}
		WORD_STEP(tab[pos].sym, ws);
		out[n++] = tab[pos].sym;
	}
#undef WORD_STEP
	if (bnd) {
		bnd[b] = (uint32_t)n;
		b += !prev_ws;
		*nb = b;
	}
	return n;
}

/* Python string.punctuation: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ as bit masks */
static bool is_punct(uint32_t c)
{
	static const uint64_t lo = 0xFC00FFFE00000000ULL; /* 0x21..0x2F, 0x3A..0x3F */
	static const uint64_t hi = 0x78000001F8000001ULL; /* 0x40, 0x5B..0x60, 0x7B..0x7E */
	uint64_t m = c < 64 ? lo : hi;
	return (c < 128) & (unsigned)(m >> (c & 63));
}

/* sacreBLEU _remove_punctuation on the words [bnd[2k], bnd[2k+1]) of the
 * symbols syms[0..) (ASCII symbols are their code points; the others are
 * never punctuation): spans relative to syms + base, with their hashes
 * (from the word hashes hw[2k+1], an item taken off the end or the start
 * when it is split off). */
static size_t split_words(const uint32_t *syms, size_t base, const uint32_t *bnd, const uint64_t *hw,
			  size_t nb, uint32_t *off, uint32_t *len, uint64_t *hs)
{
	size_t nw = 0;
	for (size_t k = 0; k < nb; k += 2) {
		uint32_t s = bnd[k], e = bnd[k + 1], l = e - s;
		uint64_t h = hw[k + 1];
		if (l == 1) {
			off[nw] = (uint32_t)base + s;
			hs[nw] = h;
			len[nw++] = 1;
		} else if (is_punct(syms[e - 1])) {
			uint64_t g = WORD_G(syms[e - 1]);
			off[nw] = (uint32_t)base + s;
			hs[nw] = rotl64(h ^ g, 64 - WORD_ROT);
			len[nw++] = l - 1;
			off[nw] = (uint32_t)base + e - 1;
			hs[nw] = g;
			len[nw++] = 1;
		} else if (is_punct(syms[s])) {
			uint64_t g = WORD_G(syms[s]);
			off[nw] = (uint32_t)base + s;
			hs[nw] = g;
			len[nw++] = 1;
			off[nw] = (uint32_t)base + s + 1;
			hs[nw] = h ^ rotl64(g, WORD_ROT * (l - 1));
			len[nw++] = l - 1;
		} else {
			off[nw] = (uint32_t)base + s;
			hs[nw] = h;
			len[nw++] = l;
		}
	}
	for (size_t k = 0; k < nw; k++)
		hs[k] = mix64(hs[k] + len[k]);
	return nw;
}

/*
 * Words from the bytes (chrF++, valid UTF-8): str.split() gives the runs of
 * bytes outside whitespace characters (wsa from char_syms), the punctuation
 * split takes an ASCII byte off either end, and equal words are equal byte
 * strings (decoding valid UTF-8 is one to one). A word of ≤ 16 bytes is its
 * own key: the bytes, zero-padded, with 0xC0 + length in the last byte when
 * there are < 16 (the last byte of valid UTF-8 is below 0xC0, so no word of
 * 16 bytes has it); longer words are keyed by a hash and their length
 * (0xC0 in the last byte) and compared byte by byte.
 */
struct word_ent {
	uint64_t k1, k2;
	const unsigned char *p; /* long words: the first occurrence's bytes */
	uint32_t idp, pad; /* id + 1; 0 = empty slot */
};

/* The boundaries of the runs of non-whitespace bytes of wsa[0..len) (wsa
 * is 1 from len on for at least 64 bytes): starts and ends alternate in
 * bnd (room for len + 5). Returns their count. */
static size_t word_bounds(const uint8_t *wsa, size_t len, uint32_t *bnd)
{
	size_t nb = 0;
	uint64_t carry = 0; /* 1: the byte before the block is in a word */
	for (size_t base = 0; base <= len; base += 64) {
		uint64_t ws = 0, x, t;
#define GATHER(q)                                                            \
	do {                                                                 \
		uint64_t v;                                                  \
		memcpy(&v, wsa + base + 8 * (q), 8);                         \
		ws |= ((v * 0x0102040810204080ULL) >> 56) << (8 * (q));      \
	} while (0)
		GATHER(0);
		GATHER(1);
		GATHER(2);
		GATHER(3);
		GATHER(4);
		GATHER(5);
		GATHER(6);
		GATHER(7);
#undef GATHER
		x = ~ws;
		t = x ^ (x << 1 | carry);
		carry = x >> 63;
		while (t) {
			/* four at a time: no branch per boundary */
			bnd[nb] = (uint32_t)(base + (size_t)__builtin_ctzll(t | 1ULL << 63));
			nb += t != 0;
			t &= t - 1;
			bnd[nb] = (uint32_t)(base + (size_t)__builtin_ctzll(t | 1ULL << 63));
			nb += t != 0;
			t &= t - 1;
			bnd[nb] = (uint32_t)(base + (size_t)__builtin_ctzll(t | 1ULL << 63));
			nb += t != 0;
			t &= t - 1;
			bnd[nb] = (uint32_t)(base + (size_t)__builtin_ctzll(t | 1ULL << 63));
			nb += t != 0;
			t &= t - 1;
		}
	}
	return nb;
}

struct word_tab {
	struct word_ent *t;
	size_t mask;
	unsigned shift;
	uint32_t nd, nu;
	uint32_t *used; /* slots filled, emptied by the caller */
};

/* Python string.punctuation as a byte table (bytes ≥ 0x80: 0). */
static const uint8_t punct_byte[256] = {
	['!'] = 1, ['"'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['('] = 1,
	[')'] = 1, ['*'] = 1, ['+'] = 1, [','] = 1, ['-'] = 1, ['.'] = 1, ['/'] = 1, [':'] = 1,
	[';'] = 1, ['<'] = 1, ['='] = 1, ['>'] = 1, ['?'] = 1, ['@'] = 1, ['['] = 1, ['\\'] = 1,
	[']'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['{'] = 1, ['|'] = 1, ['}'] = 1, ['~'] = 1,
};

/* Per word length l ≤ 16: the masks of its bytes in the two 8-byte halves
 * of the key and the length tag (0xC0 + l in the last byte, l < 16). */
static const struct { uint64_t m1, m2, tag; } key_mask[17] = {
	{ 0x0000000000000000ULL, 0x0000000000000000ULL, 0x0000000000000000ULL }, /* 0 */
	{ 0x00000000000000FFULL, 0x0000000000000000ULL, 0xC100000000000000ULL }, /* 1 */
	{ 0x000000000000FFFFULL, 0x0000000000000000ULL, 0xC200000000000000ULL }, /* 2 */
	{ 0x0000000000FFFFFFULL, 0x0000000000000000ULL, 0xC300000000000000ULL }, /* 3 */
	{ 0x00000000FFFFFFFFULL, 0x0000000000000000ULL, 0xC400000000000000ULL }, /* 4 */
	{ 0x000000FFFFFFFFFFULL, 0x0000000000000000ULL, 0xC500000000000000ULL }, /* 5 */
	{ 0x0000FFFFFFFFFFFFULL, 0x0000000000000000ULL, 0xC600000000000000ULL }, /* 6 */
	{ 0x00FFFFFFFFFFFFFFULL, 0x0000000000000000ULL, 0xC700000000000000ULL }, /* 7 */
	{ 0xFFFFFFFFFFFFFFFFULL, 0x0000000000000000ULL, 0xC800000000000000ULL }, /* 8 */
	{ 0xFFFFFFFFFFFFFFFFULL, 0x00000000000000FFULL, 0xC900000000000000ULL }, /* 9 */
	{ 0xFFFFFFFFFFFFFFFFULL, 0x000000000000FFFFULL, 0xCA00000000000000ULL }, /* 10 */
	{ 0xFFFFFFFFFFFFFFFFULL, 0x0000000000FFFFFFULL, 0xCB00000000000000ULL }, /* 11 */
	{ 0xFFFFFFFFFFFFFFFFULL, 0x00000000FFFFFFFFULL, 0xCC00000000000000ULL }, /* 12 */
	{ 0xFFFFFFFFFFFFFFFFULL, 0x000000FFFFFFFFFFULL, 0xCD00000000000000ULL }, /* 13 */
	{ 0xFFFFFFFFFFFFFFFFULL, 0x0000FFFFFFFFFFFFULL, 0xCE00000000000000ULL }, /* 14 */
	{ 0xFFFFFFFFFFFFFFFFULL, 0x00FFFFFFFFFFFFFFULL, 0xCF00000000000000ULL }, /* 15 */
	{ 0xFFFFFFFFFFFFFFFFULL, 0xFFFFFFFFFFFFFFFFULL, 0x0000000000000000ULL }, /* 16 */
};

/* Whether a probe goes on past e: the slot is filled (idp ≠ 0) with
 * another key. In arithmetic, one branch for the loop (not one on whether
 * the word is new). */
static inline bool word_probe_on(const struct word_ent *e, uint64_t k1, uint64_t k2)
{
	uint64_t d = (e->k1 ^ k1) | (e->k2 ^ k2);
	uint64_t filled = ((uint64_t)e->idp + 0xFFFFFFFFu) >> 32; /* idp < 2^32 */
	return (filled & ((d | (0 - d)) >> 63)) != 0;
}

/* The slot of the word u[a..a+l) (1 ≤ l; u readable 16 bytes past a): where its
 * key is, or the empty slot that ends its probe run. */
static inline __attribute__((always_inline)) size_t
word_slot(const struct word_tab *w, const unsigned char *u, size_t len, size_t a, size_t l,
	  uint64_t *k1p, uint64_t *k2p)
{
	uint64_t k1, k2, v2;
	size_t p;
	if (__builtin_expect(l > 16, 0)) {
		/* long: a hash of the bytes, then compared */
		uint64_t h = l;
		for (size_t q = 0; q + 8 < l; q += 8) {
			memcpy(&k1, u + a + q, 8);
			h = mix64(h ^ k1);
		}
		memcpy(&k1, u + a + l - 8, 8);
		k1 = mix64(h ^ k1);
		k2 = 0xC0ULL << 56 | l;
		p = (size_t)(((k1 ^ k2) * HASH_MUL) >> w->shift);
		while (w->t[p].idp && (w->t[p].k1 != k1 || w->t[p].k2 != k2 ||
				       memcmp(w->t[p].p, u + a, l)))
			p = (p + 1) & w->mask;
		if (!w->t[p].idp)
			w->t[p].p = u + a;
	} else {
		/* the bytes, zero-padded, with the length tag */
		const unsigned char *src = u + a; /* u padded by 16 bytes */
		memcpy(&k1, src, 8);
		memcpy(&v2, src + 8, 8);
		k1 &= key_mask[l].m1;
		k2 = (v2 & key_mask[l].m2) | key_mask[l].tag;
		p = (size_t)(((k1 ^ k2) * HASH_MUL) >> w->shift);
		while (word_probe_on(w->t + p, k1, k2))
			p = (p + 1) & w->mask;
	}
	*k1p = k1;
	*k2p = k2;
	return p;
}

/* The id of the word u[a..a+l): in order of first appearance, no branch
 * on whether it is new. */
static inline __attribute__((always_inline)) uint32_t
word_id(struct word_tab *w, const unsigned char *u, size_t ulen, size_t a, size_t l)
{
	uint64_t k1, k2;
	size_t p = word_slot(w, u, ulen, a, l, &k1, &k2);
	struct word_ent *e = w->t + p;
	uint32_t old = e->idp, isnew = old == 0;
	uint32_t idp = old | ((w->nd + 1) & (0 - isnew));
	e->k1 = k1;
	e->k2 = k2;
	e->idp = idp;
	w->nd += isnew;
	w->used[w->nu] = (uint32_t)p;
	w->nu += isnew;
	return idp - 1;
}

/* The word ids of one side: the words [bnd[2k], bnd[2k+1]) of u (from
 * str.split()) after sacreBLEU _remove_punctuation (an ASCII punctuation
 * byte taken off the end, else off the start, of words of ≥ 2 bytes; such
 * a byte is a whole character). Returns the count written to ids. */
static size_t word_ids(struct word_tab *wt, const unsigned char *u, size_t ulen, const uint32_t *bnd,
		       size_t nb, uint32_t *ids)
{
	struct word_tab w = *wt;
	size_t n = 0;
	for (size_t k = 0; k < nb; k += 2) {
		uint32_t s = bnd[k], e = bnd[k + 1], l = e - s;
		uint32_t pl = (l >= 2) & punct_byte[u[e - 1]];
		uint32_t pf = (l >= 2) & (pl ^ 1) & punct_byte[u[s]];
		uint32_t im = word_id(&w, u, ulen, s + pf, l - pl - pf), ip = 0;
		if (pl | pf)
			ip = word_id(&w, u, ulen, pf ? s : e - 1, 1);
		ids[n] = pf ? ip : im;
		ids[n + 1] = pf ? im : ip;
		n += 1 + (pl | pf);
	}
	*wt = w;
	return n;
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

/* chrF++'s words from the symbols (text that is not valid UTF-8, where
 * different bytes may decode alike): the symbol pass again, recording the
 * word boundaries and hashes, then split_words and interning. tab is empty
 * on entry and on return; *nused, ch, cr, *nh, *nr as the symbol pass
 * leaves them. */
static int words_from_syms(struct lynn_score_ctx *ctx, const struct lynn_chrf_opts *o,
			   const char *hyp, size_t hyp_len, const char *ref, size_t ref_len,
			   struct cp_ent *tab, size_t cap, uint32_t *used, size_t *nused, uint32_t *ch,
			   uint32_t *cr, size_t *nh, size_t *nr, struct lynn_chrf_stats *out,
			   struct lynn_err *err)
{
	uint32_t *bh, *br, *off, *len, *ids;
	uint64_t *hwh, *hwr, *hs;
	size_t nbh, nbr, nwh, nwr, nd, tot = hyp_len + ref_len + 2;
	int rc;
	/* boundaries, then (8-byte aligned) the word hashes */
	bh = score_buf(ctx, SLOT_CP_D, (tot + 4) * sizeof *bh + (tot + 4) * sizeof *hwh, err);
	off = score_buf(ctx, SLOT_IDS_A, 3 * (tot + 1) * sizeof *off, err);
	hs = score_buf(ctx, SLOT_HASH_A, (tot + 1) * sizeof *hs, err);
	if (!bh || !off || !hs)
		return -LYNN_ENOMEM;
	br = bh + hyp_len + 1;
	hwh = (uint64_t *)(bh + ((tot + 4) & ~(size_t)1));
	hwr = hwh + hyp_len + 2;
	len = off + tot + 1;
	ids = len + tot + 1;
	*nh = char_syms(hyp, hyp_len, o->whitespace, tab, cap, used, nused, ch, bh, hwh, &nbh, NULL,
			NULL, 0);
	*nr = char_syms(ref, ref_len, o->whitespace, tab, cap, used, nused, cr, br, hwr, &nbr, NULL,
			NULL, 0);
	for (size_t k = 0; k < *nused; k++)
		tab[used[k]].cp = 0;
	nwh = split_words(ch, 0, bh, hwh, nbh, off, len, hs);
	nwr = split_words(cr, hyp_len + 1, br, hwr, nbr, off + nwh, len + nwh, hs + nwh);
	if ((rc = score_intern_hashed(ctx, SLOT_TABLE, ch, off, len, hs, nwh + nwr, ids, &nd, err)))
		return rc;
	return ngram_stats(ctx, ids, nwh, ids + nwh, nwr, nd, o->word_order,
			   out->v + 3 * o->char_order, err);
}

/* chrF++: the symbols of both sides (ch, cr, *nh, *nr) and the word
 * statistics into out (see word_ids; words_from_syms for text that is not
 * valid UTF-8). Kept out of lynn_chrf_stats_compute so that chrF's path
 * compiles as before. */
static __attribute__((noinline)) int
words_bytes(struct lynn_score_ctx *ctx, const struct lynn_chrf_opts *o, const char *hyp,
	    size_t hyp_len, const char *ref, size_t ref_len, struct cp_ent *tab, size_t cap,
	    uint32_t *used, size_t *nusedp, uint32_t *ch, uint32_t *cr, size_t *nhp, size_t *nrp,
	    struct lynn_chrf_stats *out, struct lynn_err *err)
{
	size_t nused = 0, nh, nr;
	int rc;
	/* words from the bytes (word_ids), unless the text is not valid
	 * UTF-8: then from the symbols (words_from_syms) */
	uint8_t *wsh, *wsr;
	uint32_t *bh, *br, *ids;
	struct word_tab w = { 0 };
	unsigned char *hp, *rp;
	unsigned bad = 0;
	size_t nbh, nbr, nwh, nwr, wcap, tot = hyp_len + ref_len;
	size_t wsb = (tot + 2 * 72 + 7) & ~(size_t)7;
	wsh = score_buf(ctx, SLOT_CP_D, wsb + (tot + 16) * sizeof *bh, err);
	ids = score_buf(ctx, SLOT_IDS_A, 2 * (tot + 4) * sizeof *ids, err);
	if (!wsh || !ids)
		return -LYNN_ENOMEM;
	wsr = wsh + hyp_len + 72;
	bh = (uint32_t *)(wsh + wsb);
	br = bh + hyp_len + 8;
	w.used = ids + tot + 4;
	/* copies padded with 16 spaces: a word's key is read as 16 bytes
	 * from its start, and the symbol pass runs eight bytes at a time up
	 * to the end when spaces are dropped */
	hp = score_buf(ctx, SLOT_CP_A, tot + 32, err);
	if (!hp)
		return -LYNN_ENOMEM;
	rp = hp + hyp_len + 16;
	memcpy(hp, hyp, hyp_len);
	memset(hp + hyp_len, ' ', 16);
	memcpy(rp, ref, ref_len);
	memset(rp + ref_len, ' ', 16);
	nh = char_syms((const char *)hp, hyp_len, o->whitespace, tab, cap, used, &nused, ch, NULL,
		       NULL, NULL, wsh, &bad, o->whitespace ? 0 : 7);
	nr = char_syms((const char *)rp, ref_len, o->whitespace, tab, cap, used, &nused, cr, NULL,
		       NULL, NULL, wsr, &bad, o->whitespace ? 0 : 7);
	for (size_t k = 0; k < nused; k++)
		tab[used[k]].cp = 0;
	if (bad) {
		nused = 0;
		rc = words_from_syms(ctx, o, hyp, hyp_len, ref, ref_len, tab, cap, used, &nused,
				     ch, cr, &nh, &nr, out, err);
		if (rc)
			return rc;
	} else {
		memset(wsh + hyp_len, 1, 64);
		memset(wsr + ref_len, 1, 64);
		nbh = word_bounds(wsh, hyp_len, bh);
		nbr = word_bounds(wsr, ref_len, br);
		/* ≤ nbh + nbr words after the split: table ≤ 1/4 full, ≤ 1/2
		 * for very long inputs (memory: 32-byte entries) */
		wcap = pow2_at_least((nbh + nbr <= 65536 ? 4 : 2) * (nbh + nbr) + 8);
		w.t = clean_buf(ctx, SLOT_CHRF_WORD, wcap * sizeof *w.t, err);
		if (!w.t)
			return -LYNN_ENOMEM;
		w.mask = wcap - 1;
		w.shift = 64 - (unsigned)__builtin_ctzll((unsigned long long)wcap);
		nwh = word_ids(&w, hp, hyp_len, bh, nbh, ids);
		nwr = word_ids(&w, rp, ref_len, br, nbr, ids + nwh);
		for (size_t k = 0; k < w.nu; k++)
			w.t[w.used[k]] = (struct word_ent){ 0 };
		rc = ngram_stats(ctx, ids, nwh, ids + nwh, nwr, w.nd, o->word_order,
				 out->v + 3 * o->char_order, err);
		if (rc)
			return rc;
	}
	*nusedp = nused;
	*nhp = nh;
	*nrp = nr;
	return 0;
}

int lynn_chrf_stats_compute(struct lynn_score_ctx *ctx_in, const struct lynn_chrf_opts *o,
			    const char *hyp, size_t hyp_len, const char *ref, size_t ref_len,
			    struct lynn_chrf_stats *out, struct lynn_err *err)
{
	struct lynn_score_ctx tmp, *ctx = score_ctx_get(ctx_in, &tmp);
	uint32_t *ch, *cr, *used;
	struct cp_ent *tab;
	size_t nh, nr, nused = 0, cap;
	int rc;

	if ((rc = check_opts(o, err)))
		return rc;
	memset(out, 0, sizeof *out);
	out->n_orders = o->char_order + o->word_order;
	rc = -LYNN_ENOMEM;

	/* symbols: hyp at ch, ref at cr = ch + hyp_len + 1, at most one per byte */
	ch = score_buf(ctx, SLOT_CP_C, (hyp_len + ref_len + 2) * sizeof *ch, err);
	cr = ch ? ch + hyp_len + 1 : NULL;
	used = score_buf(ctx, SLOT_CP_B, (hyp_len + ref_len + 1) * sizeof *used, err);
	/* distinct non-ASCII symbols: U+FFFD plus code points of ≥ 2 bytes each,
	 * and no more than Unicode has; the table stays at most half full
	 * (sized by all bytes, not only the high ones: counting those cost
	 * more than the larger table, which stays zero untouched) */
	{
		size_t most = (hyp_len + ref_len) / 2 + 1;
		if (most > 0x110001)
			most = 0x110001;
		cap = pow2_at_least(2 * most + 2);
	}
	tab = ch && used ? clean_buf(ctx, SLOT_CHRF_CP, cap * sizeof *tab, err) : NULL;
	if (!tab)
		goto out;
	if (o->word_order > 0) {
		rc = words_bytes(ctx, o, hyp, hyp_len, ref, ref_len, tab, cap, used, &nused, ch, cr,
				 &nh, &nr, out, err);
		if (rc)
			goto out;
	} else {
		/* whitespace dropped: copies padded with 7 spaces, so that
		 * the symbol pass runs eight bytes at a time up to the end */
		const char *hs = hyp, *rs = ref;
		size_t pad = o->whitespace ? 0 : 7;
		if (pad) {
			char *hp = score_buf(ctx, SLOT_CP_A, hyp_len + ref_len + 16, err);
			if (!hp)
				goto out;
			memcpy(hp, hyp, hyp_len);
			memset(hp + hyp_len, ' ', 8);
			memcpy(hp + hyp_len + 8, ref, ref_len);
			memset(hp + hyp_len + 8 + ref_len, ' ', 8);
			hs = hp;
			rs = hp + hyp_len + 8;
		}
		nh = char_syms(hs, hyp_len, o->whitespace, tab, cap, used, &nused, ch, NULL, NULL,
			       NULL, NULL, NULL, pad);
		nr = char_syms(rs, ref_len, o->whitespace, tab, cap, used, &nused, cr, NULL, NULL,
			       NULL, NULL, NULL, pad);
		for (size_t k = 0; k < nused; k++)
			tab[used[k]].cp = 0;
	}
	rc = ngram_stats(ctx, ch, nh, cr, nr, 128 + nused, o->char_order, out->v, err);
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
		if (o->eps_smoothing) {
			/* the per-order f-scores are used only here (the
			 * other rule overwrites score) */
			double denom = factor * prec + rec;
			score += denom > 0 ? ((1 + factor) * prec * rec / denom) : eps;
		}
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
