/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader: any bytes as a GGUF
 * image; when it opens, walk every key, array element and tensor.
 * Expected: a clear error or a consistent reader; no crash, no sanitizer
 * report, allocations bounded by the input size.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lynn_err err = { 0 };
	struct lynn_gguf *g = lynn_gguf_open_mem("fuzz", data, size, &err);
	volatile size_t sink = 0;
	if (!g)
		return 0;
	for (size_t i = 0; i < lynn_gguf_n_kv(g); i++) {
		const char *key = lynn_gguf_kv_key(g, i);
		struct lynn_gguf_arr a;
		int64_t v;
		double d;
		const char *s;
		size_t n;
		lynn_gguf_get_int(g, key, true, &v, &err);
		lynn_gguf_get_float(g, key, true, &d, &err);
		if (!lynn_gguf_get_str(g, key, true, &s, &n, &err) && n)
			sink += (unsigned char)s[n - 1];
		if (!lynn_gguf_get_arr(g, key, true, &a, &err)) {
			for (uint64_t j = 0; j < a.n; j++) {
				if (a.type == LYNN_GGUF_STRING) {
					lynn_gguf_arr_str(&a, j, &s, &n);
					if (n)
						sink += (unsigned char)s[n - 1];
				} else {
					sink += (size_t)lynn_gguf_arr_int(&a, j);
				}
			}
		}
	}
	for (size_t i = 0; i < lynn_gguf_n_tensors(g); i++) {
		const struct lynn_gguf_tensor *t = lynn_gguf_tensor(g, i);
		if (t->size)
			sink += ((const uint8_t *)t->data)[t->size - 1];
		if (lynn_gguf_find_tensor(g, t->name) != t)
			abort();
	}
	(void)sink;
	lynn_gguf_close(g);
	return 0;
}
