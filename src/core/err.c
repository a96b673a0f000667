/* err.c - error values with messages (see include/lynn/err.h). */
#include "lynn/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lynn_verrf(struct lynn_err *err, int code, const char *fmt, va_list ap)
{
	if (err) {
		err->code = code;
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	}
	return code;
}

int lynn_errf(struct lynn_err *err, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	lynn_verrf(err, code, fmt, ap);
	va_end(ap);
	return code;
}

void lynn_err_clear(struct lynn_err *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}

const char *lynn_err_name(int code)
{
	switch (code < 0 ? -code : code) {
	case LYNN_OK: return "ok";
	case LYNN_EIO: return "io";
	case LYNN_EFORMAT: return "format";
	case LYNN_ENOMEM: return "nomem";
	case LYNN_ECUDA: return "cuda";
	case LYNN_EUNSUPPORTED: return "unsupported";
	case LYNN_EINVAL: return "invalid";
	case LYNN_ENOTFOUND: return "notfound";
	case LYNN_ENET: return "network";
	case LYNN_EAUTH: return "auth";
	case LYNN_EINTR: return "interrupted";
	}
	return "unknown";
}

int lynn_err_exit_status(int code)
{
	switch (code < 0 ? -code : code) {
	case LYNN_OK: return 0;
	case LYNN_EFORMAT:
	case LYNN_EUNSUPPORTED:
	case LYNN_EINVAL:
	case LYNN_ENOTFOUND:
	case LYNN_EAUTH:
		return 2;
	}
	return 3;
}

void lynn_assert_fail(const char *expr, const char *file, int line)
{
	fprintf(stderr, "lynn: assertion '%s' failed at %s:%d\n", expr, file, line);
	abort();
}
