/* generate.c - `lynn generate` (SPEC §2): prefill a prompt, then decode one
 * token at a time with the sampler, streaming the result to stdout and
 * stats to stderr. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "lynn/log.h"
#include "lynn/lora.h"
#include "lynn/model.h"
#include "lynn/sample.h"
#include "lynn/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lynn generate --model PATH (--prompt TEXT | --messages FILE | --ids \"1 2 3\")\n"
		"                     [--max-tokens N] [--temperature T] [--top-p P] [--top-k K]\n"
		"                     [--min-p M] [--seed S] [--think] [--raw] [--print-ids]\n"
		"                     [--adapter DIR] [--threads N] [-q|-v]\n\n"
		"Generate from a prompt and stream it to stdout; stats (prompt tokens, time to\n"
		"first token, decode tokens/s) go to stderr. Stops at max-tokens or an eos id\n"
		"(generation_config.json, else config.json).\n\n"
		"  --ids \"1 2 3\"      the prompt as token ids (no tokenizer needed)\n"
		"  --prompt TEXT      a user message (chat template unless --raw)\n"
		"  --messages FILE    an OpenAI-style messages array (JSON)\n"
		"  --print-ids        print generated ids instead of text\n"
		"  --max-tokens N     default 256\n"
		"  --temperature T    0 (default) = greedy\n"
		"  --top-k K, --top-p P, --min-p M, --seed S   sampling (seed default 0)\n"
		"  --think            enable_thinking=true in the chat template\n"
		"  --raw              no chat template\n"
		"  --adapter DIR      apply a PEFT LoRA adapter (unmerged)\n"
		"  --threads N        worker threads (default: all cores)\n");
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_float(const char *opt, const char *s, float *out)
{
	char *end;
	double v = strtod(s, &end);
	if (!*s || *end || v != v)
		return cmd_usage_error("generate", "%s: '%s' is not a number", opt, s);
	*out = (float)v;
	return 0;
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (!*s || *end || v < lo || v > hi)
		return cmd_usage_error("generate", "%s: '%s' is not an integer in [%ld, %ld]", opt, s, lo,
				       hi);
	*out = v;
	return 0;
}

static bool is_eos(const struct lynn_config *c, int32_t id)
{
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos_ids[i] == id)
			return true;
	return false;
}

int cmd_generate(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "adapter", required_argument, NULL, 'a' },
		{ "prompt", required_argument, NULL, 'p' },
		{ "messages", required_argument, NULL, 'M' },
		{ "ids", required_argument, NULL, 'i' },
		{ "max-tokens", required_argument, NULL, 'n' },
		{ "temperature", required_argument, NULL, 'T' },
		{ "top-p", required_argument, NULL, 'P' },
		{ "top-k", required_argument, NULL, 'K' },
		{ "min-p", required_argument, NULL, 'N' },
		{ "seed", required_argument, NULL, 's' },
		{ "think", no_argument, NULL, 'k' },
		{ "raw", no_argument, NULL, 'r' },
		{ "print-ids", no_argument, NULL, 'I' },
		{ "threads", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *model = NULL, *adapter = NULL, *prompt = NULL, *messages = NULL, *ids_s = NULL;
	bool print_ids = false;
	long max_tokens = 256, threads = 0, v;
	struct lynn_sample_params sp;
	struct lynn_err err = { 0 };
	struct lynn_model *m = NULL;
	struct lynn_seq *seq = NULL;
	struct lynn_lora *lora = NULL;
	struct lynn_sampler *smp = NULL;
	int32_t *ids = NULL;
	size_t n_ids = 0;
	float *logits = NULL;
	int opt, status = 0;

	lynn_sample_params_init(&sp);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
		if (cmd_common_opt(opt))
			continue;
		switch (opt) {
		case 'm': model = optarg; break;
		case 'a': adapter = optarg; break;
		case 'p': prompt = optarg; break;
		case 'M': messages = optarg; break;
		case 'i': ids_s = optarg; break;
		case 'n':
			if (parse_long("--max-tokens", optarg, 0, 1L << 30, &max_tokens))
				return 2;
			break;
		case 'T':
			if (parse_float("--temperature", optarg, &sp.temperature))
				return 2;
			break;
		case 'P':
			if (parse_float("--top-p", optarg, &sp.top_p))
				return 2;
			break;
		case 'K':
			if (parse_long("--top-k", optarg, 0, 1L << 30, &v))
				return 2;
			sp.top_k = (int)v;
			break;
		case 'N':
			if (parse_float("--min-p", optarg, &sp.min_p))
				return 2;
			break;
		case 's': {
			char *end;
			unsigned long long sv = strtoull(optarg, &end, 10);
			if (!*optarg || *end || optarg[0] == '-')
				return cmd_usage_error("generate", "--seed: '%s' is not a non-negative integer",
						       optarg);
			sp.seed = sv;
			break;
		}
		case 'k': break; /* enable_thinking: used with the chat template */
		case 'r': break;
		case 'I': print_ids = true; break;
		case 't':
			if (parse_long("--threads", optarg, 1, 4096, &threads))
				return 2;
			break;
		case 'h': usage(stdout); return 0;
		default: return cmd_usage_error("generate", "unknown option");
		}
	}
	if (optind < argc)
		return cmd_usage_error("generate", "unexpected argument '%s'", argv[optind]);
	if (!model)
		return cmd_usage_error("generate", "--model is required");
	if (!!prompt + !!messages + !!ids_s != 1)
		return cmd_usage_error("generate", "give exactly one of --prompt, --messages, --ids");
	if (!ids_s) {
		lynn_errf(&err, -LYNN_EUNSUPPORTED,
			  "generate: text prompts need the tokenizer, not in this build; use --ids");
		return cmd_fail(&err);
	}
	if (!print_ids) {
		lynn_errf(&err, -LYNN_EUNSUPPORTED,
			  "generate: text output needs the tokenizer, not in this build; use --print-ids");
		return cmd_fail(&err);
	}
	if (lynn_parse_ids(ids_s, &ids, &n_ids, &err)) {
		status = cmd_fail(&err);
		goto out;
	}
	if (n_ids == 0) {
		status = cmd_usage_error("generate", "--ids: no token ids");
		goto out;
	}
	struct lynn_model_opts mo = { .n_threads = (int)threads };
	double t0 = now_s();
	m = lynn_model_open(model, &mo, &err);
	if (!m || (adapter && !(lora = lynn_model_lora_load(m, adapter, &err))) ||
	    !(seq = lynn_seq_create(m, &err)) ||
	    !(smp = lynn_sampler_create(&sp, lynn_model_n_vocab(m), &err))) {
		status = cmd_fail(&err);
		goto out;
	}
	const struct lynn_config *cfg = lynn_model_config(m);
	logits = malloc((size_t)lynn_model_n_vocab(m) * sizeof *logits);
	if (!logits) {
		lynn_errf(&err, -LYNN_ENOMEM, "generate: out of memory");
		status = cmd_fail(&err);
		goto out;
	}
	double t1 = now_s(), t_first = 0;
	long n_gen = 0;
	if (max_tokens > 0 && lynn_model_prefill(m, seq, ids, (int64_t)n_ids, false, logits, &err)) {
		status = cmd_fail(&err);
		goto out;
	}
	while (n_gen < max_tokens) {
		int32_t tok = lynn_sampler_sample(smp, logits);
		n_gen++;
		if (n_gen == 1)
			t_first = now_s();
		printf("%s%d", n_gen > 1 ? " " : "", tok);
		fflush(stdout);
		if (is_eos(cfg, tok) || n_gen == max_tokens)
			break;
		if (lynn_model_decode(m, 1, &seq, &tok, logits, &err)) {
			printf("\n");
			status = cmd_fail(&err);
			goto out;
		}
	}
	printf("\n");
	double t2 = now_s();
	lynn_log_info("generate: load %.2f s, prompt %zu tokens, time to first token %.3f s "
		      "(%.1f tok/s prefill), %ld tokens, decode %.2f tok/s",
		      t1 - t0, n_ids, n_gen ? t_first - t1 : 0.0,
		      n_gen && t_first > t1 ? (double)n_ids / (t_first - t1) : 0.0, n_gen,
		      n_gen > 1 && t2 > t_first ? (double)(n_gen - 1) / (t2 - t_first) : 0.0);
out:
	free(logits);
	free(ids);
	lynn_sampler_free(smp);
	lynn_seq_free(seq);
	lynn_model_close(m);
	lynn_lora_free(lora);
	return status;
}
