/* fuzz_qv.c - quant-verify on arbitrary bytes: the quality checks on the
 * text itself, and the same bytes as a prompts file and as an outputs file
 * (JSONL loaders, then a report of the file against itself): errors, never
 * crashes, no unbounded allocation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lynn/quant_verify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *anchors[] = { "Paris", "北京" };
	struct lynn_qv_quality q;
	lynn_qv_quality_check((const char *)data, size, anchors, 2, size & 1, &q, NULL);
	cJSON_Delete(lynn_qv_quality_json(&q));

	char path[] = "/tmp/fuzz_qv_XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		unlink(path);
		return 0;
	}
	close(fd);
	struct lynn_qv_prompts p = { 0 }, known = { 0 };
	if (!lynn_qv_prompts_load(path, &p, NULL))
		lynn_qv_prompts_release(&p);
	lynn_qv_prompts_builtin(&known, NULL);
	if (!lynn_qv_prompts_from_outputs(path, &known, &p, NULL)) {
		struct lynn_qv_run ref = { 0 }, var = { 0 };
		if (!lynn_qv_run_load(&ref, "reference", path, &p, NULL) &&
		    !lynn_qv_run_load(&var, "v", path, &p, NULL)) {
			struct lynn_qv_opts o = { 0.7, 0, 64, "fuzz", "offline" };
			bool all;
			cJSON *rep = lynn_qv_report(&p, &ref, &var, 1, &o, &all, NULL);
			char *md = rep ? lynn_qv_markdown(rep) : NULL;
			free(md);
			cJSON_Delete(rep);
		}
		lynn_qv_run_release(&ref);
		lynn_qv_run_release(&var);
		lynn_qv_prompts_release(&p);
	}
	lynn_qv_prompts_release(&known);
	unlink(path);
	return 0;
}
