/*
 * fuzz_model.c - libFuzzer target for the runner's binding: the input is a
 * config.json placed beside the tiny bundled checkpoint's weights
 * (tests/fixtures/qwen35moe-tiny, run from the repository root). Whatever the
 * config says, opening must either fail with an error or bind weights that
 * the forward pass then reads only inside their tensors (ASan checks).
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "lynn/model.h"

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
	char path[PATH_MAX + 32];
	struct lynn_err err;
	if (setup())
		abort();
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "wb");
	if (!f)
		abort();
	fwrite(data, 1, size, f);
	fclose(f);
	struct lynn_model_opts o = { .n_threads = 1 };
	fuzz_model_run(lynn_model_open(dir, &o, &err));
	return 0;
}
