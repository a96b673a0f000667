/*
 * hub_internal.h - src/hub's private pieces: the retrying HTTP client over
 * libcurl (http.c), the response parsers (parse.c, fuzzed by
 * tests/fuzz/fuzz_hub.c), and the per-file state shared by the protocols.
 */
#ifndef LYNN_HUB_INTERNAL_H
#define LYNN_HUB_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "lynn/buf.h"
#include "lynn/err.h"
#include "lynn/hub.h"

/* Largest hub response we keep in memory. */
#define HUB_MAX_RESPONSE (64u << 20)
/* git-blob sha1 is computed for files up to this size (HF regular files). */
#define HUB_SHA1_MAX (64u << 20)
#define HUB_TRIES 5

/* ===== HTTP ===== */

struct hub_header {
	char *name;
	char *value;
};

struct hub_client {
	enum lynn_hub_kind kind;
	const char *token;     /* borrowed */
	const char *token_var; /* name of the variable, for messages */
	double backoff_base;   /* seconds */
	/* upload byte accounting (shared by threads) */
	pthread_mutex_t mu;
	uint64_t up_done, up_total;
	lynn_progress_fn up_fn;
	void *up_ud;
};

enum hub_retry {
	HUB_RETRY_NONE = 0,  /* one attempt (commits) */
	HUB_RETRY_TRANSIENT, /* 408, 429, 5xx, connection errors */
};

struct hub_req {
	const char *method;
	const char *url;
	bool auth;                       /* send the token headers */
	const char *content_type;        /* NULL: none */
	const char *accept;              /* NULL: application/json */
	const struct hub_header *extra;  /* headers from the hub (LFS actions) */
	size_t n_extra;
	const char *body;                /* in-memory body (may be NULL) */
	size_t body_len;
	const char *file;                /* or a file range as the body */
	uint64_t file_off, file_len;
	bool count_upload;               /* add sent file bytes to progress */
};

struct hub_resp {
	long status;          /* 0 when no HTTP response arrived */
	struct lynn_buf body;
	double retry_after;   /* seconds, < 0 when absent */
	char etag[256];
	char curl_msg[256];   /* transport error, "" when none */
};

void hub_resp_release(struct hub_resp *rs);
/* One request, retried per `retry`. Returns 0 whenever an HTTP response
 * arrived (check rs->status), -LYNN_ENET when the transport failed on every
 * try (message names the method and the URL path). */
int hub_http(struct hub_client *c, const struct hub_req *rq, struct hub_resp *rs,
	     enum hub_retry retry, struct lynn_err *err);
/* hub_http with transient retries, then a non-2xx status turned into an
 * error by hub_status_error. */
int hub_http_ok(struct hub_client *c, const struct hub_req *rq, struct hub_resp *rs,
		struct lynn_err *err);
/* Sleep for the retry after `attempt` failures (or Retry-After seconds). */
void hub_backoff(const struct hub_client *c, int attempt, double retry_after);
/* Turn a non-2xx response into an error (401/403 -> -LYNN_EAUTH naming the
 * token variable; 5xx/429 -> -LYNN_ENET; else -LYNN_EIO), with the hub's
 * message when the body carries one. */
int hub_status_error(const struct hub_client *c, const struct hub_req *rq,
		     const struct hub_resp *rs, struct lynn_err *err);
bool hub_status_transient(long status);
/* The path part of a URL (for messages: never includes a query string). */
void hub_url_path(const char *url, char *out, size_t cap);
/* Percent-encode a single URL component (caller frees). */
char *hub_escape(const char *s);

/* ===== Parsers (pure; every input is untrusted) ===== */

/* Retry-After: delta seconds or an HTTP date. -1 when unparsable. */
double hub_parse_retry_after(const char *value);

/* ModelScope envelope {"Code":200,"Message","Data"}: returns the parsed root
 * (caller frees) and *data (borrowed, may be NULL). Code != 200 is an error
 * (-LYNN_EAUTH for 401/403 codes, else -LYNN_EIO) even on HTTP 200. */
cJSON *hub_ms_envelope(const char *what, const char *text, size_t len, cJSON **data,
		       struct lynn_err *err);

struct hub_remote_file {
	char *path;
	char sha256[65]; /* ModelScope: content sha256; HF: oid from preupload */
	uint64_t size;
};
/* Data.Files of GET .../repo/files: blobs only (trees skipped). */
int hub_ms_parse_files(const char *text, size_t len, struct hub_remote_file **files,
		       size_t *n, struct lynn_err *err);
void hub_remote_files_free(struct hub_remote_file *files, size_t n);

/* LFS actions for one object (both hubs). */
enum hub_xfer { HUB_XFER_NONE = 0, HUB_XFER_BASIC, HUB_XFER_MULTIPART };
struct hub_action {
	enum hub_xfer kind;
	char *href;
	struct hub_header *headers; /* upload headers (basic; HF) */
	size_t n_headers;
	uint64_t chunk_size;        /* multipart */
	char **parts;               /* multipart part URLs, "00001"... in order */
	size_t n_parts;
	char *verify_href;          /* optional verify action */
	struct hub_header *verify_headers;
	size_t n_verify_headers;
};
void hub_action_release(struct hub_action *a);

/* The objects of an LFS batch reply, matched to the oids asked for (in the
 * same order). ModelScope: {"Code","Data":{"objects":[...]}}; HF: a bare
 * {"objects":[...]} (`ms` selects). An object with no actions is already
 * stored (kind NONE). An `error` object or a missing oid is an error. For
 * multipart the number of parts must equal ceil(size/chunk_size). */
int hub_parse_lfs_batch(bool ms, const char *text, size_t len, size_t n,
			const char *const *oids, const uint64_t *sizes,
			struct hub_action *acts, struct lynn_err *err);

/* HF preupload reply: for each asked path, uploadMode ("lfs" -> *lfs true),
 * shouldIgnore and the remote oid ("" when absent). */
int hub_hf_parse_preupload(const char *text, size_t len, size_t n,
			   const char *const *paths, bool *lfs, bool *ignore,
			   char (*oid)[65], struct lynn_err *err);

/* Commit replies: ModelScope Data.oid / HF commitOid into `id`. */
int hub_ms_parse_commit(const char *text, size_t len, char *id, size_t cap,
			struct lynn_err *err);
int hub_hf_parse_commit(const char *text, size_t len, char *id, size_t cap,
			struct lynn_err *err);

/* A short message from an error body ({"error"}, {"Message"}, {"message"}),
 * sanitised to printable ASCII; "" when none. */
void hub_body_message(const char *text, size_t len, char *out, size_t cap);

/* ===== Per-file state (push.c) ===== */

struct hub_file {
	const char *local;   /* borrowed from the plan */
	const char *rpath;   /* path in repo (borrowed) */
	uint64_t size;
	bool ms_lfs;         /* ModelScope's client-side rule */
	bool lfs;            /* going through LFS (hub's decision for HF) */
	char sha256[65];
	char sha1[41];       /* git blob sha1 ("" when size > HUB_SHA1_MAX) */
	uint8_t sample[512];
	size_t sample_len;
	bool unchanged;      /* the repo already has this content at this path */
	bool exists;         /* the path exists in the repo (any content) */
	bool dup;            /* same blob as an earlier file: uploaded once */
	struct hub_action act;
};

struct hub_job {
	const struct lynn_hub_opts *o;
	struct hub_client *c;
	struct hub_file *files;
	size_t n;
	char base[512];      /* endpoint without trailing '/' */
	char owner[128], name[128];
	const char *rev;
	char *rev_esc;
	struct lynn_hub_result *res;
	bool ms_add_config;  /* ModelScope: add a default configuration.json */
};

/* Commits in batches (both hubs). A commit is sent once; after a lost reply
 * (connection error, 408, 5xx, or a "try again" refusal) `landed` reads the
 * repo state back and the batch is re-sent only if it did not land. A 429
 * (not processed) is re-sent after Retry-After. */
struct hub_commit_ops {
	const char *url;
	const char *content_type;
	size_t max_files;
	uint64_t max_inline; /* raw bytes of inline (non-LFS) content per commit */
	int (*build)(struct hub_job *j, const size_t *idx, size_t n, bool first,
		     struct lynn_buf *body, struct lynn_err *err);
	int (*landed)(struct hub_job *j, const size_t *idx, size_t n, bool *yes,
		      struct lynn_err *err);
	int (*parse)(const char *text, size_t len, char *id, size_t cap, struct lynn_err *err);
};
int hub_commit_all(struct hub_job *j, const struct hub_commit_ops *ops, struct lynn_err *err);
/* A reply that did not parse is the hub's fault: runtime failure (exit 3). */
int hub_reply_error(struct lynn_err *err, int rc);

/* Protocol drivers (modelscope.c, huggingface.c). */
int hub_ms_push(struct hub_job *j, struct lynn_err *err);
int hub_hf_push(struct hub_job *j, struct lynn_err *err);
/* Shared by both: hash every file (streamed, parallel, with progress). */
int hub_hash_files(struct hub_job *j, struct lynn_err *err);
/* LFS negotiation in batches (both hubs). The files still to upload, one per
 * distinct blob (later copies get `dup`), go max_oids at a time as POSTs to
 * url; `build` appends the request body for the files idx[0..m) (nonzero:
 * out of memory). Each reply is parsed with hub_parse_lfs_batch (`ms`
 * selects the form) and each action moves into its file. */
struct hub_lfs_ops {
	const char *url;
	const char *content_type;
	const char *accept; /* NULL: application/json */
	size_t max_oids;
	bool ms;
	int (*build)(struct hub_job *j, const size_t *idx, size_t m, struct lynn_buf *body);
};
int hub_lfs_batch_all(struct hub_job *j, const struct hub_lfs_ops *ops, struct lynn_err *err);
/* Upload every file with a pending action, on opts->connections threads. */
int hub_upload_blobs(struct hub_job *j, struct lynn_err *err);
/* The steps of a push after the compare (both hubs): say how many files the
 * repo already has, negotiate LFS with `lfs`, upload the blobs, then commit
 * with `ops` (its url is replaced by <base>/<api>/<owner>/<name>/commit/<rev>). */
int hub_push_finish(struct hub_job *j, int (*lfs)(struct hub_job *j, struct lynn_err *err),
		    const char *api, const struct hub_commit_ops *ops, struct lynn_err *err);
/* Read a whole (small) file for inline commit content. */
int hub_read_small(const char *path, uint64_t size, char **out, struct lynn_err *err);
/* base64 of `len` bytes appended to b. */
int hub_b64_append(struct lynn_buf *b, const void *data, size_t len);

#endif
