/* fuzz_eval_set.c - the eval prompt-set loader (JSONL of SPEC §5) and the
 * output cache reader on arbitrary bytes: errors, never crashes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lynn/cache.h"
#include "lynn/eval.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[] = "/tmp/fuzz_eval_XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		unlink(path);
		return 0;
	}
	close(fd);
	for (int k = 0; k < 3; k++) {
		struct lynn_eval_set s = { (enum lynn_eval_kind)k, NULL, 0 };
		lynn_eval_set_load(&s, path, NULL);
		lynn_eval_set_release(&s);
	}
	{
		struct lynn_cache *c = lynn_cache_open(path, true, NULL);
		lynn_cache_close(c);
	}
	unlink(path);
	return 0;
}
