/*
 * serve.h - `lynn serve`: an OpenAI-compatible HTTP server over one engine
 * (SPEC §7; docs/lynn-serve.md). libmicrohttpd serves the connections (one
 * thread each); one scheduler thread runs continuous batching: up to
 * `parallel` requests are generated together, each lynn_engine_step feeding
 * every running request's next token and the next piece of the newest
 * prompts in one forward pass (engine.h: the decode loop of `lynn generate`
 * too). Requests wait in a bounded queue; a client that goes away cancels
 * its request at the next step.
 */
#ifndef LYNN_SERVE_H
#define LYNN_SERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "lynn/config.h"
#include "lynn/engine.h"
#include "lynn/err.h"

struct lynn_server_opts {
	const char *host;          /* address to bind; NULL = 127.0.0.1 */
	int port;                  /* 0: any free port (lynn_server_port tells) */
	const char *model_name;    /* the id /v1/models lists and responses carry */
	int parallel;              /* requests generated together (>= 1) */
	int max_queue;             /* requests waiting beyond those (>= 0); more get 503 */
	int ctx_size;              /* tokens per request, prompt + completion */
	int max_prefill;           /* prompt tokens per batch step (chunked prefill) */
	/* bytes of sequence states the engine keeps between requests (its
	 * prefix cache, lynn_engine_set_cache; emptied at stop); 0: off. A chat
	 * request also keeps the states where its system messages end and
	 * before its generation prompt. */
	size_t prefix_cache;
	const char *api_key;       /* NULL: no authentication; never logged */
	bool metrics;              /* serve GET /metrics (else 501) */
	/* sampling for the fields a request leaves out (temperature, top_p,
	 * top_k, min_p; not the seed); NULL: OpenAI's (temperature 1, top_p 1,
	 * neither top_k nor min_p). lynn serve takes generation_config.json's
	 * (lynn_server_sampling_defaults). Copied at start. */
	const struct lynn_sample_params *defaults;
};

struct lynn_server;

/* Sampling defaults for lynn_server_opts.defaults: OpenAI's (temperature 1,
 * top_p 1, top_k and min_p off), with a model's generation_config.json
 * fields (cfg->gen_*; cfg NULL: none) over them, as vLLM's default
 * --generation-config auto takes them. A field outside what a request may
 * ask (temperature 0..2, top_p in (0, 1], min_p in [0, 1), top_k >= 0) is
 * -LYNN_EFORMAT naming `what` (the file) and the field. */
int lynn_server_sampling_defaults(const struct lynn_config *cfg, const char *what,
				  struct lynn_sample_params *p, struct lynn_err *err);

/* Start serving `e` (borrowed; used only by the scheduler thread once
 * started, and for tokenizing and templating, which are thread-safe).
 * Errors: -LYNN_EINVAL for bad options, -LYNN_EIO when the address cannot
 * be bound (naming it). */
struct lynn_server *lynn_server_start(struct lynn_engine *e, const struct lynn_server_opts *o,
				      struct lynn_err *err);
/* The port bound (the chosen one when opts.port was 0). */
int lynn_server_port(const struct lynn_server *s);
/* Graceful drain: stop accepting connections, answer new requests on open
 * ones with 503, and return once every queued and running request has
 * finished and its response has been sent (or after timeout_s > 0 seconds;
 * lynn_server_stop then cancels the rest). Returns the number of requests
 * not finished. */
int lynn_server_drain(struct lynn_server *s, double timeout_s);
/* Stop (cancelling whatever runs) and free. */
void lynn_server_stop(struct lynn_server *s);

#endif
