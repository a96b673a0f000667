/*
 * cache.h - the eval output cache: zstd-compressed JSONL, one frame per record.
 *
 * Every generated output is appended the moment it arrives (SPEC §5): the
 * record is one JSON line compressed as a complete zstd frame, written with
 * one write() (fdatasync'ed at most once a second and at close). A kill
 * therefore loses at most the record being written; reopening with `resume` reads every complete frame, cuts a
 * torn last frame off, and appends after it. `zstdcat FILE` shows the JSONL.
 *
 * Records are JSON objects with a "key" (lynn_cache_key: the hash of model,
 * adapter, prompt, tools and generation settings) plus whatever the caller
 * stores (output, latency, ...). The last record with a key wins.
 */
#ifndef LYNN_CACHE_H
#define LYNN_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "lynn/err.h"

struct lynn_cache;

/* Open `path`. With `resume`, existing records are loaded (a missing file is
 * fine); without it the file is started afresh. Caller closes. */
struct lynn_cache *lynn_cache_open(const char *path, bool resume, struct lynn_err *err);
void lynn_cache_close(struct lynn_cache *c);

/* The record stored under `key` (borrowed until close), or NULL. */
const cJSON *lynn_cache_get(const struct lynn_cache *c, const char *key);

/* Append `rec` (which must hold a string "key") and flush it to disk; the
 * cache keeps its own copy. */
int lynn_cache_put(struct lynn_cache *c, const cJSON *rec, struct lynn_err *err);

/* Records loaded at open, and frames dropped as torn. */
size_t lynn_cache_n_loaded(const struct lynn_cache *c);
size_t lynn_cache_n_dropped(const struct lynn_cache *c);

/* Key = lowercase hex SHA-256 of the canonical JSON array
 * [model, adapter, prompt, tools, max_tokens, temperature 0, think]
 * (adapter "" and tools null when absent). */
void lynn_cache_key(char key[65], const char *model, const char *adapter, const char *prompt,
		    const cJSON *tools, int max_tokens, bool think);

#endif
