/* chrf_instr.c - callgrind driver for tests/bench/chrf_compare.sh: P + 1
 * passes of chrF (word order 0), chrF++ (2) or ROUGE-L ("rouge") over the
 * bench corpus without its long pairs; instructions are collected after the
 * first pass.
 *   chrf_instr WORD_ORDER|rouge P   (run from the repository root) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "lynn/score.h"
#include <valgrind/callgrind.h>
int main(int argc, char **argv)
{
	const int rouge = !strcmp(argv[1], "rouge"), wo = atoi(argv[1]), passes = atoi(argv[2]);
	FILE *f = fopen("tests/fixtures/score/corpus.jsonl", "r");
	char *line = NULL; size_t cap = 0, n = 0;
	static const char *hyp[4096], *ref[4096];
	while (getline(&line, &cap, f) > 0) {
		cJSON *j = cJSON_Parse(line);
		const char *cat = cJSON_GetObjectItem(j, "cat")->valuestring;
		if (strcmp(cat, "very_long") && strcmp(cat, "block_long")) {
			hyp[n] = strdup(cJSON_GetObjectItem(j, "hyp")->valuestring);
			ref[n++] = strdup(cJSON_GetObjectItem(j, "ref")->valuestring);
		}
		cJSON_Delete(j);
	}
	struct lynn_score_ctx *ctx = lynn_score_ctx_create(NULL);
	struct lynn_chrf_opts o = LYNN_CHRF_OPTS_DEFAULT;
	o.word_order = wo;
	double sink = 0;
	for (int p = 0; p <= passes; p++) {
		if (p == 1) CALLGRIND_TOGGLE_COLLECT;
		for (size_t i = 0; i < n; i++) {
			double s;
			struct lynn_rouge r;
			if (rouge) {
				lynn_rouge_l(ctx, hyp[i], strlen(hyp[i]), ref[i], strlen(ref[i]), 0, &r, NULL);
				s = r.fmeasure;
			} else {
				lynn_chrf_sentence(ctx, &o, hyp[i], strlen(hyp[i]), ref[i], strlen(ref[i]), &s,
						   NULL);
			}
			sink += s;
		}
	}
	CALLGRIND_TOGGLE_COLLECT;
	printf("%zu pairs sink %.6f\n", n, sink);
	return 0;
}
