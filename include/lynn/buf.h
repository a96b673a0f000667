/*
 * buf.h - a growable byte buffer (always NUL-terminated).
 *
 * struct lynn_buf b = LYNN_BUF_INIT; lynn_buf_puts(&b, "x"); ...; free(b.data);
 * Append functions return 0 or -LYNN_ENOMEM; after a failure the buffer
 * keeps what it had and stays valid.
 */
#ifndef LYNN_BUF_H
#define LYNN_BUF_H

#include <stddef.h>
#include <stdio.h>

struct lynn_buf {
	char *data; /* NULL until the first append; NUL-terminated after */
	size_t len;
	size_t cap;
};

#define LYNN_BUF_INIT { NULL, 0, 0 }

int lynn_buf_reserve(struct lynn_buf *b, size_t extra);
int lynn_buf_append(struct lynn_buf *b, const void *data, size_t len);
int lynn_buf_puts(struct lynn_buf *b, const char *s);
int lynn_buf_putc(struct lynn_buf *b, char c);
int lynn_buf_printf(struct lynn_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Append `s` as a Markdown table cell: '|' escaped, CR and LF as spaces, at
 * most `max` bytes of it (SIZE_MAX: all) with a cut UTF-8 sequence
 * finished, then "…" when cut. NULL appends nothing. */
void lynn_buf_md_cell(struct lynn_buf *b, const char *s, size_t max);
/* Append all that is left of stream f (e.g. stdin). Returns 0,
 * -LYNN_EFORMAT when that would make the buffer longer than max_len bytes,
 * -LYNN_EIO on a read error, -LYNN_ENOMEM. */
int lynn_buf_read_stream(struct lynn_buf *b, FILE *f, size_t max_len);
void lynn_buf_reset(struct lynn_buf *b); /* len = 0, keeps memory */
void lynn_buf_release(struct lynn_buf *b); /* frees memory */
/* Hand the string to the caller (caller frees); the buffer becomes empty.
 * Never NULL unless out of memory. */
char *lynn_buf_detach(struct lynn_buf *b);

#endif
