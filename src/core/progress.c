/* progress.c - a terminal progress bar with rate and ETA (include/lynn/progress.h). */
#include "lynn/progress.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

double lynn_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void lynn_progress_bar_init(struct lynn_progress_bar *bar, const char *label,
			    bool bytes, FILE *out, bool enabled)
{
	memset(bar, 0, sizeof *bar);
	snprintf(bar->label, sizeof bar->label, "%s", label ? label : "");
	bar->out = out ? out : stderr;
	bar->bytes = bytes;
	bar->enabled = enabled && isatty(fileno(bar->out));
	bar->t_start = lynn_now();
}

static void human(char *buf, size_t cap, double v, bool bytes)
{
	static const char *unit[] = { "", "k", "M", "G", "T" };
	int u = 0;
	while (v >= 1000.0 && u < 4) {
		v /= 1000.0;
		u++;
	}
	if (bytes)
		snprintf(buf, cap, u ? "%.1f %sB" : "%.0f B", v, unit[u]);
	else
		snprintf(buf, cap, u ? "%.1f%s" : "%.0f", v, unit[u]);
}

void lynn_progress_format(const struct lynn_progress_bar *bar, double now, char *buf,
			  size_t cap)
{
	double el = now - bar->t_start, rate = el > 0 ? (double)bar->done / el : 0;
	char d[32], t[32], r[32], eta[32] = "--:--";
	double pct = bar->total ? 100.0 * (double)bar->done / (double)bar->total : 0;

	human(d, sizeof d, (double)bar->done, bar->bytes);
	human(t, sizeof t, (double)bar->total, bar->bytes);
	human(r, sizeof r, rate, bar->bytes);
	if (rate > 0 && bar->total >= bar->done) {
		long s = (long)((double)(bar->total - bar->done) / rate + 0.5);
		snprintf(eta, sizeof eta, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
	}
	snprintf(buf, cap, "%s %5.1f%% %s/%s %s/s ETA %s", bar->label, pct, d, t, r, eta);
}

void lynn_progress_bar_update(void *ud, uint64_t done, uint64_t total)
{
	struct lynn_progress_bar *bar = ud;
	double now;
	char line[160];

	bar->done = done;
	bar->total = total;
	if (!bar->enabled)
		return;
	now = lynn_now();
	if (now - bar->t_last < 0.1 && done < total)
		return;
	bar->t_last = now;
	lynn_progress_format(bar, now, line, sizeof line);
	fprintf(bar->out, "\r%s\033[K", line);
	fflush(bar->out);
}

void lynn_progress_bar_finish(struct lynn_progress_bar *bar)
{
	char line[160];
	if (!bar->enabled)
		return;
	lynn_progress_format(bar, lynn_now(), line, sizeof line);
	fprintf(bar->out, "\r%s\033[K\n", line);
	fflush(bar->out);
}
