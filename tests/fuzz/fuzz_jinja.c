/*
 * fuzz_jinja.c - libFuzzer target for the Jinja engine and the chat output parser.
 *
 * Input: the first byte picks the target. Even: the rest is a template, parsed and rendered with
 * a small chat context under tight limits (render errors are fine; crashes, leaks and unbounded
 * work are not). Odd: the rest is generated text for lynn_chat_parse and the streaming parser fed
 * in uneven pieces, which must agree (bit 1: in_think, bit 7: no_tools).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/chat.h"
#include "lynn/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char CTX[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": "
	"[{\"type\": \"text\", \"text\": \"hi\"}]}, {\"role\": \"assistant\", \"content\": \"<think>r</think>a\", "
	"\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [1, null, true]}}}]}, "
	"{\"role\": \"tool\", \"content\": \"ok\"}], \"tools\": [{\"type\": \"function\", \"function\": "
	"{\"name\": \"f\", \"parameters\": {\"properties\": {\"x\": {\"type\": \"number\"}}}}}], "
	"\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"enable_thinking\": false}";

static const char TOOLS[] = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
			    "{\"properties\": {\"x\": {\"type\": \"integer\"}, \"o\": {\"type\": \"object\"}}}}}]";

static int same(const char *a, const char *b)
{
	return !strcmp(a ? a : "", b ? b : "");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lynn_err err;
	if (size < 1)
		return 0;
	if (!(data[0] & 1)) {
		struct lynn_jinja_opts o = { .max_depth = 16, .max_loop = 20000, .max_output = 1 << 20,
					     .max_memory = 64u << 20, .now = 1 };
		struct lynn_jinja *t = lynn_jinja_parse("fuzz", (const char *)data + 1, size - 1, &err);
		char *out = NULL;
		if (t) {
			if (!lynn_jinja_render(t, CTX, sizeof CTX - 1, &o, &out, NULL, &err))
				free(out);
			lynn_jinja_free(t);
		}
		return 0;
	}
	{
		struct lynn_chat_parse_opts o = { .in_think = (data[0] & 2) != 0, .tools_json = TOOLS,
						  .no_tools = (data[0] & 0x80) != 0 };
		struct lynn_chat_msg whole, acc = { 0 };
		struct lynn_chat_stream *s;
		const char *text = (const char *)data + 1;
		size_t n = size - 1, step = (size_t)(data[0] >> 2) % 7 + 1, ncalls = 0;
		if (lynn_chat_parse(text, n, &o, &whole, &err))
			return 0;
		s = lynn_chat_stream_create(&o, &err);
		if (!s)
			abort();
		for (size_t off = 0;; off += step) {
			struct lynn_chat_msg d = { 0 };
			int rc = off >= n ? lynn_chat_stream_finish(s, &d, &err)
					  : lynn_chat_stream_feed(s, text + off, off + step <= n ? step : n - off, &d, &err);
			size_t cl = acc.content ? strlen(acc.content) : 0, rl = acc.reasoning_content ? strlen(acc.reasoning_content) : 0;
			if (rc)
				abort();
			acc.content = realloc(acc.content, cl + strlen(d.content) + 1);
			acc.reasoning_content = realloc(acc.reasoning_content, rl + strlen(d.reasoning_content) + 1);
			strcpy(acc.content + cl, d.content);
			strcpy(acc.reasoning_content + rl, d.reasoning_content);
			ncalls += d.n_tool_calls;
			lynn_chat_msg_release(&d);
			if (off >= n)
				break;
		}
		if (!same(acc.content, whole.content) || !same(acc.reasoning_content, whole.reasoning_content) ||
		    ncalls != whole.n_tool_calls)
			abort();
		lynn_chat_msg_release(&acc);
		lynn_chat_msg_release(&whole);
		lynn_chat_stream_free(s);
	}
	return 0;
}
