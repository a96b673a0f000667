/*
 * bench.h - the serving throughput suite (`lynn bench`, SPEC §7): streamed
 * chat completions against an OpenAI-compatible endpoint at several
 * concurrencies; time to first token, per-stream and aggregate tokens/s.
 *
 * The stream reader (lynn_sse_*) takes a text/event-stream body in pieces of
 * any size: `data:` lines of one event are joined, the event is dispatched
 * at its blank line, `data: [DONE]` ends the stream.
 */
#ifndef LYNN_BENCH_H
#define LYNN_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "lynn/buf.h"
#include "lynn/err.h"

/* A line longer than this (no newline yet) is an error, not a buffer that grows. */
#define LYNN_SSE_MAX_LINE (1u << 20)

struct lynn_sse {
	struct lynn_buf line;   /* the current, incomplete line */
	struct lynn_buf data;   /* the current event's data lines */
	int n_tokens;           /* chunks that carried generated text */
	bool done;              /* data: [DONE] seen */
	int usage_prompt;       /* usage.prompt_tokens, -1 until reported */
	int usage_completion;   /* usage.completion_tokens, -1 until reported */
	char error[256];        /* an error event's message, or a malformed event */
};

void lynn_sse_init(struct lynn_sse *s);
/* Feed len bytes; returns the number of text chunks they completed (>= 0),
 * or -1 once the stream is broken (s->error says why; later feeds return -1). */
int lynn_sse_feed(struct lynn_sse *s, const char *data, size_t len);
void lynn_sse_release(struct lynn_sse *s);

struct lynn_bench_opts {
	const char *url;        /* the chat-completions URL */
	const char *model;      /* request "model" */
	const char *api_key;    /* Authorization: Bearer; NULL for none; never logged */
	int prompt_tokens;      /* the synthetic prompt's length, in words (about a token each) */
	int max_tokens;         /* per request (ignore_eos asked for, so every request runs to it) */
	int requests;           /* per concurrency level (at least the concurrency) */
	double timeout_s;       /* per request */
};

struct lynn_bench_level {
	int concurrency, n_requests, n_ok, n_failed;
	double wall_s;                         /* first request sent to last one done */
	double ttft_mean_s, ttft_p50_s, ttft_p90_s;
	double stream_tps_mean;                /* per stream: (tokens - 1) / (end - first token) */
	double stream_e2e_tps_mean;            /* per stream: tokens / (end - sent) */
	double aggregate_tps;                  /* all completion tokens / wall_s */
	double prompt_tokens_mean;             /* as the server reported them (-1: not reported) */
	long long completion_tokens;           /* usage, else the text chunks */
	char first_error[256];
};

/* Run one level: `concurrency` requests in flight until o->requests are
 * done. Failed requests are counted (and the first error kept), not fatal;
 * an error return is a setup failure (-LYNN_ENOMEM, -LYNN_EINVAL). */
int lynn_bench_level_run(const struct lynn_bench_opts *o, int concurrency,
			 struct lynn_bench_level *out, struct lynn_err *err);

/* Schema lynn-bench-v1 (caller deletes). */
cJSON *lynn_bench_report(const struct lynn_bench_opts *o, const struct lynn_bench_level *lv,
			 int n_levels);

#endif
