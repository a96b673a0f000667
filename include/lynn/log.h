/*
 * log.h - leveled logging through a replaceable sink.
 *
 * The default sink writes "lynn: <msg>\n" to stderr (never stdout, which
 * carries only primary output). lynn_log_set() replaces it, e.g. for tests
 * or the server's request log.
 */
#ifndef LYNN_LOG_H
#define LYNN_LOG_H

enum lynn_log_level {
	LYNN_LOG_ERROR = 0,
	LYNN_LOG_WARN = 1,
	LYNN_LOG_INFO = 2,
	LYNN_LOG_DEBUG = 3,
};

typedef void (*lynn_log_fn)(void *ud, enum lynn_log_level level, const char *msg);

/* Replace the sink; fn NULL restores the default stderr sink. */
void lynn_log_set(lynn_log_fn fn, void *ud);
/* Messages above `level` are dropped (default LYNN_LOG_INFO). */
void lynn_log_set_level(enum lynn_log_level level);
enum lynn_log_level lynn_log_get_level(void);

void lynn_log(enum lynn_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define lynn_log_error(...) lynn_log(LYNN_LOG_ERROR, __VA_ARGS__)
#define lynn_log_warn(...)  lynn_log(LYNN_LOG_WARN, __VA_ARGS__)
#define lynn_log_info(...)  lynn_log(LYNN_LOG_INFO, __VA_ARGS__)
#define lynn_log_debug(...) lynn_log(LYNN_LOG_DEBUG, __VA_ARGS__)

#endif
