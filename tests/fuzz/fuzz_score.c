/* fuzz_score.c - libFuzzer target for src/score: arbitrary bytes (any UTF-8
 * or not) through every scorer and grader. The input is split at the first
 * two 0xFF bytes into hypothesis, reference and prompt / gold. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/score.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct lynn_score_ctx *ctx;
	const char *s = (const char *)data;
	const uint8_t *p1 = memchr(data, 0xFF, size), *p2;
	size_t lh, lr, lp;
	const char *h = s, *r, *pr;
	struct lynn_chrf_opts o = LYNN_CHRF_OPTS_DEFAULT, opp = LYNN_CHRFPP_OPTS_DEFAULT;
	struct lynn_rouge rg;
	struct lynn_similarity sim;
	struct lynn_refsim rs;
	struct lynn_style_result st;
	struct lynn_tool_result tr;
	struct lynn_daily_result dr;
	double v;
	bool pass;
	char *gold, *tok;
	cJSON *calls, *hints;

	if (!ctx)
		ctx = lynn_score_ctx_create(NULL);
	if (size > 1 << 16)
		return 0;
	lh = p1 ? (size_t)(p1 - data) : size;
	r = p1 ? (const char *)p1 + 1 : s + size;
	p2 = p1 ? memchr(p1 + 1, 0xFF, size - lh - 1) : NULL;
	lr = p2 ? (size_t)(p2 - p1 - 1) : (size_t)(s + size - r);
	pr = p2 ? (const char *)p2 + 1 : s + size;
	lp = (size_t)(s + size - pr);

	lynn_chrf_sentence(ctx, &o, h, lh, r, lr, &v, NULL);
	lynn_chrf_sentence(ctx, &opp, h, lh, r, lr, &v, NULL);
	lynn_rouge_l(ctx, h, lh, r, lr, 0, &rg, NULL);
	lynn_rouge_l(NULL, h, lh, r, lr, LYNN_ROUGE_F_STEM | LYNN_ROUGE_F_ASCII_ONLY, &rg, NULL);
	lynn_similarity(ctx, h, lh, r, lr, 2, 0, &sim, NULL);
	lynn_seq_ratio(ctx, h, lh, r, lr, 5000, &v, NULL);
	lynn_refsim_score(ctx, NULL, pr, lp, h, lh, r, lr, &rs, NULL);
	lynn_style_score(NULL, pr, lp, h, lh, &st, NULL);
	tok = lynn_rouge_tokens(h, lh, 0, NULL);
	free(tok);
	calls = lynn_tool_calls_extract(h, lh, NULL);
	cJSON_Delete(calls);
	gold = malloc(lp + 1);
	if (gold) {
		memcpy(gold, pr, lp);
		gold[lp] = 0;
		hints = cJSON_Parse(gold);
		lynn_grade_tool_call(h, lh, gold, cJSON_IsObject(hints) ? hints : NULL, &tr, NULL);
		cJSON_Delete(hints);
		lynn_grade_gold(h, lh, gold, "string_match", &pass, NULL);
		lynn_grade_gold(h, lh, gold, "regex", &pass, NULL);
		lynn_grade_daily(h, lh, gold, &dr, NULL);
		free(gold);
	}
	return 0;
}
