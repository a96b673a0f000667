/*
 * gguf.h - a strict, read-only GGUF reader: header, key/value metadata and
 * tensor infos over a read-only mmap (spec: ggml docs/gguf.md, versions 2
 * and 3, little-endian).
 *
 * Every length, count and offset is checked against the file before use:
 * a malformed file gives -LYNN_EFORMAT naming the file and the key or tensor
 * at fault, never a crash or an allocation larger than the file warrants.
 * Strings and array data are borrowed views into the mmap (not
 * NUL-terminated, possibly unaligned) valid until lynn_gguf_close.
 */
#ifndef LYNN_GGUF_H
#define LYNN_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lynn/err.h"

struct lynn_gguf;

enum lynn_gguf_type {
	LYNN_GGUF_UINT8 = 0,
	LYNN_GGUF_INT8 = 1,
	LYNN_GGUF_UINT16 = 2,
	LYNN_GGUF_INT16 = 3,
	LYNN_GGUF_UINT32 = 4,
	LYNN_GGUF_INT32 = 5,
	LYNN_GGUF_FLOAT32 = 6,
	LYNN_GGUF_BOOL = 7,
	LYNN_GGUF_STRING = 8,
	LYNN_GGUF_ARRAY = 9,
	LYNN_GGUF_UINT64 = 10,
	LYNN_GGUF_INT64 = 11,
	LYNN_GGUF_FLOAT64 = 12,
};

/* An array value: `n` elements of `type` at `data` (little-endian, packed,
 * unaligned). String elements are u64 length + bytes; use lynn_gguf_arr_str. */
struct lynn_gguf_arr {
	enum lynn_gguf_type type;
	uint64_t n;
	const uint8_t *data;
	const uint64_t *str_off; /* string arrays: offset of element j in data */
};

struct lynn_gguf_tensor {
	const char *name;  /* NUL-terminated, owned by the reader */
	uint32_t n_dims;   /* 1..4 */
	uint64_t ne[4];    /* ggml order: ne[0] is the fastest-moving dimension */
	uint32_t type;     /* ggml type id (GGML_TYPE_*) */
	uint64_t offset;   /* from the start of the data section */
	uint64_t size;     /* bytes */
	const void *data;  /* in the mmap */
};

/* Open and validate `path`. Free with lynn_gguf_close. */
struct lynn_gguf *lynn_gguf_open(const char *path, struct lynn_err *err);
/* Validate a GGUF image held in memory (borrowed: must outlive the reader);
 * `what` names it in errors. */
struct lynn_gguf *lynn_gguf_open_mem(const char *what, const void *data, size_t size,
				     struct lynn_err *err);
void lynn_gguf_close(struct lynn_gguf *g);

uint32_t lynn_gguf_version(const struct lynn_gguf *g);
uint32_t lynn_gguf_alignment(const struct lynn_gguf *g);

/* ===== Metadata ===== */

size_t lynn_gguf_n_kv(const struct lynn_gguf *g);
/* Key i (NUL-terminated) and its type. */
const char *lynn_gguf_kv_key(const struct lynn_gguf *g, size_t i);
enum lynn_gguf_type lynn_gguf_kv_type(const struct lynn_gguf *g, size_t i);
/* Index of `key`, or -1. */
int64_t lynn_gguf_find_kv(const struct lynn_gguf *g, const char *key);

/* Typed getters. A missing key is -LYNN_ENOTFOUND when `required`, else 0
 * with *out unchanged; a wrong type is -LYNN_EFORMAT naming the key.
 * get_int accepts every integer type and bool; get_float the float types. */
int lynn_gguf_get_int(const struct lynn_gguf *g, const char *key, bool required, int64_t *out,
		      struct lynn_err *err);
int lynn_gguf_get_float(const struct lynn_gguf *g, const char *key, bool required, double *out,
			struct lynn_err *err);
int lynn_gguf_get_bool(const struct lynn_gguf *g, const char *key, bool required, bool *out,
		       struct lynn_err *err);
int lynn_gguf_get_str(const struct lynn_gguf *g, const char *key, bool required,
		      const char **s, size_t *len, struct lynn_err *err);
int lynn_gguf_get_arr(const struct lynn_gguf *g, const char *key, bool required,
		      struct lynn_gguf_arr *out, struct lynn_err *err);

/* Element j (< a->n) of a string array. */
void lynn_gguf_arr_str(const struct lynn_gguf_arr *a, uint64_t j, const char **s, size_t *len);
/* Element j of an integer (or bool) array, widened. */
int64_t lynn_gguf_arr_int(const struct lynn_gguf_arr *a, uint64_t j);

/* ===== Tensors ===== */

size_t lynn_gguf_n_tensors(const struct lynn_gguf *g);
const struct lynn_gguf_tensor *lynn_gguf_tensor(const struct lynn_gguf *g, size_t i);
const struct lynn_gguf_tensor *lynn_gguf_find_tensor(const struct lynn_gguf *g, const char *name);

/* ggml type facts: name ("Q4_K"; NULL if unknown), elements per block and
 * bytes per block (false if unknown). */
const char *lynn_gguf_type_name(uint32_t type);
bool lynn_gguf_type_size(uint32_t type, uint32_t *blck, uint32_t *bytes);

#endif
