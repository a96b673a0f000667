/*
 * profile.c - `lynn profile`: MoE expert activation, for pruning (SPEC §7).
 *
 * Every prompt of every *.jsonl in the prompts folder (files in name order)
 * is rendered with the chat template (one user message, thinking off) and
 * generated from greedily for up to --max-tokens; the runner's router
 * observer records, for every token processed (prompt and generated) and
 * every MoE layer, the top-k experts and their router probabilities
 * (src/eval/profile.c). Category: the record's `category`, else the file
 * stem. The prompt files are read (and checked) before the model is loaded.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/engine.h"
#include "lynn/eval.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/log.h"
#include "lynn/profile.h"

static const char usage[] =
	"usage: lynn profile --model PATH --prompts-dir DIR --out FILE [--max-tokens 64]\n"
	"                    [--max-prompts N] [--heatmap FILE.svg] [--threads N] [--device D]\n"
	"                    [-q|-v]\n"
	"\n"
	"Runs every prompt of every *.jsonl in DIR (records with `prompt`, `user` or\n"
	"`problem`; category = the record's `category`, else the file stem) through the\n"
	"model, greedy, up to --max-tokens generated tokens each, and records for every\n"
	"token processed and every MoE layer the router's top-k experts and their\n"
	"probabilities. Report schema lynn-activation-profile-v1 (--out); --heatmap writes\n"
	"an SVG of layers x experts.\n"
	"\n"
	"  --model PATH        a model folder (BF16/F16/F32/NVFP4) or a .gguf file\n"
	"  --max-prompts N     stop after N prompts (files in name order)\n"
	"  --device D          cpu, cuda or auto (default auto: the GPU when there is one)\n"
	"\n"
	"exit: 0 ok, 2 bad arguments or input, 3 runtime failure\n";

struct prompt_file {
	char *stem;
	struct lynn_eval_set set;
};

static int is_jsonl(const struct dirent *d)
{
	size_t n = strlen(d->d_name);
	return d->d_name[0] != '.' && n > 6 && !strcmp(d->d_name + n - 6, ".jsonl");
}

static void free_prompt_files(struct prompt_file *pf, int n)
{
	for (int i = 0; pf && i < n; i++) {
		free(pf[i].stem);
		lynn_eval_set_release(&pf[i].set);
	}
	free(pf);
}

/* The folder's *.jsonl files in name order, each loaded and checked (a broken
 * record is an error naming the file, line and field). */
static int load_prompt_files(const char *dir, struct prompt_file **out, int *n_out,
			     struct lynn_err *err)
{
	struct dirent **names = NULL;
	int n = scandir(dir, &names, is_jsonl, alphasort), rc = 0;
	*out = NULL;
	*n_out = 0;
	if (n < 0)
		return lynn_errf(err, errno == ENOENT || errno == ENOTDIR ? -LYNN_ENOTFOUND : -LYNN_EIO,
				 "profile: --prompts-dir '%s': %s", dir, strerror(errno));
	struct prompt_file *pf = n ? calloc((size_t)n, sizeof *pf) : NULL;
	if (n == 0)
		rc = lynn_errf(err, -LYNN_ENOTFOUND, "profile: no *.jsonl files in '%s'", dir);
	else if (!pf)
		rc = lynn_errf(err, -LYNN_ENOMEM, "profile: out of memory");
	for (int i = 0; i < n; i++) {
		if (!rc) {
			char *path = lynn_path_join(dir, names[i]->d_name);
			pf[i].set.kind = LYNN_EVAL_STYLE;
			pf[i].stem = strndup(names[i]->d_name, strlen(names[i]->d_name) - 6);
			if (!path || !pf[i].stem)
				rc = lynn_errf(err, -LYNN_ENOMEM, "profile: out of memory");
			else
				rc = lynn_eval_set_load(&pf[i].set, path, err);
			free(path);
		}
		free(names[i]);
	}
	free(names);
	if (rc) {
		free_prompt_files(pf, n);
		return rc;
	}
	*out = pf;
	*n_out = n;
	return 0;
}

/* Generate from one prompt with the router observed. */
static int run_prompt(struct lynn_engine *eng, const char *prompt, int max_tokens, size_t *n_tok,
		      struct lynn_err *err)
{
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	struct lynn_gen_result res = { 0 };
	struct lynn_gen_opts go = { .max_tokens = max_tokens };
	lynn_sample_params_init(&go.sample); /* greedy */
	int rc = lynn_engine_encode_prompt(eng, prompt, false, &ids, err);
	if (!rc)
		rc = lynn_engine_generate(eng, ids.ids, ids.n, &go, &res, err);
	if (!rc) /* the prompt, then every generated token but the last is fed back */
		*n_tok += res.n_prompt + (res.ids.n ? res.ids.n - 1 : 0);
	lynn_tok_ids_release(&ids);
	lynn_gen_result_release(&res);
	return rc;
}

int cmd_profile(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "prompts-dir", required_argument, NULL, 'p' },
		{ "out", required_argument, NULL, 'o' },
		{ "max-tokens", required_argument, NULL, 'n' },
		{ "max-prompts", required_argument, NULL, 'N' },
		{ "heatmap", required_argument, NULL, 'H' },
		{ "threads", required_argument, NULL, 'T' },
		{ "device", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *model = NULL, *dir = NULL, *out = NULL, *heatmap = NULL;
	long max_tokens = 64, max_prompts = -1, threads = 0;
	enum lynn_device device = LYNN_DEVICE_AUTO;
	int c, status = 0, n_files = 0, n_done = 0;
	size_t n_tok = 0;
	struct lynn_err err = { 0 };
	struct prompt_file *pf = NULL;
	struct lynn_engine *eng = NULL;
	struct lynn_profile *prof = NULL;
	cJSON *rep = NULL;
	char *svg = NULL;

	optind = 1;
	while ((c = getopt_long(argc, argv, "hqv", longopts, NULL)) != -1) {
		if (cmd_common_opt(c))
			continue;
		switch (c) {
		case 'm': model = optarg; break;
		case 'p': dir = optarg; break;
		case 'o': out = optarg; break;
		case 'H': heatmap = optarg; break;
		case 'n':
			if (cmd_opt_long("profile", "--max-tokens", optarg, 1, 1 << 20, &max_tokens))
				return 2;
			break;
		case 'N':
			if (cmd_opt_long("profile", "--max-prompts", optarg, 1, 1L << 30, &max_prompts))
				return 2;
			break;
		case 'T':
			if (cmd_opt_long("profile", "--threads", optarg, 1, 4096, &threads))
				return 2;
			break;
		case 'D':
			if (cmd_opt_device("profile", optarg, &device))
				return 2;
			break;
		case 'h': fputs(usage, stdout); return 0;
		default: return cmd_usage_error("profile", "unknown option");
		}
	}
	if (optind < argc)
		return cmd_usage_error("profile", "unexpected argument '%s'", argv[optind]);
	if (!model || !dir || !out)
		return cmd_usage_error("profile", "--model, --prompts-dir and --out are required");

	if (load_prompt_files(dir, &pf, &n_files, &err))
		goto fail;
	struct lynn_engine_opts eo = { .n_threads = (int)threads, .device = device };
	eng = lynn_engine_open(model, &eo, &err);
	if (!eng)
		goto fail;
	struct lynn_model *m = lynn_engine_model(eng);
	const struct lynn_config *cfg = lynn_model_config(m);
	if (cfg->n_experts < 1) {
		lynn_errf(&err, -LYNN_EFORMAT, "profile: '%s' has no MoE layers", model);
		goto fail;
	}
	prof = lynn_profile_new(cfg->n_layers, cfg->n_experts, cfg->n_experts_per_tok, &err);
	if (!prof)
		goto fail;
	lynn_model_set_route_observer(m, lynn_profile_route, prof);
	for (int f = 0; f < n_files && n_done != max_prompts; f++)
		for (size_t i = 0; i < pf[f].set.n && n_done != max_prompts; i++) {
			const struct lynn_eval_item *it = &pf[f].set.items[i];
			if (lynn_profile_category(prof, it->category[0] ? it->category : pf[f].stem, &err) ||
			    run_prompt(eng, it->prompt, (int)max_tokens, &n_tok, &err))
				goto fail;
			lynn_profile_prompt_done(prof);
			n_done++;
			lynn_log_info("profile: %d prompts, %zu tokens", n_done, n_tok);
		}
	lynn_model_set_route_observer(m, NULL, NULL);
	/* every MoE layer routed each token the runner processed, once */
	int routed = 0, off = -1;
	for (int li = 0; li < cfg->n_layers; li++) {
		int64_t t = lynn_profile_layer_tokens(prof, li);
		routed += t > 0;
		if (t && t != (int64_t)n_tok && off < 0)
			off = li;
	}
	if (!routed || off >= 0 || lynn_profile_malformed(prof)) {
		lynn_errf(&err, -LYNN_EIO, /* a runner fault: exit 3 */
			  "profile: the router's record does not match the run (%d layers routed, "
			  "layer %d off the %zu tokens processed, %lld malformed routes)",
			  routed, off, n_tok, lynn_profile_malformed(prof));
		goto fail;
	}
	rep = lynn_profile_report(prof, (int)max_tokens);
	cJSON_AddStringToObject(rep, "model", model);
	cJSON_AddStringToObject(rep, "prompts_dir", dir);
	if (lynn_json_write(out, rep, &err))
		goto fail;
	if (heatmap) {
		svg = lynn_profile_heatmap_svg(prof);
		if (!svg) {
			lynn_errf(&err, -LYNN_ENOMEM, "profile: out of memory");
			goto fail;
		}
		if (lynn_write_atomic(heatmap, svg, strlen(svg), &err))
			goto fail;
	}
	printf("profiled %d prompts (%zu tokens processed) over %d layers x %d experts (top-%d) -> %s\n",
	       n_done, n_tok, cfg->n_layers, cfg->n_experts, cfg->n_experts_per_tok, out);
	goto out;
fail:
	status = cmd_fail(&err);
out:
	free(svg);
	cJSON_Delete(rep);
	lynn_profile_free(prof);
	lynn_engine_close(eng);
	free_prompt_files(pf, n_files);
	return status;
}
