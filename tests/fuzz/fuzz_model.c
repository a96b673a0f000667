/*
 * fuzz_model.c - libFuzzer target for the runner's binding: the input is a
 * config.json placed beside the tiny bundled checkpoint's weights
 * (tests/fixtures/qwen35moe-tiny, run from the repository root); after a NUL
 * byte, the rest is its generation_config.json (none without one). Whatever
 * the files say, opening must either fail with an error or bind weights that
 * the forward pass then reads only inside their tensors (ASan checks), and
 * lynn serve's sampling defaults from the config are taken or refused.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "lynn/model.h"
#include "lynn/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[PATH_MAX];

static int setup(void)
{
	char weights[PATH_MAX], link[PATH_MAX + 32];
	if (dir[0])
		return 0;
	if (!realpath("tests/fixtures/qwen35moe-tiny/model.safetensors", weights))
		return -1;
	snprintf(dir, sizeof dir, "/tmp/lynn-fuzz-model-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(link, sizeof link, "%s/model.safetensors", dir);
	return symlink(weights, link);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[PATH_MAX + 32], gen[PATH_MAX + 32];
	struct lynn_err err;
	if (setup())
		abort();
	const uint8_t *nul = memchr(data, 0, size);
	size_t n = nul ? (size_t)(nul - data) : size;
	snprintf(path, sizeof path, "%s/config.json", dir);
	snprintf(gen, sizeof gen, "%s/generation_config.json", dir);
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	fwrite(data, 1, n, f);
	fclose(f);
	unlink(gen);
	if (nul) {
		if (!(f = fopen(gen, "wb")))
			abort();
		fwrite(nul + 1, 1, size - n - 1, f);
		fclose(f);
	}
	struct lynn_model_opts o = { .n_threads = 1 };
	struct lynn_model *m = lynn_model_open(dir, &o, &err);
	if (m) {
		struct lynn_sample_params p;
		lynn_server_sampling_defaults(lynn_model_config(m), gen, &p, &err);
	}
	fuzz_model_run(m);
	return 0;
}
