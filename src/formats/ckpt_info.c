/*
 * ckpt_info.c - what a checkpoint holds: parameters and quantization formats
 * (include/lynn/st.h). Tensor names and companions as in docs/reference
 * weight-formats.md §2.2 (NVFP4: compressed-tensors nvfp4-pack-quantized and
 * ModelOpt) and §2.8 (block FP8 with weight_scale_inv).
 */
#include <stdio.h>
#include <string.h>

#include "lynn/st.h"

static bool ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

bool lynn_tensor_is_scale(const char *name)
{
	static const char *const suf[] = {
		"weight_scale", "weight_scale_2", "weight_scale_inv", "weight_global_scale",
		"input_scale", "input_global_scale", "weight_zero_point", "k_scale", "v_scale",
	};
	size_t n = strlen(name);
	for (size_t i = 0; i < sizeof suf / sizeof suf[0]; i++) {
		size_t k = strlen(suf[i]);
		if (n >= k && !strcmp(name + n - k, suf[i]) &&
		    (n == k || name[n - k - 1] == '.' || name[n - k - 1] == '_'))
			return true;
	}
	return false;
}

bool lynn_tensor_is_routed_expert(const char *name)
{
	return strstr(name, ".experts.") != NULL;
}

/* The sibling of a "...weight" tensor: "<prefix>weight<suffix>". */
static const struct lynn_tensor *sibling(const struct lynn_ckpt *c, const char *name,
					 const char *base_suffix, const char *suffix)
{
	char buf[512];
	size_t n = strlen(name), b = strlen(base_suffix);
	if (n < b || strcmp(name + n - b, base_suffix) ||
	    (size_t)snprintf(buf, sizeof buf, "%.*s%s", (int)(n - b), name, suffix) >= sizeof buf)
		return NULL;
	return lynn_ckpt_find(c, buf);
}

int64_t lynn_ckpt_tensor_params(const struct lynn_ckpt *c, const struct lynn_tensor *t)
{
	const struct lynn_tensor *s;

	if (lynn_tensor_is_scale(t->name))
		return 0;
	if (t->dtype == LYNN_DTYPE_U8) {
		if (ends_with(t->name, "_packed"))
			return 2 * t->n_elems;
		s = sibling(c, t->name, "weight", "weight_scale");
		if (s && s->dtype == LYNN_DTYPE_F8_E4M3)
			return 2 * t->n_elems;
	}
	return t->n_elems;
}

unsigned lynn_ckpt_quant_formats(const struct lynn_ckpt *c, int64_t counts[3])
{
	unsigned flags = 0;

	if (counts)
		counts[0] = counts[1] = counts[2] = 0;
	for (int64_t i = 0; i < lynn_ckpt_n_tensors(c); i++) {
		const struct lynn_tensor *t = lynn_ckpt_tensor(c, i);
		int k = -1;
		if (t->dtype == LYNN_DTYPE_U8 && ends_with(t->name, "weight_packed") &&
		    sibling(c, t->name, "weight_packed", "weight_scale") &&
		    sibling(c, t->name, "weight_packed", "weight_global_scale"))
			k = 0;
		else if (t->dtype == LYNN_DTYPE_U8 && ends_with(t->name, "weight") &&
			 sibling(c, t->name, "weight", "weight_scale") &&
			 sibling(c, t->name, "weight", "weight_scale_2"))
			k = 1;
		else if (t->dtype == LYNN_DTYPE_F8_E4M3 && ends_with(t->name, "weight") &&
			 (sibling(c, t->name, "weight", "weight_scale_inv") ||
			  sibling(c, t->name, "weight", "weight_scale")))
			k = 2;
		if (k >= 0) {
			flags |= 1u << k;
			if (counts)
				counts[k]++;
		}
	}
	return flags;
}
