/* json.c - cJSON helpers (include/lynn/json.h). */
#include "lynn/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lynn/buf.h"
#include "lynn/fs.h"

cJSON *lynn_json_parse(const char *what, const char *text, size_t len, struct lynn_err *err)
{
	const char *end = NULL;
	cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
	if (!j) {
		size_t off = end && end >= text ? (size_t)(end - text) : 0;
		lynn_errf(err, -LYNN_EFORMAT, "json: %s: invalid JSON near byte %zu", what, off);
		return NULL;
	}
	return j;
}

cJSON *lynn_json_load(const char *path, size_t max_size, struct lynn_err *err)
{
	char *text = NULL, what[300];
	size_t len = 0;
	cJSON *j;

	if (lynn_file_read(path, max_size, &text, &len, err))
		return NULL;
	snprintf(what, sizeof what, "'%s'", path);
	j = lynn_json_parse(what, text, len, err);
	free(text);
	return j;
}

static const cJSON *field(const cJSON *obj, const char *key)
{
	return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

static int missing(const char *key, bool required, const char *what, struct lynn_err *err)
{
	if (!required)
		return 0;
	return lynn_errf(err, -LYNN_ENOTFOUND, "json: %s: missing field '%s'", what, key);
}

int lynn_json_get_int(const cJSON *obj, const char *key, bool required, int64_t *out,
		      const char *what, struct lynn_err *err)
{
	const cJSON *v = field(obj, key);
	if (!v || cJSON_IsNull(v))
		return missing(key, required, what, err);
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
	    fabs(v->valuedouble) > 9007199254740992.0)
		return lynn_errf(err, -LYNN_EFORMAT, "json: %s: field '%s' must be an integer",
				 what, key);
	*out = (int64_t)v->valuedouble;
	return 0;
}

int lynn_json_get_double(const cJSON *obj, const char *key, bool required, double *out,
			 const char *what, struct lynn_err *err)
{
	const cJSON *v = field(obj, key);
	if (!v || cJSON_IsNull(v))
		return missing(key, required, what, err);
	if (!cJSON_IsNumber(v))
		return lynn_errf(err, -LYNN_EFORMAT, "json: %s: field '%s' must be a number",
				 what, key);
	*out = v->valuedouble;
	return 0;
}

int lynn_json_get_bool(const cJSON *obj, const char *key, bool required, bool *out,
		       const char *what, struct lynn_err *err)
{
	const cJSON *v = field(obj, key);
	if (!v || cJSON_IsNull(v))
		return missing(key, required, what, err);
	if (!cJSON_IsBool(v))
		return lynn_errf(err, -LYNN_EFORMAT, "json: %s: field '%s' must be true or false",
				 what, key);
	*out = cJSON_IsTrue(v);
	return 0;
}

int lynn_json_get_str(const cJSON *obj, const char *key, bool required, const char **out,
		      const char *what, struct lynn_err *err)
{
	const cJSON *v = field(obj, key);
	if (!v || cJSON_IsNull(v)) {
		*out = NULL;
		return missing(key, required, what, err);
	}
	if (!cJSON_IsString(v))
		return lynn_errf(err, -LYNN_EFORMAT, "json: %s: field '%s' must be a string",
				 what, key);
	*out = v->valuestring;
	return 0;
}

/* cJSON's own formatted printer uses tabs; reports are read by people and
 * diffed, so print with 2-space indentation like json.dumps(indent=2). */
static int print_value(struct lynn_buf *b, const cJSON *v, int depth);

static int indent(struct lynn_buf *b, int depth)
{
	for (int i = 0; i < depth; i++)
		if (lynn_buf_puts(b, "  "))
			return -1;
	return 0;
}

static int print_string(struct lynn_buf *b, const char *s)
{
	cJSON tmp;
	char *p;
	int rc;
	memset(&tmp, 0, sizeof tmp);
	tmp.type = cJSON_String;
	tmp.valuestring = (char *)s;
	p = cJSON_PrintUnformatted(&tmp);
	if (!p)
		return -1;
	rc = lynn_buf_puts(b, p);
	cJSON_free(p);
	return rc;
}

static int print_value(struct lynn_buf *b, const cJSON *v, int depth)
{
	const cJSON *c;
	if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
		bool obj = cJSON_IsObject(v);
		if (!v->child)
			return lynn_buf_puts(b, obj ? "{}" : "[]");
		if (lynn_buf_puts(b, obj ? "{\n" : "[\n"))
			return -1;
		for (c = v->child; c; c = c->next) {
			if (indent(b, depth + 1))
				return -1;
			if (obj) {
				if (print_string(b, c->string ? c->string : "") || lynn_buf_puts(b, ": "))
					return -1;
			}
			if (print_value(b, c, depth + 1))
				return -1;
			if (lynn_buf_puts(b, c->next ? ",\n" : "\n"))
				return -1;
		}
		if (indent(b, depth))
			return -1;
		return lynn_buf_puts(b, obj ? "}" : "]");
	}
	if (cJSON_IsNumber(v) && !isfinite(v->valuedouble))
		return lynn_buf_puts(b, "null");
	{
		char *p = cJSON_PrintUnformatted(v);
		int rc;
		if (!p)
			return -1;
		rc = lynn_buf_puts(b, p);
		cJSON_free(p);
		return rc;
	}
}

char *lynn_json_print_pretty(const cJSON *obj)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	if (print_value(&b, obj, 0) || lynn_buf_putc(&b, '\n')) {
		lynn_buf_release(&b);
		return NULL;
	}
	return lynn_buf_detach(&b);
}

int lynn_json_write(const char *path, const cJSON *obj, struct lynn_err *err)
{
	char *s = lynn_json_print_pretty(obj);
	int rc;
	if (!s)
		return lynn_errf(err, -LYNN_ENOMEM, "json: '%s': out of memory", path);
	rc = lynn_write_atomic(path, s, strlen(s), err);
	free(s);
	return rc;
}

void lynn_iso8601_now(char buf[40])
{
	time_t t = time(NULL);
	struct tm tm;
	char z[8];
	localtime_r(&t, &tm);
	strftime(buf, 40, "%Y-%m-%dT%H:%M:%S", &tm);
	strftime(z, sizeof z, "%z", &tm); /* +hhmm -> +hh:mm */
	if (strlen(z) == 5)
		snprintf(buf + strlen(buf), 40 - strlen(buf), "%.3s:%.2s", z, z + 3);
}

cJSON *lynn_json_report_new(const char *schema)
{
	char ts[40];
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	lynn_iso8601_now(ts);
	cJSON_AddStringToObject(o, "schema_version", schema);
	cJSON_AddStringToObject(o, "created_at", ts);
	return o;
}
