/*
 * sample.h - choosing the next token from logits: a logit bias, the
 * penalties on tokens seen before (repetition, then frequency and
 * presence; all three after the bias, as vLLM applies them), then greedy, or temperature, top-k, top-p and min-p (applied in
 * that order, as transformers' generate chains its logits warpers), then a
 * draw from a seeded PRNG (xoshiro256**, seeded through splitmix64): the
 * same seed, logits and settings give the same tokens on every machine.
 */
#ifndef LYNN_SAMPLE_H
#define LYNN_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "lynn/err.h"

struct lynn_sample_params {
	float temperature;  /* <= 0: greedy (argmax, lowest id on ties) */
	int top_k;          /* 0: off */
	float top_p;        /* >= 1: off */
	float min_p;        /* 0: off */
	uint64_t seed;
	/* On the logits before everything else. A token of the prompt or
	 * generated before: x > 0 becomes x / r, otherwise x * r
	 * (transformers' RepetitionPenaltyLogitsProcessor, vLLM's
	 * repetition_penalty); 0 and 1: off. */
	float repetition_penalty;
	/* OpenAI's: x -= c * frequency + (c > 0) * presence, c the times the
	 * token was generated (the prompt does not count); 0: off. */
	float presence_penalty;
	float frequency_penalty;
	/* OpenAI's logit_bias: bias[i] added to token bias_ids[i]'s logit,
	 * before the penalties (a repeated id: the sum); n_bias pairs, of
	 * which the sampler keeps a copy */
	const int32_t *bias_ids;
	const float *bias;
	int n_bias;
};

/* Defaults: greedy, top_k 0, top_p 1, min_p 0, seed 0, no penalties, no
 * bias. */
void lynn_sample_params_init(struct lynn_sample_params *p);

struct lynn_sampler;

/* Whether p changes logits before the choice (a penalty or a bias): the
 * sampler then needs the logits of the whole vocabulary, and for the
 * penalties what came before (lynn_sampler_seen). */
bool lynn_sample_edits_logits(const struct lynn_sample_params *p);
/* Whether p's edits can only lower a logit (presence and frequency >= 0,
 * repetition off or >= 1, every bias <= 0): then the best edited logits
 * are among the best raw ones (lynn_sampler_sample_edited_top). */
bool lynn_sample_edits_lower(const struct lynn_sample_params *p);

/* Checks the parameters (-LYNN_EINVAL naming the bad one: top_p in (0,1],
 * min_p in [0,1), top_k >= 0, repetition_penalty >= 0, the penalties
 * finite, bias ids in the vocabulary, biases finite). Caller
 * frees with lynn_sampler_free. */
struct lynn_sampler *lynn_sampler_create(const struct lynn_sample_params *p, int n_vocab,
					 struct lynn_err *err);
void lynn_sampler_free(struct lynn_sampler *s);
/* Tokens the penalties count: the prompt's (generated = false: the
 * repetition penalty only), then each token drawn (generated = true: all
 * three). Nothing without penalties. -LYNN_EINVAL for an id outside the
 * vocabulary. */
int lynn_sampler_seen(struct lynn_sampler *s, const int32_t *ids, size_t n, bool generated,
		      struct lynn_err *err);
/* The next token for `logits` (n_vocab floats, not modified; the bias
 * and the penalties apply to a copy); -inf and NaN logits are never drawn.
 * Selection, not a sort of the whole vocabulary. */
int32_t lynn_sampler_sample(struct lynn_sampler *s, const float *logits);
/* The logits with the bias and the penalties applied (what
 * lynn_sampler_sample draws from), n_vocab floats into out. */
void lynn_sampler_penalize(const struct lynn_sampler *s, const float *logits, float *out);
/* The next token from the top-k candidates alone, as lynn_sampler_sample
 * would draw it from the whole vocabulary's logits (the same token and the
 * same generator state): x[i] and ids[i] are the n = min(top_k, finite
 * logits) largest by logit / temperature, in that order (descending, lower
 * id first on ties; -inf and NaN never among them) - what a device
 * computes so that the logits need not come back. -1 when the sampler is
 * not a top-k one or the candidates are not in that order (n < 1,
 * n > top_k) or edits the logits (lynn_sample_edits_logits). */
int32_t lynn_sampler_sample_top(struct lynn_sampler *s, const float *x, const int32_t *ids, int n);
/* For a sampler whose edits only lower logits (lynn_sample_edits_lower),
 * greedy or top-k: x and ids are the n largest raw logits of the
 * vocabulary in lynn_sampler_sample_top's order (by logit / temperature;
 * temperature 1 for a greedy sampler), `complete` when they are all of its
 * finite ones. The sampler edits them and returns the token
 * lynn_sampler_sample would draw from the whole vocabulary's logits (the
 * same token and generator state), or, with no draw made, -2 when they
 * cannot tell (fewer than top_k - or 1, greedy - stay above the n-th raw
 * one once edited, and a token outside could take a place), and -1 for a
 * sampler or candidates this does not apply to. do_draw = false only
 * answers whether they can tell (0 or -2). */
int32_t lynn_sampler_sample_edited_top(struct lynn_sampler *s, const float *x, const int32_t *ids, int n,
				       bool complete, bool do_draw);
/* argmax (lowest index on ties). */
int32_t lynn_sample_greedy(const float *logits, int n);
/* The largest non-NaN value of v[0, n) (-inf if none), in 8 independent
 * lanes. */
float lynn_max_f32(const float *v, int n);
/* log(sum of e^v[i]), through the maximum and lynn_expf_neg in blocks of 8
 * (the engine's log-softmax for logprobs). */
double lynn_log_sum_exp(const float *v, int n);
/* e^x for x <= 0, the sampler's weights (and the engine's log-softmax), in
 * float operations only (range reduction by ln 2 in two parts, a degree-7
 * polynomial on |r| <= ln 2 / 2, the power of two put in the exponent
 * field), so the same bits on every machine (C11 compiles without
 * contracting into FMAs); within 2 ulp of e^x (test_expf_neg); 0 below -87
 * (e^-87 is 1.6e-38, the smallest normal float's order) and for -inf. The
 * range test and the zeroing are done on the bits (integer compares cannot
 * raise FP exceptions, so the compiler turns them into selects), and it is
 * inline, so loops over it vectorise. */
static inline float lynn_expf_neg(float x)
{
	const float big = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
	const uint32_t lim = 0xC2AE0000u; /* -87.0f; below 0, larger bits are more negative */
	uint32_t xb, yb;
	float xc, two_k, y;
	memcpy(&xb, &x, sizeof xb);
	const uint32_t in = xb < lim, cb = in ? xb : lim;
	memcpy(&xc, &cb, sizeof xc);
	const float k = (xc * 1.44269504f + big) - big; /* round(x / ln 2) */
	const float r = (xc - k * 0.693359375f) - k * -2.12194440e-4f;
	float q = 1.0f / 5040;
	q = q * r + 1.0f / 720;
	q = q * r + 1.0f / 120;
	q = q * r + 1.0f / 24;
	q = q * r + 1.0f / 6;
	q = q * r + 0.5f;
	q = q * r + 1.0f;
	q = q * r + 1.0f;
	const uint32_t kb = (uint32_t)((int32_t)k + 127) << 23;
	memcpy(&two_k, &kb, sizeof two_k);
	y = q * two_k;
	memcpy(&yb, &y, sizeof yb);
	yb &= 0u - in;
	memcpy(&y, &yb, sizeof y);
	return y;
}

#endif
