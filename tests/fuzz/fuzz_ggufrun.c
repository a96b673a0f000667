/*
 * fuzz_ggufrun.c - libFuzzer target for the GGUF binding (src/model/
 * model_gguf.c): the input is a list of byte patches (u16 offset, u8 value)
 * applied to the metadata and tensor infos of the bundled
 * tests/fixtures/gguf/tiny-q8_0.gguf (run from the repository root), so the
 * mutations reach the binder's checks (architecture, keys, names, shapes,
 * types) rather than stopping at the magic. The fixture gets the model
 * maker's sampling keys first (general.sampling.*, as llama.cpp's converter
 * writes them), so that patches reach their reading too. Opening must fail
 * with an error or bind weights the forward pass then reads only inside the
 * file (ASan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "lynn/gguf.h"
#include "lynn/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *base;
static size_t base_len;

#define KVS 256 /* the bytes put before the fixture's pairs: the data section moves by as much */

static void put(uint8_t *b, size_t *n, const void *p, size_t len)
{
	memcpy(b + *n, p, len);
	*n += len;
}

/* temp, top_p and min_p as float32, top_k as int32, then a string that
 * pads the five pairs to KVS bytes */
static void sampling_kvs(uint8_t *b)
{
	static const char *const key[5] = { "general.sampling.temp", "general.sampling.top_p",
					    "general.sampling.min_p", "general.sampling.top_k", "pad" };
	const float fv[3] = { 0.6f, 0.95f, 0.0f };
	const int32_t top_k = 20;
	size_t n = 0;
	for (int i = 0; i < 5; i++) {
		uint64_t l = strlen(key[i]);
		uint32_t type = i < 3 ? LYNN_GGUF_FLOAT32 : i == 3 ? LYNN_GGUF_INT32 : LYNN_GGUF_STRING;
		put(b, &n, &l, 8);
		put(b, &n, key[i], l);
		put(b, &n, &type, 4);
		if (i < 3)
			put(b, &n, &fv[i], 4);
		else if (i == 3)
			put(b, &n, &top_k, 4);
	}
	uint64_t pl = KVS - n - 8;
	put(b, &n, &pl, 8);
	memset(b + n, 'x', pl);
}

static int setup(void)
{
	if (base)
		return 0;
	FILE *f = fopen("tests/fixtures/gguf/tiny-q8_0.gguf", "rb");
	if (!f)
		return -1;
	fseek(f, 0, SEEK_END);
	size_t n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	base = malloc(n + KVS);
	/* magic, version, tensor count, kv count, then the pairs */
	if (!base || n < 24 || fread(base, 1, 24, f) != 24 || fread(base + 24 + KVS, 1, n - 24, f) != n - 24) {
		fclose(f);
		return -1;
	}
	fclose(f);
	uint64_t nkv;
	memcpy(&nkv, base + 16, 8);
	nkv += 5;
	memcpy(base + 16, &nkv, 8);
	sampling_kvs(base + 24);
	base_len = n + KVS;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[] = "/tmp/lynn-fuzz-ggufrun-XXXXXX.gguf";
	struct lynn_err err;
	if (setup())
		abort();
	/* the metadata and tensor infos end before the data section (24448 in
	 * the fixture, then KVS more) */
	size_t hdr = base_len < 24448 + KVS ? base_len : 24448 + KVS;
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
