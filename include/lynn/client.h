/*
 * client.h - an OpenAI-compatible chat-completions client (libcurl multi).
 *
 * lynn eval and quant-verify send every prompt to one or more replicas of an
 * endpoint (SGLang, vLLM, llama.cpp's server, `lynn serve`): SPEC §5 "Endpoint
 * mode". The client keeps `concurrency` requests in flight, spreads them over
 * the replicas (fewest in flight first), routes around a replica that refuses
 * connections, and retries 429, 5xx, timeouts and connection errors with
 * exponential backoff. Generation is greedy: temperature 0, and
 * chat_template_kwargs {"enable_thinking": think}.
 *
 *   struct lynn_client *c = lynn_client_create(&opts, err);
 *   lynn_client_run(c, reqs, n, on_done, ud, err);   // on_done per output
 *   lynn_client_free(c);
 */
#ifndef LYNN_CLIENT_H
#define LYNN_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "lynn/err.h"

struct lynn_client;

struct lynn_client_opts {
	const char *urls;         /* comma-separated base URLs, e.g. "http://h:8000/v1" */
	const char *model;        /* request "model"; NULL: the first id of GET /models */
	int concurrency;          /* requests in flight, >= 1 */
	double timeout_s;         /* whole-request limit (default 600) */
	double connect_timeout_s; /* default 10 */
	int max_retries;          /* retries after the first attempt (default 5) */
	double backoff_s;         /* first retry delay, doubled per retry, <= 30 s (default 1) */
	bool think;               /* chat_template_kwargs.enable_thinking */
	const char *api_key;      /* "Authorization: Bearer"; NULL for none; never logged */
};

/* One request. Everything is borrowed for the duration of lynn_client_run. */
struct lynn_chat_req {
	const char *prompt;  /* the single user message */
	const cJSON *tools;  /* OpenAI "tools" array, or NULL */
	int max_tokens;
	const char *model;   /* overrides opts.model (e.g. a served LoRA name), or NULL */
};

/* One finished output, borrowed by the callback (copy what you keep). */
struct lynn_chat_out {
	const char *text;      /* message content; tool_calls appended as
	                          "<tool_call>\n{"name": …, "arguments": …}\n</tool_call>";
	                          a leading <think>…</think> is moved to reasoning */
	const char *reasoning; /* reasoning_content (or "" when none) */
	const char *finish_reason;
	int completion_tokens; /* usage.completion_tokens, or -1 when not reported */
	double latency_s;      /* last attempt's wall time */
	int attempts;
	const char *replica;   /* the base URL that answered */
};

/* Called once per finished request, in completion order, from the calling
 * thread. Return 0 to go on, or a negative error to stop the run (it is
 * returned by lynn_client_run). */
typedef int (*lynn_client_done_fn)(void *ud, size_t idx, const struct lynn_chat_out *out,
				   struct lynn_err *err);

/* Validate the options (URLs must be http:// or https://) and, when
 * opts->model is NULL, ask the replicas for their model id (falls back to
 * "default" when none answers). Caller frees with lynn_client_free. */
struct lynn_client *lynn_client_create(const struct lynn_client_opts *opts, struct lynn_err *err);
void lynn_client_free(struct lynn_client *c);

/* The model id requests use by default (borrowed). */
const char *lynn_client_model(const struct lynn_client *c);

/* Run n requests. Returns 0 when all finished; -LYNN_ENET when one failed
 * after all retries (the message names the replica, the status or curl
 * error, and the request index); a 4xx other than 429 is not retried
 * (-LYNN_ENET naming the status and the server's error message). Outputs
 * already handed to `done` stay done. */
int lynn_client_run(struct lynn_client *c, const struct lynn_chat_req *reqs, size_t n,
		    lynn_client_done_fn done, void *ud, struct lynn_err *err);

/* Stats of the last run: requests retried, and attempts that failed. */
void lynn_client_stats(const struct lynn_client *c, int *n_retries, int *n_failed_attempts);

/* Build the JSON body of one request (exposed for tests). Caller frees. */
char *lynn_client_request_body(const struct lynn_client *c, const struct lynn_chat_req *req);

#endif
