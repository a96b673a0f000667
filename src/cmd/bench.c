/*
 * bench.c - `lynn bench`: the serving throughput suite (SPEC §7).
 *
 * Streamed chat completions against an OpenAI-compatible endpoint (vLLM,
 * SGLang, llama.cpp's server) at each concurrency level in turn, with a
 * synthetic prompt and ignore_eos so every request generates max_tokens;
 * src/eval/bench.c measures. The API key comes from LYNN_API_KEY or
 * OPENAI_API_KEY and is never printed.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/bench.h"
#include "lynn/client.h"
#include "lynn/json.h"
#include "lynn/log.h"

static const char usage[] =
	"usage: lynn bench --endpoint URL [--model NAME] [--concurrency 1,4,16]\n"
	"                  [--prompt-tokens 512] [--max-tokens 128] [--requests N] [--json]\n"
	"                  [--out FILE] [--timeout SECONDS] [-q|-v]\n"
	"\n"
	"Throughput of an OpenAI-compatible endpoint: at each concurrency, N streamed chat\n"
	"completions (a synthetic prompt of about --prompt-tokens words, ignore_eos, greedy)\n"
	"with that many in flight. Reports per level: mean / p50 / p90 time to first token,\n"
	"per-stream tokens/s after the first token, aggregate tokens/s.\n"
	"\n"
	"  --endpoint URL   the base URL (http://host:port/v1) or its /chat/completions\n"
	"  --model NAME     default: the first id of GET /models\n"
	"  --requests N     per level (default 4 x the concurrency, at least 8)\n"
	"  --json           print the lynn-bench-v1 report instead of the table\n"
	"  --out FILE       also write the report (atomically)\n"
	"API key: LYNN_API_KEY, else OPENAI_API_KEY (never printed).\n"
	"\n"
	"exit: 0 every request succeeded, 2 bad arguments, 3 a request failed or the\n"
	"endpoint is unreachable\n";

/* "1,4,16" -> levels (1..4096 each, at most 16 of them) */
static int parse_levels(const char *s, int *lv, int *n)
{
	*n = 0;
	for (const char *p = s; *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 1 || v > 4096 || *n == 16 || (*end && *end != ','))
			return cmd_usage_error("bench", "--concurrency: '%s' is not a list like 1,4,16", s);
		lv[(*n)++] = (int)v;
		p = *end ? end + 1 : end;
	}
	return *n ? 0 : cmd_usage_error("bench", "--concurrency: empty list");
}

int cmd_bench(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "endpoint", required_argument, NULL, 'e' },
		{ "model", required_argument, NULL, 'm' },
		{ "concurrency", required_argument, NULL, 'c' },
		{ "prompt-tokens", required_argument, NULL, 'p' },
		{ "max-tokens", required_argument, NULL, 'n' },
		{ "requests", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "out", required_argument, NULL, 'o' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *endpoint = NULL, *model = NULL, *out = NULL, *conc = "1,4,16";
	long prompt_tokens = 512, max_tokens = 128, requests = 0;
	double timeout = 600;
	bool json = false;
	int c, levels[16], n_levels, status = 0;
	struct lynn_err err = { 0 };
	struct lynn_bench_level lv[16];
	struct lynn_client *cl = NULL;
	char *url = NULL, *base = NULL;
	cJSON *rep = NULL;

	optind = 1;
	while ((c = getopt_long(argc, argv, "hqv", longopts, NULL)) != -1) {
		if (cmd_common_opt(c))
			continue;
		switch (c) {
		case 'e': endpoint = optarg; break;
		case 'm': model = optarg; break;
		case 'c': conc = optarg; break;
		case 'j': json = true; break;
		case 'o': out = optarg; break;
		case 'p':
			if (cmd_opt_long("bench", "--prompt-tokens", optarg, 1, 1 << 20, &prompt_tokens))
				return 2;
			break;
		case 'n':
			if (cmd_opt_long("bench", "--max-tokens", optarg, 1, 1 << 20, &max_tokens))
				return 2;
			break;
		case 'r':
			if (cmd_opt_long("bench", "--requests", optarg, 1, 1 << 20, &requests))
				return 2;
			break;
		case 't':
			if (cmd_opt_double("bench", "--timeout", optarg, 0.1, 86400, &timeout))
				return 2;
			break;
		case 'h': fputs(usage, stdout); return 0;
		default: return cmd_usage_error("bench", "unknown option");
		}
	}
	if (optind < argc)
		return cmd_usage_error("bench", "unexpected argument '%s'", argv[optind]);
	if (!endpoint)
		return cmd_usage_error("bench", "--endpoint is required");
	if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8))
		return cmd_usage_error("bench", "--endpoint: '%s' is not an http(s) URL", endpoint);
	if (parse_levels(conc, levels, &n_levels))
		return 2;

	/* the base (for GET /models) and the chat-completions URL */
	size_t el = strlen(endpoint);
	while (el && endpoint[el - 1] == '/')
		el--;
	const char *suffix = "/chat/completions";
	size_t sl = strlen(suffix);
	bool full = el > sl && !strncmp(endpoint + el - sl, suffix, sl);
	base = strndup(endpoint, full ? el - sl : el);
	if (!base || asprintf(&url, "%s%s", base, suffix) < 0) {
		url = NULL; /* (undefined after a failure) */
		lynn_errf(&err, -LYNN_ENOMEM, "bench: out of memory");
		goto fail;
	}
	const char *key = getenv("LYNN_API_KEY");
	if (!key || !*key)
		key = getenv("OPENAI_API_KEY");
	if (!model) {
		struct lynn_client_opts co = { .urls = base, .concurrency = 1, .api_key = key };
		cl = lynn_client_create(&co, &err);
		if (!cl)
			goto fail;
		model = lynn_client_model(cl);
	}
	struct lynn_bench_opts bo = {
		.url = url, .model = model, .api_key = key, .prompt_tokens = (int)prompt_tokens,
		.max_tokens = (int)max_tokens, .timeout_s = timeout,
	};
	for (int i = 0; i < n_levels; i++) {
		bo.requests = requests ? (int)requests : (4 * levels[i] > 8 ? 4 * levels[i] : 8);
		if (lynn_bench_level_run(&bo, levels[i], &lv[i], &err))
			goto fail;
		lynn_log_info("bench: concurrency %d: %d/%d ok, %.1f tokens/s", levels[i], lv[i].n_ok,
			      lv[i].n_requests, lv[i].aggregate_tps);
		if (lv[i].n_failed)
			status = 3;
	}
	rep = lynn_bench_report(&bo, lv, n_levels);
	if (out && lynn_json_write(out, rep, &err))
		goto fail;
	if (json) {
		char *s = lynn_json_print_pretty(rep);
		if (s)
			puts(s);
		free(s);
	} else {
		printf("%s, model %s, prompt ~%ld words, %ld tokens a request\n", url, model,
		       prompt_tokens, max_tokens);
		printf("%11s %9s %10s %10s %10s %14s %13s\n", "concurrency", "ok", "ttft mean", "ttft p50",
		       "ttft p90", "stream tok/s", "total tok/s");
		for (int i = 0; i < n_levels; i++)
			printf("%11d %4d/%-4d %9.3fs %9.3fs %9.3fs %14.1f %13.1f\n", lv[i].concurrency,
			       lv[i].n_ok, lv[i].n_requests, lv[i].ttft_mean_s, lv[i].ttft_p50_s,
			       lv[i].ttft_p90_s, lv[i].stream_tps_mean, lv[i].aggregate_tps);
	}
	for (int i = 0; i < n_levels; i++)
		if (lv[i].n_failed)
			fprintf(stderr, "lynn: error: bench: concurrency %d: %d of %d requests failed; first: %s\n",
				lv[i].concurrency, lv[i].n_failed, lv[i].n_requests, lv[i].first_error);
	goto done;
fail:
	status = cmd_fail(&err);
done:
	cJSON_Delete(rep);
	lynn_client_free(cl);
	free(url);
	free(base);
	return status;
}
