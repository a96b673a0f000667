/*
 * fuzz_st.c - libFuzzer target for the safetensors header parser: the input
 * is a whole file held in memory (lynn_st_open_mem runs every rule that
 * lynn_st_open does). Every tensor view it accepts must lie inside the input.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "lynn/st.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lynn_err err;
	struct lynn_st_file *f = lynn_st_open_mem(data, size, "fuzz", &err);

	if (!f)
		return 0;
	for (int64_t i = 0; i < lynn_st_n_tensors(f); i++) {
		const struct lynn_tensor *t = lynn_st_tensor(f, i);
		const uint8_t *p = t->data;
		if (p < data || p + t->nbytes > data + size || lynn_st_find(f, t->name) != t)
			abort();
		if (t->nbytes) /* touch the first and last byte */
			(void)*(volatile const uint8_t *)&p[t->nbytes - 1];
	}
	for (int i = 0; i < lynn_st_n_metadata(f); i++) {
		const char *k, *v;
		lynn_st_metadata_at(f, i, &k, &v);
		if (!k || !v || lynn_st_metadata(f, k) == NULL)
			abort();
	}
	lynn_st_close(f);
	return 0;
}
