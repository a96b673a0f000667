/*
 * fuzz_ggufrun.c - libFuzzer target for the GGUF binding (src/model/
 * model_gguf.c): the input is a list of byte patches (u16 offset, u8 value)
 * applied to the metadata and tensor infos of the bundled
 * tests/fixtures/gguf/tiny-q8_0.gguf (run from the repository root), so the
 * mutations reach the binder's checks (architecture, keys, names, shapes,
 * types) rather than stopping at the magic. Opening must fail with an error
 * or bind weights the forward pass then reads only inside the file (ASan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "lynn/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *base;
static size_t base_len;

static int setup(void)
{
	if (base)
		return 0;
	FILE *f = fopen("tests/fixtures/gguf/tiny-q8_0.gguf", "rb");
	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	base_len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	base = malloc(base_len);
	if (!base || fread(base, 1, base_len, f) != base_len) {
		fclose(f);
		return -1;
	}
	fclose(f);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[] = "/tmp/lynn-fuzz-ggufrun-XXXXXX.gguf";
	struct lynn_err err;
	if (setup())
		abort();
	/* the metadata and tensor infos end before the data section (24448 here) */
	size_t hdr = base_len < 24448 ? base_len : 24448;
	uint8_t *img = malloc(base_len);
	if (!img)
		return 0;
	memcpy(img, base, base_len);
	for (size_t i = 0; i + 3 <= size; i += 3) {
		size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % hdr;
		img[off] = data[i + 2];
	}
	if (fuzz_write_tmps(path, 5, img, base_len)) {
		free(img);
		return 0;
	}
	free(img);
	struct lynn_model_opts o = { .n_threads = 1 };
	fuzz_model_run(lynn_model_open(path, &o, &err));
	unlink(path);
	return 0;
}
