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

Suite *jinja_suite(void)
{
	Suite *s = suite_create("jinja");
	TCase *tc = tcase_create("oracle");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_templates_vs_jinja2);
	suite_add_tcase(s, tc);
	return s;
}
