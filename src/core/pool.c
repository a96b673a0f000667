/* pool.c - fixed thread pool with a parallel-for (include/lynn/pool.h). */
#include "lynn/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct lynn_pool {
	int n;                 /* threads including the caller */
	pthread_t *threads;    /* n - 1 workers */
	pthread_mutex_t mu;
	pthread_cond_t cv_work, cv_done;
	uint64_t generation;   /* bumped for each run */
	int busy;              /* workers still in the current run */
	int quit;
	/* the current run */
	lynn_pool_fn fn;
	void *ud;
	int64_t n_items;
	atomic_llong next;
};

struct worker_arg {
	struct lynn_pool *pool;
	int tid;
};

int lynn_ncpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

static void drain(struct lynn_pool *p, int tid)
{
	for (;;) {
		int64_t i = atomic_fetch_add(&p->next, 1);
		if (i >= p->n_items)
			break;
		p->fn(p->ud, i, tid);
	}
}

static void *worker(void *arg)
{
	struct worker_arg *wa = arg;
	struct lynn_pool *p = wa->pool;
	int tid = wa->tid;
	uint64_t seen = 0;

	free(wa);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->quit && p->generation == seen)
			pthread_cond_wait(&p->cv_work, &p->mu);
		if (p->quit)
			break;
		seen = p->generation;
		pthread_mutex_unlock(&p->mu);
		drain(p, tid);
		pthread_mutex_lock(&p->mu);
		if (--p->busy == 0)
			pthread_cond_signal(&p->cv_done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

struct lynn_pool *lynn_pool_create(int n_threads, struct lynn_err *err)
{
	struct lynn_pool *p = calloc(1, sizeof *p);
	if (!p) {
		lynn_errf(err, -LYNN_ENOMEM, "pool: out of memory");
		return NULL;
	}
	p->n = n_threads > 0 ? n_threads : lynn_ncpu();
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv_work, NULL);
	pthread_cond_init(&p->cv_done, NULL);
	p->threads = calloc((size_t)p->n, sizeof *p->threads);
	if (!p->threads)
		goto fail;
	for (int t = 1; t < p->n; t++) {
		struct worker_arg *wa = malloc(sizeof *wa);
		if (!wa)
			goto fail_threads;
		wa->pool = p;
		wa->tid = t;
		if (pthread_create(&p->threads[t - 1], NULL, worker, wa) != 0) {
			free(wa);
			goto fail_threads;
		}
		continue;
fail_threads:
		p->n = t; /* only t-1 workers exist */
		lynn_pool_free(p);
		lynn_errf(err, -LYNN_ENOMEM, "pool: cannot start thread %d", t);
		return NULL;
	}
	return p;
fail:
	lynn_pool_free(p);
	lynn_errf(err, -LYNN_ENOMEM, "pool: out of memory");
	return NULL;
}

void lynn_pool_free(struct lynn_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->cv_work);
	pthread_mutex_unlock(&p->mu);
	if (p->threads)
		for (int t = 1; t < p->n; t++)
			pthread_join(p->threads[t - 1], NULL);
	free(p->threads);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv_work);
	pthread_cond_destroy(&p->cv_done);
	free(p);
}

int lynn_pool_size(const struct lynn_pool *p) { return p ? p->n : 1; }

void lynn_pool_run(struct lynn_pool *p, int64_t n, lynn_pool_fn fn, void *ud)
{
	if (n <= 0)
		return;
	if (!p || p->n == 1 || n == 1) {
		for (int64_t i = 0; i < n; i++)
			fn(ud, i, 0);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->ud = ud;
	p->n_items = n;
	atomic_store(&p->next, 0);
	p->busy = p->n - 1;
	p->generation++;
	pthread_cond_broadcast(&p->cv_work);
	pthread_mutex_unlock(&p->mu);
	drain(p, 0);
	pthread_mutex_lock(&p->mu);
	while (p->busy > 0)
		pthread_cond_wait(&p->cv_done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
