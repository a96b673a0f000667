/*
 * util.h - small shared helpers: sizes, id lists, edit distance.
 */
#ifndef LYNN_UTIL_H
#define LYNN_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "lynn/err.h"

/* Parse "5GB", "500MB", "1.5GiB", "4096" (bytes) into *out. Decimal units
 * (kB MB GB TB) are powers of 1000, binary ones (KiB MiB GiB) of 1024. */
int lynn_parse_size(const char *s, uint64_t *out, struct lynn_err *err);

/* Parse a list of integers separated by spaces or commas ("1 2 3").
 * Caller frees *ids. */
int lynn_parse_ids(const char *s, int32_t **ids, size_t *n, struct lynn_err *err);

/* Levenshtein distance between two short ASCII strings. */
int lynn_edit_distance(const char *a, const char *b);

#define LYNN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LYNN_MAX(a, b) ((a) > (b) ? (a) : (b))
#define LYNN_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
