/*
 * profile.h - MoE expert activation profile (`lynn profile`, SPEC §7).
 *
 * An accumulator fed by the runner's router observer
 * (lynn_model_set_route_observer): for every MoE layer, how many processed
 * tokens selected each expert and the mean router probability when it was
 * selected, overall and per prompt category. The report is schema
 * lynn-activation-profile-v1; the heatmap an SVG of layers x experts.
 */
#ifndef LYNN_PROFILE_H
#define LYNN_PROFILE_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "lynn/err.h"

struct lynn_profile;

/* n_layers >= 1, n_experts >= 1, 1 <= top_k <= n_experts. */
struct lynn_profile *lynn_profile_new(int n_layers, int n_experts, int top_k,
				      struct lynn_err *err);
void lynn_profile_free(struct lynn_profile *p);

/* The category the next routed tokens count for (created on first use). */
int lynn_profile_category(struct lynn_profile *p, const char *name, struct lynn_err *err);

/* The router observer (lynn_route_fn); ud is the profile. Routes before the
 * first category, of a layer outside [0, n_layers), of k != top_k or naming
 * an expert outside [0, n_experts) are counted as malformed, not recorded. */
void lynn_profile_route(void *ud, int layer, int k, const int *experts, const float *probs);

/* One prompt done (counted in n_prompts). */
void lynn_profile_prompt_done(struct lynn_profile *p);

/* Routes rejected by lynn_profile_route (0 for a sound runner). */
long long lynn_profile_malformed(const struct lynn_profile *p);
/* Tokens routed in `layer` so far (0 outside [0, n_layers)). */
int64_t lynn_profile_layer_tokens(const struct lynn_profile *p, int layer);

/* The report (caller deletes); max_tokens is recorded as
 * max_tokens_per_prompt. */
cJSON *lynn_profile_report(const struct lynn_profile *p, int max_tokens);

/* The heatmap: one cell per (layer, expert), shaded by the share of the
 * layer's tokens that selected the expert. Caller frees. */
char *lynn_profile_heatmap_svg(const struct lynn_profile *p);

#endif
