/*
 * profile.c - the MoE expert activation profile (include/lynn/profile.h).
 *
 * Counts are exact integers per (layer, expert), overall and per category;
 * probabilities are summed in double. The report's usage share of an expert
 * is 100 * (tokens that selected it) / (tokens routed in the layer), so a
 * layer's shares add up to 100 * top_k.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/json.h"
#include "lynn/profile.h"

struct prof_cat {
	char *name;
	int64_t *count; /* [layer * E + expert] */
	int64_t *ntok;  /* [layer] */
};

struct lynn_profile {
	int L, E, k;
	int64_t *count, *ntok;
	double *prob;   /* summed router probability, [layer * E + expert] */
	struct prof_cat *cats;
	int ncat, cur;  /* cur: the category routes count for, -1 before the first */
	int n_prompts;
	long long malformed;
};

struct lynn_profile *lynn_profile_new(int n_layers, int n_experts, int top_k, struct lynn_err *err)
{
	struct lynn_profile *p;
	if (n_layers < 1 || n_experts < 1 || top_k < 1 || top_k > n_experts || n_layers > 1 << 16 ||
	    n_experts > 1 << 16) {
		lynn_errf(err, -LYNN_EINVAL, "profile: bad shape (%d layers, %d experts, top %d)",
			  n_layers, n_experts, top_k);
		return NULL;
	}
	p = calloc(1, sizeof *p);
	if (p) {
		size_t le = (size_t)n_layers * (size_t)n_experts;
		p->L = n_layers;
		p->E = n_experts;
		p->k = top_k;
		p->cur = -1;
		p->count = calloc(le, sizeof *p->count);
		p->prob = calloc(le, sizeof *p->prob);
		p->ntok = calloc((size_t)n_layers, sizeof *p->ntok);
		if (p->count && p->prob && p->ntok)
			return p;
	}
	lynn_profile_free(p);
	lynn_errf(err, -LYNN_ENOMEM, "profile: out of memory");
	return NULL;
}

void lynn_profile_free(struct lynn_profile *p)
{
	if (!p)
		return;
	for (int c = 0; c < p->ncat; c++) {
		free(p->cats[c].name);
		free(p->cats[c].count);
		free(p->cats[c].ntok);
	}
	free(p->cats);
	free(p->count);
	free(p->prob);
	free(p->ntok);
	free(p);
}

int lynn_profile_category(struct lynn_profile *p, const char *name, struct lynn_err *err)
{
	for (int c = 0; c < p->ncat; c++)
		if (!strcmp(p->cats[c].name, name)) {
			p->cur = c;
			return 0;
		}
	struct prof_cat *cats = realloc(p->cats, (size_t)(p->ncat + 1) * sizeof *cats);
	if (!cats)
		return lynn_errf(err, -LYNN_ENOMEM, "profile: out of memory");
	p->cats = cats;
	struct prof_cat *c = &cats[p->ncat];
	c->name = strdup(name);
	c->count = calloc((size_t)p->L * (size_t)p->E, sizeof *c->count);
	c->ntok = calloc((size_t)p->L, sizeof *c->ntok);
	if (!c->name || !c->count || !c->ntok) {
		free(c->name);
		free(c->count);
		free(c->ntok);
		return lynn_errf(err, -LYNN_ENOMEM, "profile: out of memory");
	}
	p->cur = p->ncat++;
	return 0;
}

void lynn_profile_route(void *ud, int layer, int k, const int *experts, const float *probs)
{
	struct lynn_profile *p = ud;
	if (layer < 0 || layer >= p->L || k != p->k || p->cur < 0) {
		p->malformed++;
		return;
	}
	for (int j = 0; j < k; j++)
		if (experts[j] < 0 || experts[j] >= p->E) {
			p->malformed++;
			return;
		}
	struct prof_cat *c = &p->cats[p->cur];
	int64_t row = (int64_t)layer * p->E;
	p->ntok[layer]++;
	c->ntok[layer]++;
	for (int j = 0; j < k; j++) {
		p->count[row + experts[j]]++;
		p->prob[row + experts[j]] += probs[j];
		c->count[row + experts[j]]++;
	}
}

void lynn_profile_prompt_done(struct lynn_profile *p) { p->n_prompts++; }

long long lynn_profile_malformed(const struct lynn_profile *p) { return p->malformed; }

int64_t lynn_profile_layer_tokens(const struct lynn_profile *p, int layer)
{
	return layer >= 0 && layer < p->L ? p->ntok[layer] : 0;
}

/* {layer_idx, n_tokens, expert_token_count, expert_usage_pct} of one layer,
 * plus avg_gate_prob_when_active where prob is given (the overall table) */
static cJSON *layer_entry(int li, int64_t ntok, const int64_t *count, const double *prob, int E)
{
	cJSON *o = cJSON_CreateObject(), *cnt = cJSON_CreateArray(), *pct = cJSON_CreateArray();
	cJSON_AddNumberToObject(o, "layer_idx", li);
	cJSON_AddNumberToObject(o, "n_tokens", (double)ntok);
	for (int e = 0; e < E; e++) {
		cJSON_AddItemToArray(cnt, cJSON_CreateNumber((double)count[e]));
		cJSON_AddItemToArray(pct, cJSON_CreateNumber(ntok ? 100.0 * (double)count[e] / (double)ntok : 0.0));
	}
	cJSON_AddItemToObject(o, "expert_token_count", cnt);
	cJSON_AddItemToObject(o, "expert_usage_pct", pct);
	if (prob) {
		cJSON *avg = cJSON_AddArrayToObject(o, "avg_gate_prob_when_active");
		for (int e = 0; e < E; e++) /* 0 for an expert never selected */
			cJSON_AddItemToArray(avg, cJSON_CreateNumber(count[e] ? prob[e] / (double)count[e] : 0.0));
	}
	return o;
}

cJSON *lynn_profile_report(const struct lynn_profile *p, int max_tokens)
{
	cJSON *r = lynn_json_report_new("lynn-activation-profile-v1");
	cJSON_AddNumberToObject(r, "n_layers", p->L);
	cJSON_AddNumberToObject(r, "n_experts_per_layer", p->E);
	cJSON_AddNumberToObject(r, "top_k", p->k);
	cJSON_AddNumberToObject(r, "n_prompts", p->n_prompts);
	cJSON_AddNumberToObject(r, "max_tokens_per_prompt", max_tokens);
	cJSON *cats = cJSON_AddArrayToObject(r, "categories");
	for (int c = 0; c < p->ncat; c++)
		cJSON_AddItemToArray(cats, cJSON_CreateString(p->cats[c].name));
	/* the layers the router ran in (every layer of Qwen3.5-MoE) */
	cJSON *layers = cJSON_AddArrayToObject(r, "layers");
	for (int li = 0; li < p->L; li++)
		if (p->ntok[li])
			cJSON_AddItemToArray(layers, layer_entry(li, p->ntok[li], p->count + (int64_t)li * p->E,
								 p->prob + (int64_t)li * p->E, p->E));
	cJSON *by = cJSON_AddObjectToObject(r, "by_category");
	for (int c = 0; c < p->ncat; c++) {
		cJSON *arr = cJSON_AddArrayToObject(by, p->cats[c].name);
		for (int li = 0; li < p->L; li++)
			if (p->ntok[li])
				cJSON_AddItemToArray(arr, layer_entry(li, p->cats[c].ntok[li],
								      p->cats[c].count + (int64_t)li * p->E,
								      NULL, p->E));
	}
	return r;
}

/* Heatmap geometry: cells 2..12 px wide (about 1024 px for the row),
 * 6..16 px high; white (never selected) to dark blue (the map's largest
 * share). */
char *lynn_profile_heatmap_svg(const struct lynn_profile *p)
{
	const int cw = p->E >= 512 ? 2 : p->E >= 86 ? 1024 / p->E : 12;
	const int rh = p->L >= 107 ? 6 : p->L <= 40 ? 16 : 640 / p->L;
	const int left = 64, top = 40, H = top + p->L * rh + 50;
	const int W = left + p->E * cw + 20 > 640 ? left + p->E * cw + 20 : 640; /* the title's width */
	double max = 0;
	for (int li = 0; li < p->L; li++)
		for (int e = 0; e < p->E; e++)
			if (p->ntok[li]) {
				double v = 100.0 * (double)p->count[(int64_t)li * p->E + e] / (double)p->ntok[li];
				max = v > max ? v : max;
			}
	struct lynn_buf b = LYNN_BUF_INIT;
	int bad = lynn_buf_printf(&b,
			"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
			"font-family=\"sans-serif\" font-size=\"10\">\n"
			"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
			"<text x=\"%d\" y=\"16\" font-size=\"12\">expert usage: share of a layer's tokens "
			"that selected the expert (top-%d of %d; darkest = %.2f%%)</text>\n",
			W, H, left, p->k, p->E, max);
	for (int li = 0; li < p->L; li++) {
		if (rh >= 10 || li % 5 == 0)
			bad |= lynn_buf_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">L%d</text>\n",
					left - 4, top + li * rh + rh - 2, li);
		for (int e = 0; e < p->E; e++) {
			int64_t n = p->ntok[li], c = p->count[(int64_t)li * p->E + e];
			double v = n ? 100.0 * (double)c / (double)n : 0.0, t = max > 0 ? v / max : 0.0;
			bad |= lynn_buf_printf(&b,
					"<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
					"fill=\"rgb(%d,%d,%d)\"><title>layer %d expert %d: %.2f%% "
					"(%lld tokens)</title></rect>\n",
					left + e * cw, top + li * rh, cw, rh, (int)(255 - 247 * t),
					(int)(255 - 207 * t), (int)(255 - 148 * t), li, e, v, (long long)c);
		}
	}
	const int step = p->E <= 32 ? 4 : p->E <= 128 ? 16 : 32;
	for (int e = 0; e < p->E; e += step)
		bad |= lynn_buf_printf(&b, "<text x=\"%d\" y=\"%d\">%d</text>\n", left + e * cw, top + p->L * rh + 14,
				e);
	bad |= lynn_buf_printf(&b, "<text x=\"%d\" y=\"%d\">expert</text>\n</svg>\n", left,
			       top + p->L * rh + 32);
	if (bad) {
		lynn_buf_release(&b);
		return NULL;
	}
	return lynn_buf_detach(&b);
}
