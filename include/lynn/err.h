/*
 * err.h - error values with messages.
 *
 * Every fallible library call takes `struct lynn_err *err` (NULL allowed) as
 * its last argument and returns 0 (LYNN_OK) or a negative -LYNN_E* code; the
 * message says what failed, naming the file, tensor, line or field at fault.
 * The library never prints or exits: the CLI (src/cmd) turns an error into a
 * message on stderr and an exit status with lynn_err_exit_status().
 */
#ifndef LYNN_ERR_H
#define LYNN_ERR_H

#include <stdarg.h>

enum lynn_errcode {
	LYNN_OK = 0,
	LYNN_EIO = 1,          /* read/write/open failed (runtime, exit 3) */
	LYNN_EFORMAT = 2,      /* malformed input file or field (exit 2) */
	LYNN_ENOMEM = 3,       /* allocation failed (exit 3) */
	LYNN_ECUDA = 4,        /* CUDA / cuBLASLt failure (exit 3) */
	LYNN_EUNSUPPORTED = 5, /* valid but unsupported input (exit 2) */
	LYNN_EINVAL = 6,       /* bad argument from the caller (exit 2) */
	LYNN_ENOTFOUND = 7,    /* a named file, tensor or key is missing (exit 2) */
	LYNN_ENET = 8,         /* network failure after retries (exit 3) */
	LYNN_EAUTH = 9,        /* credentials refused (exit 2) */
	LYNN_EINTR = 10,       /* interrupted / cancelled (exit 3) */
};

struct lynn_err {
	int code;       /* 0 or a negative -LYNN_E* value */
	char msg[256];  /* lowercase, module prefix, no final period */
};

/* Fill `err` (when non-NULL) with `code` and a printf-style message and
 * return `code`. Usage: return lynn_errf(err, -LYNN_EFORMAT, "st: '%s': ...", path); */
int lynn_errf(struct lynn_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int lynn_verrf(struct lynn_err *err, int code, const char *fmt, va_list ap);

/* Reset to "no error". */
void lynn_err_clear(struct lynn_err *err);

/* Short name of a code ("format", "io", ...); accepts positive or negative. */
const char *lynn_err_name(int code);

/* The CLI exit status for an error code (SPEC §1): 2 for bad input / usage
 * (format, unsupported, invalid, not found, auth), 3 for runtime failures. */
int lynn_err_exit_status(int code);

/* Broken invariant (never bad input): abort with file:line. */
#define LYNN_ASSERT(x) \
	do { if (!(x)) lynn_assert_fail(#x, __FILE__, __LINE__); } while (0)
void lynn_assert_fail(const char *expr, const char *file, int line)
	__attribute__((noreturn));

#endif
