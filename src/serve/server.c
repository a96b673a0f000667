/* server.c - `lynn serve`'s lifecycle (include/lynn/serve.h): options
 * checked, the scheduler and the HTTP daemon started, drained and stopped. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lynn/log.h"
#include "serve_internal.h"

static void srv_free(struct srv *s)
{
	free(s->host);
	free(s->model_name);
	if (s->api_key) {
		explicit_bzero(s->api_key, strlen(s->api_key));
		free(s->api_key);
	}
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->work);
	pthread_cond_destroy(&s->idle);
	pthread_cond_destroy(&s->choices_cv);
	free(s);
}

int lynn_server_sampling_defaults(const struct lynn_config *cfg, const char *what,
				  struct lynn_sample_params *p, struct lynn_err *err)
{
	lynn_sample_params_init(p);
	p->temperature = 1.0f;
	if (!cfg)
		return 0;
	const double t = cfg->gen_temperature, tp = cfg->gen_top_p, mp = cfg->gen_min_p,
		     rp = cfg->gen_repetition_penalty;
	const char *bad = !isnan(t) && (t < 0 || t > 2)      ? "temperature' must be in [0, 2]"
			  : !isnan(tp) && (tp <= 0 || tp > 1) ? "top_p' must be in (0, 1]"
			  : !isnan(mp) && (mp < 0 || mp >= 1) ? "min_p' must be in [0, 1)"
			  : !isnan(rp) && !(rp > 0 && rp <= 1e30) ? "repetition_penalty' must be > 0"
			  : cfg->gen_top_k > (1 << 30)        ? "top_k' must be at most 2^30"
							      : NULL;
	if (bad)
		return lynn_errf(err, -LYNN_EFORMAT, "serve: %s: '%s (--generation-config none ignores the "
				 "file's sampling fields)", what, bad);
	if (!isnan(t))
		p->temperature = (float)t;
	if (!isnan(tp))
		p->top_p = (float)tp;
	if (!isnan(mp))
		p->min_p = (float)mp;
	if (!isnan(rp))
		p->repetition_penalty = (float)rp;
	if (cfg->gen_top_k >= 0)
		p->top_k = (int)cfg->gen_top_k;
	return 0;
}

struct lynn_server *lynn_server_start(struct lynn_engine *e, const struct lynn_server_opts *o,
				      struct lynn_err *err)
{
	struct srv *s;
	if (!lynn_engine_tok(e)) {
		lynn_errf(err, -LYNN_EINVAL, "serve: the model has no tokenizer (tokenizer.json): "
			  "a server needs text");
		return NULL;
	}
	if (o->parallel < 1 || o->max_queue < 0 || o->ctx_size < 2 || o->port < 0 || o->port > 65535 ||
	    !o->model_name || !o->model_name[0]) {
		lynn_errf(err, -LYNN_EINVAL, "serve: bad options (parallel >= 1, queue >= 0, ctx-size >= 2, "
			  "port 0..65535, a model name)");
		return NULL;
	}
	if (!(s = calloc(1, sizeof *s))) {
		lynn_errf(err, -LYNN_ENOMEM, "serve: out of memory");
		return NULL;
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->idle, NULL);
	pthread_cond_init(&s->choices_cv, NULL);
	s->o = *o;
	s->o.defaults = NULL;
	lynn_server_sampling_defaults(NULL, NULL, &s->def, NULL);
	if (o->defaults)
		s->def = *o->defaults;
	s->e = e;
	s->tok = lynn_engine_tok(e);
	s->tmpl = lynn_engine_template(e);
	s->started = (int64_t)time(NULL);
	s->host = strdup(o->host ? o->host : "127.0.0.1");
	s->model_name = strdup(o->model_name);
	s->api_key = o->api_key && o->api_key[0] ? strdup(o->api_key) : NULL;
	if (!s->host || !s->model_name || (o->api_key && o->api_key[0] && !s->api_key)) {
		srv_free(s);
		lynn_errf(err, -LYNN_ENOMEM, "serve: out of memory");
		return NULL;
	}
	s->o.host = s->host;
	s->o.model_name = s->model_name;
	s->o.api_key = NULL;
	lynn_engine_set_cache(e, o->prefix_cache);
	if (srv_sched_start(s, err)) {
		lynn_engine_set_cache(e, 0);
		srv_free(s);
		return NULL;
	}
	if (srv_http_start(s, err)) {
		srv_sched_stop(s);
		lynn_engine_set_cache(e, 0);
		srv_free(s);
		return NULL;
	}
	return (struct lynn_server *)s;
}

int lynn_server_port(const struct lynn_server *ls) { return ((const struct srv *)ls)->port; }

int lynn_server_drain(struct lynn_server *ls, double timeout_s)
{
	struct srv *s = (struct srv *)ls;
	struct timespec until;
	int left;
	clock_gettime(CLOCK_REALTIME, &until);
	if (timeout_s > 0) {
		until.tv_sec += (time_t)timeout_s;
		until.tv_nsec += (long)((timeout_s - (double)(time_t)timeout_s) * 1e9);
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&s->mu);
	s->draining = true;
	pthread_mutex_unlock(&s->mu);
	srv_http_quiesce(s);
	pthread_mutex_lock(&s->mu);
	/* until nothing is queued or running and every response has been sent */
	while (s->n_queued + s->n_running + s->n_http > 0)
		if (timeout_s > 0 ? pthread_cond_timedwait(&s->idle, &s->mu, &until) == ETIMEDOUT
				  : pthread_cond_wait(&s->idle, &s->mu) != 0)
			break;
	left = s->n_queued + s->n_running + s->n_http;
	pthread_mutex_unlock(&s->mu);
	return left;
}

void lynn_server_stop(struct lynn_server *ls)
{
	struct srv *s = (struct srv *)ls;
	if (!s)
		return;
	srv_sched_stop(s);
	srv_http_stop(s);
	lynn_engine_set_cache(s->e, 0);
	srv_free(s);
}
