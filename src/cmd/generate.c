/* generate.c - `lynn generate` (SPEC §2): prefill a prompt, then decode one
 * token at a time with the sampler, streaming the result to stdout and
 * stats to stderr. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "lynn/buf.h"
#include "lynn/chat.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/log.h"
#include "lynn/lora.h"
#include "lynn/model.h"
#include "lynn/sample.h"
#include "lynn/tok.h"
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

static bool is_eos(const struct lynn_config *c, const struct lynn_tok *tok, int32_t id)
{
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos_ids[i] == id)
			return true;
	return tok && lynn_tok_is_eog(tok, id);
}

/* The prompt's ids from text: --prompt (a user message, or the raw text
 * with --raw) or --messages (a JSON array), rendered with the model's chat
 * template (enable_thinking from --think, generation prompt added), then
 * encoded (special tokens written in the text are matched whole). */
static int text_prompt(const char *model, const struct lynn_tok *tok, const char *prompt,
		       const char *messages, bool raw, bool think, struct lynn_tok_ids *ids,
		       struct lynn_err *err)
{
	struct lynn_chat_template *t = NULL;
	char *msgs = NULL, *text = NULL;
	size_t len = 0;
	int rc;
	if (raw) {
		rc = lynn_tok_encode(tok, prompt, strlen(prompt), 0, ids, err);
		goto out;
	}
	if (prompt) {
		cJSON *arr = cJSON_CreateArray(), *msg = cJSON_CreateObject();
		cJSON_AddItemToArray(arr, msg);
		cJSON_AddStringToObject(msg, "role", "user");
		cJSON_AddStringToObject(msg, "content", prompt);
		msgs = cJSON_PrintUnformatted(arr);
		cJSON_Delete(arr);
		if (!msgs) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "generate: out of memory");
			goto out;
		}
	} else if ((rc = lynn_file_read(messages, 64u << 20, &msgs, &len, err))) {
		goto out;
	}
	if (!(t = lynn_chat_template_load(model, err))) {
		rc = err->code;
		goto out;
	}
	struct lynn_chat_input in = { .messages_json = msgs, .add_generation_prompt = true,
				      .enable_thinking = think ? 1 : 0 };
	if ((rc = lynn_chat_render(t, &in, &text, &len, err)))
		goto out;
	rc = lynn_tok_encode(tok, text, len, 0, ids, err);
out:
	lynn_chat_template_free(t);
	free(msgs);
	free(text);
	return rc;
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
	bool print_ids = false, raw = false, think = false;
	struct lynn_tok *tok = NULL;
	struct lynn_tok_ids tids = LYNN_TOK_IDS_INIT;
	struct lynn_buf text = LYNN_BUF_INIT;
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
		case 'k': think = true; break;
		case 'r': raw = true; break;
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
	if (raw && messages)
		return cmd_usage_error("generate", "--raw goes with --prompt (messages need the template)");
	if (!ids_s || !print_ids) { /* text in or out: the tokenizer */
		tok = lynn_tok_load(model, &err);
		if (!tok) {
			status = cmd_fail(&err);
			fprintf(stderr, "lynn generate: text %s needs the model's tokenizer; use --ids%s\n",
				ids_s ? "output" : "input", ids_s ? " with --print-ids" : "");
			goto out;
		}
	}
	if (ids_s) {
		if (lynn_parse_ids(ids_s, &ids, &n_ids, &err)) {
			status = cmd_fail(&err);
			goto out;
		}
	} else {
		if (text_prompt(model, tok, prompt, messages, raw, think, &tids, &err)) {
			status = cmd_fail(&err);
			goto out;
		}
		ids = tids.ids;
		n_ids = tids.n;
		tids.ids = NULL;
	}
	if (n_ids == 0) {
		status = cmd_usage_error("generate", "the prompt has no tokens");
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
	struct lynn_tok_stream ts;
	if (tok)
		lynn_tok_stream_init(&ts, tok, LYNN_TOK_F_SKIP_SPECIAL);
	double t1 = now_s(), t_first = 0;
	long n_gen = 0;
	if (max_tokens > 0 && lynn_model_prefill(m, seq, ids, (int64_t)n_ids, false, logits, &err)) {
		status = cmd_fail(&err);
		goto out;
	}
	while (n_gen < max_tokens) {
		int32_t id = lynn_sampler_sample(smp, logits);
		n_gen++;
		if (n_gen == 1)
			t_first = now_s();
		bool stop = is_eos(cfg, tok, id) || n_gen == max_tokens;
		if (print_ids) {
			printf("%s%d", n_gen > 1 ? " " : "", id);
		} else if (!is_eos(cfg, tok, id)) {
			lynn_buf_reset(&text);
			if (lynn_tok_stream_push(&ts, id, &text, &err)) {
				status = cmd_fail(&err);
				goto out;
			}
			if (stop)
				lynn_tok_stream_flush(&ts, &text);
			fwrite(text.data ? text.data : "", 1, text.len, stdout);
		}
		fflush(stdout);
		if (stop)
			break;
		if (lynn_model_decode(m, 1, &seq, &id, logits, &err)) {
			printf("\n");
			status = cmd_fail(&err);
			goto out;
		}
	}
	if (!print_ids && tok) { /* a pending partial character at the end */
		lynn_buf_reset(&text);
		lynn_tok_stream_flush(&ts, &text);
		fwrite(text.data ? text.data : "", 1, text.len, stdout);
	}
	printf("\n");
	fflush(stdout);
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
	lynn_tok_free(tok);
	lynn_tok_ids_release(&tids);
	lynn_buf_release(&text);
	return status;
}
