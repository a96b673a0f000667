/* buf.c - growable NUL-terminated byte buffer (include/lynn/buf.h). */
#include "lynn/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/err.h"

int lynn_buf_reserve(struct lynn_buf *b, size_t extra)
{
	size_t need = b->len + extra + 1, cap;
	char *p;
	if (need < b->len)
		return -LYNN_ENOMEM;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need) {
		if (cap > ((size_t)-1) / 2)
			return -LYNN_ENOMEM;
		cap *= 2;
	}
	p = realloc(b->data, cap);
	if (!p)
		return -LYNN_ENOMEM;
	b->data = p;
	b->cap = cap;
	b->data[b->len] = '\0'; /* NUL-terminated from the first allocation */
	return 0;
}

int lynn_buf_append(struct lynn_buf *b, const void *data, size_t len)
{
	if (lynn_buf_reserve(b, len))
		return -LYNN_ENOMEM;
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int lynn_buf_puts(struct lynn_buf *b, const char *s) { return lynn_buf_append(b, s, strlen(s)); }
int lynn_buf_putc(struct lynn_buf *b, char c) { return lynn_buf_append(b, &c, 1); }

int lynn_buf_printf(struct lynn_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || lynn_buf_reserve(b, (size_t)n))
		return -LYNN_ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void lynn_buf_reset(struct lynn_buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void lynn_buf_release(struct lynn_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

char *lynn_buf_detach(struct lynn_buf *b)
{
	char *p;
	if (!b->data && lynn_buf_reserve(b, 0))
		return NULL;
	p = b->data;
	b->data = NULL;
	b->len = b->cap = 0;
	return p;
}
