/* logits.c - `lynn logits` (SPEC §2): the parity tool. Runs the model on a
 * list of token ids and writes one F32 tensor `logits` [T, vocab] (or
 * [1, vocab] with --last) to a safetensors file. */
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "lynn/fs.h"
#include "lynn/log.h"
#include "lynn/lora.h"
#include "lynn/model.h"
#include "lynn/st.h"
#include "lynn/util.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: lynn logits --model PATH --ids \"1 2 3\" --out FILE.safetensors [--last]\n"
		   "                   [--adapter DIR] [--threads N] [--device D] [-q|-v]\n\n"
		   "Run the model on the token ids (one prefill) and write the logits as one F32\n"
		   "tensor `logits` of shape [T, vocab] ([1, vocab] with --last).\n\n"
		   "  --model PATH     model folder (config.json + safetensors) or a qwen35moe\n"
		   "                   .gguf file (F32/F16/BF16/Q8_0/k-quants, kept quantized)\n"
		   "  --ids \"1 2 3\"    token ids, separated by spaces or commas\n"
		   "  --out FILE       output .safetensors (written atomically)\n"
		   "  --last           only the last position's logits\n"
		   "  --adapter DIR    apply a PEFT LoRA adapter (unmerged)\n"
		   "  --threads N      worker threads (default: all cores)\n"
		   "  --device D       cpu, cuda or auto (default auto: the GPU when there is one)\n");
}

/* Write `logits` [rows, vocab] F32 to `out` through the st writer (which
 * writes <dir>/model.safetensors atomically) in a temp folder beside out. */
static int write_logits(const char *out, const float *logits, int64_t rows, int64_t vocab,
			struct lynn_err *err)
{
	char *copy = strdup(out), *tmpl = NULL, *src = NULL;
	struct lynn_st_writer *w = NULL;
	int rc = -LYNN_ENOMEM;
	int64_t shape[2] = { rows, vocab };
	if (!copy)
		goto out;
	const char *dir = dirname(copy);
	size_t n = strlen(dir) + 32;
	tmpl = malloc(n);
	if (!tmpl)
		goto out;
	snprintf(tmpl, n, "%s/.lynn-logits-XXXXXX", dir);
	if (!mkdtemp(tmpl)) {
		rc = lynn_errf(err, -LYNN_EIO, "logits: cannot create a temp folder beside '%s'", out);
		free(tmpl);
		tmpl = NULL;
		goto out;
	}
	w = lynn_st_writer_create(tmpl, 0, err);
	if (!w) {
		rc = err ? err->code : -LYNN_EIO;
		goto out;
	}
	if ((rc = lynn_st_writer_declare(w, "logits", LYNN_DTYPE_F32, 2, shape, err)) ||
	    (rc = lynn_st_writer_write(w, logits, (size_t)(rows * vocab) * sizeof(float), err)) ||
	    (rc = lynn_st_writer_finish(w, err)))
		goto out;
	src = lynn_path_join(tmpl, "model.safetensors");
	if (!src) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "logits: out of memory");
		goto out;
	}
	if (rename(src, out) != 0) {
		rc = lynn_errf(err, -LYNN_EIO, "logits: cannot write '%s'", out);
		unlink(src);
		goto out;
	}
	rc = 0;
out:
	lynn_st_writer_free(w);
	if (tmpl)
		rmdir(tmpl);
	free(src);
	free(tmpl);
	free(copy);
	if (rc == -LYNN_ENOMEM && err && !err->code)
		lynn_errf(err, rc, "logits: out of memory");
	return rc;
}

int cmd_logits(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "ids", required_argument, NULL, 'i' },
		{ "out", required_argument, NULL, 'o' },
		{ "last", no_argument, NULL, 'l' },
		{ "adapter", required_argument, NULL, 'a' },
		{ "threads", required_argument, NULL, 't' },
		{ "device", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *model = NULL, *ids_s = NULL, *out = NULL, *adapter = NULL;
	bool last = false;
	int threads = 0, opt, status = 0;
	enum lynn_device device = LYNN_DEVICE_AUTO;
	struct lynn_err err = { 0 };
	struct lynn_model *m = NULL;
	struct lynn_seq *seq = NULL;
	struct lynn_lora *lora = NULL;
	int32_t *ids = NULL;
	size_t n_ids = 0;
	float *logits = NULL;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
		if (cmd_common_opt(opt))
			continue;
		switch (opt) {
		case 'm': model = optarg; break;
		case 'i': ids_s = optarg; break;
		case 'o': out = optarg; break;
		case 'l': last = true; break;
		case 'a': adapter = optarg; break;
		case 't': {
			long v;
			if (cmd_opt_long("logits", "--threads", optarg, 1, 4096, &v))
				return 2;
			threads = (int)v;
			break;
		}
		case 'D':
			if (cmd_opt_device("logits", optarg, &device))
				return 2;
			break;
		case 'h': usage(stdout); return 0;
		default: return cmd_usage_error("logits", "unknown option");
		}
	}
	if (optind < argc)
		return cmd_usage_error("logits", "unexpected argument '%s'", argv[optind]);
	if (!model || !ids_s || !out)
		return cmd_usage_error("logits", "--model, --ids and --out are required");
	if (lynn_parse_ids(ids_s, &ids, &n_ids, &err)) {
		status = cmd_fail(&err);
		goto out;
	}
	if (n_ids == 0) {
		status = cmd_usage_error("logits", "--ids: no token ids");
		goto out;
	}
	struct lynn_model_opts mo = { .n_threads = threads, .device = device };
	m = lynn_model_open(model, &mo, &err);
	if (!m || (adapter && !(lora = lynn_model_lora_load(m, adapter, &err))) ||
	    !(seq = lynn_seq_create(m, &err))) {
		status = cmd_fail(&err);
		goto out;
	}
	int64_t V = lynn_model_n_vocab(m), rows = last ? 1 : (int64_t)n_ids;
	logits = malloc((size_t)(rows * V) * sizeof *logits);
	if (!logits) {
		lynn_errf(&err, -LYNN_ENOMEM, "logits: out of memory for %lld x %lld logits",
			  (long long)rows, (long long)V);
		status = cmd_fail(&err);
		goto out;
	}
	if (lynn_model_prefill(m, seq, ids, (int64_t)n_ids, !last, logits, &err) ||
	    write_logits(out, logits, rows, V, &err)) {
		status = cmd_fail(&err);
		goto out;
	}
	lynn_log_info("logits: %zu tokens -> %s [%lld, %lld]", n_ids, out, (long long)rows, (long long)V);
out:
	free(logits);
	free(ids);
	lynn_seq_free(seq);
	lynn_model_close(m);
	lynn_lora_free(lora);
	return status;
}
