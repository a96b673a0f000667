/* check_core.c - src/core: errors, buffers, JSON, atomic writes, sha256,
 * progress, thread pool, and the CLI shell (help, version, dispatch). */
#include <check.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lynn/buf.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/log.h"
#include "lynn/pool.h"
#include "lynn/progress.h"
#include "lynn/sha256.h"
#include "lynn/util.h"
#include "testutil.h"

START_TEST(test_errf)
{
	struct lynn_err e;
	int rc = lynn_errf(&e, -LYNN_EFORMAT, "st: '%s': bad %d", "x.safetensors", 7);
	ck_assert_int_eq(rc, -LYNN_EFORMAT);
	ck_assert_int_eq(e.code, -LYNN_EFORMAT);
	ck_assert_str_eq(e.msg, "st: 'x.safetensors': bad 7");
	ck_assert_int_eq(lynn_errf(NULL, -LYNN_EIO, "ignored"), -LYNN_EIO);
	ck_assert_int_eq(lynn_err_exit_status(-LYNN_EFORMAT), 2);
	ck_assert_int_eq(lynn_err_exit_status(-LYNN_EIO), 3);
	ck_assert_int_eq(lynn_err_exit_status(-LYNN_ENOTFOUND), 2);
}
END_TEST

START_TEST(test_buf)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(lynn_buf_printf(&b, "%d,", i), 0);
	ck_assert(strncmp(b.data, "0,1,2,", 6) == 0);
	ck_assert_uint_eq(b.len, strlen(b.data));
	lynn_buf_reset(&b);
	ck_assert_str_eq(b.data, "");
	lynn_buf_release(&b);
	ck_assert_ptr_null(b.data);
	/* detaching an empty buffer gives "" */
	char *e = lynn_buf_detach(&b);
	ck_assert_str_eq(e, "");
	free(e);
}
END_TEST

START_TEST(test_parse_size_ids)
{
	uint64_t v;
	int32_t *ids;
	size_t n;
	ck_assert_int_eq(lynn_parse_size("5GB", &v, NULL), 0);
	ck_assert_uint_eq(v, 5000000000ull);
	ck_assert_int_eq(lynn_parse_size("2MiB", &v, NULL), 0);
	ck_assert_uint_eq(v, 2097152ull);
	ck_assert_int_eq(lynn_parse_size("1.5 kB", &v, NULL), 0);
	ck_assert_uint_eq(v, 1500);
	ck_assert_int_lt(lynn_parse_size("5 parsecs", &v, NULL), 0);
	ck_assert_int_lt(lynn_parse_size("-1", &v, NULL), 0);
	ck_assert_int_eq(lynn_parse_ids("1 2,3  40", &ids, &n, NULL), 0);
	ck_assert_uint_eq(n, 4);
	ck_assert_int_eq(ids[3], 40);
	free(ids);
	ck_assert_int_lt(lynn_parse_ids("1 x", &ids, &n, NULL), 0);
	ck_assert_int_lt(lynn_parse_ids("99999999999", &ids, &n, NULL), 0);
	ck_assert_int_eq(lynn_edit_distance("evel", "eval"), 1);
}
END_TEST

START_TEST(test_json_fields)
{
	struct lynn_err e;
	const char *txt = "{\"a\": 3, \"b\": 1.5, \"c\": \"x\", \"d\": true}";
	cJSON *j = lynn_json_parse("'t.json'", txt, strlen(txt), &e);
	int64_t i = 0;
	double d = 0;
	const char *s;
	bool bo = false;
	ck_assert_ptr_nonnull(j);
	ck_assert_int_eq(lynn_json_get_int(j, "a", true, &i, "'t.json'", &e), 0);
	ck_assert_int_eq(i, 3);
	ck_assert_int_eq(lynn_json_get_int(j, "b", true, &i, "'t.json'", &e), -LYNN_EFORMAT);
	ck_assert_ptr_nonnull(strstr(e.msg, "'b'"));
	ck_assert_int_eq(lynn_json_get_double(j, "b", true, &d, "'t.json'", &e), 0);
	ck_assert_double_eq(d, 1.5);
	ck_assert_int_eq(lynn_json_get_str(j, "c", true, &s, "'t.json'", &e), 0);
	ck_assert_str_eq(s, "x");
	ck_assert_int_eq(lynn_json_get_bool(j, "d", true, &bo, "'t.json'", &e), 0);
	ck_assert(bo);
	ck_assert_int_eq(lynn_json_get_int(j, "zz", true, &i, "'t.json'", &e), -LYNN_ENOTFOUND);
	ck_assert_ptr_nonnull(strstr(e.msg, "t.json"));
	ck_assert_int_eq(lynn_json_get_int(j, "zz", false, &i, "'t.json'", &e), 0);
	cJSON_Delete(j);
	ck_assert_ptr_null(lynn_json_parse("'bad.json'", "{\"a\": ", 6, &e));
	ck_assert_int_eq(e.code, -LYNN_EFORMAT);
	ck_assert_ptr_nonnull(strstr(e.msg, "bad.json"));
}
END_TEST

START_TEST(test_json_report)
{
	cJSON *r = lynn_json_report_new("lynn-test-v1");
	char *s = lynn_json_print_pretty(r);
	/* schema_version first, created_at is ISO 8601 with an offset */
	ck_assert(strncmp(s, "{\n  \"schema_version\": \"lynn-test-v1\",\n  \"created_at\": \"", 54) == 0);
	ck_assert_ptr_nonnull(strstr(s, "T"));
	ck_assert(strchr(s + 60, '+') || strchr(s + 60, '-'));
	free(s);
	cJSON_Delete(r);
}
END_TEST

START_TEST(test_atomic_write)
{
	char *dir = tu_mkdtemp(), *path = lynn_path_join(dir, "f.txt"), *got;
	struct lynn_afile af;
	struct lynn_err e;
	ck_assert_int_eq(lynn_write_atomic(path, "old", 3, &e), 0);
	/* an aborted write leaves the old file */
	ck_assert_int_eq(lynn_afile_open(&af, path, &e), 0);
	fputs("new but unfinished", af.f);
	lynn_afile_abort(&af);
	got = tu_read(path, NULL);
	ck_assert_str_eq(got, "old");
	free(got);
	/* a process killed mid-write leaves the old file */
	pid_t pid = fork();
	if (pid == 0) {
		struct lynn_afile a2;
		if (lynn_afile_open(&a2, path, NULL))
			_exit(1);
		for (;;)
			fputs("partial partial partial\n", a2.f);
	}
	usleep(50000);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	got = tu_read(path, NULL);
	ck_assert_str_eq(got, "old");
	free(got);
	/* a committed write replaces it */
	ck_assert_int_eq(lynn_write_atomic(path, "new", 3, &e), 0);
	got = tu_read(path, NULL);
	ck_assert_str_eq(got, "new");
	free(got);
	/* a write into a missing folder fails cleanly */
	ck_assert_int_eq(lynn_write_atomic("/nonexistent-dir/x", "a", 1, &e), -LYNN_EIO);
	ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent-dir/x"));
	free(path);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_tmpdir)
{
	char *dir = tu_mkdtemp(), *out = lynn_path_join(dir, "out"), *f;
	struct lynn_tmpdir td;
	struct lynn_err e;
	ck_assert_int_eq(lynn_tmpdir_create(&td, out, false, &e), 0);
	f = lynn_path_join(td.path, "a.txt");
	tu_write(f, "x", 1);
	free(f);
	ck_assert(!lynn_dir_exists(out)); /* nothing under the final name yet */
	ck_assert_int_eq(lynn_tmpdir_commit(&td, &e), 0);
	ck_assert(lynn_dir_exists(out));
	/* a non-empty output folder is refused without force */
	ck_assert_int_eq(lynn_tmpdir_create(&td, out, false, &e), -LYNN_EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "--force"));
	ck_assert_int_eq(lynn_tmpdir_create(&td, out, true, &e), 0);
	lynn_tmpdir_abort(&td);
	ck_assert(lynn_dir_nonempty(out)); /* abort keeps what the user had */
	free(out);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_mmap_read)
{
	char *dir = tu_mkdtemp(), *p = lynn_path_join(dir, "m.bin"), *txt;
	struct lynn_map m;
	struct lynn_err e;
	size_t n;
	tu_write(p, "hello", 5);
	ck_assert_int_eq(lynn_map_open(&m, p, &e), 0);
	ck_assert_uint_eq(m.size, 5);
	ck_assert(memcmp(m.data, "hello", 5) == 0);
	lynn_map_close(&m);
	ck_assert_int_eq(lynn_file_read(p, 4, &txt, &n, &e), -LYNN_EFORMAT);
	ck_assert_int_eq(lynn_file_read(p, 5, &txt, &n, &e), 0);
	ck_assert_str_eq(txt, "hello");
	free(txt);
	ck_assert_int_eq(lynn_map_open(&m, "/no/such/file", &e), -LYNN_ENOTFOUND);
	free(p);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

static int n_progress_calls;
static void count_progress(void *ud, uint64_t done, uint64_t total)
{
	(void)ud;
	ck_assert_uint_le(done, total);
	n_progress_calls++;
}

/* sha256 of a 100 MB file equals coreutils sha256sum */
START_TEST(test_sha256_file)
{
	char *dir = tu_mkdtemp(), *p = lynn_path_join(dir, "big.bin"), *cmd, hex[65];
	uint8_t dg[32];
	struct lynn_err e;
	FILE *f = fopen(p, "wb");
	uint8_t *blk = malloc(1 << 20);
	uint32_t x = 12345;
	for (int k = 0; k < 100; k++) {
		for (int i = 0; i < (1 << 20); i++) {
			x = x * 1664525u + 1013904223u;
			blk[i] = (uint8_t)(x >> 24);
		}
		fwrite(blk, 1, 1 << 20, f);
	}
	fclose(f);
	free(blk);
	n_progress_calls = 0;
	ck_assert_int_eq(lynn_sha256_file(p, dg, count_progress, NULL, &e), 0);
	ck_assert_int_eq(n_progress_calls, 100);
	lynn_sha256_hex(dg, hex);
	ck_assert(asprintf(&cmd, "sha256sum '%s' | cut -c1-64", p) > 0);
	struct tu_run r = tu_sh(cmd, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert(strncmp(r.out, hex, 64) == 0);
	tu_run_free(&r);
	free(cmd);
	/* the empty string's digest */
	struct lynn_sha256 h;
	ck_assert_int_eq(lynn_sha256_init(&h, &e), 0);
	ck_assert_int_eq(lynn_sha256_final(&h, dg, &e), 0);
	lynn_sha256_hex(dg, hex);
	ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	free(p);
	lynn_rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(test_progress_not_a_tty)
{
	struct lynn_progress_bar bar;
	char line[160];
	FILE *f = tmpfile();
	lynn_progress_bar_init(&bar, "hash", true, f, true);
	ck_assert(!bar.enabled); /* a file is not a terminal */
	lynn_progress_bar_update(&bar, 50, 100);
	lynn_progress_bar_finish(&bar);
	ck_assert_int_eq(ftell(f), 0); /* nothing drawn */
	fclose(f);
	bar.t_start = 0;
	bar.done = 500000000;
	bar.total = 1000000000;
	lynn_progress_format(&bar, 10.0, line, sizeof line);
	ck_assert_ptr_nonnull(strstr(line, " 50.0%"));
	ck_assert_ptr_nonnull(strstr(line, "50.0 MB/s"));
	ck_assert_ptr_nonnull(strstr(line, "ETA 0:00:10"));
}
END_TEST

static void pool_add(void *ud, int64_t i, int tid)
{
	atomic_llong *sum = ud;
	(void)tid;
	atomic_fetch_add(sum, i);
}

START_TEST(test_pool)
{
	struct lynn_pool *p = lynn_pool_create(4, NULL);
	atomic_llong sum;
	ck_assert_ptr_nonnull(p);
	for (int round = 0; round < 50; round++) {
		atomic_store(&sum, 0);
		lynn_pool_run(p, 10000, pool_add, &sum);
		ck_assert_int_eq(atomic_load(&sum), 10000LL * 9999 / 2);
	}
	lynn_pool_free(p);
	atomic_store(&sum, 0);
	lynn_pool_run(NULL, 10, pool_add, &sum);
	ck_assert_int_eq(atomic_load(&sum), 45);
}
END_TEST

static int log_seen;
static void capture_log(void *ud, enum lynn_log_level lv, const char *msg)
{
	(void)ud;
	if (lv == LYNN_LOG_WARN && !strcmp(msg, "w 1"))
		log_seen++;
}

START_TEST(test_log_sink)
{
	log_seen = 0;
	lynn_log_set(capture_log, NULL);
	lynn_log_warn("w %d", 1);
	lynn_log_debug("hidden at the default level");
	lynn_log_set(NULL, NULL);
	ck_assert_int_eq(log_seen, 1);
}
END_TEST

/* ---- the CLI shell ---- */

START_TEST(test_cli_help_version)
{
	struct tu_run r = tu_lynn("--version", NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "lynn 0."));
	ck_assert_ptr_nonnull(strstr(r.out, "cuda="));
	ck_assert_ptr_nonnull(strstr(r.out, "simd="));
	tu_run_free(&r);
	r = tu_lynn("help", NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "commands:"));
	tu_run_free(&r);
	r = tu_lynn("help version", NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	tu_run_free(&r);
}
END_TEST

START_TEST(test_cli_unknown)
{
	struct tu_run r = tu_lynn("verison", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "did you mean 'version'"));
	tu_run_free(&r);
	r = tu_lynn("", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	r = tu_lynn("--bogus", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
}
END_TEST

Suite *core_suite(void)
{
	Suite *s = suite_create("core");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_errf);
	tcase_add_test(tc, test_buf);
	tcase_add_test(tc, test_parse_size_ids);
	tcase_add_test(tc, test_json_fields);
	tcase_add_test(tc, test_json_report);
	tcase_add_test(tc, test_atomic_write);
	tcase_add_test(tc, test_tmpdir);
	tcase_add_test(tc, test_mmap_read);
	tcase_add_test(tc, test_sha256_file);
	tcase_add_test(tc, test_progress_not_a_tty);
	tcase_add_test(tc, test_pool);
	tcase_add_test(tc, test_log_sink);
	suite_add_tcase(s, tc);
	tc = tcase_create("cli");
	tcase_add_test(tc, test_cli_help_version);
	tcase_add_test(tc, test_cli_unknown);
	suite_add_tcase(s, tc);
	return s;
}
