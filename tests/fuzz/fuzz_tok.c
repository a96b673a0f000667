/*
 * fuzz_tok.c - libFuzzer target for the tokenizer.
 *
 * The first input byte picks the mode:
 *   even: encode the rest (any bytes) with a small Qwen-style tokenizer
 *         (NFC, the Qwen3.5 Split regex, byte-level BPE with merges and added
 *         tokens), decode the ids back, and stream-decode them; decode must
 *         give valid UTF-8 and the stream must equal the plain decode;
 *   odd:  load the rest as a tokenizer.json, and when it loads, encode a
 *         fixed text with it.
 * Expected: no crash, no sanitizer report, bounded memory.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/tok.h"

static const char TINY[] =
	"{\"normalizer\":{\"type\":\"NFC\"},"
	"\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
	"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}"
	"\\\\p{N}]?[\\\\p{L}\\\\p{M}]+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{M}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*"
	"[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
	"{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
	"\"decoder\":{\"type\":\"ByteLevel\"},"
	"\"added_tokens\":[{\"id\":300,\"content\":\"<|end|>\",\"special\":true},"
	"{\"id\":301,\"content\":\"<s>\",\"lstrip\":true,\"rstrip\":true},"
	"{\"id\":302,\"content\":\"ab\",\"single_word\":true},"
	"{\"id\":303,\"content\":\"e\\u0301\",\"normalized\":true}],"
	"\"model\":{\"type\":\"BPE\",\"vocab\":{VOCAB},\"merges\":[MERGES]}}";

static struct lynn_tok *tiny;

/* Build the tiny tokenizer: 256 byte tokens and a few merges. */
static struct lynn_tok *make_tiny(void)
{
	static const char *merges[][2] = { { "a", "b" }, { "ab", "c" }, { "Ġ", "a" },
					   { "Ġa", "b" }, { "Ã", "©" }, { "a", "a" },
					   { "aa", "aa" }, { "Ġ", "Ġ" }, { "Ċ", "Ċ" } };
	struct lynn_buf v = LYNN_BUF_INIT, m = LYNN_BUF_INIT, all = LYNN_BUF_INIT;
	int id = 0, n = 0;
	char seen[64][8];
	for (int b = 0; b < 256; b++) {
		int cp = b, k = 0;
		/* GPT-2 bytes_to_unicode */
		if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
			for (int x = 0; x < b; x++)
				if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
					k++;
			cp = 256 + k;
		}
		char u[8];
		int l = cp < 0x80 ? (u[0] = (char)cp, 1)
				  : (u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), 2);
		u[l] = 0;
		lynn_buf_puts(&v, id ? ",\"" : "\"");
		if (cp == '"' || cp == '\\')
			lynn_buf_putc(&v, '\\');
		lynn_buf_puts(&v, u);
		lynn_buf_printf(&v, "\":%d", id++);
	}
	for (size_t i = 0; i < sizeof merges / sizeof merges[0]; i++) {
		char cat[8];
		snprintf(cat, sizeof cat, "%s%s", merges[i][0], merges[i][1]);
		int dup = 0;
		for (int k = 0; k < n; k++)
			dup |= !strcmp(seen[k], cat);
		if (!dup && strlen(cat) > 2 - (cat[0] & 0x80 ? 0 : 1)) {
			snprintf(seen[n++], 8, "%s", cat);
			lynn_buf_printf(&v, ",\"%s\":%d", cat, id++);
		}
		lynn_buf_printf(&m, "%s[\"%s\",\"%s\"]", i ? "," : "", merges[i][0], merges[i][1]);
	}
	const char *vp = strstr(TINY, "VOCAB"), *mp = strstr(TINY, "MERGES");
	lynn_buf_append(&all, TINY, (size_t)(vp - TINY));
	lynn_buf_puts(&all, v.data);
	lynn_buf_append(&all, vp + 5, (size_t)(mp - vp - 5));
	lynn_buf_puts(&all, m.data);
	lynn_buf_puts(&all, mp + 6);
	struct lynn_err err = { 0 };
	struct lynn_tok *t = lynn_tok_load_json("fuzz-tiny", all.data, all.len, NULL, NULL, &err);
	if (!t) {
		fprintf(stderr, "fuzz_tok: tiny tokenizer: %s\n", err.msg);
		abort();
	}
	lynn_buf_release(&v);
	lynn_buf_release(&m);
	lynn_buf_release(&all);
	return t;
}

static bool valid_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i], need = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : 9;
		if (need == 9 || c > 0xF4 || i + need >= n + (need ? 0 : 1))
			return false;
		for (unsigned k = 1; k <= need; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return false;
		i += need + 1;
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lynn_err err = { 0 };
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	struct lynn_buf a = LYNN_BUF_INIT, b = LYNN_BUF_INIT;

	if (!size)
		return 0;
	if (!tiny)
		tiny = make_tiny();
	if (data[0] & 1) {
		struct lynn_tok *t = lynn_tok_load_json("fuzz", (const char *)data + 1, size - 1,
							"{\"eos_token\":\"<|end|>\"}", NULL, &err);
		if (t) {
			const char *txt = "hello wörld <|end|> 123";
			lynn_tok_encode(t, txt, strlen(txt), 0, &ids, &err);
			lynn_tok_decode(t, ids.ids, ids.n, 0, &a, &err);
			lynn_tok_free(t);
		}
		goto out;
	}
	unsigned flags = (data[0] & 2) ? LYNN_TOK_F_NO_SPECIAL : 0;
	if (lynn_tok_encode(tiny, (const char *)data + 1, size - 1, flags, &ids, &err))
		abort();
	if (lynn_tok_decode(tiny, ids.ids, ids.n, 0, &a, &err))
		abort();
	if (!valid_utf8((const unsigned char *)a.data, a.len))
		abort();
	struct lynn_tok_stream st;
	lynn_tok_stream_init(&st, tiny, 0);
	lynn_buf_append(&b, "", 0);
	for (size_t i = 0; i < ids.n; i++)
		if (lynn_tok_stream_push(&st, ids.ids[i], &b, &err))
			abort();
	lynn_tok_stream_flush(&st, &b);
	if (a.len != b.len || memcmp(a.data, b.data, a.len))
		abort();
out:
	lynn_tok_ids_release(&ids);
	lynn_buf_release(&a);
	lynn_buf_release(&b);
	return 0;
}
