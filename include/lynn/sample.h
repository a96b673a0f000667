/*
 * sample.h - choosing the next token from logits: greedy, or temperature,
 * top-k, top-p and min-p (applied in that order, as transformers' generate
 * chains its logits warpers), then a draw from a seeded PRNG
 * (xoshiro256**, seeded through splitmix64): the same seed, logits and
 * settings give the same tokens on every machine.
 */
#ifndef LYNN_SAMPLE_H
#define LYNN_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "lynn/err.h"

struct lynn_sample_params {
	float temperature;  /* <= 0: greedy (argmax, lowest id on ties) */
	int top_k;          /* 0: off */
	float top_p;        /* >= 1: off */
	float min_p;        /* 0: off */
	uint64_t seed;
};

/* Defaults: greedy, top_k 0, top_p 1, min_p 0, seed 0. */
void lynn_sample_params_init(struct lynn_sample_params *p);

struct lynn_sampler;

/* Checks the parameters (-LYNN_EINVAL naming the bad one: top_p in (0,1],
 * min_p in [0,1), top_k >= 0). Caller frees with lynn_sampler_free. */
struct lynn_sampler *lynn_sampler_create(const struct lynn_sample_params *p, int n_vocab,
					 struct lynn_err *err);
void lynn_sampler_free(struct lynn_sampler *s);
/* The next token for `logits` (n_vocab floats, not modified); -inf and NaN
 * logits are never drawn. Selection, not a sort of the whole vocabulary. */
int32_t lynn_sampler_sample(struct lynn_sampler *s, const float *logits);
/* argmax (lowest index on ties). */
int32_t lynn_sample_greedy(const float *logits, int n);
/* e^x for x <= 0, the sampler's weights: float operations only, so the same
 * bits on every machine; within 2 ulp of e^x, 0 below -87 and for -inf. */
float lynn_expf_neg(float x);

#endif
