/* fuzz_pack_qcfg.c - gate 3's reading of a quantization config
 * (src/eval/pack_qcfg.c) on arbitrary JSON, as config.json and as
 * hf_quant_config.json, asked about linears of every kind: never crashes,
 * hangs or leaks; whatever it decides ends in the gate's report. */
#include <stdint.h>
#include <stdlib.h>

#include "eval/pack_internal.h"

static const char *const modules[] = {
	"lm_head", "model.embed_tokens", "model.layers.0.linear_attn.in_proj_qkv",
	"model.layers.0.mlp.gate", "model.layers.3.mlp.experts.7.down_proj",
	"model.language_model.layers.1.self_attn.q_proj", "",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	for (int as_hf = 0; as_hf < 2; as_hf++) {
		cJSON *j = cJSON_ParseWithLength((const char *)data, size), *gate = cJSON_CreateObject();
		struct pack_gate g;
		pack_gate_init(&g, gate);
		struct pack_qcfg *q = pack_qcfg_from(as_hf ? NULL : j, as_hf ? j : NULL, &g);
		for (size_t i = 0; i < sizeof modules / sizeof *modules; i++)
			for (int f = PACK_Q_PLAIN; f <= PACK_Q_NVFP4_MODELOPT; f++)
				pack_qcfg_linear(q, modules[i], i != 1, (enum pack_qform)f);
		pack_qcfg_finish(q, &g, gate);
		pack_gate_finish(&g);
		if (!cJSON_GetObjectItem(gate, "pass"))
			abort();
		cJSON_Delete(gate);
	}
	return 0;
}
