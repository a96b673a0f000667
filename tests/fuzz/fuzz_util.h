/* fuzz_util.h - shared by the libFuzzer targets (header only: each target
 * is built from its one .c file). */
#ifndef LYNN_FUZZ_UTIL_H
#define LYNN_FUZZ_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "lynn/model.h"

/* Write `size` bytes to a fresh file from the mkstemps template `path`
 * (edited in place; its last suffix_len characters are kept as the suffix).
 * Returns 0, or -1 with nothing left behind; the caller unlinks. */
static inline int fuzz_write_tmps(char *path, int suffix_len, const uint8_t *data, size_t size)
{
	int fd = mkstemps(path, suffix_len);
	if (fd < 0)
		return -1;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		unlink(path);
		return -1;
	}
	close(fd);
	return 0;
}

/* The same for a mkstemp template (no suffix). */
static inline int fuzz_write_tmp(char *path, const uint8_t *data, size_t size)
{
	return fuzz_write_tmps(path, 0, data, size);
}

/* Run an opened model (NULL: nothing) over 3 tokens, a prefill then one
 * decode step, so that ASan sees every weight read it binds; then close it. */
static inline void fuzz_model_run(struct lynn_model *m)
{
	struct lynn_err err;
	if (!m)
		return;
	struct lynn_seq *s = lynn_seq_create(m, &err);
	int32_t ids[3] = { 0, 1, 2 };
	float *lg = malloc((size_t)lynn_model_n_vocab(m) * sizeof *lg);
	if (s && lg && lynn_model_n_vocab(m) > 2) {
		lynn_model_prefill(m, s, ids, 3, false, lg, &err);
		lynn_model_decode(m, 1, &s, ids, lg, &err);
	}
	free(lg);
	lynn_seq_free(s);
	lynn_model_close(m);
}

#endif
