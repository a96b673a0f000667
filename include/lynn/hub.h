/*
 * hub.h - upload a local folder to ModelScope or Hugging Face (lynn push).
 *
 * Protocols: docs/reference/serving-and-hubs.md §3 (ModelScope HTTP commit
 * API; Hugging Face preupload, Git LFS batch with basic and multipart
 * transfers, NDJSON commit). The flow for both hubs:
 *   plan   walk the source folder, apply include/exclude globs, decide LFS
 *   push   create the repo if missing, hash every file (streamed sha256),
 *          ask the hub what it already has, upload only the missing blobs on
 *          several connections, commit in batches within the hub's limits.
 * Requests are retried with backoff on 408/429/5xx and connection errors
 * (honouring Retry-After). A commit is never retried blindly: after a lost
 * reply the repo state is read back first, so a rerun or a retry can never
 * produce a duplicate commit.
 *
 * The token is borrowed from the caller and only ever sent in request headers
 * (Authorization, and ModelScope's m_session_id cookie): never logged, never
 * put in a URL, never written to disk.
 *
 * Tests only: LYNN_HUB_BACKOFF_MS (default 1000) is the base of the
 * exponential backoff between retries (min(2^n, 60) × base).
 */
#ifndef LYNN_HUB_H
#define LYNN_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lynn/err.h"
#include "lynn/progress.h"

enum lynn_hub_kind {
	LYNN_HUB_MODELSCOPE = 0,
	LYNN_HUB_HUGGINGFACE = 1,
};

struct lynn_hub_opts {
	enum lynn_hub_kind hub;
	const char *endpoint;     /* base URL; NULL: the hub's public site */
	const char *repo;         /* "owner/name" */
	const char *src;          /* local folder */
	const char *path_in_repo; /* prefix in the repo; NULL or "" for the root */
	const char *const *include; /* fnmatch globs; none = everything */
	size_t n_include;
	const char *const *exclude; /* added to the default excludes */
	size_t n_exclude;
	const char *message;      /* commit message; NULL: a default */
	const char *revision;     /* NULL: "master" (ModelScope) / "main" (HF) */
	bool private_repo;        /* visibility when the repo is created */
	const char *token;        /* borrowed; required by lynn_hub_push */
	int connections;          /* parallel uploads and hashing (<= 0: 4) */
	/* Progress (may be NULL): bytes hashed, then bytes uploaded. Called from
	 * worker threads, but never concurrently (serialised inside). */
	lynn_progress_fn hash_progress;
	void *hash_ud;
	lynn_progress_fn upload_progress;
	void *upload_ud;
};

/* The files a push would send (sorted by path in repo). */
struct lynn_hub_plan;

/* Walk opts->src and build the plan: default excludes (*.bak, *.bak.*, *.tmp,
 * .git*, __pycache__, *.pyc) plus opts->exclude, then opts->include. A glob
 * matches the path relative to src, or (excludes) any one of its components,
 * or (includes) its basename. Symlinks to files are followed. Caller frees
 * with lynn_hub_plan_free. NULL with err filled on failure. */
struct lynn_hub_plan *lynn_hub_plan_create(const struct lynn_hub_opts *opts,
					   struct lynn_err *err);
void lynn_hub_plan_free(struct lynn_hub_plan *plan);
size_t lynn_hub_plan_count(const struct lynn_hub_plan *plan);
/* File i: its path in the repo (borrowed, valid until the plan is freed),
 * size, and whether it is expected to go through LFS (ModelScope's rule;
 * for Hugging Face a prediction, the hub decides in preupload). */
void lynn_hub_plan_file(const struct lynn_hub_plan *plan, size_t i,
			const char **path_in_repo, uint64_t *size, bool *lfs);
uint64_t lynn_hub_plan_bytes(const struct lynn_hub_plan *plan);

struct lynn_hub_result {
	size_t n_files;        /* files in the plan */
	size_t n_unchanged;    /* already in the repo with the same content */
	size_t n_blobs_uploaded; /* LFS blobs sent (others the hub already had) */
	size_t n_blobs_present;  /* LFS blobs the hub already had */
	size_t n_commits;      /* commits created by this run */
	uint64_t bytes_uploaded; /* blob bytes sent */
	char commit_id[96];    /* the last commit's id ("" when none) */
	bool created_repo;
};

/* Push the plan. Returns 0, or -LYNN_EAUTH (token refused: 401/403),
 * -LYNN_ENET (network failure or 5xx after retries), -LYNN_EIO (the hub
 * refused a request, or a local read failed), -LYNN_EINVAL (bad options). */
int lynn_hub_push(const struct lynn_hub_opts *opts, const struct lynn_hub_plan *plan,
		  struct lynn_hub_result *res, struct lynn_err *err);

/* ModelScope's LFS rule: over 1 MiB or a suffix in MODEL_LFS_SUFFIX. */
bool lynn_hub_ms_is_lfs(const char *path, uint64_t size);
/* Does the path (relative, '/'-separated) pass the default and given
 * excludes and the includes? (exposed for tests) */
bool lynn_hub_path_selected(const char *rel, const char *const *include, size_t n_include,
			    const char *const *exclude, size_t n_exclude);

#endif
