/*
 * tok_gguf.c - a tokenizer from a .gguf file's vocab (llama.cpp's "gpt2"
 * byte-level BPE): tokenizer.ggml.tokens / token_type / merges, the special
 * ids, and the pre-tokenizer regex named by tokenizer.ggml.pre (the regexes
 * are the ones the models' tokenizer.json files carry; llama.cpp spells the
 * case-insensitive contractions out, which matches the same strings).
 * Like llama.cpp, no normalizer runs: text is not NFC'd.
 */
#include <stdlib.h>
#include <string.h>

#include "lynn/gguf.h"
#include "text/tok_internal.h"

/* Qwen2 / Qwen3 (tokenizer.json Split regex) */
static const char RE_QWEN2[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
	"|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Qwen3.5: combining marks stay with letters */
static const char RE_QWEN35[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
	"| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* GPT-2 */
static const char RE_GPT2[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const struct {
	const char *pre;
	const char *re;
} PRE[] = {
	{ "qwen2", RE_QWEN2 }, { "deepseek-r1-qwen", RE_QWEN2 }, { "qwen35", RE_QWEN35 },
	{ "gpt-2", RE_GPT2 },  { "gpt2", RE_GPT2 },
};

/* llama.cpp token types (llama_token_type) */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static int opt_id(struct lynn_gguf *g, const char *key, int64_t n, int32_t *out,
		  struct lynn_err *err)
{
	int64_t v = -1;
	int rc = lynn_gguf_get_int(g, key, false, &v, err);
	if (rc)
		return rc;
	if (v >= n && v != UINT32_MAX)
		return lynn_errf(err, -LYNN_EFORMAT, "tok: gguf key '%s' = %lld is not a token id",
				 key, (long long)v);
	*out = v >= 0 && v < n ? (int32_t)v : -1;
	return 0;
}

struct lynn_tok *lynn_tok_load_gguf(const char *path, struct lynn_err *err)
{
	struct lynn_gguf *g = lynn_gguf_open(path, err);
	struct lynn_tok *t = NULL;
	struct lynn_gguf_arr toks, types = { 0 }, merges = { 0 };
	const char *s, **mlist = NULL;
	char *mbuf = NULL;
	size_t sl;
	int rc;

	if (!g)
		return NULL;
	if ((rc = lynn_gguf_get_str(g, "tokenizer.ggml.model", true, &s, &sl, err)))
		goto fail;
	if (sl != 4 || memcmp(s, "gpt2", 4)) {
		lynn_errf(err, -LYNN_EUNSUPPORTED,
			  "tok: '%s': tokenizer.ggml.model '%.*s' is not supported (only gpt2 BPE)",
			  path, (int)(sl > 40 ? 40 : sl), s);
		goto fail;
	}
	const char *re = NULL, *pre = "default";
	size_t pl = 7;
	if ((rc = lynn_gguf_get_str(g, "tokenizer.ggml.pre", false, &pre, &pl, err)))
		goto fail;
	for (size_t i = 0; i < sizeof PRE / sizeof PRE[0]; i++)
		if (strlen(PRE[i].pre) == pl && !memcmp(PRE[i].pre, pre, pl))
			re = PRE[i].re;
	if (!re) {
		lynn_errf(err, -LYNN_EUNSUPPORTED,
			  "tok: '%s': tokenizer.ggml.pre '%.*s' is not supported", path,
			  (int)(pl > 40 ? 40 : pl), pre);
		goto fail;
	}
	if ((rc = lynn_gguf_get_arr(g, "tokenizer.ggml.tokens", true, &toks, err)) ||
	    (rc = lynn_gguf_get_arr(g, "tokenizer.ggml.token_type", false, &types, err)) ||
	    (rc = lynn_gguf_get_arr(g, "tokenizer.ggml.merges", false, &merges, err)))
		goto fail;
	if (toks.type != LYNN_GGUF_STRING || !toks.n || toks.n > (1 << 24)) {
		lynn_errf(err, -LYNN_EFORMAT, "tok: '%s': tokenizer.ggml.tokens must be 1..2^24 strings",
			  path);
		goto fail;
	}
	if (types.n && (types.n != toks.n || types.type == LYNN_GGUF_STRING ||
			types.type == LYNN_GGUF_FLOAT32 || types.type == LYNN_GGUF_FLOAT64)) {
		lynn_errf(err, -LYNN_EFORMAT,
			  "tok: '%s': tokenizer.ggml.token_type must be %llu integers", path,
			  (unsigned long long)toks.n);
		goto fail;
	}
	if (merges.n && merges.type != LYNN_GGUF_STRING) {
		lynn_errf(err, -LYNN_EFORMAT, "tok: '%s': tokenizer.ggml.merges must be strings", path);
		goto fail;
	}
	if (!(t = lynn_tok_builder_new((int32_t)toks.n, err)))
		goto fail;
	for (uint64_t i = 0; i < toks.n; i++) {
		int64_t ty = types.n ? lynn_gguf_arr_int(&types, i) : TT_NORMAL;
		int kind = ty == TT_CONTROL ? LYNN_TOK_KIND_CONTROL
			   : ty == TT_USER  ? LYNN_TOK_KIND_USER
					    : LYNN_TOK_KIND_NORMAL;
		if (ty == TT_UNUSED)
			continue;
		lynn_gguf_arr_str(&toks, i, &s, &sl);
		if ((rc = lynn_tok_builder_set(t, (int32_t)i, s, sl, kind, err)))
			goto fail;
	}
	/* merges as NUL-terminated strings */
	size_t total = 0;
	for (uint64_t i = 0; i < merges.n; i++) {
		lynn_gguf_arr_str(&merges, i, &s, &sl);
		total += sl + 1;
	}
	mlist = malloc((merges.n + 1) * sizeof *mlist);
	mbuf = malloc(total + 1);
	if (!mlist || !mbuf) {
		lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
		goto fail;
	}
	char *w = mbuf;
	for (uint64_t i = 0; i < merges.n; i++) {
		lynn_gguf_arr_str(&merges, i, &s, &sl);
		if (memchr(s, 0, sl)) {
			lynn_errf(err, -LYNN_EFORMAT, "tok: '%s': tokenizer.ggml.merges[%llu] holds NUL",
				  path, (unsigned long long)i);
			goto fail;
		}
		memcpy(w, s, sl);
		w[sl] = 0;
		mlist[i] = w;
		w += sl + 1;
	}
	if ((rc = lynn_tok_builder_merges(t, mlist, (size_t)merges.n, err)))
		goto fail;
	int32_t bos = -1, eos = -1, eot = -1, eom = -1, pad = -1;
	bool add_bos = false;
	int64_t n = (int64_t)toks.n;
	if ((rc = opt_id(g, "tokenizer.ggml.bos_token_id", n, &bos, err)) ||
	    (rc = opt_id(g, "tokenizer.ggml.eos_token_id", n, &eos, err)) ||
	    (rc = opt_id(g, "tokenizer.ggml.eot_token_id", n, &eot, err)) ||
	    (rc = opt_id(g, "tokenizer.ggml.eom_token_id", n, &eom, err)) ||
	    (rc = opt_id(g, "tokenizer.ggml.padding_token_id", n, &pad, err)) ||
	    (rc = lynn_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", false, &add_bos, err)))
		goto fail;
	int32_t eog[2] = { eot, eom };
	if ((rc = lynn_tok_builder_finish(t, re, bos, eos, eog, 2, add_bos, err)))
		goto fail;
	lynn_tok_builder_set_pad(t, pad);
	free(mlist);
	free(mbuf);
	lynn_gguf_close(g);
	return t;
fail:
	if (err && !err->code)
		lynn_errf(err, -LYNN_EFORMAT, "tok: '%s': cannot load the GGUF vocab", path);
	free(mlist);
	free(mbuf);
	lynn_tok_free(t);
	lynn_gguf_close(g);
	return NULL;
}
