/*
 * testutil.h - helpers shared by the Check suites: temp folders, running the
 * lynn binary and capturing its output, fixture paths.
 */
#ifndef LYNN_TESTUTIL_H
#define LYNN_TESTUTIL_H

#include <stddef.h>

/* Named tolerances live next to the tests that use them. */

/* The repo-relative fixtures folder. */
#define FIXTURES "tests/fixtures"

/* Make a fresh temp folder (caller frees the path and removes with rm_rf). */
char *tu_mkdtemp(void);
/* Write a file (aborts the test on failure). */
void tu_write(const char *path, const void *data, size_t len);
/* Read a whole file into a NUL-terminated heap string (NULL if absent). */
char *tu_read(const char *path, size_t *len);

struct tu_run {
	int status;   /* exit status; 128+sig when killed by a signal */
	char *out;    /* captured stdout (heap, NUL-terminated) */
	char *err;    /* captured stderr */
};

/* Run the lynn binary ($LYNN_BIN, default ./lynn) with a shell-quoted
 * argument string, optional stdin text and extra environment ("K=V K2=V2",
 * may be NULL). Frees nothing: call tu_run_free. */
struct tu_run tu_lynn(const char *args, const char *stdin_text, const char *env);
/* Run any shell command the same way. */
struct tu_run tu_sh(const char *cmd, const char *stdin_text);
void tu_run_free(struct tu_run *r);

#endif
