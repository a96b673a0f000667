/* check_hub.c - src/hub and `lynn push`.
 *
 * The oracle is tests/tools/hub_emulator.js, an independent node
 * implementation of the two documented protocols (serving-and-hubs.md §3):
 * it checks every blob against its oid with node's crypto, checks commits
 * against the stored blobs and inline content, and rejects protocol
 * violations. The tests compare what the emulator stored with the local
 * files byte for byte. The emulator starts on 127.0.0.1 on a free port
 * inside each test. LYNN_HUB_BACKOFF_MS keeps retries short. */
#include <check.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hub/hub_internal.h"
#include "lynn/buf.h"
#include "lynn/hub.h"
#include "lynn/util.h"
#include "testutil.h"

#define TOKEN "tok-S3cr3t-9f8e7d6c5b4a"
/* Retry-After: 1 must delay the retry by about a second; timer slack */
#define RETRY_AFTER_MIN_MS 900

/* ===== emulator ===== */

struct emu {
	pid_t pid;
	char dir[256];
	char log[300];
	char base[64];
};

static void emu_start(struct emu *e)
{
	char *d = tu_mkdtemp(), pf[300];
	snprintf(e->dir, sizeof e->dir, "%s", d);
	free(d);
	snprintf(pf, sizeof pf, "%s/port", e->dir);
	snprintf(e->log, sizeof e->log, "%s/emu.log", e->dir);
	e->pid = fork();
	ck_assert_int_ge(e->pid, 0);
	if (e->pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 1);
		execlp("node", "node", "tests/tools/hub_emulator.js", "--port-file", pf, "--log", e->log,
		       "--token", TOKEN, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 200; i++) {
		char *p = tu_read(pf, NULL);
		if (p) {
			snprintf(e->base, sizeof e->base, "http://127.0.0.1:%d", atoi(p));
			free(p);
			return;
		}
		usleep(50000);
	}
	ck_abort_msg("hub emulator did not start (is node installed?)");
}

static void emu_stop(struct emu *e)
{
	char cmd[300];
	kill(e->pid, SIGTERM);
	waitpid(e->pid, NULL, 0);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
	ck_assert_int_eq(system(cmd), 0);
}

static size_t on_body(char *d, size_t s, size_t n, void *ud)
{
	lynn_buf_append(ud, d, s * n);
	return s * n;
}

/* GET (body NULL) or POST to the emulator; returns the body (caller frees). */
static char *emu_http(const struct emu *e, const char *path, const char *body, size_t *len,
		      long *status)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	char url[512];
	CURL *c = curl_easy_init();
	long st = 0;
	snprintf(url, sizeof url, "%s%s", e->base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
	curl_easy_cleanup(c);
	if (status)
		*status = st;
	if (len)
		*len = b.len;
	lynn_buf_putc(&b, '\0');
	return b.data;
}

static void emu_config(const struct emu *e, const char *json)
{
	free(emu_http(e, "/__emu/config", json, NULL, NULL));
}

static cJSON *emu_state(const struct emu *e)
{
	char *s = emu_http(e, "/__emu/state", NULL, NULL, NULL);
	cJSON *j = cJSON_Parse(s);
	free(s);
	ck_assert_ptr_nonnull(j);
	return j;
}

static int count_kind(const cJSON *st, const char *kind, long status)
{
	const cJSON *r;
	int n = 0;
	cJSON_ArrayForEach(r, cJSON_GetObjectItem(st, "requests"))
	{
		if (!strcmp(cJSON_GetObjectItem(r, "kind")->valuestring, kind) &&
		    (status < 0 || cJSON_GetObjectItem(r, "status")->valueint == status))
			n++;
	}
	return n;
}

static void assert_no_violations(const cJSON *st)
{
	const cJSON *v = cJSON_GetObjectItem(st, "violations");
	char *s = cJSON_PrintUnformatted(v);
	ck_assert_msg(cJSON_GetArraySize(v) == 0, "emulator saw protocol violations: %s", s);
	free(s);
}

static const cJSON *repo_of(const cJSON *st, const char *hub, const char *repo)
{
	const cJSON *r = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(st, hub), "repos"),
					     repo);
	ck_assert_msg(r != NULL, "repo %s missing on %s", repo, hub);
	return r;
}

/* The token may appear in the emulator's log only in the auth headers. */
static void assert_log_clean(const struct emu *e)
{
	char *log = tu_read(e->log, NULL), *line, *save = NULL;
	int seen = 0;
	if (!log)
		return;
	for (line = strtok_r(log, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!strstr(line, TOKEN))
			continue;
		seen++;
		ck_assert_msg(!strncmp(line, "H authorization: Bearer " TOKEN, 24 + strlen(TOKEN)) ||
				      !strncmp(line, "H cookie: m_session_id=", 23),
			      "token outside the auth headers: %.200s", line);
	}
	ck_assert_int_gt(seen, 0); /* it was sent where it belongs */
	free(log);
}

static void assert_no_token(const struct tu_run *r)
{
	ck_assert_msg(!strstr(r->out, TOKEN), "token on stdout");
	ck_assert_msg(!strstr(r->err, TOKEN), "token on stderr");
}

/* ===== the folder to upload ===== */

static void fill(char *buf, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		buf[i] = (char)(seed >> 16);
	}
}

static void put(const char *dir, const char *rel, size_t n, unsigned seed)
{
	char path[512], *buf = malloc(n + 1), *slash;
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	for (slash = strchr(path + strlen(dir) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		mkdir(path, 0755);
		*slash = '/';
	}
	fill(buf, n, seed);
	tu_write(path, buf, n);
	free(buf);
}

/* Uploaded: config.json, tokenizer_config.json, empty.txt, sub/notes.md,
 * model.safetensors, sub/big.bin (multipart on the HF emulator), w.gguf.
 * Default-excluded: x.bak, y.bak.1, t.tmp, .git/HEAD, .gitattributes,
 * __pycache__/m.pyc, a.pyc. */
static const char *const uploaded[] = { "config.json", "tokenizer_config.json", "empty.txt",
					"sub/notes.md", "model.safetensors", "sub/big.bin",
					"w.gguf" };
static const char *const excluded[] = { "x.bak", "y.bak.1", "t.tmp", ".git/HEAD",
					".gitattributes", "__pycache__/m.pyc", "a.pyc" };

static char *make_src(void)
{
	char *d = tu_mkdtemp();
	put(d, "config.json", 300, 1);
	put(d, "tokenizer_config.json", 2000, 2);
	put(d, "empty.txt", 0, 3);
	put(d, "sub/notes.md", 700, 4);
	put(d, "model.safetensors", 40000, 5);
	put(d, "sub/big.bin", 300000, 6);
	put(d, "w.gguf", 1200000, 7);
	for (size_t i = 0; i < LYNN_ARRAY_LEN(excluded); i++)
		put(d, excluded[i], 10, 100 + (unsigned)i);
	return d;
}

static void rm_rf(const char *d)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
	ck_assert_int_eq(system(cmd), 0);
}

/* Every uploaded file is stored byte for byte; no excluded one is. */
static void assert_arrived(const struct emu *e, const cJSON *st, const char *hub, const char *repo,
			   const char *src, const char *prefix)
{
	const cJSON *r = repo_of(st, hub, repo);
	const cJSON *files = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "revs"),
						 !strcmp(hub, "ms") ? "master" : "main");
	for (size_t i = 0; i < LYNN_ARRAY_LEN(uploaded); i++) {
		char path[512], q[600], rp[300];
		size_t ln = 0, rn = 0;
		char *local, *remote;
		snprintf(path, sizeof path, "%s/%s", src, uploaded[i]);
		snprintf(rp, sizeof rp, "%s%s", prefix, uploaded[i]);
		snprintf(q, sizeof q, "/__emu/file?hub=%s&repo=%s&path=%s", hub, repo, rp);
		local = tu_read(path, &ln);
		remote = emu_http(e, q, NULL, &rn, NULL);
		ck_assert_msg(cJSON_GetObjectItem(files, rp) != NULL, "%s missing in the repo", rp);
		ck_assert_uint_eq(ln, rn);
		ck_assert_msg(!memcmp(local, remote, ln), "%s differs", rp);
		free(local);
		free(remote);
	}
	for (size_t i = 0; i < LYNN_ARRAY_LEN(excluded); i++) {
		char rp[300];
		snprintf(rp, sizeof rp, "%s%s", prefix, excluded[i]);
		ck_assert_msg(cJSON_GetObjectItem(files, rp) == NULL, "%s was uploaded", rp);
	}
}

static int n_commits(const cJSON *st, const char *hub, const char *repo)
{
	return cJSON_GetArraySize(cJSON_GetObjectItem(repo_of(st, hub, repo), "commits"));
}

static struct tu_run push(const struct emu *e, const char *hub, const char *repo, const char *src,
			  const char *extra)
{
	char args[1024], env[256];
	snprintf(args, sizeof args, "-v push --hub %s --repo %s --src '%s' --endpoint %s %s", hub,
		 repo, src, e->base, extra ? extra : "");
	snprintf(env, sizeof env, "LYNN_HUB_BACKOFF_MS=10 %s=%s",
		 !strcmp(hub, "modelscope") ? "MS_TOKEN" : "HF_TOKEN", TOKEN);
	return tu_lynn(args, NULL, env);
}

/* ===== unit: selection, LFS rule, parsers ===== */

START_TEST(test_select)
{
	const char *inc[] = { "*.json" }, *exc[] = { "sub/*" };
	ck_assert(lynn_hub_path_selected("config.json", NULL, 0, NULL, 0));
	for (size_t i = 0; i < LYNN_ARRAY_LEN(excluded); i++)
		ck_assert_msg(!lynn_hub_path_selected(excluded[i], NULL, 0, NULL, 0), "%s",
			      excluded[i]);
	ck_assert(!lynn_hub_path_selected("a/__pycache__/b.py", NULL, 0, NULL, 0));
	ck_assert(lynn_hub_path_selected("a/b.json", inc, 1, NULL, 0));
	ck_assert(!lynn_hub_path_selected("a/b.md", inc, 1, NULL, 0));
	ck_assert(!lynn_hub_path_selected("sub/x.json", inc, 1, exc, 1));
	ck_assert(lynn_hub_ms_is_lfs("m.safetensors", 10));
	ck_assert(lynn_hub_ms_is_lfs("a.txt", (1u << 20) + 1));
	ck_assert(!lynn_hub_ms_is_lfs("a.txt", 1u << 20));
	ck_assert(!lynn_hub_ms_is_lfs("w.gguf", 1000)); /* not in MODEL_LFS_SUFFIX */
}
END_TEST

START_TEST(test_retry_after)
{
	ck_assert(hub_parse_retry_after("5") == 5);
	ck_assert(hub_parse_retry_after(" 12 \r\n") == 12);
	ck_assert(hub_parse_retry_after("abc") < 0);
	ck_assert(hub_parse_retry_after("") < 0);
	ck_assert(hub_parse_retry_after("-3") < 0);
	ck_assert(hub_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0); /* past */
}
END_TEST

static const char *const oid_a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

START_TEST(test_parse_good)
{
	struct hub_action a[2];
	const char *oids[2] = { oid_a, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" };
	uint64_t sizes[2] = { 10, 250 };
	const char *ms = "{\"Code\":200,\"Message\":\"ok\",\"Data\":{\"objects\":["
			 "{\"oid\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
			 "\"size\":10,\"actions\":{\"upload\":{\"href\":\"https://h/x\"}}},"
			 "{\"oid\":\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\","
			 "\"size\":250}]}}";
	const char *hf = "{\"objects\":[{\"oid\":\"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
			 "bbbbbbbbbb\",\"size\":250,\"actions\":{\"upload\":{\"href\":\"https://h/c\","
			 "\"header\":{\"chunk_size\":\"100\",\"00001\":\"https://p/1\",\"00002\":"
			 "\"https://p/2\",\"00003\":\"https://p/3\"}},\"verify\":{\"href\":\"https://h/v\","
			 "\"header\":{\"X\":\"y\"}}}}]}";
	const char *paths[2] = { "a.bin", "b.txt" };
	bool lfs[2], ign[2];
	char oid[2][65], id[96];
	struct hub_remote_file *rf;
	size_t nr;

	ck_assert_int_eq(hub_parse_lfs_batch(true, ms, strlen(ms), 2, oids, sizes, a, NULL), 0);
	ck_assert_int_eq(a[0].kind, HUB_XFER_BASIC);
	ck_assert_str_eq(a[0].href, "https://h/x");
	ck_assert_int_eq(a[1].kind, HUB_XFER_NONE);
	hub_action_release(&a[0]);
	hub_action_release(&a[1]);

	ck_assert_int_eq(hub_parse_lfs_batch(false, hf, strlen(hf), 1, oids + 1, sizes + 1, a, NULL),
			 0);
	ck_assert_int_eq(a[0].kind, HUB_XFER_MULTIPART);
	ck_assert_uint_eq(a[0].n_parts, 3);
	ck_assert_str_eq(a[0].parts[2], "https://p/3");
	ck_assert_uint_eq(a[0].n_headers, 0);
	ck_assert_str_eq(a[0].verify_href, "https://h/v");
	hub_action_release(&a[0]);

	{
		const char *pre = "{\"files\":[{\"path\":\"b.txt\",\"uploadMode\":\"regular\","
				  "\"shouldIgnore\":false,\"oid\":\"0123456789abcdef0123456789abcdef01234567\"},"
				  "{\"path\":\"a.bin\",\"uploadMode\":\"lfs\",\"shouldIgnore\":true}]}";
		ck_assert_int_eq(hub_hf_parse_preupload(pre, strlen(pre), 2, paths, lfs, ign, oid, NULL),
				 0);
		ck_assert(lfs[0] && ign[0] && !oid[0][0]);
		ck_assert(!lfs[1] && !ign[1]);
		ck_assert_str_eq(oid[1], "0123456789abcdef0123456789abcdef01234567");
	}
	{
		const char *c = "{\"Code\":200,\"Data\":{\"oid\":\"c0ffee\"}}";
		ck_assert_int_eq(hub_ms_parse_commit(c, strlen(c), id, sizeof id, NULL), 0);
		ck_assert_str_eq(id, "c0ffee");
		c = "{\"commitOid\":\"beef\",\"commitUrl\":\"u\"}";
		ck_assert_int_eq(hub_hf_parse_commit(c, strlen(c), id, sizeof id, NULL), 0);
		ck_assert_str_eq(id, "beef");
	}
	{
		const char *l = "{\"Code\":200,\"Data\":{\"Files\":[{\"Path\":\"d\",\"Type\":\"tree\"},"
				"{\"Path\":\"d/f\",\"Type\":\"blob\",\"Size\":3,\"Sha256\":\"AAAAAAAAAAAAAAAAAAAAAA"
				"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}}";
		ck_assert_int_eq(hub_ms_parse_files(l, strlen(l), &rf, &nr, NULL), 0);
		ck_assert_uint_eq(nr, 1);
		ck_assert_str_eq(rf[0].path, "d/f");
		ck_assert_str_eq(rf[0].sha256, oid_a);
		ck_assert_uint_eq(rf[0].size, 3);
		hub_remote_files_free(rf, nr);
	}
}
END_TEST

/* Broken replies: each is an error naming the field, never a crash. */
static const struct {
	int parser; /* 0 ms batch, 1 hf batch, 2 preupload, 3 ms commit, 4 hf commit, 5 ms files */
	const char *text;
	const char *needle; /* in the message */
} bad[] = {
	{ 0, "", "" },
	{ 0, "{\"Code\":200,", "" },
	{ 0, "[1,2]", "not a JSON object" },
	{ 0, "{\"Message\":\"x\"}", "Code" },
	{ 0, "{\"Code\":\"200\"}", "Code" },
	{ 0, "{\"Code\":10010205,\"Message\":\"quota\"}", "10010205" },
	{ 0, "{\"Code\":200,\"Data\":{}}", "objects" },
	{ 0, "{\"Code\":200,\"Data\":{\"objects\":[]}}", "no object for oid" },
	{ 0, "{\"Code\":200,\"Data\":{\"objects\":[{\"oid\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	     "aaaaaaaaaaaaaaaaaaaaaa\",\"actions\":{\"upload\":{\"href\":\"file:///etc/passwd\"}}}]}}",
	  "href" },
	{ 0, "{\"Code\":200,\"Data\":{\"objects\":[{\"oid\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	     "aaaaaaaaaaaaaaaaaaaaaa\",\"error\":{\"code\":422,\"message\":\"bad\"}}]}}",
	  "422" },
	{ 1, "{\"objects\":[{\"oid\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
	     "\"actions\":{\"upload\":{\"href\":\"https://h\",\"header\":{\"chunk_size\":\"0\"}}}}]}",
	  "chunk_size" },
	{ 1, "{\"objects\":[{\"oid\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
	     "\"actions\":{\"upload\":{\"href\":\"https://h\",\"header\":{\"chunk_size\":\"4\","
	     "\"00001\":\"https://p\",\"00002\":\"https://p\"}}}}]}",
	  "parts" },
	{ 1, "{\"objects\":[{\"oid\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
	     "\"actions\":{\"upload\":{\"href\":\"https://h\",\"header\":{\"chunk_size\":\"1\"}}}}]}",
	  "parts" },
	{ 1, "{\"objects\":[{\"oid\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
	     "\"actions\":{\"upload\":{\"href\":\"https://h\",\"header\":{\"X\":\"a\\r\\nB: c\"}}}}]}",
	  "header" },
	{ 1, "{\"objects\":[{\"oid\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
	     "\"actions\":[]}]}",
	  "actions" },
	{ 2, "{\"files\":{}}", "files" },
	{ 2, "{\"files\":[{\"path\":\"a.bin\",\"uploadMode\":\"xet\"}]}", "uploadMode" },
	{ 2, "{\"files\":[{\"path\":\"a.bin\",\"uploadMode\":\"lfs\",\"shouldIgnore\":\"no\"}]}",
	  "shouldIgnore" },
	{ 2, "{\"files\":[{\"path\":\"other\",\"uploadMode\":\"lfs\"}]}", "a.bin" },
	{ 3, "{\"Code\":200,\"Data\":{}}", "Data.oid" },
	{ 3, "{\"Code\":500,\"Message\":\"Could not update refs\"}", "Could not update refs" },
	{ 4, "{\"commitUrl\":\"x\"}", "commitOid" },
	{ 4, "{\"commitOid\":7}", "commitOid" },
	{ 5, "{\"Code\":200,\"Data\":{\"Files\":{}}}", "Files" },
	{ 5, "{\"Code\":200,\"Data\":{\"Files\":[{\"Type\":\"blob\"}]}}", "Path" },
	{ 5, "{\"Code\":401,\"Message\":\"login\"}", "401" },
};

START_TEST(test_parse_bad)
{
	for (size_t i = 0; i < LYNN_ARRAY_LEN(bad); i++) {
		struct lynn_err e = { 0 };
		struct hub_action a[1];
		const char *oids[1] = { oid_a }, *paths[1] = { "a.bin" };
		uint64_t sizes[1] = { 10 };
		bool lfs[1], ign[1];
		char oid[1][65], id[96];
		struct hub_remote_file *rf = NULL;
		size_t nr = 0;
		const char *t = bad[i].text;
		size_t n = strlen(t);
		int rc = 0;
		switch (bad[i].parser) {
		case 0: rc = hub_parse_lfs_batch(true, t, n, 1, oids, sizes, a, &e); break;
		case 1: rc = hub_parse_lfs_batch(false, t, n, 1, oids, sizes, a, &e); break;
		case 2: rc = hub_hf_parse_preupload(t, n, 1, paths, lfs, ign, oid, &e); break;
		case 3: rc = hub_ms_parse_commit(t, n, id, sizeof id, &e); break;
		case 4: rc = hub_hf_parse_commit(t, n, id, sizeof id, &e); break;
		case 5: rc = hub_ms_parse_files(t, n, &rf, &nr, &e); break;
		}
		ck_assert_msg(rc < 0, "case %zu (%s) accepted", i, t);
		ck_assert_msg(strstr(e.msg, bad[i].needle), "case %zu: message '%s' lacks '%s'", i,
			      e.msg, bad[i].needle);
		ck_assert_msg(!strncmp(e.msg, "hub: ", 5) || !strncmp(e.msg, "json", 4),
			      "case %zu: '%s'", i, e.msg);
	}
}
END_TEST

/* ===== CLI without a hub ===== */

START_TEST(test_usage_and_dry_run)
{
	char *src = make_src(), args[600];
	struct tu_run r;
	const char *noenv = "-u MS_TOKEN -u MODELSCOPE_API_TOKEN -u HF_TOKEN";

	snprintf(args, sizeof args, "push --repo me/x --src '%s'", src);
	r = tu_lynn(args, NULL, noenv);
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "MS_TOKEN") && strstr(r.err, "MODELSCOPE_API_TOKEN"), "%s", r.err);
	tu_run_free(&r);

	snprintf(args, sizeof args, "push --hub huggingface --repo me/x --src '%s'", src);
	r = tu_lynn(args, NULL, noenv);
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "HF_TOKEN"), "%s", r.err);
	tu_run_free(&r);

	/* dry run: no token, no network (the endpoint is a closed port) */
	snprintf(args, sizeof args,
		 "push --repo me/x --src '%s' --dry-run --endpoint http://127.0.0.1:9 "
		 "--path-in-repo reports/",
		 src);
	r = tu_lynn(args, NULL, noenv);
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(strstr(r.out, "lfs") && strstr(r.out, "reports/model.safetensors") &&
			      strstr(r.out, "reports/sub/big.bin") && strstr(r.out, "1200000"),
		      "%s", r.out);
	for (size_t i = 0; i < LYNN_ARRAY_LEN(excluded); i++)
		ck_assert_msg(!strstr(r.out, excluded[i]), "%s in the plan", excluded[i]);
	ck_assert_msg(strstr(r.out, "7 file(s)"), "%s", r.out);
	tu_run_free(&r);

	snprintf(args, sizeof args, "push --repo me/x --src '%s' --dry-run --include '*.json'", src);
	r = tu_lynn(args, NULL, noenv);
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(strstr(r.out, "2 file(s)") && !strstr(r.out, "notes.md"), "%s", r.out);
	tu_run_free(&r);

	static const char *const usage_bad[] = {
		"push --src /tmp --repo a/b --hub github",
		"push --src /tmp --repo a/b --bogus",
		"push --src /tmp",
		"push --repo a/b",
		"push --repo a/b --src /nonexistent/dir --dry-run",
		"push --repo a/b --src /tmp --threads 0",
	};
	for (size_t i = 0; i < LYNN_ARRAY_LEN(usage_bad); i++) {
		r = tu_lynn(usage_bad[i], NULL, noenv);
		ck_assert_msg(r.status == 2, "%s: exit %d", usage_bad[i], r.status);
		tu_run_free(&r);
	}
	/* a bad repo id is bad input */
	snprintf(args, sizeof args, "push --repo 'no-slash' --src '%s'", src);
	r = tu_lynn(args, NULL, "MS_TOKEN=" TOKEN);
	ck_assert_int_eq(r.status, 2);
	assert_no_token(&r);
	tu_run_free(&r);
	rm_rf(src);
	free(src);
}
END_TEST

START_TEST(test_network_failure)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	char *src = make_src(), args[600];
	struct tu_run r;
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	close(fd); /* nothing listens there now */
	snprintf(args, sizeof args, "push --repo me/x --src '%s' --endpoint http://127.0.0.1:%d", src,
		 ntohs(sa.sin_port));
	r = tu_lynn(args, NULL, "LYNN_HUB_BACKOFF_MS=1 MS_TOKEN=" TOKEN);
	ck_assert_int_eq(r.status, 3);
	ck_assert_msg(strstr(r.err, "after 5 tries"), "%s", r.err);
	assert_no_token(&r);
	tu_run_free(&r);
	rm_rf(src);
	free(src);
}
END_TEST

/* ===== against the emulator ===== */

static void complete_and_rerun(const char *hub, const char *key)
{
	struct emu e;
	char *src = make_src();
	struct tu_run r;
	cJSON *st;
	int puts1;

	emu_start(&e);
	r = push(&e, hub, "me/model", src, "--private --message 'first upload'");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	assert_no_token(&r);
	tu_run_free(&r);
	st = emu_state(&e);
	assert_no_violations(st);
	assert_arrived(&e, st, key, "me/model", src, "");
	ck_assert_int_eq(n_commits(st, key, "me/model"), 1);
	ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(
						     repo_of(st, key, "me/model"), "commits"), 0),
					     "message")->valuestring,
			 "first upload");
	if (!strcmp(key, "ms"))
		ck_assert_int_eq(cJSON_GetObjectItem(repo_of(st, key, "me/model"), "visibility")->valueint, 1);
	else
		ck_assert_str_eq(cJSON_GetObjectItem(repo_of(st, key, "me/model"), "visibility")->valuestring,
				 "private");
	puts1 = count_kind(st, "blob_put", -1);
	ck_assert_int_gt(puts1, 0);
	cJSON_Delete(st);

	/* a second run uploads nothing and commits nothing */
	r = push(&e, hub, "me/model", src, NULL);
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_msg(strstr(r.out, "0 blob(s) uploaded") && strstr(r.out, "0 commit(s)"), "%s", r.out);
	tu_run_free(&r);
	st = emu_state(&e);
	ck_assert_int_eq(count_kind(st, "blob_put", -1), puts1);
	ck_assert_int_eq(n_commits(st, key, "me/model"), 1);
	assert_no_violations(st);
	cJSON_Delete(st);

	/* into a folder of an existing repo, only the matching files */
	r = push(&e, hub, "me/model", src, "--path-in-repo reports/ --include '*.json' --include 'sub/*'");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	tu_run_free(&r);
	st = emu_state(&e);
	{
		const cJSON *files = cJSON_GetObjectItem(
			cJSON_GetObjectItem(repo_of(st, key, "me/model"), "revs"),
			!strcmp(key, "ms") ? "master" : "main");
		ck_assert_ptr_nonnull(cJSON_GetObjectItem(files, "reports/config.json"));
		ck_assert_ptr_nonnull(cJSON_GetObjectItem(files, "reports/sub/big.bin"));
		ck_assert_ptr_null(cJSON_GetObjectItem(files, "reports/w.gguf"));
	}
	/* sub/big.bin's blob was already stored: not sent again */
	ck_assert_int_eq(count_kind(st, "blob_put", -1), puts1);
	ck_assert_int_eq(n_commits(st, key, "me/model"), 2);
	assert_no_violations(st);
	cJSON_Delete(st);

	/* another branch */
	r = push(&e, hub, "me/model", src, "--revision dev --include config.json --path-in-repo d/");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	tu_run_free(&r);
	st = emu_state(&e);
	{
		const cJSON *dev = cJSON_GetObjectItem(
			cJSON_GetObjectItem(repo_of(st, key, "me/model"), "revs"), "dev");
		const cJSON *c = cJSON_GetArrayItem(
			cJSON_GetObjectItem(repo_of(st, key, "me/model"), "commits"), 2);
		ck_assert_ptr_nonnull(cJSON_GetObjectItem(dev, "d/config.json"));
		ck_assert_ptr_nonnull(cJSON_GetObjectItem(dev, "config.json")); /* from the base */
		ck_assert_str_eq(cJSON_GetObjectItem(c, "rev")->valuestring, "dev");
	}
	assert_no_violations(st);
	cJSON_Delete(st);

	/* nothing selected: bad input, nothing sent */
	r = push(&e, hub, "me/model", src, "--include '*.nothing'");
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "no files"), "%s", r.err);
	tu_run_free(&r);
	assert_log_clean(&e);
	emu_stop(&e);
	rm_rf(src);
	free(src);
}

START_TEST(test_ms_complete)
{
	complete_and_rerun("modelscope", "ms");
}
END_TEST

START_TEST(test_hf_complete)
{
	complete_and_rerun("huggingface", "hf");
}
END_TEST

/* Kill lynn after N blobs (the emulator stops answering blob PUTs), rerun:
 * only the missing blobs go up and one complete commit results. */
static void kill_and_resume(const char *hub, const char *key)
{
	enum { N_FILES = 12, N_BEFORE = 5 };
	struct emu e;
	char *src = tu_mkdtemp(), out[400], cmd[1200];
	const cJSON *r;
	struct tu_run run;
	cJSON *st;
	pid_t pid;
	int status, puts_ok1, commits;
	const char *bin = getenv("LYNN_BIN") ? getenv("LYNN_BIN") : "./lynn";

	for (int i = 0; i < N_FILES; i++) {
		char name[64];
		snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, N_FILES);
		put(src, name, 20000 + (size_t)i, 200 + (unsigned)i);
	}
	put(src, "config.json", 100, 300);
	emu_start(&e);
	emu_config(&e, "{\"hang_blob_puts_after\":5}");
	snprintf(out, sizeof out, "%s/run1", e.dir);
	snprintf(cmd, sizeof cmd,
		 "exec env LYNN_HUB_BACKOFF_MS=10 %s=%s '%s' push --hub %s --repo me/big --src '%s' "
		 "--endpoint %s --threads 3 >'%s.out' 2>'%s.err'",
		 !strcmp(hub, "modelscope") ? "MS_TOKEN" : "HF_TOKEN", TOKEN, bin, hub, src, e.base,
		 out, out);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 400; i++) {
		st = emu_state(&e);
		int hanging = cJSON_GetObjectItem(st, "hanging")->valueint;
		cJSON_Delete(st);
		if (hanging > 0)
			break;
		usleep(25000);
	}
	usleep(100000);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	ck_assert(WIFSIGNALED(status));
	st = emu_state(&e);
	ck_assert_int_eq(cJSON_GetObjectItem(st, "blob_stores")->valueint, N_BEFORE);
	ck_assert_int_eq(n_commits(st, key, "me/big"), 0);
	puts_ok1 = count_kind(st, "blob_put", 200);
	ck_assert_int_eq(puts_ok1, N_BEFORE);
	cJSON_Delete(st);

	emu_config(&e, "{\"hang_blob_puts_after\":-1}");
	run = push(&e, hub, "me/big", src, "--threads 3");
	ck_assert_msg(run.status == 0, "exit %d: %s", run.status, run.err);
	assert_no_token(&run);
	tu_run_free(&run);
	st = emu_state(&e);
	assert_no_violations(st);
	/* exactly the missing blobs, each once */
	ck_assert_int_eq(count_kind(st, "blob_put", 200), N_FILES);
	ck_assert_int_eq(cJSON_GetObjectItem(st, "blob_stores")->valueint, N_FILES);
	commits = n_commits(st, key, "me/big");
	ck_assert_int_eq(commits, 1);
	r = cJSON_GetArrayItem(cJSON_GetObjectItem(repo_of(st, key, "me/big"), "commits"), 0);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "paths")),
			 N_FILES + 1 + !strcmp(key, "ms") /* configuration.json */);
	for (int i = 0; i < N_FILES; i++) {
		char name[64], path[600], q[300];
		size_t ln, rn;
		snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, N_FILES);
		snprintf(path, sizeof path, "%s/%s", src, name);
		snprintf(q, sizeof q, "/__emu/file?hub=%s&repo=me/big&path=%s", key, name);
		char *l = tu_read(path, &ln), *rm = emu_http(&e, q, NULL, &rn, NULL);
		ck_assert_uint_eq(ln, rn);
		ck_assert(!memcmp(l, rm, ln));
		free(l);
		free(rm);
	}
	cJSON_Delete(st);
	assert_log_clean(&e);
	emu_stop(&e);
	rm_rf(src);
	free(src);
}

START_TEST(test_ms_kill_resume)
{
	kill_and_resume("modelscope", "ms");
}
END_TEST

START_TEST(test_hf_kill_resume)
{
	kill_and_resume("huggingface", "hf");
}
END_TEST

/* 500, 503 and 429 (Retry-After: 1) are retried; Retry-After is honoured. */
static void retries(const char *hub, const char *key, const char *batch_re, const char *commit_re)
{
	struct emu e;
	char *src = make_src(), cfg[800];
	struct tu_run r;
	cJSON *st;
	const cJSON *q;
	double t429 = 0, tnext = 0;

	emu_start(&e);
	snprintf(cfg, sizeof cfg,
		 "{\"faults\":[{\"path\":\"%s\",\"status\":500,\"times\":1},"
		 "{\"method\":\"PUT\",\"path\":\"blob|part\",\"status\":503,\"times\":2},"
		 "{\"path\":\"%s\",\"status\":429,\"retry_after\":1,\"times\":1}]}",
		 batch_re, commit_re);
	emu_config(&e, cfg);
	r = push(&e, hub, "me/retry", src, NULL);
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_msg(strstr(r.err, "retrying"), "%s", r.err);
	assert_no_token(&r);
	tu_run_free(&r);
	st = emu_state(&e);
	assert_no_violations(st);
	assert_arrived(&e, st, key, "me/retry", src, "");
	ck_assert_int_eq(n_commits(st, key, "me/retry"), 1);
	ck_assert_int_eq(count_kind(st, "lfs_batch", 500), 1);
	ck_assert_int_eq(count_kind(st, "blob_put", 503), 2);
	ck_assert_int_eq(count_kind(st, "commit", 429), 1);
	cJSON_ArrayForEach(q, cJSON_GetObjectItem(st, "requests"))
	{
		if (!strcmp(cJSON_GetObjectItem(q, "kind")->valuestring, "commit")) {
			if (cJSON_GetObjectItem(q, "status")->valueint == 429)
				t429 = cJSON_GetObjectItem(q, "t")->valuedouble;
			else if (t429 > 0 && tnext == 0)
				tnext = cJSON_GetObjectItem(q, "t")->valuedouble;
		}
	}
	ck_assert_msg(tnext - t429 >= RETRY_AFTER_MIN_MS, "retried %.0f ms after the 429",
		      tnext - t429);
	cJSON_Delete(st);
	assert_log_clean(&e);
	emu_stop(&e);
	rm_rf(src);
	free(src);
}

START_TEST(test_ms_retries)
{
	retries("modelscope", "ms", "lfs/objects/batch", "/commit/");
}
END_TEST

START_TEST(test_hf_retries)
{
	retries("huggingface", "hf", "lfs/objects/batch", "/commit/");
}
END_TEST

/* The hub applies the commit but the reply is lost (500): lynn reads the
 * state back and does not commit twice. */
static void lost_commit_reply(const char *hub, const char *key, const char *fault)
{
	struct emu e;
	char *src = make_src();
	struct tu_run r;
	cJSON *st;

	emu_start(&e);
	emu_config(&e, fault);
	r = push(&e, hub, "me/lost", src, NULL);
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	assert_no_token(&r);
	tu_run_free(&r);
	st = emu_state(&e);
	assert_no_violations(st);
	assert_arrived(&e, st, key, "me/lost", src, "");
	ck_assert_int_eq(n_commits(st, key, "me/lost"), 1);
	cJSON_Delete(st);
	emu_stop(&e);
	rm_rf(src);
	free(src);
}

START_TEST(test_lost_commit_reply)
{
	lost_commit_reply("modelscope", "ms",
			  "{\"faults\":[{\"path\":\"/commit/\",\"status\":500,\"times\":1,\"apply\":true}]}");
	lost_commit_reply("huggingface", "hf",
			  "{\"faults\":[{\"path\":\"/commit/\",\"status\":502,\"times\":1,\"apply\":true}]}");
	/* HTTP 200 carrying Code 500 "try again", not applied: retried once */
	lost_commit_reply("modelscope", "ms",
			  "{\"faults\":[{\"path\":\"/commit/\",\"ms_code\":500,\"message\":\"Could not "
			  "update refs, try again\",\"times\":1}]}");
}
END_TEST

START_TEST(test_ms_code_on_200)
{
	struct emu e;
	char *src = make_src();
	struct tu_run r;
	cJSON *st;

	emu_start(&e);
	emu_config(&e, "{\"faults\":[{\"path\":\"lfs/objects/batch\",\"ms_code\":10010101,"
		       "\"message\":\"quota exceeded\",\"times\":9}]}");
	r = push(&e, "modelscope", "me/code", src, NULL);
	ck_assert_int_eq(r.status, 3);
	ck_assert_msg(strstr(r.err, "10010101") && strstr(r.err, "quota exceeded"), "%s", r.err);
	tu_run_free(&r);
	st = emu_state(&e);
	ck_assert_int_eq(count_kind(st, "blob_put", -1), 0);
	ck_assert_int_eq(count_kind(st, "commit", -1), 0);
	cJSON_Delete(st);
	emu_stop(&e);
	rm_rf(src);
	free(src);
}
END_TEST

START_TEST(test_unauthorized)
{
	struct emu e;
	char *src = make_src(), args[800];
	struct tu_run r;
	const char *bad_tok = "wrong-token-0123456789";

	emu_start(&e);
	snprintf(args, sizeof args, "push --repo me/x --src '%s' --endpoint %s", src, e.base);
	r = tu_lynn(args, NULL, "LYNN_HUB_BACKOFF_MS=10 MODELSCOPE_API_TOKEN=wrong-token-0123456789");
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "401") && strstr(r.err, "refused the token") &&
			      strstr(r.err, "MODELSCOPE_API_TOKEN"),
		      "%s", r.err);
	ck_assert(!strstr(r.err, bad_tok) && !strstr(r.out, bad_tok));
	tu_run_free(&r);
	snprintf(args, sizeof args, "-v push --hub huggingface --repo me/x --src '%s' --endpoint %s", src,
		 e.base);
	r = tu_lynn(args, NULL, "LYNN_HUB_BACKOFF_MS=10 HF_TOKEN=wrong-token-0123456789");
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "401") && strstr(r.err, "HF_TOKEN"), "%s", r.err);
	ck_assert(!strstr(r.err, bad_tok) && !strstr(r.out, bad_tok));
	tu_run_free(&r);
	/* a hub that echoes the token in an error body: scrubbed */
	emu_config(&e, "{\"faults\":[{\"path\":\"preupload\",\"status\":400,\"times\":1,"
		       "\"body\":{\"error\":\"bad request from Bearer " TOKEN "\"}}]}");
	r = push(&e, "huggingface", "me/x", src, NULL);
	ck_assert_int_eq(r.status, 3);
	ck_assert_msg(strstr(r.err, "HTTP 400") && strstr(r.err, "Bearer ***"), "%s", r.err);
	assert_no_token(&r);
	tu_run_free(&r);
	emu_stop(&e);
	rm_rf(src);
	free(src);
}
END_TEST

/* More files than one commit may carry: several commits, each within the
 * hub's limit (the emulator refuses > 256 ModelScope actions / > 100 HF files). */
static void batches(const char *hub, const char *key, int n_files, int want_commits)
{
	struct emu e;
	char *src = tu_mkdtemp();
	struct tu_run r;
	cJSON *st;

	for (int i = 0; i < n_files; i++) {
		char name[64];
		snprintf(name, sizeof name, "shard/part-%04d.txt", i);
		put(src, name, (size_t)(i % 7), 500 + (unsigned)i);
	}
	emu_start(&e);
	r = push(&e, hub, "me/many", src, NULL);
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	tu_run_free(&r);
	st = emu_state(&e);
	assert_no_violations(st);
	ck_assert_int_eq(n_commits(st, key, "me/many"), want_commits);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(
				 cJSON_GetObjectItem(repo_of(st, key, "me/many"), "revs"),
				 !strcmp(key, "ms") ? "master" : "main")),
			 n_files + !strcmp(key, "ms"));
	cJSON_Delete(st);
	emu_stop(&e);
	rm_rf(src);
	free(src);
}

START_TEST(test_commit_batches)
{
	batches("modelscope", "ms", 300, 2); /* 255 + configuration.json, then 45 */
	batches("huggingface", "hf", 230, 3);
}
END_TEST

Suite *hub_suite(void)
{
	Suite *s = suite_create("hub");
	TCase *u = tcase_create("unit"), *c = tcase_create("cli"), *h = tcase_create("emulator");
	tcase_add_test(u, test_select);
	tcase_add_test(u, test_retry_after);
	tcase_add_test(u, test_parse_good);
	tcase_add_test(u, test_parse_bad);
	tcase_add_test(c, test_usage_and_dry_run);
	tcase_add_test(c, test_network_failure);
	tcase_set_timeout(c, 60);
	tcase_add_test(h, test_ms_complete);
	tcase_add_test(h, test_hf_complete);
	tcase_add_test(h, test_ms_kill_resume);
	tcase_add_test(h, test_hf_kill_resume);
	tcase_add_test(h, test_ms_retries);
	tcase_add_test(h, test_hf_retries);
	tcase_add_test(h, test_lost_commit_reply);
	tcase_add_test(h, test_ms_code_on_200);
	tcase_add_test(h, test_unauthorized);
	tcase_add_test(h, test_commit_batches);
	tcase_set_timeout(h, 120);
	suite_add_tcase(s, u);
	suite_add_tcase(s, c);
	suite_add_tcase(s, h);
	return s;
}
