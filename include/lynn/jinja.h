/*
 * jinja.h - a Jinja template engine for chat templates, byte-exact with the way
 * Hugging Face transformers renders them: Jinja2's ImmutableSandboxedEnvironment
 * with trim_blocks=True, lstrip_blocks=True and the loopcontrols extension, a
 * `tojson` filter equal to json.dumps(x, ensure_ascii=False, indent=…,
 * separators=…, sort_keys=…), and the globals raise_exception(msg) and
 * strftime_now(fmt). Values follow Python: str(True) is "True", 1.5/2 is 0.75,
 * 4/2 is 2.0, floats print in repr's shortest form (1e-05, 100.0), dicts keep
 * insertion order, strings index by code point.
 *
 * Rendering is bounded (lynn_jinja_limits): call depth, loop iterations, output
 * size and working memory. Errors name the template, line and column:
 *   "jinja: 'chat_template.jinja':12:7: unknown filter 'frobnicate'"
 * raise_exception(msg) fails with -LYNN_EINVAL and the message
 *   "jinja: 'NAME':LINE:COL: raise_exception: MSG".
 *
 * Usage:
 *   struct lynn_jinja *t = lynn_jinja_parse("chat_template.jinja", src, len, err);
 *   char *out; size_t n;
 *   lynn_jinja_render(t, "{\"messages\": [...]}", SIZE_MAX, NULL, &out, &n, err);
 *   ... free(out); lynn_jinja_free(t);
 */
#ifndef LYNN_JINJA_H
#define LYNN_JINJA_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cjson/cJSON.h>

#include "lynn/err.h"

/* A parsed template (opaque, immutable after parsing: one template may be
 * rendered from several threads at once). */
struct lynn_jinja;

/* Defaults used when a field is 0. */
#define LYNN_JINJA_MAX_DEPTH 64              /* nested macro calls / recursive loops */
#define LYNN_JINJA_MAX_LOOP (1u << 20)       /* total loop iterations per render */
#define LYNN_JINJA_MAX_OUTPUT (64u << 20)    /* bytes of rendered output */
#define LYNN_JINJA_MAX_MEMORY (512u << 20)   /* bytes of working values per render */

struct lynn_jinja_opts {
	unsigned max_depth;     /* 0 = LYNN_JINJA_MAX_DEPTH */
	uint64_t max_loop;      /* 0 = LYNN_JINJA_MAX_LOOP */
	size_t max_output;      /* 0 = LYNN_JINJA_MAX_OUTPUT */
	size_t max_memory;      /* 0 = LYNN_JINJA_MAX_MEMORY */
	time_t now;             /* strftime_now's clock (local time); 0 = time(NULL) */
};

/* Parse template text (`len` bytes, UTF-8; NUL not required). `name` names the
 * template in errors (copied). Syntax errors (unclosed blocks, unknown
 * statements, bad expressions, unknown filters or tests) are -LYNN_EFORMAT
 * with line and column. Returns NULL on error. Free with lynn_jinja_free. */
struct lynn_jinja *lynn_jinja_parse(const char *name, const char *src, size_t len,
				    struct lynn_err *err);
void lynn_jinja_free(struct lynn_jinja *t);

/* Render with a context given as JSON text: an object whose keys become the
 * template's variables (`len` may be SIZE_MAX for a NUL-terminated string).
 * The JSON is read by lynn's own parser so that 3 and 3.0 stay an int and a
 * float (cJSON cannot tell them apart); duplicate keys keep the last value.
 * `opts` may be NULL. On success *out is a NUL-terminated heap string (caller
 * frees) of *out_len bytes. Errors: -LYNN_EFORMAT (bad context JSON, type
 * errors, undefined values used), -LYNN_EINVAL (raise_exception),
 * -LYNN_EUNSUPPORTED (a limit was hit; the message names it and the line),
 * -LYNN_ENOMEM. */
int lynn_jinja_render(const struct lynn_jinja *t, const char *ctx_json, size_t len,
		      const struct lynn_jinja_opts *opts, char **out, size_t *out_len,
		      struct lynn_err *err);

/* The same with a cJSON object as context. cJSON keeps no int/float
 * distinction: a number with an integral value within ±2^53 becomes an int. */
int lynn_jinja_render_cjson(const struct lynn_jinja *t, const cJSON *ctx,
			    const struct lynn_jinja_opts *opts, char **out, size_t *out_len,
			    struct lynn_err *err);

#endif
