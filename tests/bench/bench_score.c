/* bench_score.c - chrF and ROUGE-L pairs per second, single-threaded (process CPU time, so that load from other work on a shared machine counts less), on
 * the scorer test corpus (tests/fixtures/score/corpus.jsonl). The peers
 * (sacreBLEU, rouge-score) run on the same pairs in bench_score_peers.py.
 *
 *   build/bench_score [corpus.jsonl] [--with-long] [--only chrF|chrF++|ROUGE-L]
 * Without --with-long the "very_long" and "block_long" pairs are left out, as in the peer
 * script (rouge-score's pure-Python LCS table makes them minutes long). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "lynn/score.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	const char *path = "tests/fixtures/score/corpus.jsonl";
	bool with_long = false;
	const char *only = NULL;
	FILE *f;
	char *line = NULL;
	size_t cap = 0, n = 0, ncap = 0;
	const char **hyp = NULL, **ref = NULL;
	struct lynn_score_ctx *ctx = lynn_score_ctx_create(NULL);
	struct lynn_chrf_opts o = LYNN_CHRF_OPTS_DEFAULT;
	double sink = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--with-long"))
			with_long = true;
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else
			path = argv[i];
	}
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "bench_score: cannot open '%s'\n", path);
		return 2;
	}
	while (getline(&line, &cap, f) > 0) {
		cJSON *j = cJSON_Parse(line);
		const char *cat;
		if (!j)
			continue;
		cat = cJSON_GetObjectItem(j, "cat")->valuestring;
		if (with_long || (strcmp(cat, "very_long") && strcmp(cat, "block_long"))) {
			if (n == ncap) {
				ncap = ncap ? 2 * ncap : 1024;
				hyp = realloc(hyp, ncap * sizeof *hyp);
				ref = realloc(ref, ncap * sizeof *ref);
			}
			hyp[n] = strdup(cJSON_GetObjectItem(j, "hyp")->valuestring);
			ref[n++] = strdup(cJSON_GetObjectItem(j, "ref")->valuestring);
		}
		cJSON_Delete(j);
	}
	fclose(f);
	free(line);

	for (int metric = 0; metric < 3; metric++) {
		const char *name = metric == 0 ? "chrF" : metric == 1 ? "chrF++" : "ROUGE-L";
		double best = 1e30;
		if (only && strcmp(only, name))
			continue;
		for (int rep = 0; rep < 5; rep++) {
			double t0 = now(), dt;
			int iters = 0;
			do {
				for (size_t i = 0; i < n; i++) {
					double s = 0;
					struct lynn_rouge r;
					if (metric < 2) {
						o.word_order = metric == 0 ? 0 : 2;
						lynn_chrf_sentence(ctx, &o, hyp[i], strlen(hyp[i]), ref[i],
								   strlen(ref[i]), &s, NULL);
					} else {
						lynn_rouge_l(ctx, hyp[i], strlen(hyp[i]), ref[i],
							     strlen(ref[i]), LYNN_ROUGE_F_ASCII_ONLY, &r, NULL);
						s = r.fmeasure;
					}
					sink += s;
				}
				iters++;
				dt = now() - t0;
			} while (dt < 0.3);
			dt /= iters;
			if (dt < best)
				best = dt;
		}
		printf("lynn %-8s %6zu pairs  %10.0f pairs/s  (%.3f ms per pass)\n", name, n,
		       (double)n / best, best * 1e3);
	}
	fprintf(stderr, "(checksum %.6f)\n", sink);
	for (size_t i = 0; i < n; i++) {
		free((void *)hyp[i]);
		free((void *)ref[i]);
	}
	free(hyp);
	free(ref);
	lynn_score_ctx_free(ctx);
	return 0;
}
