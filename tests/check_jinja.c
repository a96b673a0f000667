/* check_jinja.c - src/text/jinja.c and src/text/chat.c against Jinja2 (the oracle): every template
 * of llama.cpp's bundle (tests/fixtures/templates, rendered by tests/tools/gen_template_fixtures.py)
 * over the fixture conversations, Python semantics cases, bad input, the output parser, and
 * `lynn template`. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "lynn/chat.h"
#include "lynn/jinja.h"
#include "testutil.h"

#define TDIR FIXTURES "/templates"

/* 2026-01-02T03:04:05 in UTC: the generator's fixed strftime_now clock (TZ=UTC in the test). */
#define FIXED_NOW ((time_t)1767323045)

static char *read_opt(const char *path)
{
	return tu_read(path, NULL);
}

struct conv {
	char name[64];
	char *messages, *tools, *kwargs;
};

static size_t load_convs(struct conv *cv, size_t max)
{
	char *list = tu_read(TDIR "/conversations.txt", NULL), *save = NULL, *line;
	size_t n = 0;
	ck_assert_ptr_nonnull(list);
	for (line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char p[512];
		if (line[0] == '#' || n == max)
			continue;
		snprintf(cv[n].name, sizeof cv[n].name, "%s", line);
		snprintf(p, sizeof p, TDIR "/conversations/%s.messages.json", line);
		cv[n].messages = read_opt(p);
		ck_assert_ptr_nonnull(cv[n].messages);
		snprintf(p, sizeof p, TDIR "/conversations/%s.tools.json", line);
		cv[n].tools = read_opt(p);
		snprintf(p, sizeof p, TDIR "/conversations/%s.kwargs.json", line);
		cv[n].kwargs = read_opt(p);
		n++;
	}
	free(list);
	return n;
}

static void free_convs(struct conv *cv, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(cv[i].messages);
		free(cv[i].tools);
		free(cv[i].kwargs);
	}
}

/* Render one template file over all conversations; returns the number of mismatches and counts
 * the conversations Jinja2 rendered in *rendered. */
static int check_template(const char *name, const char *path, struct conv *cv, size_t ncv,
			  int *rendered, bool verbose)
{
	size_t len;
	char *src = tu_read(path, &len);
	struct lynn_err err = { 0 };
	struct lynn_chat_template *t;
	struct lynn_jinja_opts jo = { .now = FIXED_NOW };
	int bad = 0;
	ck_assert_ptr_nonnull(src);
	t = lynn_chat_template_from_string(name, src, len, "<s>", "</s>", &err);
	*rendered = 0;
	for (size_t i = 0; i < ncv; i++) {
		char p[600], *want_txt, *want_err, *got = NULL;
		size_t want_len = 0, got_len = 0;
		int rc;
		struct lynn_chat_input in = { .messages_json = cv[i].messages, .tools_json = cv[i].tools,
					      .kwargs_json = cv[i].kwargs, .add_generation_prompt = true,
					      .enable_thinking = -1, .jinja = &jo };
		snprintf(p, sizeof p, TDIR "/expected/%s/%s.txt", name, cv[i].name);
		want_txt = tu_read(p, &want_len);
		snprintf(p, sizeof p, TDIR "/expected/%s/%s.err", name, cv[i].name);
		want_err = tu_read(p, NULL);
		ck_assert_msg(want_txt || want_err, "no fixture for %s/%s", name, cv[i].name);
		if (want_txt)
			(*rendered)++;
		rc = t ? lynn_chat_render(t, &in, &got, &got_len, &err) : err.code;
		if (want_txt && (rc || got_len != want_len || memcmp(got, want_txt, want_len))) {
			bad++;
			if (verbose && bad == 1) {
				size_t k = 0;
				while (!rc && k < got_len && k < want_len && got[k] == want_txt[k])
					k++;
				fprintf(stderr, "MISMATCH %s/%s: %s at byte %zu\n", name, cv[i].name,
					rc ? err.msg : "differs", k);
			}
		} else if (!want_txt && !rc) {
			bad++;
			if (verbose && bad == 1)
				fprintf(stderr, "MISMATCH %s/%s: Jinja2 failed (%s) but lynn rendered\n", name,
					cv[i].name, want_err);
		}
		free(got);
		free(want_txt);
		free(want_err);
	}
	lynn_chat_template_free(t);
	free(src);
	return bad;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

START_TEST(test_templates_vs_jinja2)
{
	struct conv cv[64];
	size_t ncv;
	DIR *d;
	struct dirent *de;
	char *names[256];
	size_t nn = 0;
	int exact = 0, renders = 0, total = 0;
	bool verbose = getenv("LYNN_TEMPLATE_VERBOSE") != NULL;
	static const char *const must[] = { "Qwen3.5-4B", "Qwen-Qwen3-0.6B", "Qwen3-Coder", NULL };

	setenv("TZ", "UTC", 1);
	tzset();
	ncv = load_convs(cv, 64);
	ck_assert_uint_ge(ncv, 12);
	d = opendir(TDIR);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)) && nn < 255) {
		size_t l = strlen(de->d_name);
		if (l > 6 && !strcmp(de->d_name + l - 6, ".jinja"))
			names[nn++] = strndup(de->d_name, l - 6);
	}
	closedir(d);
	qsort(names, nn, sizeof *names, cmp_str);
	ck_assert_uint_eq(nn, 68); /* llama.cpp's models/templates: 68 .jinja files and a README */
	for (size_t i = 0; i < nn; i++) {
		char path[600];
		int rendered, bad;
		snprintf(path, sizeof path, TDIR "/%s.jinja", names[i]);
		bad = check_template(names[i], path, cv, ncv, &rendered, verbose);
		total++;
		if (rendered)
			renders++;
		if (rendered && !bad)
			exact++;
		for (size_t k = 0; must[k]; k++)
			if (!strcmp(must[k], names[i]))
				ck_assert_msg(bad == 0, "%s: %d conversation(s) differ from Jinja2", names[i], bad);
		free(names[i]);
	}
	{
		int rendered, bad = check_template("lynn-qwen35", FIXTURES "/chat_template_qwen35.jinja", cv,
						   ncv, &rendered, verbose);
		ck_assert_msg(bad == 0, "lynn's chat_template_qwen35.jinja differs from Jinja2");
	}
	fprintf(stderr, "jinja: %d/%d templates byte-identical with Jinja2 on all %zu conversations "
			"(%d templates in the bundle)\n", exact, renders, ncv, total);
	free_convs(cv, ncv);
}
END_TEST


/* ---- semantic cases rendered by Jinja2 (tests/fixtures/jinja_cases.json) ---- */

START_TEST(test_semantic_cases)
{
	char *text = tu_read(FIXTURES "/jinja_cases.json", NULL);
	cJSON *cases = cJSON_Parse(text), *c;
	int n = 0, bad = 0;
	struct lynn_jinja_opts jo = { .now = FIXED_NOW };
	setenv("TZ", "UTC", 1);
	tzset();
	ck_assert(cJSON_IsArray(cases));
	cJSON_ArrayForEach(c, cases) {
		const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
		const char *src = cJSON_GetObjectItem(c, "template")->valuestring;
		const char *ctx = cJSON_GetObjectItem(c, "context")->valuestring;
		const cJSON *want = cJSON_GetObjectItem(c, "output"), *werr = cJSON_GetObjectItem(c, "error");
		struct lynn_err err = { 0 };
		struct lynn_jinja *t = lynn_jinja_parse(name, src, strlen(src), &err);
		char *out = NULL;
		size_t len = 0;
		int rc = t ? lynn_jinja_render(t, ctx, SIZE_MAX, &jo, &out, &len, &err) : err.code;
		n++;
		if (want) {
			if (rc || len != strlen(want->valuestring) || memcmp(out, want->valuestring, len)) {
				bad++;
				fprintf(stderr, "case %s: want [%s] got [%s]\n", name, want->valuestring,
					rc ? err.msg : out);
			}
		} else {
			ck_assert_ptr_nonnull(werr);
			if (!rc) {
				bad++;
				fprintf(stderr, "case %s: Jinja2 fails (%s), lynn rendered [%s]\n", name,
					werr->valuestring, out);
			} else {
				/* every error names the template and, except context errors, line:col */
				char pat[128];
				snprintf(pat, sizeof pat, "jinja: '%s':", name);
				ck_assert_msg(strstr(err.msg, pat) != NULL, "%s: error without location: %s", name, err.msg);
				if (strstr(werr->valuestring, "TemplateError: "))  /* raise_exception keeps the message */
					ck_assert_msg(strstr(err.msg, strstr(werr->valuestring, ": ") + 2) != NULL,
						      "%s: message lost: %s", name, err.msg);
			}
		}
		free(out);
		lynn_jinja_free(t);
	}
	ck_assert_int_ge(n, 80);
	ck_assert_msg(bad == 0, "%d of %d semantic cases differ from Jinja2", bad, n);
	cJSON_Delete(cases);
	free(text);
}
END_TEST


/* ---- bad input: errors with line and column, never a crash ---- */

START_TEST(test_bad_templates)
{
	static const struct {
		const char *src, *ctx;
		int code;
		const char *where; /* "line:col" expected in the message, or NULL */
	} cases[] = {
		{ "{% if x %}abc", "{}", -LYNN_EFORMAT, ":1:4:" },
		{ "a\n{% for x in y %}\nabc", "{}", -LYNN_EFORMAT, ":2:4:" },
		{ "{% for x in y %}{% endif %}", "{}", -LYNN_EFORMAT, ":1:20:" },
		{ "line1\n  {{ x|nofilter }}", "{}", -LYNN_EFORMAT, ":2:8:" },
		{ "{{ x is notatest }}", "{}", -LYNN_EFORMAT, ":1:" },
		{ "{{ 'abc }}", "{}", -LYNN_EFORMAT, ":1:4:" },
		{ "{{ x ", "{}", -LYNN_EFORMAT, ":1:" },
		{ "{# open comment", "{}", -LYNN_EFORMAT, ":1:1:" },
		{ "{% endif %}", "{}", -LYNN_EFORMAT, ":1:4:" },
		{ "{% %}", "{}", -LYNN_EFORMAT, ":1:" },
		{ "{% for %}", "{}", -LYNN_EFORMAT, ":1:" },
		{ "{{ (1 }}", "{}", -LYNN_EFORMAT, ":1:" },
		{ "{{ 1 ) }}", "{}", -LYNN_EFORMAT, ":1:6:" },
		{ "{% break %}", "{}", -LYNN_EFORMAT, ":1:4:" },
		{ "{% generation %}x{% endgeneration %}", "{}", -LYNN_EFORMAT, ":1:4:" },
		{ "{{ 99999999999999999999 }}", "{}", -LYNN_EFORMAT, ":1:4:" },
		{ "\x00\xff{{\x01}}", "{}", -LYNN_EFORMAT, ":1:" },
		/* runtime errors */
		{ "\n\n   {{ x.y.z }}", "{}", -LYNN_EFORMAT, ":3:" },
		{ "{{ raise_exception('stop here') }}", "{}", -LYNN_EINVAL, ":1:" },
		{ "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(1) }}", "{}", -LYNN_EUNSUPPORTED, ":1:" },
		{ "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}",
		  -LYNN_EUNSUPPORTED, ":1:" },
		{ "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
		  "{}", -LYNN_EUNSUPPORTED, ":1:" },
		{ "{{ 'x' * 1000000000000 }}", "{}", -LYNN_EUNSUPPORTED, ":1:" },
		{ "{{ 1 // 0 }}", "{}", -LYNN_EFORMAT, ":1:" },
		{ "{{ x }}", "{\"x\": [", -LYNN_EFORMAT, NULL },
		{ "{{ x }}", "[1]", -LYNN_EFORMAT, NULL },
		{ "{{ x }}", "{\"x\": \"\\ud800\\u\"}", -LYNN_EFORMAT, NULL },
	};
	struct lynn_jinja_opts jo = { .max_loop = 1000000 };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct lynn_err err = { 0 };
		size_t len = strlen(cases[i].src) + (i == 16 ? 1 : 0); /* case 16 has a NUL byte first */
		struct lynn_jinja *t;
		char *out = NULL;
		int rc;
		if (i == 16)
			len = 8;
		t = lynn_jinja_parse("bad.jinja", cases[i].src, len, &err);
		rc = t ? lynn_jinja_render(t, cases[i].ctx, SIZE_MAX, &jo, &out, NULL, &err) : err.code;
		ck_assert_msg(rc == cases[i].code, "case %zu: rc %d, want %d (%s)", i, rc, cases[i].code, err.msg);
		ck_assert_msg(strstr(err.msg, "jinja: 'bad.jinja'") != NULL, "case %zu: %s", i, err.msg);
		if (cases[i].where)
			ck_assert_msg(strstr(err.msg, cases[i].where) != NULL, "case %zu: want %s in: %s", i,
				      cases[i].where, err.msg);
		ck_assert_ptr_null(out);
		lynn_jinja_free(t);
	}
}
END_TEST

START_TEST(test_deep_nesting)
{
	/* parser and JSON depth limits keep the C stack bounded */
	size_t n = 100000, o = 0;
	char *src = malloc(2 * n + 16), *ctx = malloc(n + 16), *out = NULL;
	struct lynn_err err = { 0 };
	struct lynn_jinja *t;
	memcpy(src, "{{ ", 3);
	memset(src + 3, '(', n);
	memcpy(src + 3 + n, "1 }}", 5);
	t = lynn_jinja_parse("deep.jinja", src, strlen(src), &err);
	ck_assert_ptr_null(t);
	ck_assert_ptr_nonnull(strstr(err.msg, "deep.jinja':1:"));
	for (size_t i = 0; i < 2000; i++)
		o += (size_t)sprintf(src + o, "{%% if x %%}");
	t = lynn_jinja_parse("deep.jinja", src, o, &err);
	ck_assert_ptr_null(t);
	ck_assert_ptr_nonnull(strstr(err.msg, "nested too deeply"));
	t = lynn_jinja_parse("deep.jinja", "{{ x|length }}", 14, &err);
	ck_assert_ptr_nonnull(t);
	strcpy(ctx, "{\"x\": ");
	memset(ctx + 6, '[', n);
	ctx[6 + n] = 0;
	ck_assert_int_eq(lynn_jinja_render(t, ctx, SIZE_MAX, NULL, &out, NULL, &err), -LYNN_EFORMAT);
	ck_assert_ptr_nonnull(strstr(err.msg, "nested too deeply"));
	lynn_jinja_free(t);
	free(src);
	free(ctx);
}
END_TEST

/* ---- output parser: a table of generated outputs ---- */

#define PT_TOOLS                                                                                          \
	"[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": "      \
	"\"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, "   \
	"\"metric\": {\"type\": \"boolean\"}}}}}, {\"type\": \"function\", \"function\": {\"name\": "          \
	"\"search\", \"parameters\": {\"type\": \"object\", \"properties\": {\"query\": {\"type\": "          \
	"\"string\"}, \"limit\": {\"type\": \"number\"}, \"filters\": {\"type\": \"object\"}, \"sites\": "    \
	"{\"type\": \"array\", \"items\": {\"type\": \"string\"}}, \"cursor\": {\"type\": [\"string\", "      \
	"\"null\"]}}}}}]"

#define TC_OPEN "<tool_call>\n<function="
#define TC_CLOSE "</function>\n</tool_call>"
#define P(k, v) "<parameter=" k ">\n" v "\n</parameter>\n"

static const struct ptcase {
	const char *text;
	bool in_think, tools;
	const char *content, *reasoning;
	const char *calls[3][2]; /* name, arguments JSON */
} ptcases[] = {
	/* 0 */ { "Hello world", false, true, "Hello world", "", { { 0 } } },
	{ "<think>\nhmm\n</think>\n\nHello", false, true, "Hello", "hmm", { { 0 } } },
	{ "hmm\n</think>\n\nHello", true, true, "Hello", "hmm", { { 0 } } },
	{ "thinking that never ends", true, true, "", "thinking that never ends", { { 0 } } },
	{ "  <think>a</think>b", false, true, "b", "a", { { 0 } } },
	/* 5: a tool call before </think> ends the reasoning */
	{ "plan\n" TC_OPEN "get_weather>\n" P("city", "Paris") TC_CLOSE, true, true, "", "plan",
	  { { "get_weather", "{\"city\": \"Paris\"}" } } },
	{ "Sure.\n\n" TC_OPEN "get_weather>\n" P("city", "Paris") P("days", "3") TC_CLOSE, false, true,
	  "Sure.", "", { { "get_weather", "{\"city\": \"Paris\", \"days\": 3}" } } },
	{ TC_OPEN "get_weather>\n" P("city", "Zürich") P("metric", "True") TC_CLOSE, false, true, "", "",
	  { { "get_weather", "{\"city\": \"Zürich\", \"metric\": true}" } } },
	{ TC_OPEN "get_weather>\n" P("metric", "false") P("days", "three") TC_CLOSE, false, true, "", "",
	  { { "get_weather", "{\"metric\": false, \"days\": \"three\"}" } } },
	{ TC_OPEN "search>\n" P("query", "x") P("limit", "1e-05") TC_CLOSE, false, true, "", "",
	  { { "search", "{\"query\": \"x\", \"limit\": 1e-05}" } } },
	/* 10 */ { TC_OPEN "search>\n" P("limit", "2.5") TC_CLOSE TC_OPEN "search>\n" P("limit", "3.0") TC_CLOSE,
	  false, true, "", "", { { "search", "{\"limit\": 2.5}" }, { "search", "{\"limit\": 3}" } } },
	{ TC_OPEN "search>\n" P("filters", "{\"lang\": \"en\", \"n\": [1, 2.0]}") P("sites", "[\"a.com\", \"b.org\"]") TC_CLOSE,
	  false, true, "", "", { { "search", "{\"filters\": {\"lang\": \"en\", \"n\": [1, 2.0]}, \"sites\": [\"a.com\", \"b.org\"]}" } } },
	{ TC_OPEN "search>\n" P("cursor", "null") P("query", "None") TC_CLOSE, false, true, "", "",
	  { { "search", "{\"cursor\": null, \"query\": \"None\"}" } } },
	{ TC_OPEN "search>\n" P("query", "line1\nline2\n") TC_CLOSE, false, true, "", "",
	  { { "search", "{\"query\": \"line1\\nline2\\n\"}" } } },
	{ "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}\n</tool_call>",
	  false, true, "", "", { { "get_weather", "{\"city\": \"Oslo\", \"days\": 2}" } } },
	/* 15 */ { "<tool_call>{\"name\": \"search\", \"arguments\": \"{\\\"query\\\": \\\"q\\\"}\"}</tool_call>",
	  false, true, "", "", { { "search", "{\"query\": \"q\"}" } } },
	{ "Let me search.\n\n" TC_OPEN "search>\n" P("query", "x") "</function>", false, true,
	  "Let me search.", "", { { "search", "{\"query\": \"x\"}" } } },
	{ "a <tool_call>garbage</tool_call> b", false, true, "a <tool_call>garbage</tool_call> b", "", { { 0 } } },
	{ TC_OPEN "unknown_fn>\n" P("n", "5") TC_CLOSE, false, true, "", "", { { "unknown_fn", "{\"n\": \"5\"}" } } },
	{ TC_OPEN "get_weather>\n" P("days", "5") TC_CLOSE, false, false, "", "", { { "get_weather", "{\"days\": \"5\"}" } } },
	/* 20 */ { TC_OPEN "get_weather>\n<parameter=city>\nRome\n<parameter=days>\n2\n</function>\n</tool_call>",
	  false, true, "", "", { { "get_weather", "{\"city\": \"Rome\", \"days\": 2}" } } },
	{ "a" TC_OPEN "get_weather>\n" TC_CLOSE "b", false, true, "ab", "", { { "get_weather", "{}" } } },
	{ "abc</think>def", false, true, "abc</think>def", "", { { 0 } } },
	{ "\n\n</think>\n\nAnswer", true, true, "Answer", "", { { 0 } } },
	{ "<think>\n\n</think>\n\nX", false, true, "X", "", { { 0 } } },
	/* 25 */ { "r" TC_OPEN "get_weather>\n" P("city", "A") TC_CLOSE "</think>", true, true, "", "r",
	  { { "get_weather", "{\"city\": \"A\"}" } } },
	{ "日本語 ✓ \"quoted\"", false, true, "日本語 ✓ \"quoted\"", "", { { 0 } } },
	{ "a < b <tool", false, true, "a < b <tool", "", { { 0 } } },
	{ "<think", false, true, "<think", "", { { 0 } } },
	{ "", false, true, "", "", { { 0 } } },
	/* 30 */ { "\n\n", true, true, "", "", { { 0 } } },
	{ TC_OPEN "search>\n" P("query", "if a<b:\n  x") TC_CLOSE, false, true, "", "",
	  { { "search", "{\"query\": \"if a<b:\\n  x\"}" } } },
	{ "<think>r</think>I'll check both.\n\n" TC_OPEN "get_weather>\n" P("city", "A") TC_CLOSE "\n" TC_OPEN
	  "get_weather>\n" P("city", "B") TC_CLOSE "\n", false, true, "I'll check both.", "r",
	  { { "get_weather", "{\"city\": \"A\"}" }, { "get_weather", "{\"city\": \"B\"}" } } },
	{ "<think>x</think>y", true, true, "y", "x", { { 0 } } },
	{ "reason </thin", true, true, "", "reason </thin", { { 0 } } },
	/* 35 */ { "Answer <tool_ca", false, true, "Answer <tool_ca", "", { { 0 } } },
	{ "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"limit\": 1.5e3}}", false, true, "", "",
	  { { "search", "{\"limit\": 1500}" } } },
};

static void check_msg(size_t i, const struct ptcase *c, const struct lynn_chat_msg *m)
{
	size_t n = 0;
	ck_assert_msg(!strcmp(m->content, c->content), "case %zu content [%s] want [%s]", i, m->content, c->content);
	ck_assert_msg(!strcmp(m->reasoning_content, c->reasoning), "case %zu reasoning [%s] want [%s]", i,
		      m->reasoning_content, c->reasoning);
	while (n < 3 && c->calls[n][0])
		n++;
	ck_assert_msg(m->n_tool_calls == n, "case %zu: %zu tool calls, want %zu", i, m->n_tool_calls, n);
	for (size_t k = 0; k < n; k++) {
		cJSON *got = cJSON_Parse(m->tool_calls[k].arguments), *want = cJSON_Parse(c->calls[k][1]);
		ck_assert_str_eq(m->tool_calls[k].name, c->calls[k][0]);
		ck_assert_msg(got && want && cJSON_Compare(got, want, true), "case %zu call %zu args %s want %s", i, k,
			      m->tool_calls[k].arguments, c->calls[k][1]);
		cJSON_Delete(got);
		cJSON_Delete(want);
	}
}

START_TEST(test_parse_table)
{
	ck_assert_uint_ge(sizeof ptcases / sizeof ptcases[0], 30);
	for (size_t i = 0; i < sizeof ptcases / sizeof ptcases[0]; i++) {
		const struct ptcase *c = &ptcases[i];
		struct lynn_chat_parse_opts o = { .in_think = c->in_think, .tools_json = c->tools ? PT_TOOLS : NULL };
		struct lynn_chat_msg m;
		struct lynn_err err = { 0 };
		ck_assert_int_eq(lynn_chat_parse(c->text, strlen(c->text), &o, &m, &err), 0);
		check_msg(i, c, &m);
		lynn_chat_msg_release(&m);
	}
}
END_TEST

/* Streaming: any split of the text gives the same result, and text that may be part of a tag is
 * never emitted early. */
START_TEST(test_parse_stream)
{
	static const size_t steps[] = { 1, 2, 3, 7, 64 };
	for (size_t i = 0; i < sizeof ptcases / sizeof ptcases[0]; i++) {
		const struct ptcase *c = &ptcases[i];
		size_t len = strlen(c->text);
		for (size_t si = 0; si < sizeof steps / sizeof steps[0]; si++) {
			struct lynn_chat_parse_opts o = { .in_think = c->in_think, .tools_json = c->tools ? PT_TOOLS : NULL };
			struct lynn_err err = { 0 };
			struct lynn_chat_stream *s = lynn_chat_stream_create(&o, &err);
			struct lynn_chat_msg all = { 0 };
			ck_assert_ptr_nonnull(s);
			for (size_t off = 0;; off += steps[si]) {
				struct lynn_chat_msg d = { 0 };
				size_t k = off + steps[si] <= len ? steps[si] : len - off;
				if (off >= len)
					off = len;
				if (off == len)
					ck_assert_int_eq(lynn_chat_stream_finish(s, &d, &err), 0);
				else
					ck_assert_int_eq(lynn_chat_stream_feed(s, c->text + off, k, &d, &err), 0);
				/* what is emitted is always a prefix of the final answer */
				{
					size_t cl = all.content ? strlen(all.content) : 0, rl = all.reasoning_content ? strlen(all.reasoning_content) : 0;
					char *nc = malloc(cl + strlen(d.content) + 1), *nr = malloc(rl + strlen(d.reasoning_content) + 1);
					sprintf(nc, "%s%s", all.content ? all.content : "", d.content);
					sprintf(nr, "%s%s", all.reasoning_content ? all.reasoning_content : "", d.reasoning_content);
					ck_assert_msg(!strncmp(nc, c->content, strlen(nc)), "case %zu step %zu: emitted [%s]", i, steps[si], nc);
					ck_assert_msg(!strncmp(nr, c->reasoning, strlen(nr)), "case %zu step %zu: emitted [%s]", i, steps[si], nr);
					free(all.content);
					free(all.reasoning_content);
					all.content = nc;
					all.reasoning_content = nr;
				}
				for (size_t t = 0; t < d.n_tool_calls; t++) {
					all.tool_calls = realloc(all.tool_calls, (all.n_tool_calls + 1) * sizeof *all.tool_calls);
					all.tool_calls[all.n_tool_calls++] = d.tool_calls[t];
				}
				free(d.tool_calls);
				d.tool_calls = NULL;
				d.n_tool_calls = 0;
				lynn_chat_msg_release(&d);
				if (off == len)
					break;
			}
			check_msg(i, c, &all);
			lynn_chat_msg_release(&all);
			lynn_chat_stream_free(s);
		}
	}
}
END_TEST

/* Round trip through the oracle: the assistant turns Jinja2 rendered with Qwen3.5's template parse
 * back to the tool calls the conversation fixture holds. */
START_TEST(test_parse_roundtrip_qwen35)
{
	static const char *const convs[] = { "07-tool-call-string-number", "09-tool-call-object-array" };
	for (size_t ci = 0; ci < 2; ci++) {
		char p[300], *rendered, *msgs, *tools;
		cJSON *mj, *msg, *want_calls = NULL;
		const char *a, *b;
		struct lynn_chat_parse_opts o = { 0 };
		struct lynn_chat_msg m;
		size_t k = 0;
		snprintf(p, sizeof p, TDIR "/expected/Qwen3.5-4B/%s.txt", convs[ci]);
		rendered = tu_read(p, NULL);
		snprintf(p, sizeof p, TDIR "/conversations/%s.messages.json", convs[ci]);
		msgs = tu_read(p, NULL);
		snprintf(p, sizeof p, TDIR "/conversations/%s.tools.json", convs[ci]);
		tools = tu_read(p, NULL);
		ck_assert(rendered && msgs && tools);
		mj = cJSON_Parse(msgs);
		cJSON_ArrayForEach(msg, mj)
			if (cJSON_GetObjectItem(msg, "tool_calls"))
				want_calls = cJSON_GetObjectItem(msg, "tool_calls");
		ck_assert_ptr_nonnull(want_calls);
		/* the first assistant turn: between "<|im_start|>assistant\n" and "<|im_end|>" */
		a = strstr(rendered, "<|im_start|>assistant\n");
		ck_assert_ptr_nonnull(a);
		a += strlen("<|im_start|>assistant\n");
		b = strstr(a, "<|im_end|>");
		o.tools_json = tools;
		ck_assert_int_eq(lynn_chat_parse(a, (size_t)(b - a), &o, &m, NULL), 0);
		ck_assert_uint_eq(m.n_tool_calls, (size_t)cJSON_GetArraySize(want_calls));
		cJSON_ArrayForEach(msg, want_calls) {
			const cJSON *fn = cJSON_GetObjectItem(msg, "function");
			cJSON *got = cJSON_Parse(m.tool_calls[k].arguments);
			ck_assert_str_eq(m.tool_calls[k].name, cJSON_GetObjectItem(fn, "name")->valuestring);
			ck_assert_msg(cJSON_Compare(got, cJSON_GetObjectItem(fn, "arguments"), true), "%s: %s",
				      convs[ci], m.tool_calls[k].arguments);
			cJSON_Delete(got);
			k++;
		}
		lynn_chat_msg_release(&m);
		cJSON_Delete(mj);
		free(rendered);
		free(msgs);
		free(tools);
	}
}
END_TEST

/* ---- lynn template ---- */

#define CONV TDIR "/conversations/"
#define EXP TDIR "/expected/"

static void expect_cli_matches(const char *args, const char *fixture)
{
	struct tu_run r = tu_lynn(args, NULL, "TZ=UTC");
	size_t wl;
	char *want = tu_read(fixture, &wl);
	ck_assert_ptr_nonnull(want);
	ck_assert_msg(r.status == 0, "lynn %s: exit %d: %s", args, r.status, r.err);
	ck_assert_msg(strlen(r.out) == wl && !memcmp(r.out, want, wl), "lynn %s differs from %s", args, fixture);
	free(want);
	tu_run_free(&r);
}

START_TEST(test_cli_template)
{
	char *dir = tu_mkdtemp(), path[600], args[2000], *src, *cfg;
	size_t sl;
	cJSON *j, *list, *e;
	struct tu_run r;

	/* a .jinja file, tools, --think (Qwen3.5: enable_thinking=true renders like unset) */
	expect_cli_matches("template --model " TDIR "/Qwen3.5-4B.jinja --messages " CONV
			   "07-tool-call-string-number.messages.json --tools " CONV
			   "07-tool-call-string-number.tools.json --think",
			   EXP "Qwen3.5-4B/07-tool-call-string-number.txt");
	/* default enable_thinking=false (SPEC) = the fixture rendered with enable_thinking False */
	expect_cli_matches("template --model " TDIR "/Qwen3.5-4B.jinja --messages " CONV "04-thinking-off.messages.json",
			   EXP "Qwen3.5-4B/04-thinking-off.txt");
	expect_cli_matches("template --model " TDIR "/Qwen3.5-4B.jinja --messages " CONV
			   "16-no-generation-prompt.messages.json --no-generation-prompt --kwargs '{\"enable_thinking\": true}'",
			   EXP "Qwen3.5-4B/16-no-generation-prompt.txt");
	/* a model folder: chat_template.jinja */
	src = tu_read(TDIR "/Qwen-Qwen3-0.6B.jinja", &sl);
	snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
	tu_write(path, src, sl);
	snprintf(args, sizeof args, "template --model '%s' --messages " CONV "04-thinking-off.messages.json", dir);
	expect_cli_matches(args, EXP "Qwen-Qwen3-0.6B/04-thinking-off.txt");
	unlink(path);
	/* tokenizer_config.json with the template as a string, then as a named list */
	j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "chat_template", src);
	cJSON_AddStringToObject(j, "eos_token", "<|im_end|>");
	cfg = cJSON_Print(j);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	tu_write(path, cfg, strlen(cfg));
	free(cfg);
	expect_cli_matches(args, EXP "Qwen-Qwen3-0.6B/04-thinking-off.txt");
	cJSON_DeleteItemFromObject(j, "chat_template");
	list = cJSON_AddArrayToObject(j, "chat_template");
	e = cJSON_CreateObject();
	cJSON_AddStringToObject(e, "name", "tool_use");
	cJSON_AddStringToObject(e, "template", "{{ raise_exception('wrong one') }}");
	cJSON_AddItemToArray(list, e);
	e = cJSON_CreateObject();
	cJSON_AddStringToObject(e, "name", "default");
	cJSON_AddStringToObject(e, "template", src);
	cJSON_AddItemToArray(list, e);
	cfg = cJSON_Print(j);
	tu_write(path, cfg, strlen(cfg));
	free(cfg);
	expect_cli_matches(args, EXP "Qwen-Qwen3-0.6B/04-thinking-off.txt");
	cJSON_Delete(j);
	free(src);

	/* errors: exit 2 with a message naming the file/line */
	r = tu_lynn("template --model " TDIR "/Qwen3.5-4B.jinja --messages /nonexistent.json", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "/nonexistent.json"));
	tu_run_free(&r);
	r = tu_lynn("template --model " TDIR "/Qwen3.5-4B.jinja --messages -", "[]", NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "raise_exception: No messages provided."));
	tu_run_free(&r);
	r = tu_lynn("template --model " TDIR "/Qwen3.5-4B.jinja --messages -", "{\"role\": 1}", NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	r = tu_lynn("template --model " TDIR "/Qwen3.5-4B.jinja --messages - --kwargs '[1]'", "[]", NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "chat_template_kwargs"));
	tu_run_free(&r);
	snprintf(args, sizeof args, "template --model '%s/nothing' --messages -", dir);
	r = tu_lynn(args, "[]", NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	unlink(path);
	snprintf(args, sizeof args, "template --model '%s' --messages -", dir);
	r = tu_lynn(args, "[]", NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "no chat template"));
	tu_run_free(&r);
	r = tu_lynn("template --messages x.json", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	r = tu_lynn("template --help", NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "--messages"));
	tu_run_free(&r);
	rmdir(dir);
	free(dir);
}
END_TEST

/* lynn_chat_render_request keeps 3.0 a float (the body's own text is used, not cJSON's). */
START_TEST(test_render_request)
{
	struct lynn_err err = { 0 };
	const char *tpl = "{{ messages[0].content }}|{{ x }}|{{ add_generation_prompt }}|{{ enable_thinking }}|{{ tools }}";
	struct lynn_chat_template *t = lynn_chat_template_from_string("req", tpl, strlen(tpl), NULL, NULL, &err);
	const char *body = "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": 3.0}], "
			   "\"chat_template_kwargs\": {\"x\": 1.50, \"enable_thinking\": true}}";
	char *out = NULL;
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(lynn_chat_render_request(t, body, strlen(body), 0, &out, NULL, &err), 0);
	ck_assert_str_eq(out, "3.0|1.5|True|True|None");
	free(out);
	ck_assert_int_eq(lynn_chat_render_request(t, "{\"messages\": 5}", 15, 0, &out, NULL, &err), -LYNN_EFORMAT);
	ck_assert_int_eq(lynn_chat_render_request(t, "{bad", 4, 0, &out, NULL, &err), -LYNN_EFORMAT);
	ck_assert(lynn_chat_prompt_in_think("x<|im_start|>assistant\n<think>\n", 31));
	ck_assert(!lynn_chat_prompt_in_think("<think>\n\n</think>\n\n", 19));
	lynn_chat_template_free(t);
}
END_TEST

Suite *jinja_suite(void)
{
	Suite *s = suite_create("jinja");
	TCase *tc = tcase_create("oracle");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_templates_vs_jinja2);
	tcase_add_test(tc, test_semantic_cases);
	suite_add_tcase(s, tc);
	tc = tcase_create("bad-input");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_bad_templates);
	tcase_add_test(tc, test_deep_nesting);
	suite_add_tcase(s, tc);
	tc = tcase_create("parser");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_parse_table);
	tcase_add_test(tc, test_parse_stream);
	tcase_add_test(tc, test_parse_roundtrip_qwen35);
	suite_add_tcase(s, tc);
	tc = tcase_create("cli");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cli_template);
	tcase_add_test(tc, test_render_request);
	suite_add_tcase(s, tc);
	return s;
}
