/* sample.c - next-token selection (include/lynn/sample.h). */
#include "lynn/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct cand {
	float v;     /* logit / temperature, then probability */
	int32_t id;
};

struct lynn_sampler {
	struct lynn_sample_params p;
	int n;
	uint64_t st[4];
	struct cand *c;
};

void lynn_sample_params_init(struct lynn_sample_params *p)
{
	memset(p, 0, sizeof *p);
	p->top_p = 1.0f;
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
	s = calloc(1, sizeof *s);
	if (s)
		s->c = malloc((size_t)n_vocab * sizeof *s->c);
	if (!s || !s->c) {
		lynn_sampler_free(s);
		lynn_errf(err, -LYNN_ENOMEM, "sample: out of memory");
		return NULL;
	}
	s->p = *p;
	s->n = n_vocab;
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
	free(s);
}

int32_t lynn_sample_greedy(const float *logits, int n)
{
	int32_t best = 0;
	for (int i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

/* descending value, ascending id on ties */
static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->v != y->v)
		return x->v > y->v ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

int32_t lynn_sampler_sample(struct lynn_sampler *s, const float *logits)
{
	const struct lynn_sample_params *p = &s->p;
	if (p->temperature <= 0.0f)
		return lynn_sample_greedy(logits, s->n);
	int n = 0;
	for (int i = 0; i < s->n; i++) {
		if (logits[i] == -INFINITY)
			continue;
		s->c[n].v = logits[i] / p->temperature;
		s->c[n].id = i;
		n++;
	}
	/* sorted descending (a full sort: exact top-p whatever the vocabulary) */
	qsort(s->c, (size_t)n, sizeof *s->c, cmp_cand);
	if (p->top_k > 0 && p->top_k < n)
		n = p->top_k;
	/* probabilities over the kept candidates */
	double sum = 0.0, top = s->c[0].v;
	for (int i = 0; i < n; i++) {
		s->c[i].v = (float)exp((double)s->c[i].v - top);
		sum += s->c[i].v;
	}
	for (int i = 0; i < n; i++)
		s->c[i].v = (float)(s->c[i].v / sum);
	if (p->top_p < 1.0f) { /* smallest prefix with mass >= top_p (at least one) */
		double cum = 0.0;
		int keep = n;
		for (int i = 0; i < n; i++) {
			cum += s->c[i].v;
			if (cum >= p->top_p) {
				keep = i + 1;
				break;
			}
		}
		n = keep;
	}
	if (p->min_p > 0.0f) { /* drop p < min_p * p_max (a ratio: no renormalising needed) */
		float thr = p->min_p * s->c[0].v;
		int keep = 1;
		while (keep < n && s->c[keep].v >= thr)
			keep++;
		n = keep;
	}
	sum = 0.0;
	for (int i = 0; i < n; i++)
		sum += s->c[i].v;
	double u = next_unit(s->st) * sum, acc = 0.0;
	for (int i = 0; i < n; i++) {
		acc += s->c[i].v;
		if (u < acc)
			return s->c[i].id;
	}
	return s->c[n - 1].id;
}
