/*
 * util.h - small shared helpers: sizes, id lists, edit distance, a name ->
 * index hash table.
 */
#ifndef LYNN_UTIL_H
#define LYNN_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lynn/err.h"

/* Parse "5GB", "500MB", "1.5GiB", "4096" (bytes) into *out. Decimal units
 * (kB MB GB TB) are powers of 1000, binary ones (KiB MiB GiB) of 1024. */
int lynn_parse_size(const char *s, uint64_t *out, struct lynn_err *err);

/* Parse a list of integers separated by spaces or commas ("1 2 3").
 * Caller frees *ids. */
int lynn_parse_ids(const char *s, int32_t **ids, size_t *n, struct lynn_err *err);

/* Does s end with suffix? */
bool lynn_str_ends_with(const char *s, const char *suffix);

/* The "re:" entries of module lists (compressed-tensors' targets and
 * ignore, lynn quantize --ignore): a regular expression (PCRE2, Python's
 * syntax for what such lists use) matched from the start of the module
 * name, as Python's re.match. Compile returns NULL with the reason in msg
 * (cap bytes). */
struct lynn_re;
struct lynn_re *lynn_re_compile(const char *pattern, char *msg, size_t cap);
bool lynn_re_match(const struct lynn_re *re, const char *s);
void lynn_re_free(struct lynn_re *re);

/* Levenshtein distance between two short ASCII strings. */
int lynn_edit_distance(const char *a, const char *b);

#define LYNN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LYNN_MAX(a, b) ((a) > (b) ? (a) : (b))
#define LYNN_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* 64-bit FNV-1a of a NUL-terminated string (for in-memory hash tables). */
uint64_t lynn_hash_str(const char *s);

/* A name -> index hash table (open addressing) over indices into the
 * owner's array; the owner supplies each entry's name through
 * name_of(ctx, i) and keeps the names alive while the index is used. */
struct lynn_name_index {
	int64_t *slots; /* -1 = empty; owned, freed by lynn_name_index_release */
	size_t mask;
	const char *(*name_of)(const void *ctx, int64_t i);
	const void *ctx;
};

/* Room for n names. Returns 0 or -1 (out of memory). */
int lynn_name_index_init(struct lynn_name_index *ix, size_t n,
			 const char *(*name_of)(const void *ctx, int64_t i), const void *ctx);
void lynn_name_index_release(struct lynn_name_index *ix);
/* Insert entry i; if the name is already present, returns the earlier index
 * and inserts nothing, else -1. */
int64_t lynn_name_index_put(struct lynn_name_index *ix, int64_t i);
/* Index of `name`, or -1 (also on a zeroed, never initialized index). */
int64_t lynn_name_index_get(const struct lynn_name_index *ix, const char *name);

#endif
