/*
 * pool.h - a fixed thread pool with a parallel-for.
 *
 * lynn_pool_run(pool, n, fn, ud) calls fn(ud, i, tid) for every i in [0, n)
 * across the pool's threads (the calling thread takes part as tid 0) and
 * returns when all are done. Work is handed out in order through an atomic
 * counter, so uneven items balance. Not reentrant: one run at a time per pool.
 */
#ifndef LYNN_POOL_H
#define LYNN_POOL_H

#include <stdint.h>

#include "lynn/err.h"

struct lynn_pool;

typedef void (*lynn_pool_fn)(void *ud, int64_t i, int tid);

/* n_threads <= 0 means all online cores. Caller frees with lynn_pool_free. */
struct lynn_pool *lynn_pool_create(int n_threads, struct lynn_err *err);
void lynn_pool_free(struct lynn_pool *pool);
int lynn_pool_size(const struct lynn_pool *pool);
/* Run fn over [0, n). A NULL pool runs serially on the caller. */
void lynn_pool_run(struct lynn_pool *pool, int64_t n, lynn_pool_fn fn, void *ud);

/* Number of online cores. */
int lynn_ncpu(void);

#endif
