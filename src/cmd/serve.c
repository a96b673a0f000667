/* serve.c - `lynn serve` (SPEC §7): the OpenAI-compatible server
 * (include/lynn/serve.h) on a model folder or .gguf, until SIGTERM or
 * SIGINT, which drain it: no new connections, open requests finish (up to
 * --drain-timeout), then exit 0. */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/engine.h"
#include "lynn/fs.h"
#include "lynn/log.h"
#include "lynn/model.h"
#include "lynn/serve.h"

static const char usage[] =
	"usage: lynn serve --model PATH [--adapter DIR] [--host 127.0.0.1] [--port 8080]\n"
	"                  [--served-model-name NAME] [--parallel 4] [--ctx-size 4096]\n"
	"                  [--max-queue 64] [--max-prefill 512] [--prefix-cache 4096]\n"
	"                  [--api-key KEY] [--metrics] [--drain-timeout 30]\n"
	"                  [--generation-config auto|none] [--threads N] [--device D] [-q|-v]\n"
	"\n"
	"OpenAI-compatible server: GET /health, GET /v1/models, POST /v1/chat/completions\n"
	"and /v1/completions (streamed or not), /tokenize, /detokenize, /apply-template,\n"
	"GET /metrics. Up to --parallel requests are generated together (continuous\n"
	"batching); --max-queue more wait, beyond that 503. SIGTERM/SIGINT drain: new\n"
	"connections are refused, running requests finish, then the server exits 0.\n"
	"\n"
	"  --model PATH            a model folder (BF16/F16/F32/NVFP4) or a .gguf file\n"
	"  --served-model-name N   the model id clients use (default: the folder's or file's name)\n"
	"  --port N                0 = any free port (the line on stderr names it)\n"
	"  --ctx-size N            tokens per request, prompt + completion\n"
	"  --max-prefill N         prompt tokens per batch step (long prompts are fed in\n"
	"                          pieces between the running requests' tokens)\n"
	"  --prefix-cache MB       memory for the states kept between requests (host or GPU,\n"
	"                          where the model runs): a prompt that begins with a kept\n"
	"                          one's tokens (the conversation so far) prefills only the\n"
	"                          rest; 0 = off\n"
	"  --api-key KEY           require Authorization: Bearer KEY (also LYNN_API_KEY);\n"
	"                          /health stays open\n"
	"  --metrics               serve Prometheus counters at GET /metrics\n"
	"  --drain-timeout S       seconds a drain waits for running requests (0 = no limit)\n"
	"  --generation-config G   auto (default): a request's missing temperature, top_p,\n"
	"                          top_k and min_p come from the model's generation_config.json\n"
	"                          (a .gguf: its general.sampling.* keys), as vLLM and\n"
	"                          llama-server do; none: OpenAI's (temperature 1, top_p 1)\n"
	"\n"
	"exit: 0 drained, 2 bad arguments or model, 3 runtime failure\n";

int cmd_serve(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "adapter", required_argument, NULL, 'a' },
		{ "host", required_argument, NULL, 'H' },
		{ "port", required_argument, NULL, 'p' },
		{ "served-model-name", required_argument, NULL, 'n' },
		{ "parallel", required_argument, NULL, 'P' },
		{ "ctx-size", required_argument, NULL, 'c' },
		{ "max-queue", required_argument, NULL, 'Q' },
		{ "max-prefill", required_argument, NULL, 'F' },
		{ "prefix-cache", required_argument, NULL, 'C' },
		{ "api-key", required_argument, NULL, 'k' },
		{ "metrics", no_argument, NULL, 'M' },
		{ "drain-timeout", required_argument, NULL, 'd' },
		{ "generation-config", required_argument, NULL, 'g' },
		{ "threads", required_argument, NULL, 't' },
		{ "device", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	struct lynn_server_opts so = { .host = "127.0.0.1", .port = 8080, .parallel = 4,
				       .max_queue = 64, .ctx_size = 4096, .max_prefill = 512,
				       .prefix_cache = (size_t)4096 << 20 };
	const char *model = NULL, *adapter = NULL, *key = NULL;
	long v, threads = 0;
	enum lynn_device device = LYNN_DEVICE_AUTO;
	double drain = 30;
	bool gen_auto = true;
	struct lynn_err err = { 0 };
	int opt;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
		if (cmd_common_opt(opt))
			continue;
		switch (opt) {
		case 'm': model = optarg; break;
		case 'a': adapter = optarg; break;
		case 'H': so.host = optarg; break;
		case 'n': so.model_name = optarg; break;
		case 'k': key = optarg; break;
		case 'M': so.metrics = true; break;
		case 'p':
			if (cmd_opt_long("serve", "--port", optarg, 0, 65535, &v))
				return 2;
			so.port = (int)v;
			break;
		case 'P':
			if (cmd_opt_long("serve", "--parallel", optarg, 1, 256, &v))
				return 2;
			so.parallel = (int)v;
			break;
		case 'c':
			if (cmd_opt_long("serve", "--ctx-size", optarg, 2, 1L << 24, &v))
				return 2;
			so.ctx_size = (int)v;
			break;
		case 'Q':
			if (cmd_opt_long("serve", "--max-queue", optarg, 0, 1L << 16, &v))
				return 2;
			so.max_queue = (int)v;
			break;
		case 'F':
			if (cmd_opt_long("serve", "--max-prefill", optarg, 1, 1L << 20, &v))
				return 2;
			so.max_prefill = (int)v;
			break;
		case 'C':
			if (cmd_opt_long("serve", "--prefix-cache", optarg, 0, 1L << 30, &v))
				return 2;
			so.prefix_cache = (size_t)v << 20;
			break;
		case 'd':
			if (cmd_opt_double("serve", "--drain-timeout", optarg, 0, 1e6, &drain))
				return 2;
			break;
		case 't':
			if (cmd_opt_long("serve", "--threads", optarg, 1, 4096, &threads))
				return 2;
			break;
		case 'D':
			if (cmd_opt_device("serve", optarg, &device))
				return 2;
			break;
		case 'g':
			if (strcmp(optarg, "auto") && strcmp(optarg, "none"))
				return cmd_usage_error("serve", "--generation-config must be auto or none, not '%s'",
						       optarg);
			gen_auto = !strcmp(optarg, "auto");
			break;
		case 'h': fputs(usage, stdout); return 0;
		default: return cmd_usage_error("serve", "unknown option");
		}
	}
	if (optind < argc)
		return cmd_usage_error("serve", "unexpected argument '%s'", argv[optind]);
	if (!model)
		return cmd_usage_error("serve", "--model is required");
	if (!key)
		key = getenv("LYNN_API_KEY");
	so.api_key = key;
	if (!so.model_name)
		so.model_name = lynn_path_base(model);

	/* the signals are taken by sigwait below: blocked before any thread starts */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct lynn_engine_opts eo = { .n_threads = (int)threads, .adapter = adapter, .device = device };
	struct lynn_engine *eng = lynn_engine_open(model, &eo, &err);
	if (!eng)
		return cmd_fail(&err);
	/* the model maker's sampling, for what a request leaves out */
	struct lynn_sample_params def;
	const struct lynn_config *cfg = lynn_model_config(lynn_engine_model(eng));
	const bool folder = lynn_dir_exists(model);
	char *gen_path = NULL; /* where the fields came from, for messages */
	if (folder ? !(gen_path = lynn_path_join(model, "generation_config.json"))
		   : asprintf(&gen_path, "%s (general.sampling.*)", model) < 0) {
		lynn_engine_close(eng);
		lynn_errf(&err, -LYNN_ENOMEM, "serve: out of memory");
		return cmd_fail(&err);
	}
	int rc = lynn_server_sampling_defaults(gen_auto ? cfg : NULL, gen_path, &def, &err);
	if (!rc && gen_auto && (!isnan(cfg->gen_temperature) || !isnan(cfg->gen_top_p) || !isnan(cfg->gen_min_p) ||
				!isnan(cfg->gen_repetition_penalty) || cfg->gen_top_k >= 0))
		lynn_log_info("serve: sampling defaults from %s: temperature %g, top_p %g, top_k %d, min_p %g, "
			      "repetition_penalty %g (a request's own fields win; --generation-config none: "
			      "OpenAI's)", gen_path, def.temperature, def.top_p, def.top_k, def.min_p,
			      def.repetition_penalty);
	free(gen_path);
	if (rc) {
		lynn_engine_close(eng);
		return cmd_fail(&err);
	}
	so.defaults = &def;
	struct lynn_server *srv = lynn_server_start(eng, &so, &err);
	if (!srv) {
		lynn_engine_close(eng);
		return cmd_fail(&err);
	}
	fprintf(stderr, "lynn serve: listening on http://%s%s%s:%d (model '%s', %d parallel, ctx %d, "
		"prefix cache %zu MB%s)\n",
		strchr(so.host, ':') ? "[" : "", so.host, strchr(so.host, ':') ? "]" : "",
		lynn_server_port(srv), so.model_name, so.parallel, so.ctx_size, so.prefix_cache >> 20,
		so.api_key && so.api_key[0] ? ", API key required" : "");
	fflush(stderr);

	int sig = 0;
	sigwait(&sigs, &sig);
	lynn_log_info("serve: %s: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	int left = lynn_server_drain(srv, drain);
	if (left)
		lynn_log_warn("serve: drain timed out after %g s: %d requests cancelled", drain, left);
	lynn_server_stop(srv);
	lynn_engine_close(eng);
	fprintf(stderr, "lynn serve: stopped\n");
	return 0;
}
