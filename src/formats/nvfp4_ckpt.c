/*
 * nvfp4_ckpt.c - an NVFP4 linear in an opened checkpoint, by the name its
 * dense weight would have (the model's binder and the adapter binder). Kept
 * apart from nvfp4.c, which the CUDA kernel benchmark links without the
 * checkpoint reader.
 */
#include <stdio.h>
#include <string.h>

#include "lynn/nvfp4.h"

enum lynn_nvfp4_format lynn_nvfp4_find(const struct lynn_ckpt *c, const char *name,
				       struct lynn_nvfp4_linear *L)
{
	enum lynn_nvfp4_format f = LYNN_NVFP4_CT;
	const struct lynn_nvfp4_suffixes *sx;
	const size_t n = strlen(name), suf = strlen(".weight");
	char nm[300];

	memset(L, 0, sizeof *L);
	if (n < suf || n - suf >= sizeof L->base || strcmp(name + n - suf, ".weight"))
		return LYNN_NVFP4_NONE;
	memcpy(L->base, name, n - suf);
	snprintf(nm, sizeof nm, "%s.weight_packed", L->base);
	L->weight = lynn_ckpt_find_decoder(c, nm);
	if (!L->weight) {
		L->weight = lynn_ckpt_find_decoder(c, name);
		if (!L->weight || L->weight->dtype != LYNN_DTYPE_U8)
			return LYNN_NVFP4_NONE;
		f = LYNN_NVFP4_MODELOPT;
	}
	sx = lynn_nvfp4_suffixes(f);
	snprintf(nm, sizeof nm, "%s.%s", L->base, sx->scale);
	L->scale = lynn_ckpt_find_decoder(c, nm);
	snprintf(nm, sizeof nm, "%s.%s", L->base, sx->global);
	L->global = lynn_ckpt_find_decoder(c, nm);
	const int nd = L->weight->n_dims;
	if (nd == 2 || nd == 3) {
		L->n_experts = nd == 3 ? L->weight->shape[0] : 0;
		L->n = L->weight->shape[nd - 2];
		L->k = 2 * L->weight->shape[nd - 1];
	}
	return f;
}
