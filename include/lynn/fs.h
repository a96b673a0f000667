/*
 * fs.h - files: read-only mmap, bounded whole-file reads, atomic writes.
 *
 * Atomic writes (SPEC §1): data goes to a temp file in the destination's own
 * folder, is fsync'ed, then renamed over the final name, and the folder is
 * fsync'ed, so a crash or kill leaves either the old file or the new one.
 * Output folders work the same way: build in a hidden temp folder beside the
 * target and rename it into place at the end (lynn_tmpdir_*).
 */
#ifndef LYNN_FS_H
#define LYNN_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lynn/err.h"

/* ===== Read-only mmap ===== */
struct lynn_map {
	const uint8_t *data; /* NULL for an empty file */
	size_t size;
	int fd;
};

/* Map `path` read-only. On success the caller releases with lynn_map_close. */
int lynn_map_open(struct lynn_map *map, const char *path, struct lynn_err *err);
void lynn_map_close(struct lynn_map *map);

/* Hints for streaming through a mapped range: read ahead (sequential), and
 * drop our pages once done (a read-only file mapping; the page cache keeps
 * the data), so a streamed pass over a large checkpoint does not pile up
 * resident pages. Ranges are rounded inward to whole pages; no-ops on error. */
void lynn_mem_sequential(const void *p, size_t len);
void lynn_mem_drop(const void *p, size_t len);

/* Read all of `path` into a NUL-terminated heap buffer, refusing files larger
 * than `max_size` bytes. Caller frees *out with free(). */
int lynn_file_read(const char *path, size_t max_size, char **out, size_t *len,
		   struct lynn_err *err);

bool lynn_file_exists(const char *path);
bool lynn_dir_exists(const char *path);
/* Size of a regular file, or a negative error. */
int64_t lynn_file_size(const char *path, struct lynn_err *err);
/* Join folder and name into a fresh heap string ("dir/name"). Caller frees. */
char *lynn_path_join(const char *dir, const char *name);

/* ===== Atomic file writes ===== */
struct lynn_afile {
	FILE *f;         /* write through this */
	char *final_path;
	char *tmp_path;
};

/* Open a temp file beside `path` for writing. */
int lynn_afile_open(struct lynn_afile *af, const char *path, struct lynn_err *err);
/* Flush, fsync, rename over the final path, fsync the folder. Always
 * releases `af`; on failure the temp file is removed and the old file kept. */
int lynn_afile_commit(struct lynn_afile *af, struct lynn_err *err);
/* Drop the temp file; the final path is untouched. Accepts a closed af. */
void lynn_afile_abort(struct lynn_afile *af);

/* Write `len` bytes to `path` atomically. */
int lynn_write_atomic(const char *path, const void *data, size_t len,
		      struct lynn_err *err);

/* Copy a file byte for byte (atomically at the destination). */
int lynn_file_copy(const char *src, const char *dst, struct lynn_err *err);

/* ===== Atomic output folders ===== */
struct lynn_tmpdir {
	char *final_path; /* where the folder ends up */
	char *path;       /* hidden temp folder beside it: write here */
};

/* Create `<parent>/.<name>.tmp-XXXXXX` beside final_path. With `force`, an
 * existing final folder is replaced at commit; without it, a non-empty
 * existing folder is an error (SPEC §1). */
int lynn_tmpdir_create(struct lynn_tmpdir *td, const char *final_path, bool force,
		       struct lynn_err *err);
/* fsync the temp folder's files and rename it to the final path. */
int lynn_tmpdir_commit(struct lynn_tmpdir *td, struct lynn_err *err);
/* Remove the temp folder and everything in it. */
void lynn_tmpdir_abort(struct lynn_tmpdir *td);

/* Remove a folder tree (used for temp folders only). */
int lynn_rm_rf(const char *path);

/* Is `path` a non-empty folder? */
bool lynn_dir_nonempty(const char *path);

#endif
