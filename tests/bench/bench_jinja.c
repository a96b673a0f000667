/*
 * bench_jinja.c - chat-template rendering time: a conversation through a template, the way
 * `lynn serve` renders every request (parse once, render many).
 *
 *   build/bench_jinja TEMPLATE.jinja MESSAGES.json TOOLS.json [ROUNDS]
 *
 * Prints the parse time and the median and best render time (thread CPU time, µs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lynn/chat.h"
#include "lynn/fs.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct lynn_err err = { 0 };
	char *src = NULL, *msgs = NULL, *tools = NULL, *out = NULL;
	size_t sl, ml, tl, ol = 0;
	int rounds = argc > 4 ? atoi(argv[4]) : 2000;
	double t0, parse_us, *ts;
	struct lynn_chat_template *t;
	struct lynn_chat_input in = { 0 };

	if (argc < 4 || rounds < 1) {
		fprintf(stderr, "usage: bench_jinja TEMPLATE MESSAGES.json TOOLS.json [ROUNDS]\n");
		return 2;
	}
	if (lynn_file_read(argv[1], 1 << 24, &src, &sl, &err) || lynn_file_read(argv[2], 1 << 26, &msgs, &ml, &err) ||
	    lynn_file_read(argv[3], 1 << 24, &tools, &tl, &err)) {
		fprintf(stderr, "bench_jinja: %s\n", err.msg);
		return 2;
	}
	t0 = now();
	t = lynn_chat_template_from_string(argv[1], src, sl, NULL, NULL, &err);
	parse_us = (now() - t0) * 1e6;
	if (!t) {
		fprintf(stderr, "bench_jinja: %s\n", err.msg);
		return 2;
	}
	in.messages_json = msgs;
	in.tools_json = tools;
	in.add_generation_prompt = true;
	in.enable_thinking = 0;
	ts = malloc(sizeof *ts * (size_t)rounds);
	for (int i = 0; i < rounds; i++) {
		free(out);
		t0 = now();
		if (lynn_chat_render(t, &in, &out, &ol, &err)) {
			fprintf(stderr, "bench_jinja: %s\n", err.msg);
			return 2;
		}
		ts[i] = (now() - t0) * 1e6;
	}
	qsort(ts, (size_t)rounds, sizeof *ts, cmp_d);
	printf("jinja: %s: parse %.0f us; render %zu bytes (%zu messages bytes): median %.1f us, best %.1f us "
	       "over %d rounds\n", argv[1], parse_us, ol, ml, ts[rounds / 2], ts[0], rounds);
	free(ts);
	free(out);
	free(src);
	free(msgs);
	free(tools);
	lynn_chat_template_free(t);
	return 0;
}
