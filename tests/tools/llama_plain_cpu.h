/* llama_plain_cpu.h - force-included (cc -include) when tests/tools/
 * gen_gguf_fixtures.py builds tests/bench/llama_logits.c: model params with
 * use_extra_bufts off, so llama.cpp runs its plain CPU kernels (ggml-cpu
 * vec_dot) instead of repacked or AMX ones (AMX tile instructions fault with
 * SIGILL on this machine, where the kernel does not grant AMX state). */
#include "llama.h"

static inline struct llama_model_params lynn_llama_plain_params(void)
{
	struct llama_model_params p = llama_model_default_params();
	p.use_extra_bufts = false;
	return p;
}
#define llama_model_default_params lynn_llama_plain_params
