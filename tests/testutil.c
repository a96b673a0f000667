/* testutil.c - helpers shared by the Check suites (tests/testutil.h). */
#include "testutil.h"

#include "lynn/buf.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

char *tu_mkdtemp(void)
{
	char *p = strdup("/tmp/lynn-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(p));
	return p;
}

void tu_write(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_msg(f != NULL, "cannot write %s", path);
	ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	fclose(f);
}

char *tu_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	if (len)
		*len = (size_t)n;
	return buf;
}

struct tu_run tu_sh(const char *cmd, const char *stdin_text)
{
	struct tu_run r = { 0 };
	char *dir = tu_mkdtemp(), *full, in_path[512], out_path[512], err_path[512];
	int st;

	snprintf(in_path, sizeof in_path, "%s/in", dir);
	snprintf(out_path, sizeof out_path, "%s/out", dir);
	snprintf(err_path, sizeof err_path, "%s/err", dir);
	tu_write(in_path, stdin_text ? stdin_text : "", stdin_text ? strlen(stdin_text) : 0);
	ck_assert(asprintf(&full, "(%s) <'%s' >'%s' 2>'%s'", cmd, in_path, out_path, err_path) > 0);
	st = system(full);
	free(full);
	if (WIFEXITED(st))
		r.status = WEXITSTATUS(st);
	else if (WIFSIGNALED(st))
		r.status = 128 + WTERMSIG(st);
	else
		r.status = -1;
	r.out = tu_read(out_path, NULL);
	r.err = tu_read(err_path, NULL);
	unlink(in_path);
	unlink(out_path);
	unlink(err_path);
	rmdir(dir);
	free(dir);
	return r;
}

struct tu_run tu_lynn(const char *args, const char *stdin_text, const char *env)
{
	const char *bin = getenv("LYNN_BIN");
	char *cmd;
	struct tu_run r;
	ck_assert(asprintf(&cmd, "env %s '%s' %s", env ? env : "", bin ? bin : "./lynn", args) > 0);
	r = tu_sh(cmd, stdin_text);
	free(cmd);
	/* 126/127: the binary did not start; >128: killed by a signal (a crash) */
	ck_assert_msg(r.status < 126, "lynn %s: exit %d\nstderr: %s", args, r.status, r.err);
	return r;
}

void tu_run_free(struct tu_run *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

double tu_num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	ck_assert_msg(cJSON_IsNumber(v), "field '%s' is not a number", k);
	return v->valuedouble;
}

void tu_put_u32(struct lynn_buf *b, uint32_t v)
{
	ck_assert_int_eq(lynn_buf_append(b, &v, 4), 0);
}

void tu_put_u64(struct lynn_buf *b, uint64_t v)
{
	ck_assert_int_eq(lynn_buf_append(b, &v, 8), 0);
}

void tu_put_str(struct lynn_buf *b, const char *s)
{
	tu_put_u64(b, strlen(s));
	ck_assert_int_eq(lynn_buf_append(b, s, strlen(s)), 0);
}

/* ===== scripted HTTP endpoints ===== */

enum MHD_Result tu_http_reply(struct MHD_Connection *c, int status, const char *json)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), (void *)json,
								 MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;
	MHD_add_response_header(r, "Content-Type", "application/json");
	ret = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

static void http_done(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode t)
{
	struct lynn_buf *b = *con_cls;
	(void)cls;
	(void)c;
	(void)t;
	if (b) {
		lynn_buf_release(b);
		free(b);
		*con_cls = NULL;
	}
}

struct MHD_Daemon *tu_http_start(MHD_AccessHandlerCallback handler, void *cls, int *port)
{
	struct MHD_Daemon *d;
	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL,
			     NULL, handler, cls, MHD_OPTION_NOTIFY_COMPLETED, http_done, NULL,
			     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
	ck_assert_ptr_nonnull(d);
	*port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
	ck_assert_int_gt(*port, 0);
	return d;
}

int tu_dead_port(void)
{
	struct sockaddr_in a = { 0 };
	socklen_t l = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM, 0), p;
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	getsockname(s, (struct sockaddr *)&a, &l);
	p = ntohs(a.sin_port);
	close(s);
	return p;
}
