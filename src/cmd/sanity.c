/*
 * sanity.c - `lynn sanity`: is the LoRA adapter really active? (SPEC §4)
 *
 * For each probe prompt (rendered with the chat template, thinking off) the
 * base runs with and without the adapter; the mean absolute difference of the
 * last position's logits must exceed the threshold for every prompt.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/engine.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/log.h"

static const char usage[] =
	"usage: lynn sanity --base DIR --adapter DIR [--prompts FILE] [--threshold 0.01]\n"
	"                   [--out-json FILE] [--threads N] [-q|-v]\n"
	"\n"
	"Checks that a LoRA adapter changes the model: for each probe prompt (5 built-in\n"
	"bilingual prompts, or one per line of FILE), rendered with the chat template\n"
	"(thinking off), the mean |logits(base+adapter) - logits(base)| at the last position\n"
	"must exceed the threshold. An adapter whose modules match no base weight fails with\n"
	"their list. Report schema lynn-diff-sanity-v1; the last stdout line is\n"
	"__DIFF_SANITY_PASS__ or __DIFF_SANITY_FAIL__.\n"
	"\n"
	"exit: 0 pass, 1 fail, 2 bad arguments or input, 3 runtime failure\n";

/* Prompts from a file: one per non-empty line. */
static int read_prompts(const char *path, char ***out, int *n, struct lynn_err *err)
{
	char *text = NULL, *save = NULL, *line;
	size_t len;
	int cap = 0, rc;

	*out = NULL;
	*n = 0;
	if ((rc = lynn_file_read(path, 16u << 20, &text, &len, err)))
		return rc;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t l = strlen(line);
		if (l && line[l - 1] == '\r')
			line[--l] = '\0';
		if (!l)
			continue;
		if (*n == cap) {
			char **p = realloc(*out, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *p);
			if (!p) {
				free(text);
				return lynn_errf(err, -LYNN_ENOMEM, "sanity: out of memory");
			}
			*out = p;
		}
		(*out)[(*n)++] = strdup(line);
	}
	free(text);
	if (*n == 0)
		return lynn_errf(err, -LYNN_EFORMAT, "sanity: '%s': no prompts", path);
	return 0;
}

static void report_fail_load(cJSON *rep, const char *msg)
{
	cJSON_AddStringToObject(rep, "error", msg);
	cJSON_AddItemToObject(rep, "items", cJSON_CreateArray());
}

int cmd_sanity(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "base", required_argument, NULL, 'b' },
		{ "adapter", required_argument, NULL, 'a' },
		{ "prompts", required_argument, NULL, 'p' },
		{ "threshold", required_argument, NULL, 't' },
		{ "out-json", required_argument, NULL, 'o' },
		{ "threads", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *base = NULL, *adapter = NULL, *prompts_file = NULL, *out_json = NULL;
	double threshold = 0.01;
	long threads = 0;
	int c, status = 0, n_prompts = 0, n_pass = 0;
	char **prompts = NULL;
	struct lynn_err err = { 0 };
	struct lynn_engine *eng = NULL;
	float *on = NULL, *off = NULL;
	cJSON *rep = NULL, *items;

	optind = 1;
	while ((c = getopt_long(argc, argv, "hqv", longopts, NULL)) != -1) {
		if (cmd_common_opt(c))
			continue;
		switch (c) {
		case 'b': base = optarg; break;
		case 'a': adapter = optarg; break;
		case 'p': prompts_file = optarg; break;
		case 'o': out_json = optarg; break;
		case 't':
			if (cmd_opt_double("sanity", "--threshold", optarg, 0, HUGE_VAL, &threshold))
				return 2;
			break;
		case 'T':
			if (cmd_opt_long("sanity", "--threads", optarg, 1, 4096, &threads))
				return 2;
			break;
		case 'h': fputs(usage, stdout); return 0;
		default: return cmd_usage_error("sanity", "unknown option");
		}
	}
	if (optind < argc)
		return cmd_usage_error("sanity", "unexpected argument '%s'", argv[optind]);
	if (!base || !adapter)
		return cmd_usage_error("sanity", "--base and --adapter are required");
	if (prompts_file && read_prompts(prompts_file, &prompts, &n_prompts, &err))
		goto fail;
	if (!prompts_file)
		n_prompts = LYNN_N_PROBE_PROMPTS;

	rep = lynn_json_report_new("lynn-diff-sanity-v1");
	cJSON_AddStringToObject(rep, "base", base);
	cJSON_AddStringToObject(rep, "adapter", adapter);
	cJSON_AddBoolToObject(rep, "pass", false);
	cJSON_AddNumberToObject(rep, "n_pass", 0);
	cJSON_AddNumberToObject(rep, "n_total", n_prompts);
	cJSON_AddNumberToObject(rep, "diff_threshold", threshold);

	struct lynn_engine_opts eo = { .n_threads = (int)threads, .adapter = adapter };
	eng = lynn_engine_open(base, &eo, &err);
	if (!eng) {
		/* an adapter that maps onto nothing is the failure this command exists for */
		if (err.code == -LYNN_EFORMAT && strstr(err.msg, "match no base weight")) {
			fprintf(stderr, "lynn: %s\n", err.msg);
			report_fail_load(rep, err.msg);
			status = 1;
			goto write;
		}
		goto fail;
	}
	int n_vocab = lynn_model_n_vocab(lynn_engine_model(eng));
	on = malloc((size_t)n_vocab * sizeof *on);
	off = malloc((size_t)n_vocab * sizeof *off);
	if (!on || !off) {
		lynn_errf(&err, -LYNN_ENOMEM, "sanity: out of memory");
		goto fail;
	}
	items = cJSON_AddArrayToObject(rep, "items");
	for (int i = 0; i < n_prompts; i++) {
		const char *p = prompts ? prompts[i] : lynn_probe_prompts[i];
		struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
		double diff = 0;
		int rc = lynn_engine_encode_prompt(eng, p, false, &ids, &err);
		if (!rc) {
			lynn_engine_adapter_enable(eng, false);
			rc = lynn_engine_last_logits(eng, ids.ids, ids.n, off, &err);
		}
		if (!rc) {
			lynn_engine_adapter_enable(eng, true);
			rc = lynn_engine_last_logits(eng, ids.ids, ids.n, on, &err);
		}
		lynn_tok_ids_release(&ids);
		if (rc)
			goto fail;
		for (int k = 0; k < n_vocab; k++)
			diff += fabs((double)on[k] - (double)off[k]);
		diff /= n_vocab;
		bool pass = diff > threshold; /* NaN fails */
		n_pass += pass;
		cJSON *it = cJSON_CreateObject();
		cJSON_AddNumberToObject(it, "idx", i);
		cJSON_AddStringToObject(it, "prompt", p);
		cJSON_AddNumberToObject(it, "diff", isfinite(diff) ? diff : -1);
		cJSON_AddBoolToObject(it, "pass", pass);
		cJSON_AddItemToArray(items, it);
		printf("%s prompt %d  diff %.6f  %s\n", pass ? "✓" : "✗", i, diff, p);
	}
	cJSON_ReplaceItemInObjectCaseSensitive(rep, "pass", cJSON_CreateBool(n_pass == n_prompts));
	cJSON_ReplaceItemInObjectCaseSensitive(rep, "n_pass", cJSON_CreateNumber(n_pass));
	status = n_pass == n_prompts ? 0 : 1;
write:
	if (out_json && lynn_json_write(out_json, rep, &err))
		goto fail;
	printf("%d/%d prompts above %g\n", n_pass, n_prompts, threshold);
	printf("%s\n", status == 0 ? "__DIFF_SANITY_PASS__" : "__DIFF_SANITY_FAIL__");
	goto out;
fail:
	status = cmd_fail(&err);
out:
	cJSON_Delete(rep);
	free(on);
	free(off);
	for (int i = 0; prompts && i < n_prompts; i++)
		free(prompts[i]);
	free(prompts);
	lynn_engine_close(eng);
	return status;
}
