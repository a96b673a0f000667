/*
 * serve_internal.h - the parts of `lynn serve` (include/lynn/serve.h):
 *  - oai.c: OpenAI request bodies -> a request (checked, rendered,
 *    tokenized), and the response, chunk and error objects;
 *  - sched.c: the bounded queue and the continuous-batching thread;
 *  - http.c: libmicrohttpd, routing, authentication, streaming.
 */
#ifndef LYNN_SERVE_INTERNAL_H
#define LYNN_SERVE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "lynn/buf.h"
#include "lynn/chat.h"
#include "lynn/engine.h"
#include "lynn/serve.h"
#include "lynn/tok.h"

/* An OpenAI error: HTTP status, type and message (and the param at fault). */
struct srv_error {
	int status;
	const char *type;
	char message[512];
	const char *param;
	/* exceed_context_size_error's extra fields (0 = absent) */
	int64_t n_prompt_tokens, n_ctx;
};
/* Set *e and return -1. */
int srv_fail(struct srv_error *e, int status, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* {"error":{"message","type","code","param"?}} as heap JSON text. */
char *srv_error_json(const struct srv_error *e);

enum srv_kind { SRV_CHAT, SRV_COMPLETION };

#define SRV_MAX_CHOICES 16

enum srv_state { SRV_QUEUED, SRV_RUNNING, SRV_DONE, SRV_FAILED };

/* Generated ids with their log-probabilities. */
struct srv_lps {
	int32_t *ids;
	struct lynn_gen_logprob *lp;
	size_t n, cap;
};
void srv_lps_release(struct srv_lps *l);

/* One completion request, shared by its connection thread and the
 * scheduler; freed when both have let go (refs, under srv.mu). */
struct srv_req {
	enum srv_kind kind;
	char id[40];              /* "chatcmpl-…" / "cmpl-…" */
	int64_t created;
	bool stream, include_usage;
	int n_choices;            /* the body's n: this request and n - 1 clones */
	bool grouped;             /* a choice of a streamed body with n > 1: the scheduler also
				   * wakes srv.choices_cv, where that stream's connection waits */
	struct lynn_chat_parse_opts parse;
	char *tools_json;         /* parse.tools_json's storage (the request's tools) */
	char **stop;
	int n_stop;
	int32_t *bias_ids;        /* gopts.sample's logit_bias storage */
	float *bias;
	struct lynn_gen_opts gopts;
	struct lynn_tok_ids prompt;

	/* under srv.mu */
	enum srv_state state;
	bool cancelled;           /* the client went away */
	struct lynn_buf pending;  /* text generated and not yet taken by the connection */
	struct srv_lps pending_lp; /* streamed logprobs not yet taken (the same way) */
	size_t n_lp_queued;       /* logprob entries moved to pending_lp so far */
	struct lynn_gen_result res; /* once SRV_DONE */
	struct srv_error err;     /* once SRV_FAILED */
	pthread_cond_t cv;        /* signalled on new text and at the end */
	int refs;
	struct srv_req *next;     /* queue link */
	struct lynn_gen *gen;     /* the scheduler's */
	size_t n_fed, n_made;     /* prompt and generated tokens counted in the metrics */
	struct srv *srv;
};

struct srv_metrics {
	uint64_t prompt_tokens, predicted_tokens, prompt_tokens_cached;
	double prompt_seconds, predicted_seconds;
	uint64_t requests_ok, requests_failed, requests_cancelled, requests_rejected;
};

struct srv {
	struct lynn_server_opts o;   /* o.defaults: NULL, copied into def */
	struct lynn_sample_params def; /* a request's sampling where it says nothing */
	char *host, *model_name, *api_key;
	struct lynn_engine *e;
	const struct lynn_tok *tok;
	const struct lynn_chat_template *tmpl;
	int64_t started;
	struct MHD_Daemon *mhd;
	int port;

	pthread_t thread;
	bool thread_started;
	struct srv_req **slot;    /* the scheduler's: the running requests (parallel of them) */
	struct lynn_gen **gens;   /* the scheduler's: their gens, for each step */
	pthread_mutex_t mu;
	pthread_cond_t work;      /* the scheduler waits here */
	pthread_cond_t idle;      /* signalled when nothing is queued or running */
	pthread_cond_t choices_cv; /* signalled on news of a grouped request */
	struct srv_req *queue_head, *queue_tail;
	int n_queued, n_running;
	int n_http;               /* requests whose response is not yet sent */
	bool draining, stopping;
	struct srv_metrics m;
};

/* ---- oai.c ---- */
/* Parse and check a /v1/chat/completions or /v1/completions body, render
 * and tokenize its prompt: a new request (refs 0, not queued) or NULL with
 * *e set (400s naming the field; 404 for another model's name). */
struct srv_req *srv_req_parse(struct srv *s, enum srv_kind kind, const char *body, size_t len,
			      struct srv_error *e);
void srv_req_free(struct srv_req *r);
/* The chat prompt of a request body b (its text `body`): the template over
 * its messages, tools and chat_template_kwargs. An assistant message's
 * "reasoning" (vLLM's newer name) reaches the template as
 * "reasoning_content"; with tool_choice "none" the tools are left out (b is
 * edited). Heap text in *prompt. */
int srv_render(struct srv *s, cJSON *b, const char *body, size_t len, char **prompt, size_t *plen,
	       struct srv_error *e);
/* The finish_reason of a finished request ("tool_calls" when calls were
 * parsed out of it). */
const char *srv_finish_reason(const struct srv_req *r, bool has_tool_calls);
/* The whole response (heap JSON text) of n finished requests, the n
 * choices of one body (index i = r[i]); NULL when out of memory. */
char *srv_response(struct srv *s, struct srv_req *const *r, int n);
/* Another choice of the same request: a copy with its own sampling seed
 * (not queued, refs 0). */
struct srv_req *srv_req_clone(const struct srv_req *r, uint64_t seed);
/* A chunk object with the request's id, object, created and model; the
 * caller adds "choices" (and "usage"). */
cJSON *srv_chunk_new(struct srv *s, const struct srv_req *r);
/* {"prompt_tokens","completion_tokens","total_tokens",
 * "prompt_tokens_details":{"cached_tokens"}} (OpenAI's; cached: the prompt
 * tokens the prefix cache gave) */
cJSON *srv_usage(size_t prompt_tokens, size_t completion_tokens, size_t cached_tokens);

/* A streamed response's events (chat.completion.chunk or text_completion
 * objects as "data: …" lines), one srv_events a choice: the role chunk at
 * init, content, reasoning and tool-call deltas as text arrives
 * (lynn_chat_stream: tags held back, each tool call sent whole), at the
 * choice's end its finish_reason chunk, or the error object and [DONE];
 * once every choice has ended, the usage chunk when asked for and [DONE]
 * (srv_events_close). */
struct srv_events {
	struct srv *s;
	struct srv_req *r;
	int index;                     /* the choice's index in its chunks */
	struct lynn_chat_stream *cs;   /* chat only */
	struct lynn_buf out;           /* events not yet sent */
	struct lynn_buf text;
	int n_calls;
	size_t lp_offset;              /* completions' text_offset so far */
};
int srv_events_init(struct srv_events *ev, struct srv *s, struct srv_req *r, int index, struct lynn_err *err);
void srv_events_text(struct srv_events *ev, const char *text, size_t len);
/* Log-probabilities of the tokens generated since the last call (a chunk
 * whose delta is empty, or whose text is "", with the logprobs object). */
void srv_events_logprobs(struct srv_events *ev, const struct srv_lps *l);
/* r has ended (SRV_DONE or SRV_FAILED). */
void srv_events_end(struct srv_events *ev);
/* The n choices r[] of the body have ended (SRV_DONE): the usage chunk
 * (r[0]'s prompt once, the completions summed) when asked for, then
 * [DONE], into ev->out. */
void srv_events_close(struct srv_events *ev, struct srv_req *const *r, int n);
void srv_events_release(struct srv_events *ev);

/* ---- sched.c ---- */
int srv_sched_start(struct srv *s, struct lynn_err *err);
void srv_sched_stop(struct srv *s);
/* Queue r (taking a reference for the scheduler): 0, or -1 with *e set
 * (503 when the queue is full or the server is draining). */
int srv_submit(struct srv *s, struct srv_req *r, struct srv_error *e);
/* The connection lets go of r (cancelling it if it is still queued or
 * running). */
void srv_release(struct srv *s, struct srv_req *r);
/* Prometheus text of the counters (heap). */
char *srv_metrics_text(struct srv *s);

/* ---- http.c ---- */
int srv_http_start(struct srv *s, struct lynn_err *err);
void srv_http_quiesce(struct srv *s);
void srv_http_stop(struct srv *s);

#endif
