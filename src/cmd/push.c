/*
 * push.c - `lynn push`: resumable, deduplicated upload of a folder to
 * ModelScope or Hugging Face (SPEC §7; docs/lynn-push.md).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/hub.h"
#include "lynn/log.h"
#include "lynn/progress.h"

#define MAX_GLOBS 256

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lynn push --repo OWNER/NAME --src DIR [options]\n\n"
		"Upload a folder to ModelScope or Hugging Face: hash every file, ask the hub which\n"
		"blobs it has, upload only the missing ones, commit in batches. Running it again\n"
		"after an interruption uploads only what is missing.\n\n"
		"options:\n"
		"  --repo OWNER/NAME     target repository (created if missing)\n"
		"  --src DIR             local folder to upload\n"
		"  --hub modelscope|huggingface   (default modelscope)\n"
		"  --endpoint URL        hub base URL (default https://www.modelscope.cn or\n"
		"                        https://huggingface.co)\n"
		"  --path-in-repo PREFIX put the files under PREFIX/ in the repo\n"
		"  --include GLOB        upload only matching files (repeatable)\n"
		"  --exclude GLOB        skip matching files (repeatable); always skipped:\n"
		"                        *.bak *.bak.* *.tmp .git* __pycache__ *.pyc\n"
		"  --message TEXT        commit message\n"
		"  --revision REV        branch (default master on ModelScope, main on HF)\n"
		"  --private             create the repo private\n"
		"  --dry-run             print the plan (files, sizes, LFS or not); no token,\n"
		"                        no network\n"
		"  --threads N           parallel uploads and hashing (default 4)\n"
		"  -q, -v                quieter / more detail on stderr\n\n"
		"token (never printed or written): MS_TOKEN or MODELSCOPE_API_TOKEN for\n"
		"ModelScope, HF_TOKEN for Hugging Face.\n"
		"exit: 0 ok, 2 usage / bad input / token missing or refused, 3 network failure\n"
		"after retries or I/O error.\n");
}

/* Two bars on one line of stderr: hashing, then uploading. Each bar's clock
 * starts with its first bytes (not at set-up, before the network calls). */
struct bars {
	struct lynn_progress_bar hash, up;
	bool hash_started, hash_done, up_started, up_done;
};

static void on_hash(void *ud, uint64_t done, uint64_t total)
{
	struct bars *b = ud;
	if (!b->hash_started) {
		b->hash_started = true;
		b->hash.t_start = lynn_now();
	}
	lynn_progress_bar_update(&b->hash, done, total);
	if (done == total && !b->hash_done) {
		b->hash_done = true;
		lynn_progress_bar_finish(&b->hash);
	}
}

static void on_upload(void *ud, uint64_t done, uint64_t total)
{
	struct bars *b = ud;
	if (!b->up_started) {
		b->up_started = true;
		if (b->hash_started && !b->hash_done) {
			b->hash_done = true;
			lynn_progress_bar_finish(&b->hash);
		}
		b->up.t_start = lynn_now();
	}
	lynn_progress_bar_update(&b->up, done, total);
	if (done == total && !b->up_done) {
		b->up_done = true;
		lynn_progress_bar_finish(&b->up);
	}
}

enum { O_REPO = 256, O_SRC, O_HUB, O_ENDPOINT, O_PIR, O_INCLUDE, O_EXCLUDE, O_MESSAGE,
       O_REVISION, O_PRIVATE, O_DRY, O_THREADS };

int cmd_push(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "repo", required_argument, NULL, O_REPO },
		{ "src", required_argument, NULL, O_SRC },
		{ "hub", required_argument, NULL, O_HUB },
		{ "endpoint", required_argument, NULL, O_ENDPOINT },
		{ "path-in-repo", required_argument, NULL, O_PIR },
		{ "include", required_argument, NULL, O_INCLUDE },
		{ "exclude", required_argument, NULL, O_EXCLUDE },
		{ "message", required_argument, NULL, O_MESSAGE },
		{ "revision", required_argument, NULL, O_REVISION },
		{ "private", no_argument, NULL, O_PRIVATE },
		{ "dry-run", no_argument, NULL, O_DRY },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *inc[MAX_GLOBS], *exc[MAX_GLOBS];
	struct lynn_hub_opts o = { .include = inc, .exclude = exc, .connections = 4 };
	struct lynn_hub_result res;
	struct lynn_hub_plan *plan = NULL;
	struct bars bars = { 0 };
	struct lynn_err err = { 0 };
	bool dry = false;
	const char *hubname = "modelscope", *var = NULL;
	int opt, rc;

	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "hqv", longopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			usage(stdout);
			return 0;
		case O_REPO: o.repo = optarg; break;
		case O_SRC: o.src = optarg; break;
		case O_HUB:
			if (!strcmp(optarg, "modelscope") || !strcmp(optarg, "ms"))
				o.hub = LYNN_HUB_MODELSCOPE;
			else if (!strcmp(optarg, "huggingface") || !strcmp(optarg, "hf"))
				o.hub = LYNN_HUB_HUGGINGFACE;
			else
				return cmd_usage_error("push",
						       "--hub '%s': expected modelscope or huggingface",
						       optarg);
			break;
		case O_ENDPOINT: o.endpoint = optarg; break;
		case O_PIR: o.path_in_repo = optarg; break;
		case O_INCLUDE:
			if (o.n_include >= MAX_GLOBS)
				return cmd_usage_error("push", "too many --include globs");
			inc[o.n_include++] = optarg;
			break;
		case O_EXCLUDE:
			if (o.n_exclude >= MAX_GLOBS)
				return cmd_usage_error("push", "too many --exclude globs");
			exc[o.n_exclude++] = optarg;
			break;
		case O_MESSAGE: o.message = optarg; break;
		case O_REVISION: o.revision = optarg; break;
		case O_PRIVATE: o.private_repo = true; break;
		case O_DRY: dry = true; break;
		case O_THREADS: {
			long v;
			if (cmd_opt_long("push", "--threads", optarg, 1, 64, &v))
				return 2;
			o.connections = (int)v;
			break;
		}
		default:
			if (cmd_common_opt(opt))
				break;
			if (optopt)
				return cmd_usage_error("push", "option '-%c' is unknown or needs a value",
						       optopt);
			return cmd_usage_error("push", "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cmd_usage_error("push", "unexpected argument '%s'", argv[optind]);
	if (!o.repo)
		return cmd_usage_error("push", "--repo OWNER/NAME is required");
	if (!o.src)
		return cmd_usage_error("push", "--src DIR is required");
	if (o.hub == LYNN_HUB_HUGGINGFACE)
		hubname = "huggingface";

	if (!dry) {
		if (o.hub == LYNN_HUB_MODELSCOPE) {
			var = getenv("MS_TOKEN") && *getenv("MS_TOKEN") ? "MS_TOKEN"
									: "MODELSCOPE_API_TOKEN";
		} else {
			var = "HF_TOKEN";
		}
		o.token = getenv(var);
		if (!o.token || !*o.token) {
			fprintf(stderr, "lynn push: no token: set %s in the environment (or use "
					"--dry-run)\n",
				o.hub == LYNN_HUB_MODELSCOPE ? "MS_TOKEN or MODELSCOPE_API_TOKEN"
							     : "HF_TOKEN");
			return 2;
		}
	}

	plan = lynn_hub_plan_create(&o, &err);
	if (!plan)
		return cmd_fail(&err);

	if (dry) {
		size_t n = lynn_hub_plan_count(plan), n_lfs = 0;
		printf("plan: %zu file(s), %llu bytes from '%s' to %s %s@%s%s\n", n,
		       (unsigned long long)lynn_hub_plan_bytes(plan), o.src, hubname, o.repo,
		       o.revision ? o.revision
				  : o.hub == LYNN_HUB_MODELSCOPE ? "master" : "main",
		       o.hub == LYNN_HUB_HUGGINGFACE ? " (LFS predicted; the hub decides)" : "");
		for (size_t i = 0; i < n; i++) {
			const char *p;
			uint64_t sz;
			bool lfs;
			lynn_hub_plan_file(plan, i, &p, &sz, &lfs);
			n_lfs += lfs;
			printf("%-7s %14llu  %s\n", lfs ? "lfs" : "regular", (unsigned long long)sz,
			       p);
		}
		printf("total: %zu lfs, %zu regular; nothing was sent (dry run)\n", n_lfs, n - n_lfs);
		lynn_hub_plan_free(plan);
		return 0;
	}

	if (lynn_hub_plan_count(plan) == 0) {
		fprintf(stderr, "lynn push: no files to push in '%s' (after the excludes and includes)\n",
			o.src);
		lynn_hub_plan_free(plan);
		return 2;
	}
	lynn_progress_bar_init(&bars.hash, "hashing", true, stderr, cmd_progress_enabled());
	lynn_progress_bar_init(&bars.up, "uploading", true, stderr, cmd_progress_enabled());
	o.hash_progress = on_hash;
	o.hash_ud = &bars;
	o.upload_progress = on_upload;
	o.upload_ud = &bars;
	lynn_log_info("push: %zu file(s), %.1f MB to %s %s", lynn_hub_plan_count(plan),
		      (double)lynn_hub_plan_bytes(plan) / 1e6, hubname, o.repo);
	rc = lynn_hub_push(&o, plan, &res, &err);
	if (bars.hash_started && !bars.hash_done)
		lynn_progress_bar_finish(&bars.hash);
	if (bars.up_started && !bars.up_done)
		lynn_progress_bar_finish(&bars.up);
	lynn_hub_plan_free(plan);
	if (rc)
		return cmd_fail(&err);
	printf("pushed %s %s: %zu file(s), %zu unchanged, %zu blob(s) uploaded (%llu bytes), "
	       "%zu already on the hub, %zu commit(s)%s%s\n",
	       hubname, o.repo, res.n_files, res.n_unchanged, res.n_blobs_uploaded,
	       (unsigned long long)res.bytes_uploaded, res.n_blobs_present, res.n_commits,
	       res.n_commits && res.commit_id[0] ? ", commit " : "",
	       res.n_commits ? res.commit_id : "");
	return 0;
}
