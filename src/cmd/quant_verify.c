/* quant_verify.c - `lynn quant-verify` (SPEC §6): does every variant still
 * answer like the reference? Generates (in-process or through endpoints) or
 * reads outputs, then reports lynn-quant-verify-v2 and a Markdown table.
 * Exit 0 when every variant passes, 1 when one fails, 2 bad arguments. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/log.h"
#include "lynn/quant_verify.h"

#define MAX_VARIANTS 64

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lynn quant-verify --reference PATH|URL --variant LABEL=PATH|URL ...\n"
		"                         [--prompts FILE] [--max-tokens 64] [--min-similarity 0.70]\n"
		"                         [--chrf-word-order 0|2] [--out-dir DIR [--force]] [--json]\n"
		"       lynn quant-verify --reference-outputs FILE.jsonl --variant-outputs LABEL=FILE.jsonl ...\n\n"
		"Every variant answers the same prompts greedily (6 built-in bilingual prompts unless\n"
		"--prompts); each output is scored against the reference's (similarity = 0.5*chrF/100 +\n"
		"0.5*ROUGE-L F1) and checked for coherence. A variant passes when it loads, every output\n"
		"passes quality and its mean similarity is at least the minimum. The Markdown table goes\n"
		"to stdout (the JSON report with --json). Exit 0 all pass, 1 one fails, 2 bad arguments.\n\n"
		"  --reference PATH|URL     model folder or .gguf file (in-process) or OpenAI-compatible\n"
		"                           base URL (comma-separated URLs are replicas)\n"
		"  --variant LABEL=PATH|URL a variant to verify (repeat; one model loaded at a time)\n"
		"  --reference-outputs FILE offline: JSONL records {\"id\", \"output\"} of the reference\n"
		"  --variant-outputs LABEL=FILE  offline: a variant's outputs (repeat)\n"
		"  --prompts FILE           JSONL {\"prompt\", optional \"id\", \"anchors\"} replacing the\n"
		"                           built-in prompts (offline: anchors by id)\n"
		"  --max-tokens N           new tokens per prompt (default 64)\n"
		"  --min-similarity X       mean similarity a variant needs (default 0.70)\n"
		"  --chrf-word-order N      0 chrF (default), 2 chrF++\n"
		"  --out-dir DIR            write report.json, report.md and the outputs (JSONL) there\n"
		"  --force                  replace a non-empty --out-dir\n"
		"  --json                   print the JSON report instead of the table\n"
		"  --threads N              in-process worker threads (default: all cores)\n"
		"  --concurrency N          requests in flight (endpoints) or generated together\n"
		"                           (in-process; default 4)\n"
		"  --timeout S              endpoint request timeout in seconds (default 600)\n"
		"  --retries N              endpoint retries (default 5)\n"
		"Endpoints read the API key from LYNN_API_KEY or OPENAI_API_KEY.\n");
}

struct labelled {
	const char *label; /* points into a strdup'ed copy */
	const char *path;
	char *mem;
};

static int parse_labelled(const char *opt, const char *arg, struct labelled *out)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg || !eq[1])
		return cmd_usage_error("quant-verify", "%s: '%s' is not LABEL=PATH", opt, arg);
	out->mem = strdup(arg);
	if (!out->mem) {
		fprintf(stderr, "lynn: error: quant-verify: out of memory\n");
		return 3;
	}
	out->mem[eq - arg] = 0;
	out->label = out->mem;
	out->path = out->mem + (eq - arg) + 1;
	return 0;
}

/* A label as a file name: [A-Za-z0-9._-] kept, the rest '_'. */
static char *file_name(const char *label, const char *suffix)
{
	size_t n = strlen(label);
	char *s = malloc(n + strlen(suffix) + 2);
	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		char c = label[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  c == '-' || c == '_' || (c == '.' && i);
		s[i] = ok ? c : '_';
	}
	strcpy(s + n, suffix);
	return s;
}

static int write_in(const char *dir, const char *name, const char *text, struct lynn_err *err)
{
	char *p = lynn_path_join(dir, name);
	int rc = p ? lynn_write_atomic(p, text, strlen(text), err)
		   : lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	free(p);
	return rc;
}

static int write_outputs(const char *dir, const struct lynn_qv_run *run,
			 const struct lynn_qv_prompts *p, struct lynn_err *err)
{
	char *name = file_name(run->label, ".outputs.jsonl"), *path = NULL;
	int rc = 0;
	if (!name || !(path = lynn_path_join(dir, name)))
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	else if (run->loaded)
		rc = lynn_qv_run_write(run, p, path, err);
	free(name);
	free(path);
	return rc;
}

int cmd_quant_verify(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "reference", required_argument, NULL, 'r' },
		{ "variant", required_argument, NULL, 'V' },
		{ "reference-outputs", required_argument, NULL, 'R' },
		{ "variant-outputs", required_argument, NULL, 'O' },
		{ "prompts", required_argument, NULL, 'p' },
		{ "max-tokens", required_argument, NULL, 'n' },
		{ "min-similarity", required_argument, NULL, 's' },
		{ "chrf-word-order", required_argument, NULL, 'w' },
		{ "out-dir", required_argument, NULL, 'o' },
		{ "force", no_argument, NULL, 'f' },
		{ "json", no_argument, NULL, 'j' },
		{ "threads", required_argument, NULL, 't' },
		{ "concurrency", required_argument, NULL, 'c' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "retries", required_argument, NULL, 'y' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *reference = NULL, *ref_outputs = NULL, *prompts_file = NULL, *out_dir = NULL;
	struct labelled var[MAX_VARIANTS] = { 0 };
	int n_var = 0, n_var_gen = 0, n_var_off = 0;
	bool force = false, json = false;
	struct lynn_qv_gen_opts go;
	struct lynn_qv_opts ro = { LYNN_QV_DEFAULT_MIN_SIMILARITY, 0, LYNN_QV_DEFAULT_MAX_TOKENS, NULL,
				   NULL };
	struct lynn_qv_prompts known = { 0 }, prompts = { 0 };
	struct lynn_qv_run ref = { 0 }, *runs = NULL;
	struct lynn_tmpdir td = { 0 };
	struct lynn_err err = { 0 };
	cJSON *rep = NULL;
	char *md = NULL, *js = NULL;
	long v;
	double d;
	int opt, status = 0;

	lynn_qv_gen_opts_init(&go);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
		if (cmd_common_opt(opt))
			continue;
		switch (opt) {
		case 'r': reference = optarg; break;
		case 'R': ref_outputs = optarg; break;
		case 'V':
		case 'O':
			if (n_var == MAX_VARIANTS) {
				status = cmd_usage_error("quant-verify", "more than %d variants", MAX_VARIANTS);
				goto out;
			}
			if ((status = parse_labelled(opt == 'V' ? "--variant" : "--variant-outputs", optarg,
						     &var[n_var])))
				goto out;
			n_var++;
			if (opt == 'V')
				n_var_gen++;
			else
				n_var_off++;
			break;
		case 'p': prompts_file = optarg; break;
		case 'n':
			if ((status = cmd_opt_long("quant-verify", "--max-tokens", optarg, 1, 1 << 20, &v)))
				goto out;
			go.max_tokens = ro.max_tokens = (int)v;
			break;
		case 's':
			if ((status = cmd_opt_double("quant-verify", "--min-similarity", optarg, 0, 1, &ro.min_similarity)))
				goto out;
			break;
		case 'w':
			if ((status = cmd_opt_long("quant-verify", "--chrf-word-order", optarg, 0, 4, &v)))
				goto out;
			ro.chrf_word_order = (int)v;
			break;
		case 'o': out_dir = optarg; break;
		case 'f': force = true; break;
		case 'j': json = true; break;
		case 't':
			if ((status = cmd_opt_long("quant-verify", "--threads", optarg, 1, 4096, &v)))
				goto out;
			go.n_threads = (int)v;
			break;
		case 'c':
			if ((status = cmd_opt_long("quant-verify", "--concurrency", optarg, 1, 1024, &v)))
				goto out;
			go.concurrency = (int)v;
			break;
		case 'T':
			if ((status = cmd_opt_double("quant-verify", "--timeout", optarg, 0.001, 86400, &d)))
				goto out;
			go.timeout_s = d;
			break;
		case 'y':
			if ((status = cmd_opt_long("quant-verify", "--retries", optarg, 0, 100, &v)))
				goto out;
			go.max_retries = (int)v;
			break;
		case 'h': usage(stdout); goto out;
		default: status = cmd_usage_error("quant-verify", "unknown option"); goto out;
		}
	}
	if (optind < argc) {
		status = cmd_usage_error("quant-verify", "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	bool offline = ref_outputs || n_var_off;
	if (offline && (reference || n_var_gen)) {
		status = cmd_usage_error("quant-verify", "--reference-outputs/--variant-outputs (offline) "
					 "cannot be mixed with --reference/--variant");
		goto out;
	}
	if (!offline && !reference) {
		status = cmd_usage_error("quant-verify", "--reference (or --reference-outputs) is required");
		goto out;
	}
	if (offline && !ref_outputs) {
		status = cmd_usage_error("quant-verify", "--reference-outputs is required with --variant-outputs");
		goto out;
	}
	if (!n_var) {
		status = cmd_usage_error("quant-verify", "give at least one %s",
					 offline ? "--variant-outputs LABEL=FILE" : "--variant LABEL=PATH");
		goto out;
	}
	for (int i = 0; i < n_var; i++)
		for (int j = -1; j < i; j++) {
			/* labels name the outputs files: no two may map to one file name */
			char *a = file_name(var[i].label, ""), *b = file_name(j < 0 ? "reference" : var[j].label, "");
			bool same = a && b && !strcmp(a, b);
			free(a);
			free(b);
			if (same) {
				status = j >= 0 && !strcmp(var[i].label, var[j].label)
						 ? cmd_usage_error("quant-verify", "variant label '%s' given twice",
								   var[i].label)
						 : cmd_usage_error("quant-verify", "variant label '%s' clashes with '%s' "
								   "(same outputs file name)", var[i].label,
								   j < 0 ? "reference" : var[j].label);
				goto out;
			}
		}
	if (out_dir && (status = lynn_tmpdir_create(&td, out_dir, force, &err) ? cmd_fail(&err) : 0))
		goto out;

	/* prompts */
	if (prompts_file ? lynn_qv_prompts_load(prompts_file, &known, &err)
			 : lynn_qv_prompts_builtin(&known, &err)) {
		status = cmd_fail(&err);
		goto out;
	}
	ro.prompts_src = prompts_file ? prompts_file : "builtin";
	ro.mode = offline ? "offline" : "generate";
	if (offline) {
		if (lynn_qv_prompts_from_outputs(ref_outputs, &known, &prompts, &err)) {
			status = cmd_fail(&err);
			goto out;
		}
		ro.prompts_src = ref_outputs;
	} else {
		prompts = known;
		memset(&known, 0, sizeof(known));
	}
	runs = calloc((size_t)n_var, sizeof(*runs));
	if (!runs) {
		lynn_errf(&err, -LYNN_ENOMEM, "quant-verify: out of memory");
		status = cmd_fail(&err);
		goto out;
	}

	/* the reference, then each variant: one model loaded at a time */
	if (offline ? lynn_qv_run_load(&ref, "reference", ref_outputs, &prompts, &err)
		    : lynn_qv_run_generate(&ref, "reference", reference, &prompts, &go, &err)) {
		status = cmd_fail(&err);
		goto out;
	}
	if (!ref.loaded) {
		lynn_errf(&err, ref.load_code, "quant-verify: reference '%.100s' did not load: %.120s",
			  ref.path, ref.load_error ? ref.load_error : "");
		status = cmd_fail(&err);
		goto out;
	}
	for (size_t i = 0; i < prompts.n; i++)
		if (!ref.outs[i].text) {
			lynn_errf(&err, -LYNN_EIO, "quant-verify: the reference gave no output for prompt '%s'",
				  prompts.items[i].id);
			status = cmd_fail(&err);
			goto out;
		}
	for (int i = 0; i < n_var; i++) {
		int rc = offline ? lynn_qv_run_load(&runs[i], var[i].label, var[i].path, &prompts, &err)
				 : lynn_qv_run_generate(&runs[i], var[i].label, var[i].path, &prompts, &go,
							&err);
		if (rc) {
			status = cmd_fail(&err);
			goto out;
		}
	}

	bool all_pass;
	if (!(rep = lynn_qv_report(&prompts, &ref, runs, (size_t)n_var, &ro, &all_pass, &err))) {
		status = cmd_fail(&err);
		goto out;
	}
	if (!(md = lynn_qv_markdown(rep)) || !(js = lynn_json_print_pretty(rep))) {
		lynn_errf(&err, -LYNN_ENOMEM, "quant-verify: out of memory");
		status = cmd_fail(&err);
		goto out;
	}
	if (out_dir) {
		int rc = write_in(td.path, "report.json", js, &err);
		if (!rc)
			rc = write_in(td.path, "report.md", md, &err);
		if (!rc && !offline)
			rc = write_outputs(td.path, &ref, &prompts, &err);
		for (int i = 0; !rc && !offline && i < n_var; i++)
			rc = write_outputs(td.path, &runs[i], &prompts, &err);
		if (!rc)
			rc = lynn_tmpdir_commit(&td, &err);
		if (rc) {
			status = cmd_fail(&err);
			goto out;
		}
		lynn_log_info("quant-verify: report written to %s/report.json", out_dir);
	}
	fputs(json ? js : md, stdout);
	fflush(stdout);
	status = all_pass ? 0 : 1;
out:
	if (td.path)
		lynn_tmpdir_abort(&td);
	free(md);
	free(js);
	cJSON_Delete(rep);
	for (int i = 0; runs && i < n_var; i++)
		lynn_qv_run_release(&runs[i]);
	free(runs);
	lynn_qv_run_release(&ref);
	lynn_qv_prompts_release(&prompts);
	lynn_qv_prompts_release(&known);
	for (int i = 0; i < n_var; i++)
		free(var[i].mem);
	return status;
}
