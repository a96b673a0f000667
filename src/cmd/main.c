/*
 * main.c - the lynn binary: git-style dispatch over the command table.
 *
 *   lynn [-q|-v] CMD [options]     run a command
 *   lynn help [CMD] | CMD --help   usage
 *   lynn --version                 version, git hash, build flags
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "lynn/log.h"
#include "lynn/util.h"
#include "lynn/version.h"

/* The table lists only commands that work. Keep it sorted by workflow. */
static const struct lynn_cmd cmds[] = {
	{ "help", cmd_help, "show usage of lynn or of one command" },
	{ "version", cmd_version, "print version and build flags" },
	{ "inspect", cmd_inspect, "describe a checkpoint: architecture, parameters, dtypes, files" },
	{ "tokenize", cmd_tokenize, "encode text to token ids or decode ids to text" },
	{ "template", cmd_template, "render a chat prompt with the model's chat template" },
	{ "generate", cmd_generate, "generate text or token ids from a model" },
	{ "logits", cmd_logits, "write a model's logits for token ids (parity tool)" },
	{ "score", cmd_score, "chrF, ROUGE-L, similarity and grader scores of text pairs" },
	{ "sanity", cmd_sanity, "check a LoRA adapter really changes the model" },
	{ "merge", cmd_merge, "merge a LoRA adapter into its base, streamed" },
	{ "quantize", cmd_quantize, "round-to-nearest NVFP4 (compressed-tensors or ModelOpt)" },
	{ "pack", cmd_pack, "ship gate: complete a quantized folder and check files, tokenizer, weights" },
	{ "eval", cmd_eval, "four-gate ship verdict (NET_WIN/ABORT) and daily-mix comparison" },
	{ "quant-verify", cmd_quant_verify, "is each quantized variant still the reference model? (PASS/FAIL)" },
	{ "profile", cmd_profile, "MoE expert activation over prompt sets, for pruning" },
	{ "push", cmd_push, "upload a folder to ModelScope or Hugging Face (resumable)" },
	{ "serve", cmd_serve, "OpenAI-compatible server with continuous batching" },
	{ "bench", cmd_bench, "serving throughput of an OpenAI-compatible endpoint (TTFT, tokens/s)" },
};

static const struct lynn_cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < LYNN_ARRAY_LEN(cmds); i++)
		if (!strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

static const char *closest_cmd(const char *name)
{
	const char *best = NULL;
	int bd = 1 << 30;
	for (size_t i = 0; i < LYNN_ARRAY_LEN(cmds); i++) {
		int d = lynn_edit_distance(name, cmds[i].name);
		if (d < bd) {
			bd = d;
			best = cmds[i].name;
		}
	}
	return best;
}

/* ===== shared CLI helpers (cmd.h) ===== */

int cmd_fail(const struct lynn_err *err)
{
	fprintf(stderr, "lynn: error: %s\n", err && err->msg[0] ? err->msg : "unknown error");
	return lynn_err_exit_status(err ? err->code : -LYNN_EIO);
}

int cmd_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "lynn %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n(see 'lynn %s --help')\n", cmd);
	return 2;
}

int cmd_opt_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;
	errno = 0;
	v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi)
		return cmd_usage_error(cmd, "%s: '%s' is not an integer in [%ld, %ld]", opt, s, lo, hi);
	*out = v;
	return 0;
}

int cmd_opt_double(const char *cmd, const char *opt, const char *s, double lo, double hi,
		   double *out)
{
	char *end;
	double v;
	errno = 0;
	v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi)
		return cmd_usage_error(cmd, "%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
	*out = v;
	return 0;
}

int cmd_opt_device(const char *cmd, const char *s, enum lynn_device *out)
{
	int d = lynn_device_parse(s);
	if (d < 0)
		return cmd_usage_error(cmd, "--device %s: cpu, cuda or auto", s);
	*out = (enum lynn_device)d;
	return 0;
}

bool cmd_common_opt(int opt)
{
	if (opt == 'q') {
		lynn_log_set_level(LYNN_LOG_ERROR);
		return true;
	}
	if (opt == 'v') {
		lynn_log_set_level(LYNN_LOG_DEBUG);
		return true;
	}
	return false;
}

bool cmd_progress_enabled(void)
{
	return lynn_log_get_level() >= LYNN_LOG_INFO && isatty(2);
}

/* ===== help and version ===== */

static void print_overview(FILE *f)
{
	fprintf(f, "usage: lynn [-q|-v] <command> [options]\n\n"
		   "lynn takes a distilled Qwen3.5-MoE model from training to production.\n\n"
		   "commands:\n");
	for (size_t i = 0; i < LYNN_ARRAY_LEN(cmds); i++)
		fprintf(f, "  %-13s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\n'lynn help <command>' or 'lynn <command> --help' shows a command's options.\n"
		   "Exit codes: 0 ok, 1 gate failed / negative verdict, 2 usage or bad input,\n"
		   "3 runtime failure.\n");
}

int cmd_help(int argc, char **argv)
{
	const struct lynn_cmd *c;
	char *sub[3];

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		print_overview(stdout);
		return 0;
	}
	c = find_cmd(argv[1]);
	if (!c) {
		fprintf(stderr, "lynn: '%s' is not a lynn command; did you mean '%s'?\n", argv[1],
			closest_cmd(argv[1]));
		return 2;
	}
	if (c->fn == cmd_help) {
		print_overview(stdout);
		return 0;
	}
	sub[0] = (char *)c->name;
	sub[1] = "--help";
	sub[2] = NULL;
	return c->fn(2, sub);
}

int cmd_version(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h"))
		return cmd_usage_error("version", "unexpected argument '%s'", argv[1]);
	printf("lynn %s (git %s)\n", LYNN_VERSION, lynn_git_hash());
	printf("build: cuda=%s simd=%s compiler=%s\n", lynn_build_cuda(), lynn_build_simd(),
	       __VERSION__);
	return 0;
}

int main(int argc, char **argv)
{
	const struct lynn_cmd *c;
	int i = 1;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V"))
			return cmd_version(0, NULL);
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			print_overview(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "-q"))
			lynn_log_set_level(LYNN_LOG_ERROR);
		else if (!strcmp(argv[i], "-v"))
			lynn_log_set_level(LYNN_LOG_DEBUG);
		else {
			fprintf(stderr, "lynn: unknown option '%s'\n", argv[i]);
			print_overview(stderr);
			return 2;
		}
	}
	if (i >= argc) {
		print_overview(stderr);
		return 2;
	}
	c = find_cmd(argv[i]);
	if (!c) {
		fprintf(stderr, "lynn: '%s' is not a lynn command; did you mean '%s'?\n"
				"(see 'lynn help')\n",
			argv[i], closest_cmd(argv[i]));
		return 2;
	}
	return c->fn(argc - i, argv + i);
}
