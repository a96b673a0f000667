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
#include <unistd.h>

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
	int fd = mkstemps(path, 5);
	if (fd < 0 || write(fd, img, base_len) != (ssize_t)base_len) {
		if (fd >= 0) {
			close(fd);
			unlink(path);
		}
		free(img);
		return 0;
	}
	close(fd);
	free(img);
	struct lynn_model_opts o = { .n_threads = 1 };
	struct lynn_model *m = lynn_model_open(path, &o, &err);
	if (m) {
		struct lynn_seq *s = lynn_seq_create(m, &err);
		int32_t ids[3] = { 0, 1, 2 };
		float *lg = malloc((size_t)lynn_model_n_vocab(m) * sizeof *lg);
		if (s && lg && lynn_model_n_vocab(m) > 2) {
			lynn_model_prefill(m, s, ids, 3, false, lg, &err);
			lynn_model_decode(m, 1, &s, ids, lg, &err);
		}
		free(lg);
		lynn_seq_free(s);
		lynn_model_close(m);
	}
	unlink(path);
	return 0;
}
