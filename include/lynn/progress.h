/*
 * progress.h - progress reporting.
 *
 * Long library operations take a `lynn_progress_fn` and call it with work
 * done and total. The CLI passes lynn_progress_bar_update with a bar that
 * draws "\r label  42% 1.2 GB/4.0 GB 310 MB/s ETA 0:09" on stderr, only when
 * stderr is a terminal (lynn_progress_bar_init decides once).
 */
#ifndef LYNN_PROGRESS_H
#define LYNN_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef void (*lynn_progress_fn)(void *ud, uint64_t done, uint64_t total);

struct lynn_progress_bar {
	char label[48];
	bool enabled;   /* draw at all (stderr is a tty and not quiet) */
	bool bytes;     /* units are bytes (human sizes) or items */
	double t_start; /* monotonic seconds */
	double t_last;  /* last draw */
	uint64_t done, total;
	FILE *out;      /* stderr unless a test overrides it */
};

/* Set up a bar. `enabled` is forced off when `out` is not a terminal. */
void lynn_progress_bar_init(struct lynn_progress_bar *bar, const char *label,
			    bool bytes, FILE *out, bool enabled);
/* A lynn_progress_fn: `ud` is the bar. Redraws at most 10 times a second. */
void lynn_progress_bar_update(void *ud, uint64_t done, uint64_t total);
/* Draw the final state and end the line (nothing when disabled). */
void lynn_progress_bar_finish(struct lynn_progress_bar *bar);

/* Format the bar line into buf (exposed for tests). */
void lynn_progress_format(const struct lynn_progress_bar *bar, double now, char *buf,
			  size_t cap);

/* Monotonic clock in seconds. */
double lynn_now(void);

#endif
