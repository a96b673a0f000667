/*
 * fuzz_nvfp4.c - libFuzzer target for the NVFP4 checkpoint rules and the
 * CPU kernel: the input is a safetensors file held in memory; every tensor
 * goes through lynn_nvfp4_scan (data checks on), and each linear that passes
 * the view checks is multiplied by a small vector (bounded work). Also the
 * codec round trips on the input's first bytes.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "lynn/cpu_nvfp4.h"
#include "lynn/nvfp4.h"
#include "lynn/st.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lynn_err err;
	struct lynn_nvfp4_scan sc;

	for (size_t i = 0; i < size && i < 64; i++) {
		if (lynn_f32_to_e2m1(lynn_e2m1_to_f32(data[i])) != (data[i] & 15))
			abort();
		if ((data[i] & 0x7f) != 0x7f && lynn_f32_to_e4m3(lynn_e4m3_to_f32(data[i])) != data[i])
			abort();
	}
	struct lynn_st_file *f = lynn_st_open_mem(data, size, "fuzz", &err);
	if (!f)
		return 0;
	int64_t n = lynn_st_n_tensors(f);
	const struct lynn_tensor **ts = malloc(sizeof *ts * (size_t)(n ? n : 1));
	if (!ts)
		goto out;
	for (int64_t i = 0; i < n; i++)
		ts[i] = lynn_st_tensor(f, i);
	if (lynn_nvfp4_scan(ts, n, true, &sc, &err) == 0) {
		for (int64_t l = 0; l < sc.n_linears; l++) {
			struct lynn_nvfp4_view v;
			const struct lynn_nvfp4_linear *L = &sc.linears[l];
			if (L->n * L->k > (1 << 16) || lynn_nvfp4_view_init(&v, sc.format, L, 0, &err))
				continue;
			float *x = calloc((size_t)L->k, sizeof *x), *y = malloc(sizeof *y * (size_t)L->n);
			if (x && y) {
				for (int64_t k = 0; k < L->k; k++)
					x[k] = 1.0f;
				lynn_cpu_nvfp4_rows(&v, x, L->k, 1, 0, L->n, y, L->n, false);
			}
			free(x);
			free(y);
		}
		lynn_nvfp4_scan_free(&sc);
	}
	free(ts);
out:
	lynn_st_close(f);
	return 0;
}
