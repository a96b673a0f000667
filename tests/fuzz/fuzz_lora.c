/* fuzz_lora.c - a PEFT adapter folder whose adapter_config.json is arbitrary
 * bytes, next to the real tiny adapter's tensors: lynn_lora_open and
 * lynn_lora_bind give errors, never crashes or unbounded allocation.
 * Run from the repository root (make fuzz does). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lynn/fs.h"
#include "lynn/lora.h"
#include "lynn/st.h"

static char dir[] = "/tmp/fuzz_lora_XXXXXX";
static struct lynn_ckpt *base;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char cfg[64], st[64];
	struct lynn_lora *l;

	if (!base) {
		if (!mkdtemp(dir))
			return 0;
		snprintf(st, sizeof st, "%s/adapter_model.safetensors", dir);
		if (lynn_file_copy("tests/fixtures/lora-tiny/adapter_model.safetensors", st, NULL))
			return 0;
		base = lynn_ckpt_open("tests/fixtures/qwen35moe-tiny", NULL);
		if (!base)
			return 0;
	}
	snprintf(cfg, sizeof cfg, "%s/adapter_config.json", dir);
	if (lynn_write_atomic(cfg, data, size, NULL))
		return 0;
	l = lynn_lora_open(dir, NULL);
	if (l)
		lynn_lora_bind(l, base, NULL);
	lynn_lora_free(l);
	return 0;
}
