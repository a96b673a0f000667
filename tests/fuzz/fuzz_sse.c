/* fuzz_sse.c - the event-stream reader of `lynn bench` on arbitrary bytes:
 * never crashes, never buffers past its line limit, and reads the same
 * stream the same way whether it arrives whole or split in two. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/bench.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lynn_sse a, b;
	size_t cut = size ? data[0] % (size + 1) : 0;
	lynn_sse_init(&a);
	lynn_sse_init(&b);
	lynn_sse_feed(&a, (const char *)data, size);
	lynn_sse_feed(&b, (const char *)data, cut);
	lynn_sse_feed(&b, (const char *)data + cut, size - cut);
	if (a.n_tokens != b.n_tokens || a.done != b.done || a.usage_prompt != b.usage_prompt ||
	    a.usage_completion != b.usage_completion || !a.error[0] != !b.error[0] ||
	    a.line.len > LYNN_SSE_MAX_LINE || b.line.len > LYNN_SSE_MAX_LINE)
		abort();
	lynn_sse_release(&a);
	lynn_sse_release(&b);
	return 0;
}
