/*
 * bench_tok.c - tokenizer load time and single-thread encode throughput.
 *
 *   build/bench_tok TOKENIZER_PATH CORPUS_FILE [ROUNDS]
 *
 * Load: the best of ROUNDS loads, wall ms and process CPU ms (the merges
 * are scanned on a second thread). Encode, MB/s of
 * corpus bytes, best of ROUNDS passes: each line as one text ("lines"), and
 * the whole file as one text ("whole_text", as llama-tokenize -f does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lynn/fs.h"
#include "lynn/tok.h"

/* Thread CPU time: the build machine is shared, and CPU time is what the
 * tokenizer costs; wall time is printed beside it. */
static double clk(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now(void) { return clk(CLOCK_THREAD_CPUTIME_ID); }

int main(int argc, char **argv)
{
	struct lynn_err err = { 0 };
	struct lynn_tok *tok = NULL;
	char *text = NULL;
	size_t len = 0;
	int rounds = argc > 3 ? atoi(argv[3]) : 5;
	double best_load = 1e9, best_enc = 1e9, best_wall = 1e9;
	size_t n_ids = 0, n_lines = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: bench_tok TOKENIZER CORPUS [ROUNDS]\n");
		return 2;
	}
	for (int r = 0; r < rounds; r++) {
		/* loading may use a second thread: process CPU time, and wall */
		double w0 = clk(CLOCK_MONOTONIC), t0 = clk(CLOCK_PROCESS_CPUTIME_ID);
		struct lynn_tok *t = lynn_tok_load(argv[1], &err);
		double t1 = clk(CLOCK_PROCESS_CPUTIME_ID), w1 = clk(CLOCK_MONOTONIC);
		if (w1 - w0 < best_wall)
			best_wall = w1 - w0;
		if (!t) {
			fprintf(stderr, "bench_tok: %s\n", err.msg);
			return 2;
		}
		if (t1 - t0 < best_load)
			best_load = t1 - t0;
		if (tok)
			lynn_tok_free(tok);
		tok = t;
	}
	if (lynn_file_read(argv[2], 1u << 30, &text, &len, &err)) {
		fprintf(stderr, "bench_tok: %s\n", err.msg);
		return 2;
	}
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	for (int r = 0; r < rounds; r++) {
		double t0 = now();
		n_ids = n_lines = 0;
		for (char *p = text, *end = text + len; p < end;) {
			char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
			ids.n = 0;
			if (lynn_tok_encode(tok, p, n, 0, &ids, &err)) {
				fprintf(stderr, "bench_tok: %s\n", err.msg);
				return 3;
			}
			n_ids += ids.n;
			n_lines++;
			p += n + 1;
		}
		double t1 = now();
		if (t1 - t0 < best_enc)
			best_enc = t1 - t0;
	}
	/* the whole corpus as one text */
	double best_whole = 1e9;
	for (int r = 0; r < rounds; r++) {
		double t0 = now();
		ids.n = 0;
		if (lynn_tok_encode(tok, text, len, 0, &ids, &err)) {
			fprintf(stderr, "bench_tok: %s\n", err.msg);
			return 3;
		}
		double t1 = now();
		if (t1 - t0 < best_whole)
			best_whole = t1 - t0;
	}
	printf("lynn  whole_text_MB/s %.2f  ids %zu\n", len / best_whole / 1e6, ids.n);
	printf("lynn  load_wall_ms %.1f  load_cpu_ms %.1f  vocab %d  corpus_bytes %zu lines %zu ids %zu  encode_MB/s %.2f\n",
	       best_wall * 1e3, best_load * 1e3, lynn_tok_n_vocab(tok), len, n_lines, n_ids, len / best_enc / 1e6);
	lynn_tok_ids_release(&ids);
	free(text);
	lynn_tok_free(tok);
	return 0;
}
