/*
 * chat.c - chat prompts (include/lynn/chat.h): the Jinja context transformers builds for
 * apply_chat_template, template loading from a model folder, and the inverse: generated text
 * to content / reasoning_content / tool_calls (vLLM's qwen3 reasoning parser and qwen3_coder
 * tool parser rules), as one incremental state machine that the whole-text parser also runs.
 */
#include "lynn/chat.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "lynn/buf.h"
#include "lynn/fs.h"
#include "lynn/json.h"

#define TEMPLATE_MAX_SIZE (16u << 20)

/* ===================================================================== templates */

struct lynn_chat_template {
	struct lynn_jinja *j;
	char *src, *bos, *eos;
};

struct lynn_chat_template *lynn_chat_template_from_string(const char *name, const char *src,
							  size_t len, const char *bos,
							  const char *eos, struct lynn_err *err)
{
	struct lynn_chat_template *t = calloc(1, sizeof *t);
	if (!t)
		goto nomem;
	t->src = malloc(len + 1);
	t->bos = strdup(bos ? bos : "");
	t->eos = strdup(eos ? eos : "");
	if (!t->src || !t->bos || !t->eos)
		goto nomem;
	memcpy(t->src, src, len);
	t->src[len] = 0;
	t->j = lynn_jinja_parse(name, src, len, err);
	if (!t->j) {
		lynn_chat_template_free(t);
		return NULL;
	}
	return t;
nomem:
	lynn_chat_template_free(t);
	lynn_errf(err, -LYNN_ENOMEM, "chat: out of memory");
	return NULL;
}

void lynn_chat_template_free(struct lynn_chat_template *t)
{
	if (!t)
		return;
	lynn_jinja_free(t->j);
	free(t->src);
	free(t->bos);
	free(t->eos);
	free(t);
}

const char *lynn_chat_template_source(const struct lynn_chat_template *t)
{
	return t->src;
}

const char *lynn_chat_template_bos(const struct lynn_chat_template *t)
{
	return t->bos;
}

const char *lynn_chat_template_eos(const struct lynn_chat_template *t)
{
	return t->eos;
}

static const char *token_str(const cJSON *cfg, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
	if (cJSON_IsString(v))
		return v->valuestring;
	if (cJSON_IsObject(v)) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
		if (cJSON_IsString(c))
			return c->valuestring;
	}
	return "";
}

struct lynn_chat_template *lynn_chat_template_load(const char *model_dir, struct lynn_err *err)
{
	char *jpath = lynn_path_join(model_dir, "chat_template.jinja");
	char *cpath = lynn_path_join(model_dir, "tokenizer_config.json");
	char *text = NULL, name[600];
	size_t len = 0;
	cJSON *cfg = NULL;
	const char *bos = "", *eos = "";
	struct lynn_chat_template *t = NULL;

	if (!jpath || !cpath) {
		lynn_errf(err, -LYNN_ENOMEM, "chat: out of memory");
		goto out;
	}
	if (lynn_file_exists(cpath)) {
		cfg = lynn_json_load(cpath, LYNN_JSON_MAX_SIZE, err);
		if (!cfg)
			goto out;
		bos = token_str(cfg, "bos_token");
		eos = token_str(cfg, "eos_token");
	}
	if (lynn_file_exists(jpath)) {
		if (lynn_file_read(jpath, TEMPLATE_MAX_SIZE, &text, &len, err))
			goto out;
		snprintf(name, sizeof name, "%s", jpath);
		t = lynn_chat_template_from_string(name, text, len, bos, eos, err);
		goto out;
	}
	if (cfg) {
		const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), *src = NULL;
		if (cJSON_IsString(ct)) {
			src = ct;
		} else if (cJSON_IsArray(ct)) {
			const cJSON *e;
			cJSON_ArrayForEach(e, ct) {
				const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
				if (cJSON_IsString(n) && !strcmp(n->valuestring, "default"))
					src = cJSON_GetObjectItemCaseSensitive(e, "template");
			}
			if (!cJSON_IsString(src)) {
				lynn_errf(err, -LYNN_EFORMAT,
					  "chat: '%s': field 'chat_template' is a list without a template named 'default'",
					  cpath);
				goto out;
			}
		} else if (ct) {
			lynn_errf(err, -LYNN_EFORMAT, "chat: '%s': field 'chat_template' must be a string or a list",
				  cpath);
			goto out;
		}
		if (src) {
			snprintf(name, sizeof name, "%s:chat_template", cpath);
			t = lynn_chat_template_from_string(name, src->valuestring, strlen(src->valuestring),
							   bos, eos, err);
			goto out;
		}
	}
	lynn_errf(err, -LYNN_ENOTFOUND,
		  "chat: '%s': no chat template (neither chat_template.jinja nor a 'chat_template' in "
		  "tokenizer_config.json)", model_dir);
out:
	cJSON_Delete(cfg);
	free(text);
	free(jpath);
	free(cpath);
	return t;
}

/* ===================================================================== rendering */

static int json_escape_into(struct lynn_buf *b, const char *s)
{
	int rc = lynn_buf_putc(b, '"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			rc |= lynn_buf_printf(b, "\\%c", c);
		else if (c < 0x20)
			rc |= lynn_buf_printf(b, "\\u%04x", c);
		else
			rc |= lynn_buf_putc(b, (char)c);
	}
	return rc | lynn_buf_putc(b, '"');
}

/* The members of a JSON object text, without the braces ("" for {}); NULL if not an object. */
static const char *object_members(const char *s, size_t *len)
{
	const char *b = s, *e = s + strlen(s);
	while (b < e && isspace((unsigned char)*b))
		b++;
	while (e > b && isspace((unsigned char)e[-1]))
		e--;
	if (e - b < 2 || *b != '{' || e[-1] != '}')
		return NULL;
	b++;
	e--;
	while (b < e && isspace((unsigned char)*b))
		b++;
	*len = (size_t)(e - b);
	return b;
}

static bool json_starts(const char *s, char c)
{
	while (*s && isspace((unsigned char)*s))
		s++;
	return *s == c;
}

int lynn_chat_render(const struct lynn_chat_template *t, const struct lynn_chat_input *in,
		     char **out, size_t *out_len, struct lynn_err *err)
{
	struct lynn_buf ctx = LYNN_BUF_INIT;
	int rc = 0;
	*out = NULL;
	if (!in->messages_json || !json_starts(in->messages_json, '['))
		return lynn_errf(err, -LYNN_EFORMAT, "chat: 'messages' must be a JSON array");
	if (in->tools_json && !json_starts(in->tools_json, '['))
		return lynn_errf(err, -LYNN_EFORMAT, "chat: 'tools' must be a JSON array");
	/* apply_chat_template: render(messages=, tools=, documents=, add_generation_prompt=, **kwargs)
	 * with the tokenizer's special tokens; tools and documents are None when absent. */
	rc |= lynn_buf_puts(&ctx, "{\"messages\": ");
	rc |= lynn_buf_puts(&ctx, in->messages_json);
	rc |= lynn_buf_puts(&ctx, ", \"tools\": ");
	rc |= lynn_buf_puts(&ctx, in->tools_json ? in->tools_json : "null");
	rc |= lynn_buf_puts(&ctx, ", \"documents\": null, \"add_generation_prompt\": ");
	rc |= lynn_buf_puts(&ctx, in->add_generation_prompt ? "true" : "false");
	rc |= lynn_buf_puts(&ctx, ", \"bos_token\": ");
	rc |= json_escape_into(&ctx, t->bos);
	rc |= lynn_buf_puts(&ctx, ", \"eos_token\": ");
	rc |= json_escape_into(&ctx, t->eos);
	if (in->enable_thinking >= 0)
		rc |= lynn_buf_printf(&ctx, ", \"enable_thinking\": %s", in->enable_thinking ? "true" : "false");
	if (in->kwargs_json) {
		size_t n;
		const char *m = object_members(in->kwargs_json, &n);
		if (!m) {
			lynn_buf_release(&ctx);
			return lynn_errf(err, -LYNN_EFORMAT, "chat: chat_template_kwargs must be a JSON object");
		}
		if (n) {
			rc |= lynn_buf_puts(&ctx, ", ");
			rc |= lynn_buf_append(&ctx, m, n);
		}
	}
	rc |= lynn_buf_putc(&ctx, '}');
	if (rc) {
		lynn_buf_release(&ctx);
		return lynn_errf(err, -LYNN_ENOMEM, "chat: out of memory");
	}
	rc = lynn_jinja_render(t->j, ctx.data, ctx.len, in->jinja, out, out_len, err);
	lynn_buf_release(&ctx);
	return rc;
}

int lynn_chat_render_request(const struct lynn_chat_template *t, const char *body, size_t len,
			     int default_thinking, char **out, size_t *out_len,
			     struct lynn_err *err)
{
	/* Field texts are cut from the body with cJSON's parse end pointers so that numbers keep
	 * their spelling (3 vs 3.0). */
	cJSON *root = NULL;
	char *msgs = NULL, *tools = NULL, *kw = NULL;
	struct lynn_chat_input in = { 0 };
	int rc;
	const cJSON *m, *agp;
	*out = NULL;
	root = lynn_json_parse("chat request", body, len, err);
	if (!root)
		return err ? err->code : -LYNN_EFORMAT;
	m = cJSON_GetObjectItemCaseSensitive(root, "messages");
	agp = cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt");
	if (!cJSON_IsArray(m)) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "chat: request field 'messages' must be an array");
		goto out;
	}
	/* Re-serialising with cJSON would turn 3.0 into 3; find each member's raw text instead. */
	{
		struct { const char *key; char **dst; } want[] = { { "messages", &msgs }, { "tools", &tools },
								  { "chat_template_kwargs", &kw } };
		for (size_t w = 0; w < 3; w++) {
			const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, want[w].key);
			if (!item || cJSON_IsNull(item))
				continue;
			/* scan top-level members of the body text */
			const char *p = body, *end = body + len;
			int depth = 0;
			bool found = false;
			while (p < end && !found) {
				if (*p == '"') {
					const char *q = p + 1;
					while (q < end && *q != '"')
						q += *q == '\\' ? 2 : 1;
					if (depth == 1 && (size_t)(q - p - 1) == strlen(want[w].key) &&
					    !memcmp(p + 1, want[w].key, (size_t)(q - p - 1))) {
						const char *r = q + 1, *vend = NULL;
						while (r < end && isspace((unsigned char)*r))
							r++;
						if (r < end && *r == ':') {
							cJSON *tmp;
							r++;
							tmp = cJSON_ParseWithLengthOpts(r, (size_t)(end - r), &vend, false);
							if (tmp && vend) {
								*want[w].dst = strndup(r, (size_t)(vend - r));
								found = true;
							}
							cJSON_Delete(tmp);
						}
					}
					p = q + 1;
					continue;
				}
				if (*p == '{' || *p == '[')
					depth++;
				else if (*p == '}' || *p == ']')
					depth--;
				p++;
			}
			if (!found)
				*want[w].dst = cJSON_PrintUnformatted(item);
		}
	}
	in.messages_json = msgs;
	in.tools_json = tools;
	in.kwargs_json = kw;
	in.add_generation_prompt = agp ? cJSON_IsTrue(agp) : true;
	in.enable_thinking = default_thinking;
	if (kw && !json_starts(kw, '{')) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "chat: request field 'chat_template_kwargs' must be an object");
		goto out;
	}
	rc = lynn_chat_render(t, &in, out, out_len, err);
out:
	free(msgs);
	free(tools);
	free(kw);
	cJSON_Delete(root);
	return rc;
}

bool lynn_chat_prompt_in_think(const char *prompt, size_t len)
{
	while (len && isspace((unsigned char)prompt[len - 1]))
		len--;
	return len >= 7 && !memcmp(prompt + len - 7, "<think>", 7);
}

/* ===================================================================== parsing generated text */

void lynn_chat_msg_release(struct lynn_chat_msg *m)
{
	if (!m)
		return;
	free(m->content);
	free(m->reasoning_content);
	for (size_t i = 0; i < m->n_tool_calls; i++) {
		free(m->tool_calls[i].name);
		free(m->tool_calls[i].arguments);
	}
	free(m->tool_calls);
	memset(m, 0, sizeof *m);
}

enum pstate { S_START, S_REASON, S_CONTENT, S_TOOL };

/* One output channel (content or reasoning) with strip(): leading whitespace is dropped,
 * trailing whitespace is held until more text follows. */
struct chan {
	bool started;
	struct lynn_buf held;
};

struct lynn_chat_stream {
	int state;
	bool drop_close;        /* reasoning ended at <tool_call>: drop the next stray </think> */
	bool in_think;          /* the prompt left a think block open */
	bool no_tools;          /* <tool_call> is text */
	struct lynn_buf pending; /* text not yet decided */
	struct chan content, reason;
	cJSON *tools;
	bool oom;
};

static const char TAG_THINK[] = "<think>", TAG_ENDTHINK[] = "</think>", TAG_TC[] = "<tool_call>",
		  TAG_ENDTC[] = "</tool_call>";

static bool sp(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int str_append(char **dst, const char *s, size_t n)
{
	size_t old = *dst ? strlen(*dst) : 0;
	char *p = realloc(*dst, old + n + 1);
	if (!p)
		return -LYNN_ENOMEM;
	memcpy(p + old, s, n);
	p[old + n] = 0;
	*dst = p;
	return 0;
}

static int chan_emit(struct chan *c, char **dst, const char *s, size_t n)
{
	size_t b = 0, e = n;
	int rc = 0;
	while (b < n && sp(s[b]))
		b++;
	if (b == n) { /* only whitespace: dropped at the start, else held */
		if (c->started)
			rc |= lynn_buf_append(&c->held, s, n);
		return rc;
	}
	if (c->started)
		b = 0;
	while (e > b && sp(s[e - 1]))
		e--;
	if (c->held.len)
		rc |= str_append(dst, c->held.data, c->held.len);
	lynn_buf_reset(&c->held);
	rc |= str_append(dst, s + b, e - b);
	rc |= lynn_buf_append(&c->held, s + e, n - e);
	c->started = true;
	return rc;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of one of the tags. */
static size_t partial_tag(const char *s, size_t n, const char *const *tags)
{
	size_t best = 0;
	for (size_t t = 0; tags[t]; t++) {
		size_t tl = strlen(tags[t]);
		for (size_t k = tl - 1; k > best; k--)
			if (k <= n && !memcmp(s + n - k, tags[t], k)) {
				best = k;
				break;
			}
	}
	return best;
}

static const char *find(const char *s, size_t n, const char *tag)
{
	return memmem(s, n, tag, strlen(tag));
}

/* ---- tool-call bodies ---- */

static const cJSON *param_schema(const cJSON *tools, const char *fn, const char *param)
{
	const cJSON *t;
	cJSON_ArrayForEach(t, tools) {
		const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
		const cJSON *n, *props;
		if (!f)
			f = t;
		n = cJSON_GetObjectItemCaseSensitive(f, "name");
		if (!cJSON_IsString(n) || strcmp(n->valuestring, fn))
			continue;
		props = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "parameters"),
							 "properties");
		return cJSON_GetObjectItemCaseSensitive(props, param);
	}
	return NULL;
}

static bool type_is(const cJSON *schema, const char *const *names)
{
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(schema, "type"), *e;
	if (cJSON_IsString(ty)) {
		for (size_t i = 0; names[i]; i++)
			if (!strcasecmp(ty->valuestring, names[i]))
				return true;
		return false;
	}
	cJSON_ArrayForEach(e, ty)
		if (cJSON_IsString(e) && strcasecmp(e->valuestring, "null"))
			for (size_t i = 0; names[i]; i++)
				if (!strcasecmp(e->valuestring, names[i]))
					return true;
	return false;
}

static int put_json_string(struct lynn_buf *b, const char *s, size_t n)
{
	int rc = lynn_buf_putc(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		switch (c) {
		case '"': rc |= lynn_buf_puts(b, "\\\""); break;
		case '\\': rc |= lynn_buf_puts(b, "\\\\"); break;
		case '\n': rc |= lynn_buf_puts(b, "\\n"); break;
		case '\r': rc |= lynn_buf_puts(b, "\\r"); break;
		case '\t': rc |= lynn_buf_puts(b, "\\t"); break;
		case '\b': rc |= lynn_buf_puts(b, "\\b"); break;
		case '\f': rc |= lynn_buf_puts(b, "\\f"); break;
		default:
			if (c < 0x20)
				rc |= lynn_buf_printf(b, "\\u%04x", c);
			else
				rc |= lynn_buf_putc(b, (char)c);
		}
	}
	return rc | lynn_buf_putc(b, '"');
}

/* Is s[0..n) one complete JSON value (checked with cJSON)? */
static bool is_json(const char *s, size_t n, int want_type)
{
	const char *end = NULL;
	cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, false);
	bool ok = j && end == s + n && (!want_type || (j->type & 0xff) == want_type);
	cJSON_Delete(j);
	return ok;
}

/* Append a parameter value converted by its schema type (vLLM qwen3_coder rules). */
static int put_param_value(struct lynn_buf *b, const cJSON *schema, const char *v, size_t n)
{
	static const char *const t_str[] = { "string", "str", "text", "varchar", "char", "enum", NULL };
	static const char *const t_int[] = { "integer", "int", NULL };
	static const char *const t_num[] = { "number", "float", NULL };
	static const char *const t_bool[] = { "boolean", "bool", "binary", NULL };
	static const char *const t_obj[] = { "object", "array", "dict", "list", NULL };
	char tmp[64];
	if (n == 4 && !strncasecmp(v, "null", 4))
		return lynn_buf_puts(b, "null");
	if (!schema || type_is(schema, t_str))
		return put_json_string(b, v, n);
	if (type_is(schema, t_int) || type_is(schema, t_num)) {
		char *end;
		if (n && n < sizeof tmp) {
			memcpy(tmp, v, n);
			tmp[n] = 0;
			if (type_is(schema, t_int)) {
				long long iv = strtoll(tmp, &end, 10);
				if (!*end)
					return lynn_buf_printf(b, "%lld", iv);
			} else {
				double d = strtod(tmp, &end);
				if (!*end && isfinite(d)) {
					if (d == floor(d) && fabs(d) < 9e15)
						return lynn_buf_printf(b, "%lld", (long long)d);
					for (int p = 1; p <= 17; p++) { /* shortest round-trip form */
						char f[40];
						snprintf(f, sizeof f, "%.*g", p, d);
						if (strtod(f, NULL) == d || p == 17)
							return lynn_buf_puts(b, f);
					}
				}
			}
		}
		return put_json_string(b, v, n);
	}
	if (type_is(schema, t_bool)) {
		if (n == 4 && !strncasecmp(v, "true", 4))
			return lynn_buf_puts(b, "true");
		if (n == 5 && !strncasecmp(v, "false", 5))
			return lynn_buf_puts(b, "false");
		return put_json_string(b, v, n);
	}
	if (type_is(schema, t_obj) && is_json(v, n, 0))
		return lynn_buf_append(b, v, n);
	/* unknown type: a JSON value stays JSON, anything else a string */
	if (!type_is(schema, t_obj) && cJSON_GetObjectItemCaseSensitive(schema, "type") == NULL && is_json(v, n, 0))
		return lynn_buf_append(b, v, n);
	return put_json_string(b, v, n);
}

static void trim(const char **s, size_t *n)
{
	while (*n && sp(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && sp((*s)[*n - 1]))
		(*n)--;
}

/* Parse one tool-call body into name + arguments JSON; false if it is neither form. */
static bool parse_tool_body(const cJSON *tools, const char *s, size_t n, char **name, char **args)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	int rc = 0;
	trim(&s, &n);
	*name = *args = NULL;
	if (n > 10 && !memcmp(s, "<function=", 10)) {
		const char *gt = memchr(s, '>', n), *p, *end = s + n, *fend;
		size_t nparams = 0;
		if (!gt)
			return false;
		*name = strndup(s + 10, (size_t)(gt - s - 10));
		fend = find(gt, (size_t)(end - gt), "</function>");
		if (fend)
			end = fend;
		p = gt + 1;
		rc |= lynn_buf_putc(&b, '{');
		for (;;) {
			const char *ps = find(p, (size_t)(end - p), "<parameter="), *pgt, *vb, *ve, *next;
			if (!ps)
				break;
			pgt = memchr(ps, '>', (size_t)(end - ps));
			if (!pgt)
				break;
			vb = pgt + 1;
			ve = find(vb, (size_t)(end - vb), "</parameter>");
			next = find(vb, (size_t)(end - vb), "<parameter=");
			if (!ve || (next && next < ve))
				ve = next ? next : end;
			p = ve;
			if (ve < end && !memcmp(ve, "</parameter>", 12))
				p = ve + 12;
			/* one leading and one trailing newline belong to the format */
			if (ve > vb && *vb == '\n')
				vb++;
			if (ve > vb && ve[-1] == '\n')
				ve--;
			{
				char *key = strndup(ps + 11, (size_t)(pgt - ps - 11));
				const cJSON *schema = key ? param_schema(tools, *name ? *name : "", key) : NULL;
				if (!key) {
					rc = -1;
					break;
				}
				if (nparams++)
					rc |= lynn_buf_puts(&b, ", ");
				rc |= put_json_string(&b, key, strlen(key));
				rc |= lynn_buf_puts(&b, ": ");
				rc |= put_param_value(&b, schema, vb, (size_t)(ve - vb));
				free(key);
			}
		}
		rc |= lynn_buf_putc(&b, '}');
		if (rc || !*name) {
			free(*name);
			*name = NULL;
			lynn_buf_release(&b);
			return false;
		}
		*args = lynn_buf_detach(&b);
		return *args != NULL;
	}
	if (n && *s == '{') {
		const char *end = NULL;
		cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, false);
		const cJSON *nm = cJSON_GetObjectItemCaseSensitive(j, "name");
		const cJSON *ar = cJSON_GetObjectItemCaseSensitive(j, "arguments");
		bool ok = false;
		if (!ar)
			ar = cJSON_GetObjectItemCaseSensitive(j, "parameters");
		if (j && end == s + n && cJSON_IsString(nm)) {
			*name = strdup(nm->valuestring);
			if (cJSON_IsString(ar))
				*args = strdup(ar->valuestring);
			else if (cJSON_IsObject(ar))
				*args = cJSON_PrintUnformatted(ar);
			else if (!ar)
				*args = strdup("{}");
			ok = *name && *args;
			if (!ok) {
				free(*name);
				free(*args);
				*name = *args = NULL;
			}
		}
		cJSON_Delete(j);
		return ok;
	}
	return false;
}

/* ---- the state machine ---- */

struct lynn_chat_stream *lynn_chat_stream_create(const struct lynn_chat_parse_opts *opts,
						 struct lynn_err *err)
{
	struct lynn_chat_stream *s = calloc(1, sizeof *s);
	if (!s) {
		lynn_errf(err, -LYNN_ENOMEM, "chat: out of memory");
		return NULL;
	}
	s->state = S_START;
	s->in_think = opts && opts->in_think;
	s->no_tools = opts && opts->no_tools;
	if (opts && opts->tools_json) {
		s->tools = cJSON_Parse(opts->tools_json);
		if (!cJSON_IsArray(s->tools)) {
			cJSON_Delete(s->tools);
			free(s);
			lynn_errf(err, -LYNN_EFORMAT, "chat: tools must be a JSON array");
			return NULL;
		}
	}
	return s;
}

void lynn_chat_stream_free(struct lynn_chat_stream *s)
{
	if (!s)
		return;
	lynn_buf_release(&s->pending);
	lynn_buf_release(&s->content.held);
	lynn_buf_release(&s->reason.held);
	cJSON_Delete(s->tools);
	free(s);
}

static int ensure_strings(struct lynn_chat_msg *d)
{
	if (!d->content && !(d->content = strdup("")))
		return -LYNN_ENOMEM;
	if (!d->reasoning_content && !(d->reasoning_content = strdup("")))
		return -LYNN_ENOMEM;
	return 0;
}

static int add_call(struct lynn_chat_msg *d, char *name, char *args)
{
	struct lynn_chat_tool_call *tc = realloc(d->tool_calls, (d->n_tool_calls + 1) * sizeof *tc);
	if (!tc) {
		free(name);
		free(args);
		return -LYNN_ENOMEM;
	}
	d->tool_calls = tc;
	tc[d->n_tool_calls].name = name;
	tc[d->n_tool_calls].arguments = args;
	d->n_tool_calls++;
	return 0;
}

static void consume(struct lynn_buf *b, size_t k)
{
	if (!b->data)
		return;
	memmove(b->data, b->data + k, b->len - k);
	b->len -= k;
	b->data[b->len] = 0;
}

/* Advance as far as the pending text allows; `final` at the end of generation. */
static int step(struct lynn_chat_stream *s, struct lynn_chat_msg *d, bool final)
{
	int rc = 0;
	for (;;) {
		const char *p = s->pending.data ? s->pending.data : "";
		size_t n = s->pending.len;
		if (s->state == S_START) {
			size_t w = 0;
			while (w < n && sp(p[w]))
				w++;
			if (n - w >= 7 && !memcmp(p + w, TAG_THINK, 7)) {
				consume(&s->pending, w + 7);
				s->state = S_REASON;
				continue;
			}
			if (!final && n - w < 7 && !memcmp(p + w, TAG_THINK, n - w))
				return rc; /* could still become <think> */
			s->state = s->in_think ? S_REASON : S_CONTENT;
			continue;
		}
		if (s->state == S_REASON) {
			const char *e = find(p, n, TAG_ENDTHINK), *t = s->no_tools ? NULL : find(p, n, TAG_TC);
			static const char *const tags_tc[] = { TAG_ENDTHINK, TAG_TC, NULL };
			static const char *const tags_no_tc[] = { TAG_ENDTHINK, NULL };
			const char *const *tags = s->no_tools ? tags_no_tc : tags_tc;
			if (e && (!t || e < t)) {
				rc |= chan_emit(&s->reason, &d->reasoning_content, p, (size_t)(e - p));
				consume(&s->pending, (size_t)(e - p) + 8);
				s->state = S_CONTENT;
				continue;
			}
			if (t) {
				rc |= chan_emit(&s->reason, &d->reasoning_content, p, (size_t)(t - p));
				consume(&s->pending, (size_t)(t - p));
				s->state = S_CONTENT;
				s->drop_close = true;
				continue;
			}
			size_t keep = final ? 0 : partial_tag(p, n, tags);
			rc |= chan_emit(&s->reason, &d->reasoning_content, p, n - keep);
			consume(&s->pending, n - keep);
			return rc;
		}
		if (s->state == S_CONTENT) {
			const char *t = s->no_tools ? NULL : find(p, n, TAG_TC);
			const char *e = s->drop_close ? find(p, n, TAG_ENDTHINK) : NULL;
			static const char *const tags1[] = { TAG_TC, NULL };
			static const char *const tags2[] = { TAG_TC, TAG_ENDTHINK, NULL };
			if (e && (!t || e < t)) {
				rc |= chan_emit(&s->content, &d->content, p, (size_t)(e - p));
				consume(&s->pending, (size_t)(e - p) + 8);
				s->drop_close = false;
				continue;
			}
			if (t) {
				rc |= chan_emit(&s->content, &d->content, p, (size_t)(t - p));
				consume(&s->pending, (size_t)(t - p) + 11);
				s->state = S_TOOL;
				continue;
			}
			/* drop_close is only set by a call, so never with no_tools */
			size_t keep = final || s->no_tools ? 0 : partial_tag(p, n, s->drop_close ? tags2 : tags1);
			rc |= chan_emit(&s->content, &d->content, p, n - keep);
			consume(&s->pending, n - keep);
			return rc;
		}
		/* S_TOOL: wait for </tool_call> (or the end) */
		{
			const char *e = find(p, n, TAG_ENDTC);
			size_t body = e ? (size_t)(e - p) : n;
			char *name, *args;
			if (!e && !final)
				return rc;
			if (parse_tool_body(s->tools, p, body, &name, &args)) {
				rc |= add_call(d, name, args);
			} else {
				rc |= chan_emit(&s->content, &d->content, TAG_TC, 11);
				rc |= chan_emit(&s->content, &d->content, p, body);
				if (e)
					rc |= chan_emit(&s->content, &d->content, TAG_ENDTC, 12);
			}
			consume(&s->pending, e ? body + 12 : body);
			s->state = S_CONTENT;
			if (!e)
				return rc;
		}
	}
}

int lynn_chat_stream_feed(struct lynn_chat_stream *s, const char *text, size_t len,
			  struct lynn_chat_msg *delta, struct lynn_err *err)
{
	int rc = ensure_strings(delta);
	/* NUL bytes cannot be part of the C strings handed out: they are dropped */
	for (size_t i = 0; !rc && i < len;) {
		const char *z = memchr(text + i, 0, len - i);
		size_t k = z ? (size_t)(z - text) - i : len - i;
		rc = lynn_buf_append(&s->pending, text + i, k);
		i += k + (z ? 1 : 0);
	}
	if (!rc)
		rc = step(s, delta, false);
	if (rc)
		return lynn_errf(err, -LYNN_ENOMEM, "chat: out of memory");
	return 0;
}

int lynn_chat_stream_finish(struct lynn_chat_stream *s, struct lynn_chat_msg *delta,
			    struct lynn_err *err)
{
	int rc = ensure_strings(delta);
	if (!rc)
		rc = step(s, delta, true);
	if (rc)
		return lynn_errf(err, -LYNN_ENOMEM, "chat: out of memory");
	return 0;
}

int lynn_chat_parse(const char *text, size_t len, const struct lynn_chat_parse_opts *opts,
		    struct lynn_chat_msg *out, struct lynn_err *err)
{
	struct lynn_chat_stream *s = lynn_chat_stream_create(opts, err);
	int rc;
	memset(out, 0, sizeof *out);
	if (!s)
		return err ? err->code : -LYNN_EFORMAT;
	rc = lynn_chat_stream_feed(s, text, len, out, err);
	if (!rc)
		rc = lynn_chat_stream_finish(s, out, err);
	lynn_chat_stream_free(s);
	if (rc)
		lynn_chat_msg_release(out);
	return rc;
}
