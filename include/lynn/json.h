/*
 * json.h - cJSON helpers: bounded loading with errors that name the file and
 * field, typed getters, atomic writing, and the report timestamp.
 */
#ifndef LYNN_JSON_H
#define LYNN_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "lynn/err.h"

/* Default cap for config-like JSON files. tokenizer.json needs more. */
#define LYNN_JSON_MAX_SIZE (64u << 20)

/* Parse `path` (at most max_size bytes). Caller frees with cJSON_Delete.
 * Errors name the file and the byte offset of a syntax error. */
cJSON *lynn_json_load(const char *path, size_t max_size, struct lynn_err *err);
/* Parse a buffer; `what` names it in errors. */
cJSON *lynn_json_parse(const char *what, const char *text, size_t len, struct lynn_err *err);

/* Typed field getters. `what` names the file in errors ("'x/config.json'"). A
 * missing field is -LYNN_ENOTFOUND when `required`, else *out keeps its value
 * and 0 is returned. A wrong type is -LYNN_EFORMAT naming the field. */
int lynn_json_get_int(const cJSON *obj, const char *key, bool required, int64_t *out,
		      const char *what, struct lynn_err *err);
int lynn_json_get_double(const cJSON *obj, const char *key, bool required, double *out,
			 const char *what, struct lynn_err *err);
int lynn_json_get_bool(const cJSON *obj, const char *key, bool required, bool *out,
		       const char *what, struct lynn_err *err);
/* Borrowed string (valid while obj lives), or NULL when absent and optional. */
int lynn_json_get_str(const cJSON *obj, const char *key, bool required, const char **out,
		      const char *what, struct lynn_err *err);

/* Write `obj` pretty-printed (2-space indent, trailing newline) atomically. */
int lynn_json_write(const char *path, const cJSON *obj, struct lynn_err *err);
/* Print to a heap string, 2-space indented like Python json.dumps(indent=2). */
char *lynn_json_print_pretty(const cJSON *obj);

/* ISO 8601 local time with offset, e.g. "2026-11-30T15:10:06+00:00". */
void lynn_iso8601_now(char buf[40]);

/* New report object: {"schema_version": schema, "created_at": now}. */
cJSON *lynn_json_report_new(const char *schema);

#endif
