/*
 * quantize.c - `lynn quantize --nvfp4 SRC_DIR OUT_DIR [--format ...]
 * [--ignore PATTERN]...`: RTN NVFP4 (docs/lynn-quantize.md; the library part
 * is src/formats/quantize.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/log.h"
#include "lynn/progress.h"
#include "lynn/quantize.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lynn quantize --nvfp4 SRC_DIR OUT_DIR [--format compressed-tensors|modelopt]\n"
		"                     [--ignore PATTERN]... [--force]\n\n"
		"Round-to-nearest NVFP4 (weights only, W4A16) of a BF16/F16/F32 checkpoint\n"
		"folder. lm_head, embed_tokens, vision, the router mlp.gate, shared_expert_gate,\n"
		"conv1d, MTP layers and 1-D tensors stay as they are; every other linear\n"
		"(attention, linear attention, experts) is quantized, with one global scale\n"
		"per fused group (q/k/v, gate/up). Fused 3-D experts are written per expert.\n"
		"The output folder appears atomically, with config.json's quantization_config\n"
		"(and hf_quant_config.json for modelopt) and the tokenizer files copied.\n\n"
		"  --nvfp4           the target format (required; the only one so far)\n"
		"  --format F        compressed-tensors (nvfp4-pack-quantized, default) or modelopt\n"
		"  --ignore PATTERN  also keep modules matching PATTERN unquantized: an fnmatch\n"
		"                    wildcard ('*.self_attn.*') or 're:REGEX'; repeatable\n"
		"  --force           replace OUT_DIR if it exists and is not empty\n"
		"  -q, -v            quieter / more verbose logs\n\n"
		"Exit: 0 written, 2 bad arguments or input, 3 runtime failure.\n");
}

int cmd_quantize(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "nvfp4", no_argument, NULL, 'n' },
		{ "format", required_argument, NULL, 'f' },
		{ "ignore", required_argument, NULL, 'i' },
		{ "force", no_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct lynn_quantize_opts o = { .format = LYNN_NVFP4_CT };
	struct lynn_quantize_stats st;
	struct lynn_progress_bar bar;
	struct lynn_err err = { 0 };
	const char **ign = NULL;
	bool nvfp4 = false;
	int opt, rc;

	optind = 1;
	ign = calloc((size_t)argc + 1, sizeof *ign);
	if (!ign)
		return 3;
	while ((opt = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
		if (cmd_common_opt(opt))
			continue;
		switch (opt) {
		case 'n':
			nvfp4 = true;
			break;
		case 'f':
			if (!strcmp(optarg, "compressed-tensors") || !strcmp(optarg, "ct"))
				o.format = LYNN_NVFP4_CT;
			else if (!strcmp(optarg, "modelopt"))
				o.format = LYNN_NVFP4_MODELOPT;
			else {
				free(ign);
				return cmd_usage_error("quantize",
						       "--format '%s': expected compressed-tensors or modelopt",
						       optarg);
			}
			break;
		case 'i':
			ign[o.n_ignore++] = optarg;
			break;
		case 'F':
			o.force = true;
			break;
		case 'h':
			usage(stdout);
			free(ign);
			return 0;
		default:
			free(ign);
			return cmd_usage_error("quantize", "unknown option");
		}
	}
	o.ignore = ign;
	if (!nvfp4) {
		free(ign);
		return cmd_usage_error("quantize", "say which format: --nvfp4");
	}
	if (optind != argc - 2) {
		free(ign);
		return cmd_usage_error("quantize", "expected SRC_DIR and OUT_DIR");
	}
	lynn_progress_bar_init(&bar, "quantize", true, stderr, cmd_progress_enabled());
	o.progress = lynn_progress_bar_update;
	o.progress_ud = &bar;
	rc = lynn_nvfp4_quantize(argv[optind], argv[optind + 1], &o, &st, &err);
	lynn_progress_bar_finish(&bar);
	free(ign);
	if (rc)
		return cmd_fail(&err);
	lynn_log(LYNN_LOG_INFO,
		"quantize: %lld linears to NVFP4 (%s; %lld cut from fused experts), %lld tensors "
		"copied, %d ship files; %.2f GB -> %.2f GB; weight rel. RMSE %.4f",
		(long long)st.n_quantized, lynn_nvfp4_format_name(o.format),
		(long long)st.n_split_experts, (long long)st.n_copied, st.n_ship_files,
		st.bytes_in / 1e9, st.bytes_out / 1e9, st.rel_rmse);
	printf("%s\n", argv[optind + 1]);
	return 0;
}
