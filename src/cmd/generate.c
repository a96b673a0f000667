/* generate.c - `lynn generate` (SPEC §2): prefill a prompt, then decode one
 * token at a time with the sampler, streaming the result to stdout and
 * stats to stderr. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/log.h"
#include "lynn/engine.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/progress.h"
#include "lynn/util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lynn generate --model PATH (--prompt TEXT | --messages FILE | --ids \"1 2 3\")\n"
		"                     [--max-tokens N] [--temperature T] [--top-p P] [--top-k K]\n"
		"                     [--min-p M] [--seed S] [--repetition-penalty R]\n"
		"                     [--presence-penalty P] [--frequency-penalty F]\n"
		"                     [--logit-bias ID:B]... [--stop TEXT]...\n"
		"                     [--think] [--raw] [--print-ids]\n"
		"                     [--adapter DIR] [--threads N] [--device D] [-q|-v]\n\n"
		"Generate from a prompt and stream it to stdout; stats (prompt tokens, time to\n"
		"first token, decode tokens/s) go to stderr. Stops at max-tokens or an eos id\n"
		"(generation_config.json, else config.json; a .gguf --model: its\n"
		"tokenizer.ggml.eos/eot ids, tokenizer and tokenizer.chat_template).\n\n"
		"  --ids \"1 2 3\"      the prompt as token ids (no tokenizer needed)\n"
		"  --prompt TEXT      a user message (chat template unless --raw)\n"
		"  --messages FILE    an OpenAI-style messages array (JSON)\n"
		"  --print-ids        print generated ids instead of text\n"
		"  --max-tokens N     default 256\n"
		"  --temperature T    0 (default) = greedy\n"
		"  --top-k K, --top-p P, --min-p M, --seed S   sampling (seed default 0)\n"
		"  --repetition-penalty R   > 0, 1 = off: a logit of a token of the prompt or\n"
		"                     the output so far is divided by R if > 0, else times R\n"
		"                     (transformers', vLLM's)\n"
		"  --presence-penalty P, --frequency-penalty F   -2..2, 0 = off: OpenAI's; a\n"
		"                     generated token's logit loses P once and F per time\n"
		"  --logit-bias ID:B  add B (-100..100) to token ID's logit; repeatable\n"
		"  --stop TEXT        end the text before TEXT (not printed); up to 16\n"
		"  --think            enable_thinking=true in the chat template\n"
		"  --raw              no chat template\n"
		"  --adapter DIR      apply a PEFT LoRA adapter (unmerged)\n"
		"  --threads N        worker threads (default: all cores)\n"
		"  --device D         cpu, cuda or auto (default auto: the GPU when there is one)\n");
}

static int parse_float(const char *opt, const char *s, double lo, double hi, float *out)
{
	double v;
	if (cmd_opt_double("generate", opt, s, lo, hi, &v))
		return 2;
	*out = (float)v;
	return 0;
}

static void print_id(void *ud, int32_t id)
{
	long *n = ud;
	printf("%s%d", (*n)++ ? " " : "", id);
	fflush(stdout);
}

static void print_text(void *ud, const char *text, size_t len)
{
	(void)ud;
	fwrite(text, 1, len, stdout);
	fflush(stdout);
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
		{ "repetition-penalty", required_argument, NULL, 'R' },
		{ "presence-penalty", required_argument, NULL, 'E' },
		{ "frequency-penalty", required_argument, NULL, 'F' },
		{ "logit-bias", required_argument, NULL, 'B' },
		{ "stop", required_argument, NULL, 'S' },
		{ "think", no_argument, NULL, 'k' },
		{ "raw", no_argument, NULL, 'r' },
		{ "print-ids", no_argument, NULL, 'I' },
		{ "threads", required_argument, NULL, 't' },
		{ "device", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *model = NULL, *adapter = NULL, *prompt = NULL, *messages = NULL, *ids_s = NULL;
	bool print_ids = false;
	long max_tokens = 256, threads = 0, v;
	enum lynn_device device = LYNN_DEVICE_AUTO;
	struct lynn_sample_params sp;
	struct lynn_err err = { 0 };
	struct lynn_engine *eng = NULL;
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	struct lynn_gen_result res = { 0 };
	bool think = false, raw = false;
	long n_out = 0;
	enum { MAX_STOP = 16, MAX_BIAS = 1024 };
	const char *stops[MAX_STOP];
	int n_stop = 0;
	static int32_t bias_ids[MAX_BIAS];
	static float bias[MAX_BIAS];
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
			if (cmd_opt_long("generate", "--max-tokens", optarg, 0, 1L << 30, &max_tokens))
				return 2;
			break;
		case 'T':
			if (parse_float("--temperature", optarg, -HUGE_VAL, HUGE_VAL, &sp.temperature))
				return 2;
			break;
		case 'P':
			if (parse_float("--top-p", optarg, -HUGE_VAL, HUGE_VAL, &sp.top_p))
				return 2;
			break;
		case 'K':
			if (cmd_opt_long("generate", "--top-k", optarg, 0, 1L << 30, &v))
				return 2;
			sp.top_k = (int)v;
			break;
		case 'N':
			if (parse_float("--min-p", optarg, -HUGE_VAL, HUGE_VAL, &sp.min_p))
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
		case 'R':
			if (parse_float("--repetition-penalty", optarg, 0, HUGE_VAL, &sp.repetition_penalty))
				return 2;
			if (!(sp.repetition_penalty > 0))
				return cmd_usage_error("generate", "--repetition-penalty: '%s' is not > 0", optarg);
			break;
		case 'E':
			if (parse_float("--presence-penalty", optarg, -2, 2, &sp.presence_penalty))
				return 2;
			break;
		case 'F':
			if (parse_float("--frequency-penalty", optarg, -2, 2, &sp.frequency_penalty))
				return 2;
			break;
		case 'B': {
			char *colon = strchr(optarg, ':'), *end;
			long id = colon ? strtol(optarg, &end, 10) : -1;
			double b;
			if (!colon || end != colon || colon == optarg || id < 0 || id > INT32_MAX)
				return cmd_usage_error("generate", "--logit-bias: '%s' is not ID:BIAS", optarg);
			if (cmd_opt_double("generate", "--logit-bias", colon + 1, -100, 100, &b))
				return 2;
			if (sp.n_bias == MAX_BIAS)
				return cmd_usage_error("generate", "--logit-bias: at most %d", MAX_BIAS);
			bias_ids[sp.n_bias] = (int32_t)id;
			bias[sp.n_bias++] = (float)b;
			sp.bias_ids = bias_ids;
			sp.bias = bias;
			break;
		}
		case 'S':
			if (!optarg[0] || n_stop == MAX_STOP)
				return cmd_usage_error("generate", "--stop: non-empty, at most %d", MAX_STOP);
			stops[n_stop++] = optarg;
			break;
		case 'k': think = true; break;
		case 'r': raw = true; break;
		case 'I': print_ids = true; break;
		case 't':
			if (cmd_opt_long("generate", "--threads", optarg, 1, 4096, &threads))
				return 2;
			break;
		case 'D':
			if (cmd_opt_device("generate", optarg, &device))
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
	if (raw && !prompt)
		return cmd_usage_error("generate", "--raw applies to --prompt");
	struct lynn_engine_opts eo = { .n_threads = (int)threads, .adapter = adapter, .device = device };
	double t0 = lynn_now();
	eng = lynn_engine_open(model, &eo, &err);
	if (!eng)
		goto fail;
	if (ids_s) {
		if (lynn_parse_ids(ids_s, &ids.ids, &ids.n, &err))
			goto fail;
		ids.cap = ids.n;
		if (ids.n == 0) {
			status = cmd_usage_error("generate", "--ids: no token ids");
			goto out;
		}
	} else if (raw && prompt) {
		if (lynn_engine_encode_text(eng, prompt, &ids, &err))
			goto fail;
	} else if (prompt) {
		if (lynn_engine_encode_prompt(eng, prompt, think, &ids, &err))
			goto fail;
	} else {
		struct lynn_chat_input in = { .add_generation_prompt = true, .enable_thinking = think };
		char *text = NULL;
		size_t len;
		if (lynn_file_read(messages, LYNN_JSON_MAX_SIZE, &text, &len, &err))
			goto fail;
		in.messages_json = text;
		int rc = lynn_engine_encode_chat(eng, &in, &ids, NULL, &err);
		free(text);
		if (rc)
			goto fail;
	}
	if ((!print_ids || n_stop) && !lynn_engine_tok(eng)) {
		lynn_errf(&err, -LYNN_ENOTFOUND,
			  "generate: '%s' has no tokenizer (tokenizer.json, or a .gguf's "
			  "tokenizer.ggml.*): text output and --stop need it (use --print-ids)",
			  model);
		goto fail;
	}
	struct lynn_gen_opts go = { .max_tokens = (int)max_tokens, .sample = sp, .ud = &n_out,
				    .stop = stops, .n_stop = n_stop };
	if (print_ids)
		go.on_token = print_id;
	else
		go.on_text = print_text;
	double t1 = lynn_now();
	if (lynn_engine_generate(eng, ids.ids, ids.n, &go, &res, &err)) {
		printf("\n");
		goto fail;
	}
	printf("\n");
	lynn_log_info("generate: load %.2f s, prompt %zu tokens, time to first token %.3f s "
		      "(%.1f tok/s prefill), %zu tokens, decode %.2f tok/s%s",
		      t1 - t0, ids.n, res.t_prefill_s,
		      res.t_prefill_s > 0 ? (double)ids.n / res.t_prefill_s : 0.0, res.ids.n,
		      res.ids.n > 1 && res.t_decode_s > 0 ? (double)(res.ids.n - 1) / res.t_decode_s : 0.0,
		      res.nonfinite ? " (WARNING: non-finite logits)" : "");
	goto out;
fail:
	status = cmd_fail(&err);
out:
	lynn_gen_result_release(&res);
	lynn_tok_ids_release(&ids);
	lynn_engine_close(eng);
	return status;
}
