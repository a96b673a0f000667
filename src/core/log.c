/* log.c - leveled logging with a replaceable sink (see include/lynn/log.h). */
#include "lynn/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

static lynn_log_fn sink_fn;
static void *sink_ud;
static enum lynn_log_level max_level = LYNN_LOG_INFO;
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;

static void default_sink(void *ud, enum lynn_log_level level, const char *msg)
{
	static const char *tag[] = { "error: ", "warning: ", "", "debug: " };
	(void)ud;
	fprintf(stderr, "lynn: %s%s\n", tag[level], msg);
}

void lynn_log_set(lynn_log_fn fn, void *ud)
{
	pthread_mutex_lock(&sink_lock);
	sink_fn = fn;
	sink_ud = ud;
	pthread_mutex_unlock(&sink_lock);
}

void lynn_log_set_level(enum lynn_log_level level) { max_level = level; }
enum lynn_log_level lynn_log_get_level(void) { return max_level; }

void lynn_log(enum lynn_log_level level, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	if (level > max_level)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&sink_lock);
	if (sink_fn)
		sink_fn(sink_ud, level, buf);
	else
		default_sink(NULL, level, buf);
	pthread_mutex_unlock(&sink_lock);
}
