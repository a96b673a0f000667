/* sample.c - next-token selection (include/lynn/sample.h). */
#include "lynn/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
	float x;     /* the logit */
	float l;     /* logit / temperature: the order */
	float p;     /* probability */
	int32_t id;
};

struct lynn_sampler {
	struct lynn_sample_params p;
	int n;
	uint64_t st[4];
	struct cand *c;
	float *w;   /* weights, contiguous (the exp loop vectorises): the vocabulary's (draw_all), then the candidates' */
	double *bs; /* the draw's sums of 8 weights */
	double *bmass; /* top-p: the weights' mass and count by bucket (MASS_BUCKETS) */
	int *bcnt;
	/* the penalties (none: NULL): by token, SEEN_PROMPT and the times
	 * generated; the tokens seen, once each */
	uint32_t *seen;
	int32_t *seen_ids;
	int n_seen;
	int32_t *bias_ids; /* the bias (p.n_bias pairs), by id (a repeated id in
			    * the order given) */
	float *bias;
	bool lowers; /* lynn_sample_edits_lower(&p) */
	float *pen; /* the edited logits (lynn_sample_edits_logits), else NULL */
};

#define SEEN_PROMPT 0x80000000u
#define SEEN_COUNT 0x7FFFFFFFu

/* top-p's buckets of the weights: a weight's float bits >> MASS_SHIFT, its
 * exponent and 5 mantissa bits (weights lie in [0, 1]). A larger weight
 * comes from a larger logit, so the buckets keep the candidates' order. */
#define MASS_SHIFT 18
#define MASS_BUCKETS ((0x3F800000u >> MASS_SHIFT) + 1)

void lynn_sample_params_init(struct lynn_sample_params *p)
{
	memset(p, 0, sizeof *p);
	p->top_p = 1.0f;
	p->repetition_penalty = 1.0f;
}

static bool penalized(const struct lynn_sample_params *p)
{
	return (p->repetition_penalty != 0.0f && p->repetition_penalty != 1.0f) || p->presence_penalty != 0.0f ||
	       p->frequency_penalty != 0.0f;
}

bool lynn_sample_edits_logits(const struct lynn_sample_params *p)
{
	return penalized(p) || p->n_bias > 0;
}

bool lynn_sample_edits_lower(const struct lynn_sample_params *p)
{
	if (!(p->presence_penalty >= 0.0f && p->frequency_penalty >= 0.0f &&
	      (p->repetition_penalty == 0.0f || p->repetition_penalty >= 1.0f)))
		return false;
	for (int i = 0; i < p->n_bias; i++)
		if (!(p->bias[i] <= 0.0f))
			return false;
	return true;
}

struct bias_at {
	int32_t id, at; /* the token, its place in the caller's list */
};

static int cmp_bias_at(const void *a, const void *b)
{
	const struct bias_at *x = a, *y = b;
	return x->id != y->id ? (x->id > y->id) - (x->id < y->id) : (x->at > y->at) - (x->at < y->at);
}

/* The sampler's copy of p's bias, sorted by id, so that a candidate finds
 * its own by binary search (lynn_sampler_sample_edited_top); -1: out of
 * memory */
static int sort_bias(struct lynn_sampler *s, const struct lynn_sample_params *p)
{
	struct bias_at *o = malloc((size_t)p->n_bias * sizeof *o);
	if (!o)
		return -1;
	for (int i = 0; i < p->n_bias; i++)
		o[i] = (struct bias_at){ p->bias_ids[i], i };
	qsort(o, (size_t)p->n_bias, sizeof *o, cmp_bias_at);
	for (int i = 0; i < p->n_bias; i++) {
		s->bias_ids[i] = o[i].id;
		s->bias[i] = p->bias[o[i].at];
	}
	free(o);
	return 0;
}

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t s[4])
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
	s[2] ^= t; s[3] = rotl(s[3], 45);
	return r;
}

/* uniform in [0, 1) with 53 bits */
static double next_unit(uint64_t s[4]) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

struct lynn_sampler *lynn_sampler_create(const struct lynn_sample_params *p, int n_vocab,
					 struct lynn_err *err)
{
	struct lynn_sampler *s;
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) {
		lynn_errf(err, -LYNN_EINVAL, "sample: top_p %g outside (0, 1]", p->top_p);
		return NULL;
	}
	if (!(p->min_p >= 0.0f && p->min_p < 1.0f)) {
		lynn_errf(err, -LYNN_EINVAL, "sample: min_p %g outside [0, 1)", p->min_p);
		return NULL;
	}
	if (p->top_k < 0 || n_vocab <= 0 || !(p->temperature == p->temperature)) {
		lynn_errf(err, -LYNN_EINVAL, "sample: bad top_k %d or temperature", p->top_k);
		return NULL;
	}
	if (!(p->repetition_penalty >= 0.0f && p->repetition_penalty < INFINITY) ||
	    !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty)) {
		lynn_errf(err, -LYNN_EINVAL, "sample: bad penalties (repetition %g must be >= 0, presence %g and "
			  "frequency %g finite)", p->repetition_penalty, p->presence_penalty, p->frequency_penalty);
		return NULL;
	}
	if (p->n_bias < 0 || (p->n_bias > 0 && (!p->bias_ids || !p->bias))) {
		lynn_errf(err, -LYNN_EINVAL, "sample: bad logit bias");
		return NULL;
	}
	for (int i = 0; i < p->n_bias; i++)
		if (p->bias_ids[i] < 0 || p->bias_ids[i] >= n_vocab || !isfinite(p->bias[i])) {
			lynn_errf(err, -LYNN_EINVAL, "sample: logit bias of token %d: outside the vocabulary "
				  "(0..%d) or not a number", p->bias_ids[i], n_vocab - 1);
			return NULL;
		}
	const bool pen = penalized(p);
	s = calloc(1, sizeof *s);
	if (s) {
		s->c = malloc((size_t)n_vocab * sizeof *s->c);
		s->w = malloc((size_t)n_vocab * sizeof *s->w);
		s->bs = malloc(((size_t)n_vocab / 8 + 1) * sizeof *s->bs);
		s->bmass = malloc(MASS_BUCKETS * sizeof *s->bmass);
		s->bcnt = malloc(MASS_BUCKETS * sizeof *s->bcnt);
		if (pen) {
			s->seen = calloc((size_t)n_vocab, sizeof *s->seen);
			s->seen_ids = malloc((size_t)n_vocab * sizeof *s->seen_ids);
		}
		if (p->n_bias) {
			s->bias_ids = malloc((size_t)p->n_bias * sizeof *s->bias_ids);
			s->bias = malloc((size_t)p->n_bias * sizeof *s->bias);
		}
		if (lynn_sample_edits_logits(p))
			s->pen = malloc((size_t)n_vocab * sizeof *s->pen);
	}
	if (!s || !s->c || !s->w || !s->bs || !s->bmass || !s->bcnt || (pen && (!s->seen || !s->seen_ids)) ||
	    (p->n_bias && (!s->bias_ids || !s->bias)) || (lynn_sample_edits_logits(p) && !s->pen)) {
		lynn_sampler_free(s);
		lynn_errf(err, -LYNN_ENOMEM, "sample: out of memory");
		return NULL;
	}
	s->p = *p;
	s->n = n_vocab;
	if (p->n_bias && sort_bias(s, p)) {
		lynn_sampler_free(s);
		lynn_errf(err, -LYNN_ENOMEM, "sample: out of memory");
		return NULL;
	}
	s->p.bias_ids = s->bias_ids;
	s->p.bias = s->bias;
	s->lowers = lynn_sample_edits_lower(p);
	uint64_t x = p->seed;
	for (int i = 0; i < 4; i++)
		s->st[i] = splitmix64(&x);
	return s;
}

void lynn_sampler_free(struct lynn_sampler *s)
{
	if (!s)
		return;
	free(s->c);
	free(s->w);
	free(s->bs);
	free(s->bmass);
	free(s->bcnt);
	free(s->seen);
	free(s->seen_ids);
	free(s->bias_ids);
	free(s->bias);
	free(s->pen);
	free(s);
}

int lynn_sampler_seen(struct lynn_sampler *s, const int32_t *ids, size_t n, bool generated,
		      struct lynn_err *err)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= s->n)
			return lynn_errf(err, -LYNN_EINVAL, "sample: token %d outside the vocabulary (0..%d)",
					 ids[i], s->n - 1);
	if (!s->seen)
		return 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t *v = &s->seen[ids[i]];
		if (!*v)
			s->seen_ids[s->n_seen++] = ids[i]; /* distinct ids: at most n of them */
		if (!generated)
			*v |= SEEN_PROMPT;
		else if ((*v & SEEN_COUNT) < SEEN_COUNT)
			(*v)++;
	}
	return 0;
}

/* The penalties of a token seen before (seen: its SEEN_PROMPT and count)
 * on x: repetition, then frequency and presence (vLLM's order), in float as
 * transformers and vLLM compute them. */
static float penalty(const struct lynn_sample_params *p, uint32_t seen, float x)
{
	const float r = p->repetition_penalty;
	const uint32_t c = seen & SEEN_COUNT;
	if (r != 0.0f && r != 1.0f)
		x = x < 0.0f ? x * r : x / r;
	if (c) {
		x -= (float)c * p->frequency_penalty;
		x -= p->presence_penalty;
	}
	return x;
}

/* Only the tokens biased and seen change: the bias, then the penalties. */
void lynn_sampler_penalize(const struct lynn_sampler *s, const float *logits, float *out)
{
	const struct lynn_sample_params *p = &s->p;
	if (out != logits)
		memcpy(out, logits, (size_t)s->n * sizeof *out);
	for (int i = 0; i < p->n_bias; i++)
		out[s->bias_ids[i]] += s->bias[i];
	for (int i = 0; i < s->n_seen; i++)
		out[s->seen_ids[i]] = penalty(p, s->seen[s->seen_ids[i]], out[s->seen_ids[i]]);
}

float lynn_max_f32(const float *v, int n)
{
	float m[8], best = -INFINITY;
	int i = 0;
	for (int j = 0; j < 8; j++)
		m[j] = -INFINITY;
	for (; i + 8 <= n; i += 8) /* 8 independent maxima: no loop-carried dependency */
		for (int j = 0; j < 8; j++)
			m[j] = v[i + j] > m[j] ? v[i + j] : m[j];
	for (; i < n; i++)
		best = v[i] > best ? v[i] : best;
	for (int j = 0; j < 8; j++)
		best = m[j] > best ? m[j] : best;
	return best;
}

/* CLONES: an AVX2 copy of a loop over e^x (8 lanes where SSE has 4), picked
 * at load time where the CPU has AVX2; without FMA (which C11 does not
 * contract into anyway), so the same operations and the same bits as the
 * default copy (bench_sample: log-sum-exp 410 -> 201 us). On static
 * functions only: clang 14 names an exported function's dispatcher
 * "f.ifunc", which callers in other files do not link to. */
#if defined(__x86_64__) || defined(__i386__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

/* sum of e^(v[i] - mx) */
CLONES static double exp_sum(const float *v, int n, float mx)
{
	double part[8] = { 0 }, sum = 0.0;
	int i = 0;
	for (; i + 8 <= n; i += 8) /* blocks of 8: a fixed trip count vectorises at -O2 */
		for (int j = 0; j < 8; j++)
			part[j] += lynn_expf_neg(v[i + j] - mx);
	for (; i < n; i++)
		sum += lynn_expf_neg(v[i] - mx);
	for (int j = 0; j < 8; j++)
		sum += part[j];
	return sum;
}

double lynn_log_sum_exp(const float *v, int n)
{
	const float mx = lynn_max_f32(v, n);
	return (double)mx + log(exp_sum(v, n, mx));
}

/* Two passes: the maximum (lynn_max_f32), then its first index. NaNs never
 * win, as in a plain `>` scan, except a NaN at index 0, which nothing
 * beats. */
int32_t lynn_sample_greedy(const float *logits, int n)
{
	if (n <= 0 || isnan(logits[0]))
		return 0;
	const float best = lynn_max_f32(logits, n);
	for (int i = 0; i < n; i++)
		if (logits[i] == best)
			return i;
	return 0;
}

/* the candidates' order: descending logit, ascending id on ties */
static bool before(const struct cand *x, const struct cand *y)
{
	return x->l > y->l || (x->l == y->l && x->id < y->id);
}

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	return before(x, y) ? -1 : before(y, x);
}

static void swap_cand(struct cand *a, struct cand *b)
{
	struct cand t = *a;
	*a = *b;
	*b = t;
}

/* Partitions c[lo, hi) (hi - lo >= 2) around a median-of-three pivot:
 * returns m with c[lo, m) before c[m], c[m + 1, hi) after it. */
static int partition(struct cand *c, int lo, int hi)
{
	int mid = lo + (hi - lo) / 2, last = hi - 1;
	if (before(&c[mid], &c[lo]))
		swap_cand(&c[mid], &c[lo]);
	if (before(&c[last], &c[lo]))
		swap_cand(&c[last], &c[lo]);
	if (before(&c[last], &c[mid]))
		swap_cand(&c[last], &c[mid]);
	swap_cand(&c[mid], &c[last]); /* the median to the end */
	int m = lo;
	for (int i = lo; i < last; i++)
		if (before(&c[i], &c[last]))
			swap_cand(&c[i], &c[m++]);
	swap_cand(&c[m], &c[last]);
	return m;
}

/* The k first candidates in order (0 < k) in one pass over the logits, into
 * c[0, returned) in no particular order (fewer than k when fewer logits are
 * finite): a heap of the best so far with the last of them at its root. A
 * logit below the root's cannot get in (dividing by the temperature keeps
 * the order, and a tie loses to the root's lower id), so most cost one
 * comparison. Not inlined: inside lynn_sampler_sample GCC 12 compiled its
 * scan 40% slower (bench_sample, Qwen's top-k row: 209 against 148 us). */
__attribute__((noinline)) static int heap_first(struct cand *c, const float *logits, int n, int k,
						 float temp)
{
	int m = 0;
	for (int i = 0; i < n; i++) {
		float x = logits[i];
		if (!(x > -INFINITY) || (m == k && x < c[0].x)) /* -inf and NaN never drawn */
			continue;
		struct cand nc = { x, x / temp, 0.0f, i };
		int j;
		if (m < k) { /* sift up from the end */
			for (j = m++; j > 0 && before(&c[(j - 1) / 2], &nc); j = (j - 1) / 2)
				c[j] = c[(j - 1) / 2];
			c[j] = nc;
			continue;
		}
		if (!before(&nc, &c[0]))
			continue;
		for (j = 0;;) { /* sift down from the root */
			int ch = 2 * j + 1;
			if (ch >= m)
				break;
			if (ch + 1 < m && before(&c[ch], &c[ch + 1]))
				ch++; /* the later child */
			if (!before(&nc, &c[ch]))
				break;
			c[j] = c[ch];
			j = ch;
		}
		c[j] = nc;
	}
	return m;
}

/* Rounds of partitioning before a range is sorted instead (a bound on the
 * quadratic worst case of a pivot rule) */
#define SELECT_ROUNDS 64

/* The length of the shortest prefix (in order) of c[0, n) whose
 * probabilities sum to >= mass (all n if none does); that prefix is moved
 * to the front, in no particular order. */
static int select_mass(struct cand *c, int n, double mass)
{
	int lo = 0, hi = n;
	double need = mass; /* still wanted from c[lo, hi): everything before lo is in */
	for (int r = 0; lo < hi; r++) {
		if (r == SELECT_ROUNDS || hi - lo == 1) {
			qsort(c + lo, (size_t)(hi - lo), sizeof *c, cmp_cand);
			for (int i = lo; i < hi; i++) {
				need -= c[i].p;
				if (need <= 0.0)
					return i + 1;
			}
			return hi; /* short of it by rounding only, or hi == n */
		}
		int m = partition(c, lo, hi);
		double up = 0.0;
		for (int i = lo; i < m; i++)
			up += c[i].p;
		if (up >= need) {
			hi = m;
		} else if (up + c[m].p >= need) {
			return m + 1;
		} else {
			need -= up + c[m].p;
			lo = m + 1;
		}
	}
	return lo; /* as above */
}

static inline uint32_t mass_bucket(float p)
{
	uint32_t b;
	memcpy(&b, &p, sizeof b);
	return b >> MASS_SHIFT;
}

/* select_mass over c[0, n) with weights w[i] = c[i].p: the buckets of the
 * weights, highest first, until their mass reaches `need`; the buckets
 * above are all in and go to the front, then the crossing bucket's
 * candidates, among which select_mass finds the rest. Two passes over the
 * candidates however flat the weights; for more candidates than a few
 * times the buckets (clearing them costs what a pass does). */
static int select_mass_buckets(struct lynn_sampler *s, struct cand *c, const float *w, int n, double need)
{
	double *mass = s->bmass, above = 0.0;
	int *cnt = s->bcnt;
	memset(mass, 0, MASS_BUCKETS * sizeof *mass);
	memset(cnt, 0, MASS_BUCKETS * sizeof *cnt);
	for (int i = 0; i < n; i++) {
		const uint32_t b = mass_bucket(w[i]);
		mass[b] += w[i];
		cnt[b]++;
	}
	int cross = -1;
	for (int b = (int)MASS_BUCKETS - 1; b >= 0 && cross < 0; b--) {
		if (above + mass[b] >= need)
			cross = b;
		else
			above += mass[b];
	}
	if (cross < 0) /* short of it by rounding only: all of them */
		return n;
	int front = 0;
	for (int i = 0; i < n; i++)
		if (mass_bucket(c[i].p) > (uint32_t)cross)
			swap_cand(&c[i], &c[front++]);
	int mid = front;
	for (int i = front; i < n; i++)
		if (mass_bucket(c[i].p) == (uint32_t)cross)
			swap_cand(&c[i], &c[mid++]);
	return front + select_mass(c + front, mid - front, need - above);
}

/* The seeded draw over n >= 1 weights: the position where their running
 * sum passes u times their sum. The weights' mass in blocks of 8 (the
 * blocks' sums are independent, so only one add a block waits on the one
 * before), then the block where the running sum passes, one by one. Past
 * the end by rounding only: the last position of positive weight. */
__attribute__((always_inline)) static inline int pick(struct lynn_sampler *s, const float *w, int n)
{
	double *bs = s->bs, sum = 0.0;
	int nb = n / 8;
	for (int b = 0; b < nb; b++) {
		double t = 0.0;
		for (int j = 0; j < 8; j++)
			t += w[8 * b + j];
		bs[b] = t;
		sum += t;
	}
	for (int i = 8 * nb; i < n; i++)
		sum += w[i];
	double u = next_unit(s->st) * sum, acc = 0.0;
	int i = 0;
	for (int b = 0; b < nb && u >= acc + bs[b]; b++, i += 8)
		acc += bs[b];
	for (; i < n; i++) {
		acc += w[i];
		if (u < acc)
			return i;
	}
	for (i = n - 1; i > 0 && !(w[i] > 0.0f); i--)
		;
	return i;
}

/* top-p, min-p and the seeded draw over the n candidates in s->c (n >= 1),
 * whose weights c[i].p (the best 1) s->w holds too, in the same order;
 * `sum` is the weight of every token top-p counts (the whole vocabulary's,
 * or the top k's). Inlined into its callers: as a call, GCC 12 compiled
 * their loops 6-15% slower (bench_sample's temperature and top-p rows). */
__attribute__((always_inline)) static inline int32_t cut_draw(struct lynn_sampler *s, int n, double sum)
{
	const struct lynn_sample_params *p = &s->p;
	struct cand *c = s->c;
	if (p->top_p < 1.0f) { /* smallest prefix with mass >= top_p (at least one) */
		n = n > 4 * (int)MASS_BUCKETS ? select_mass_buckets(s, c, s->w, n, p->top_p * sum)
					      : select_mass(c, n, p->top_p * sum);
	}
	if (p->min_p > 0.0f) { /* drop p < min_p * p_max (p_max is 1 here) */
		int keep = 0;
		for (int i = 0; i < n; i++)
			if (c[i].p >= p->min_p)
				swap_cand(&c[i], &c[keep++]);
		n = keep;
	}
	float *w = s->w;
	for (int i = 0; i < n; i++)
		w[i] = c[i].p;
	return c[pick(s, w, n)].id;
}

/* The weights w[i] = e^(w[i] - max) of n values in place (the best exactly
 * 1; +inf values share all the mass; -inf gives 0); returns their sum,
 * taken in 8 running sums added in a fixed order. The cuts compare against
 * the sum instead of dividing by it. */
CLONES static double weights(float *w, int n)
{
	const float top = lynn_max_f32(w, n);
	if (top == INFINITY) {
		for (int i = 0; i < n; i++)
			w[i] = w[i] == INFINITY;
	} else { /* blocks of 8 (a fixed trip count vectorises at -O2), then the rest */
		int i = 0;
		for (; i + 8 <= n; i += 8)
			for (int j = 0; j < 8; j++)
				w[i + j] = lynn_expf_neg(w[i + j] - top);
		for (; i < n; i++)
			w[i] = lynn_expf_neg(w[i] - top);
	}
	double part[8] = { 0 }, sum = 0.0;
	int i8 = 0;
	for (; i8 + 8 <= n; i8 += 8)
		for (int j = 0; j < 8; j++)
			part[j] += w[i8 + j];
	for (int j = 0; j < 8; j++)
		sum += part[j];
	for (; i8 < n; i8++)
		sum += w[i8];
	return sum;
}

/* The draw over the n candidates in s->c (n >= 1, logit and logit /
 * temperature set): their weights, then cut_draw. */
__attribute__((always_inline)) static inline int32_t draw(struct lynn_sampler *s, int n)
{
	struct cand *c = s->c;
	float *w = s->w;
	for (int i = 0; i < n; i++)
		w[i] = c[i].l;
	const double sum = weights(w, n);
	for (int i = 0; i < n; i++)
		c[i].p = w[i];
	return cut_draw(s, n, sum);
}

/* The draw over the whole vocabulary (no top-k): the weights of all
 * tokens in one flat array, then candidates only for the tokens that can
 * survive the cuts: none below min-p, and none so light that all such
 * tokens together hold less than the mass top-p leaves out (each under (1
 * - top_p) * sum / n: such a tail is never reached by the prefix top-p
 * keeps), nor of weight 0 (-inf and NaN logits among them). At a model's
 * peaked logits that leaves a small part of 248,320 (bench_sample's: 17K
 * at top-p 0.95). */
__attribute__((always_inline)) static inline int32_t draw_all(struct lynn_sampler *s, const float *logits)
{
	const struct lynn_sample_params *p = &s->p;
	const int n = s->n;
	const float t = p->temperature;
	float *w = s->w;
	/* logit / temperature, -inf for the logits never drawn (-inf, NaN); in
	 * blocks of 8 (a fixed trip count vectorises at -O2), then the rest */
	int i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			w[i + j] = logits[i + j] > -INFINITY ? logits[i + j] / t : -INFINITY;
	for (; i < n; i++)
		w[i] = logits[i] > -INFINITY ? logits[i] / t : -INFINITY;
	const double sum = weights(w, n);
	if (!(sum > 0.0)) /* no finite logit */
		return lynn_sample_greedy(logits, n);
	if (p->top_p >= 1.0f && p->min_p <= 0.0f) /* no cuts: w is in the ids' order */
		return pick(s, w, n);
	double tail = p->top_p < 1.0f ? (1.0 - p->top_p) * sum / n : 0.0;
	float cut = (float)tail;
	if ((double)cut > tail) /* rounded up: the next float down keeps the bound */
		cut = nextafterf(cut, 0.0f);
	if (cut < p->min_p)
		cut = p->min_p;
	struct cand *c = s->c;
	int m = 0; /* the candidates' weights go to w's front, behind i */
	for (i = 0; i < n; i++)
		if (w[i] >= cut) {
			c[m] = (struct cand){ logits[i], logits[i] / t, w[i], i };
			w[m++] = w[i];
		}
	if (m == 0) /* not reached: the best token weighs 1, above every cut */
		return lynn_sample_greedy(logits, n);
	return cut_draw(s, m, sum);
}

/* Selection, not a sort of the whole vocabulary: top-k keeps a heap of k
 * in one pass and then sorts those k (so that the draw sees them in one
 * order however they were found: lynn_sampler_sample_top); without a
 * top-k only the tokens that can survive become candidates (draw_all);
 * top-p buckets the weights and partitions the crossing bucket by mass
 * (linear time), min-p is one pass, and the draw walks the survivors in
 * the order selection left them (the same on every machine). */
int32_t lynn_sampler_sample(struct lynn_sampler *s, const float *logits)
{
	const struct lynn_sample_params *p = &s->p;
	if (s->n_seen || s->p.n_bias) { /* a bias, or penalties and tokens they apply to */
		lynn_sampler_penalize(s, logits, s->pen);
		logits = s->pen;
	}
	if (p->temperature <= 0.0f)
		return lynn_sample_greedy(logits, s->n);
	if (p->top_k <= 0)
		return draw_all(s, logits);
	struct cand *c = s->c;
	int n = heap_first(c, logits, s->n, p->top_k, p->temperature);
	qsort(c, (size_t)n, sizeof *c, cmp_cand);
	if (n == 0)
		return lynn_sample_greedy(logits, s->n);
	return draw(s, n);
}

int32_t lynn_sampler_sample_top(struct lynn_sampler *s, const float *x, const int32_t *ids, int n)
{
	const struct lynn_sample_params *p = &s->p;
	if (n < 1 || p->temperature <= 0.0f || p->top_k <= 0 || n > p->top_k || n > s->n || s->pen)
		return -1;
	for (int i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= s->n || !(x[i] > -INFINITY))
			return -1;
		s->c[i] = (struct cand){ x[i], x[i] / p->temperature, 0.0f, ids[i] };
	}
	for (int i = 1; i < n; i++) /* the order lynn_sampler_sample sorts its top k in */
		if (!before(&s->c[i - 1], &s->c[i]))
			return -1;
	return draw(s, n);
}

/* The raw candidates, edited (bias, then penalties), in the order
 * lynn_sampler_sample's top-k sorts: the edited top-k is among them when
 * the k-th stays above the n-th raw logit (an edit only lowers, so a token
 * outside, at most that raw logit, is below). */
int32_t lynn_sampler_sample_edited_top(struct lynn_sampler *s, const float *x, const int32_t *ids, int n,
				       bool complete, bool do_draw)
{
	const struct lynn_sample_params *p = &s->p;
	const bool greedy = p->temperature <= 0.0f;
	const float t = greedy ? 1.0f : p->temperature;
	const int k = greedy ? 1 : p->top_k;
	if (n < 1 || n > s->n || k <= 0 || !s->lowers)
		return -1;
	for (int i = 0; i < n; i++) {
		/* in the device's order: by logit / temperature, lower id first */
		if (ids[i] < 0 || ids[i] >= s->n || !(x[i] > -INFINITY) ||
		    (i > 0 && !(x[i - 1] / t > x[i] / t || (x[i - 1] / t == x[i] / t && ids[i - 1] < ids[i]))))
			return -1;
		float e = x[i];
		int lo = 0, hi = p->n_bias; /* the first bias of ids[i], then its repeats */
		while (lo < hi) {
			const int mid = lo + (hi - lo) / 2;
			if (s->bias_ids[mid] < ids[i])
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < p->n_bias && s->bias_ids[lo] == ids[i]; lo++)
			e += s->bias[lo];
		if (s->seen && s->seen[ids[i]])
			e = penalty(p, s->seen[ids[i]], e);
		s->c[i] = (struct cand){ e, e / t, 0.0f, ids[i] };
	}
	qsort(s->c, (size_t)n, sizeof *s->c, cmp_cand);
	const int m = k < n ? k : n;
	if (!complete && (m < k || !(s->c[m - 1].l > x[n - 1] / t)))
		return -2;
	if (!do_draw)
		return 0;
	return greedy ? s->c[0].id : draw(s, m);
}
