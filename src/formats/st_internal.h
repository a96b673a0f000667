/*
 * st_internal.h - shared by src/formats/{st,ckpt,st_writer}.c: a name ->
 * index hash table and a strict UTF-8 check. Not part of the public API.
 */
#ifndef LYNN_ST_INTERNAL_H
#define LYNN_ST_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Open addressing over indices into the owner's array; the owner supplies
 * each entry's name through name_of(ctx, i). */
struct lynn_name_index {
	int64_t *slots; /* -1 = empty */
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
/* Index of `name`, or -1. */
int64_t lynn_name_index_get(const struct lynn_name_index *ix, const char *name);

/* Offset of the first byte that breaks strict UTF-8 (overlongs, surrogates
 * and code points above U+10FFFF rejected), or len when valid. */
size_t lynn_utf8_check(const uint8_t *s, size_t len);

#endif
