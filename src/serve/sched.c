/* sched.c - continuous batching for `lynn serve`: a bounded FIFO of
 * requests and one thread that keeps up to `parallel` of them running.
 * Each turn it admits queued requests into free slots, drops cancelled
 * ones (their decode state is freed at once), and runs one
 * lynn_engine_step over all running requests: every decoding request
 * advances one token and the newest prompts advance by up to max_prefill
 * tokens, all in one forward pass. Generated text goes to the request's
 * pending buffer, where its connection thread picks it up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/log.h"
#include "lynn/util.h"
#include "serve_internal.h"

static void unref(struct srv_req *r)
{
	if (--r->refs == 0)
		srv_req_free(r);
}

/* News of r (text, logprobs, its end) to whoever waits for it (under mu). */
static void wake(struct srv_req *r)
{
	pthread_cond_broadcast(&r->cv);
	if (r->grouped)
		pthread_cond_broadcast(&r->srv->choices_cv);
}

/* Generated text -> the request's pending buffer (scheduler thread, during
 * the step; srv.mu is not held by the step). */
static void on_text(void *ud, const char *text, size_t len)
{
	struct srv_req *r = ud;
	pthread_mutex_lock(&r->srv->mu);
	if (lynn_buf_append(&r->pending, text, len) == 0)
		wake(r);
	pthread_mutex_unlock(&r->srv->mu);
}

/* A streamed request's new logprob entries -> pending_lp (under mu; a final
 * end-of-generation id is left out, as its text is). */
static void queue_logprobs(struct srv_req *r)
{
	const struct lynn_gen_result *g = lynn_gen_result(r->gen);
	const size_t upto = lynn_gen_n_text_ids(g);
	struct srv_lps *l = &r->pending_lp;
	if (upto <= r->n_lp_queued)
		return;
	const size_t need = l->n + upto - r->n_lp_queued;
	if (need > l->cap) {
		size_t cap = need * 2;
		int32_t *ids = realloc(l->ids, cap * sizeof *ids);
		if (ids)
			l->ids = ids;
		struct lynn_gen_logprob *lp = ids ? realloc(l->lp, cap * sizeof *lp) : NULL;
		if (!lp)
			return; /* out of memory: these entries go with the next step's */
		l->lp = lp;
		l->cap = cap;
	}
	for (size_t i = r->n_lp_queued; i < upto; i++, l->n++) {
		l->ids[l->n] = g->ids.ids[i];
		l->lp[l->n] = g->logprobs[i];
	}
	r->n_lp_queued = upto;
	wake(r);
}

int srv_submit(struct srv *s, struct srv_req *r, struct srv_error *e)
{
	int rc = 0;
	pthread_mutex_lock(&s->mu);
	if (s->draining || s->stopping)
		rc = srv_fail(e, 503, NULL, "the server is shutting down");
	else if (s->n_queued >= s->o.max_queue &&
		 !(s->n_queued == 0 && s->n_running < s->o.parallel))
		rc = srv_fail(e, 503, NULL, "the server is busy: %d requests running and %d queued",
			      s->n_running, s->n_queued);
	if (rc) {
		s->m.requests_rejected++;
		pthread_mutex_unlock(&s->mu);
		return rc;
	}
	r->refs = 2; /* the connection's and the scheduler's */
	r->state = SRV_QUEUED;
	r->gopts.on_text = r->stream ? on_text : NULL; /* whole responses take res.text */
	r->gopts.ud = r;
	r->next = NULL;
	if (s->queue_tail)
		s->queue_tail->next = r;
	else
		s->queue_head = r;
	s->queue_tail = r;
	s->n_queued++;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void srv_release(struct srv *s, struct srv_req *r)
{
	pthread_mutex_lock(&s->mu);
	if (r->state == SRV_QUEUED || r->state == SRV_RUNNING) {
		r->cancelled = true;
		pthread_cond_signal(&s->work);
	}
	unref(r);
	pthread_mutex_unlock(&s->mu);
}

/* Whether a running request has the same prompt as r and is still feeding
 * it (under mu): r then waits, to start from the state that one keeps at
 * its prompt's last token (serve's n > 1 choices: the prefix cache). */
static bool twin_prefilling(const struct srv *s, const struct srv_req *r)
{
	for (int i = 0; i < s->o.parallel; i++) {
		const struct srv_req *x = s->slot[i];
		if (x && x->gen && lynn_gen_prompt_left(x->gen) > 0 && x->prompt.n == r->prompt.n &&
		    !memcmp(x->prompt.ids, r->prompt.ids, r->prompt.n * sizeof *r->prompt.ids))
			return true;
	}
	return false;
}

/* End a request (under mu): wake its connection, count it, let go. */
static void finish(struct srv *s, struct srv_req *r, enum srv_state st)
{
	if (r->cancelled)
		s->m.requests_cancelled++;
	else if (st == SRV_DONE)
		s->m.requests_ok++;
	else
		s->m.requests_failed++;
	if (r->gen) {
		const struct lynn_gen_result *g = lynn_gen_result(r->gen);
		s->m.prompt_seconds += g->t_prefill_s;
		s->m.predicted_seconds += g->t_decode_s;
		if (st == SRV_DONE)
			lynn_gen_take_result(r->gen, &r->res);
		lynn_gen_free(r->gen);
		r->gen = NULL;
	}
	r->state = st;
	wake(r);
	unref(r);
}

static void *run(void *arg)
{
	struct srv *s = arg;
	const int P = s->o.parallel;
	struct srv_req **slot = s->slot;
	struct lynn_gen **gens = s->gens;
	struct lynn_err err = { 0 };

	pthread_mutex_lock(&s->mu);
	for (;;) {
		int n = 0;
		/* drop cancelled and admit queued requests */
		for (int i = 0; i < P; i++)
			if (slot[i] && (slot[i]->cancelled || s->stopping)) {
				if (s->stopping)
					srv_fail(&slot[i]->err, 503, NULL, "the server is shutting down");
				finish(s, slot[i], SRV_FAILED);
				slot[i] = NULL;
				s->n_running--;
			}
		for (int i = 0; i < P && s->queue_head && !s->stopping; i++) {
			if (slot[i])
				continue;
			struct srv_req *r = s->queue_head;
			if (s->o.prefix_cache && !r->cancelled && twin_prefilling(s, r))
				break; /* the queue waits a step or two with it */
			s->queue_head = r->next;
			if (!s->queue_head)
				s->queue_tail = NULL;
			s->n_queued--;
			if (r->cancelled) {
				finish(s, r, SRV_FAILED);
				i--;
				continue;
			}
			r->gen = lynn_gen_create(s->e, r->prompt.ids, r->prompt.n, &r->gopts, &err);
			if (!r->gen) {
				srv_fail(&r->err, err.code == -LYNN_EINVAL ? 400 : 500, NULL, "%s", err.msg);
				finish(s, r, SRV_FAILED);
				i--;
				continue;
			}
			/* the prompt tokens a kept state gave are not fed */
			r->n_fed = lynn_gen_result(r->gen)->n_cached;
			s->m.prompt_tokens_cached += r->n_fed;
			r->state = SRV_RUNNING;
			slot[i] = r;
			s->n_running++;
		}
		for (int i = 0; i < P; i++)
			if (slot[i])
				gens[n++] = slot[i]->gen;
		if (n == 0) {
			pthread_cond_broadcast(&s->idle);
			if (s->stopping)
				break;
			pthread_cond_wait(&s->work, &s->mu);
			continue;
		}
		pthread_mutex_unlock(&s->mu);
		int rc = lynn_engine_step(s->e, gens, (size_t)n, s->o.max_prefill, &err);
		pthread_mutex_lock(&s->mu);
		for (int i = 0; i < P; i++) {
			struct srv_req *r = slot[i];
			if (!r)
				continue;
			/* the counters move as the tokens go through */
			const size_t fed = r->prompt.n - lynn_gen_prompt_left(r->gen);
			const size_t made = lynn_gen_result(r->gen)->ids.n;
			s->m.prompt_tokens += fed - r->n_fed;
			s->m.predicted_tokens += made - r->n_made;
			r->n_fed = fed;
			r->n_made = made;
			if (r->stream && r->gopts.logprobs)
				queue_logprobs(r);
			if (rc)
				srv_fail(&r->err, 500, NULL, "generation failed: %s", err.msg);
			else if (!lynn_gen_finished(r->gen))
				continue;
			finish(s, r, rc ? SRV_FAILED : SRV_DONE);
			slot[i] = NULL;
			s->n_running--;
		}
		if (rc)
			lynn_log_error("serve: %s", err.msg);
	}
	/* stopping: whatever still waits is cancelled */
	while (s->queue_head) {
		struct srv_req *r = s->queue_head;
		s->queue_head = r->next;
		s->n_queued--;
		srv_fail(&r->err, 503, NULL, "the server is shutting down");
		finish(s, r, SRV_FAILED);
	}
	s->queue_tail = NULL;
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int srv_sched_start(struct srv *s, struct lynn_err *err)
{
	s->slot = calloc((size_t)s->o.parallel, sizeof *s->slot);
	s->gens = calloc((size_t)s->o.parallel, sizeof *s->gens);
	if (!s->slot || !s->gens || pthread_create(&s->thread, NULL, run, s)) {
		free(s->slot);
		free(s->gens);
		s->slot = NULL;
		s->gens = NULL;
		return lynn_errf(err, -LYNN_ENOMEM, "serve: cannot start the scheduler thread");
	}
	s->thread_started = true;
	return 0;
}

void srv_sched_stop(struct srv *s)
{
	if (!s->thread_started)
		return;
	pthread_mutex_lock(&s->mu);
	s->stopping = true;
	for (struct srv_req *r = s->queue_head; r; r = r->next)
		r->cancelled = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	s->thread_started = false;
	free(s->slot);
	free(s->gens);
	s->slot = NULL;
	s->gens = NULL;
}

char *srv_metrics_text(struct srv *s)
{
	struct lynn_buf b = { 0 };
	pthread_mutex_lock(&s->mu);
	const struct srv_metrics m = s->m;
	const int running = s->n_running, queued = s->n_queued;
	pthread_mutex_unlock(&s->mu);
#define METRIC(name, type, help, fmt, v)                                                       \
	lynn_buf_printf(&b, "# HELP lynn_" name " " help "\n# TYPE lynn_" name " " type "\nlynn_" name \
			" " fmt "\n", v)
	METRIC("prompt_tokens_total", "counter", "Prompt tokens through the model.", "%llu",
	       (unsigned long long)m.prompt_tokens);
	METRIC("prompt_tokens_cached_total", "counter", "Prompt tokens whose state came from the prefix cache.",
	       "%llu", (unsigned long long)m.prompt_tokens_cached);
	METRIC("tokens_predicted_total", "counter", "Tokens generated.", "%llu",
	       (unsigned long long)m.predicted_tokens);
	METRIC("prompt_seconds_total", "counter", "Seconds from a request's first step to its first token, summed.",
	       "%.6f", m.prompt_seconds);
	METRIC("predicted_seconds_total", "counter", "Seconds from a request's first token to its end, summed.",
	       "%.6f", m.predicted_seconds);
	METRIC("requests_succeeded_total", "counter", "Requests that ran to the end.", "%llu",
	       (unsigned long long)m.requests_ok);
	METRIC("requests_failed_total", "counter", "Requests that failed while running.", "%llu",
	       (unsigned long long)m.requests_failed);
	METRIC("requests_cancelled_total", "counter", "Requests whose client went away first.", "%llu",
	       (unsigned long long)m.requests_cancelled);
	METRIC("requests_rejected_total", "counter", "Requests refused: queue full or draining.", "%llu",
	       (unsigned long long)m.requests_rejected);
	METRIC("requests_processing", "gauge", "Requests being generated.", "%d", running);
	METRIC("requests_deferred", "gauge", "Requests waiting in the queue.", "%d", queued);
	METRIC("n_parallel", "gauge", "Requests generated together at most.", "%d", s->o.parallel);
#undef METRIC
	return b.data;
}
