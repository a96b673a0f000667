/*
 * testutil.h - helpers shared by the Check suites: temp folders, running the
 * lynn binary and capturing its output, fixture paths, a scripted HTTP
 * endpoint.
 */
#ifndef LYNN_TESTUTIL_H
#define LYNN_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

/* Named tolerances live next to the tests that use them. */

/* The repo-relative fixtures folder. */
#define FIXTURES "tests/fixtures"

/* Make a fresh temp folder (caller frees the path and removes with rm_rf). */
char *tu_mkdtemp(void);
/* Write a file (aborts the test on failure). */
void tu_write(const char *path, const void *data, size_t len);
/* Read a whole file into a NUL-terminated heap string (NULL if absent). */
char *tu_read(const char *path, size_t *len);
/* The number at key k of object o (asserts it is one). */
double tu_num(const cJSON *o, const char *k);

/* GGUF's encoding (little-endian; a string is its u64 length and bytes),
 * appended to b: for tests that write GGUF images. */
struct lynn_buf;
void tu_put_u32(struct lynn_buf *b, uint32_t v);
void tu_put_u64(struct lynn_buf *b, uint64_t v);
void tu_put_str(struct lynn_buf *b, const char *s);

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

/* ===== scripted HTTP endpoints (libmicrohttpd) ===== */

/* Queue a JSON reply (the text is copied). */
enum MHD_Result tu_http_reply(struct MHD_Connection *c, int status, const char *json);
/* Start a daemon (a thread per connection, 30 s timeout) on a free loopback
 * port, set *port; `handler` keeps each request's body in a heap
 * struct lynn_buf in *con_cls, which the daemon frees when the request is
 * done. Aborts the test on failure; stop with MHD_stop_daemon. */
struct MHD_Daemon *tu_http_start(MHD_AccessHandlerCallback handler, void *cls, int *port);
/* A loopback port nothing listens on. */
int tu_dead_port(void);

#endif
