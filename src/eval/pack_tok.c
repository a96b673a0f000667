/*
 * pack_tok.c - gate 2 of the ship gate (SPEC §3): the folder's tokenizer
 * loads, encodes a probe set (ASCII, Chinese, emoji, code, whitespace runs)
 * to non-empty ids below the model's vocab size, decodes them back to the
 * text, resolves eos/pad to ids, and the chat template renders a one-turn
 * conversation with the generation prompt.
 * It uses lynn's own tokenizer (lynn/tok.h) and chat template engine
 * (lynn/chat.h), so a folder that passes is one lynn itself can serve.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/pack_internal.h"
#include "lynn/chat.h"
#include "lynn/config.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/tok.h"


/* tokenizer.json of a 248k vocab is ~12 MB; allow generous room */
#define TOK_JSON_MAX (512u << 20)

/* Probe texts, already in NFC so decode must give them back byte for byte. */
static const char *const probes[] = {
	"Hello, world! The quick brown fox jumps over the lazy dog.",
	"你好，世界。今天天气很好。",
	"\xf0\x9f\x99\x82\xf0\x9f\x9a\x80 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd ok",
	"def f(x):\n    return x * 2  # doubled\n\nprint(f(21))\n",
	"a  b\t\tc\n\n\n   d    \r\n  e      ",
};
static const char *const probe_names[] = { "ascii", "chinese", "emoji", "code", "whitespace" };

static char *read_text(char *(*resolve)(const void *, const char *), const void *ctx,
		       const char *name, size_t max, size_t *len)
{
	char *p = resolve(ctx, name), *text = NULL;
	if (p && lynn_file_exists(p))
		lynn_file_read(p, max, &text, len, NULL);
	free(p);
	return text;
}

bool pack_gate_tokenizer(char *(*resolve)(const void *ctx, const char *name), const void *ctx,
			 cJSON *gate)
{
	struct pack_gate g;
	size_t tj_len = 0, tc_len = 0, gc_len = 0;
	char *tj = read_text(resolve, ctx, "tokenizer.json", TOK_JSON_MAX, &tj_len);
	char *tc = read_text(resolve, ctx, "tokenizer_config.json", LYNN_JSON_MAX_SIZE, &tc_len);
	char *gc = read_text(resolve, ctx, "generation_config.json", LYNN_JSON_MAX_SIZE, &gc_len);
	char *cfg_path = resolve(ctx, "config.json");
	struct lynn_config cfg;
	struct lynn_err err;
	int64_t vocab = -1;

	pack_gate_init(&g, gate);
	if (!tj) {
		pack_reason(&g, "tokenizer.json is missing or unreadable");
		goto out;
	}
	if (cfg_path && lynn_file_exists(cfg_path) && lynn_config_load(&cfg, cfg_path, &err) == 0) {
		vocab = cfg.vocab_size;
		lynn_config_release(&cfg);
		cJSON_AddNumberToObject(gate, "vocab_size", (double)vocab);
	} else {
		pack_reason(&g, "no usable config.json to take vocab_size from");
	}
	{
		struct lynn_tok *tok = lynn_tok_load_json("tokenizer.json", tj, tj_len, tc, gc, &err);
		cJSON *pr = cJSON_AddArrayToObject(gate, "probes");
		struct lynn_chat_template *tpl = NULL;
		char *tpl_src = NULL;
		size_t tpl_len = 0;

		if (!tok) {
			pack_reason(&g, "tokenizer does not load: %s", err.msg);
			goto out;
		}
		cJSON_AddNumberToObject(gate, "n_vocab", lynn_tok_n_vocab(tok));
		if (vocab > 0 && lynn_tok_n_vocab(tok) > vocab)
			pack_reason(&g, "tokenizer has %d ids but config.json vocab_size is %lld",
				    (int)lynn_tok_n_vocab(tok), (long long)vocab);
		for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
			struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
			struct lynn_buf back = LYNN_BUF_INIT;
			cJSON *o = cJSON_CreateObject();
			bool ok = true;
			cJSON_AddStringToObject(o, "probe", probe_names[i]);
			if (lynn_tok_encode(tok, probes[i], strlen(probes[i]), 0, &ids, &err)) {
				pack_reason(&g, "probe '%s': encode failed: %s", probe_names[i], err.msg);
				ok = false;
			} else if (!ids.n) {
				pack_reason(&g, "probe '%s': encodes to no ids", probe_names[i]);
				ok = false;
			}
			for (size_t k = 0; ok && k < ids.n; k++)
				if (ids.ids[k] < 0 || (vocab > 0 && ids.ids[k] >= vocab)) {
					pack_reason(&g, "probe '%s': id %d is outside the vocab (%lld)",
						    probe_names[i], (int)ids.ids[k], (long long)vocab);
					ok = false;
				}
			if (ok && lynn_tok_decode(tok, ids.ids, ids.n, 0, &back, &err)) {
				pack_reason(&g, "probe '%s': decode failed: %s", probe_names[i], err.msg);
				ok = false;
			} else if (ok && (back.len != strlen(probes[i]) ||
					  memcmp(back.data, probes[i], back.len))) {
				pack_reason(&g, "probe '%s': decoding its ids does not give the text back",
					    probe_names[i]);
				ok = false;
			}
			cJSON_AddNumberToObject(o, "n_ids", (double)ids.n);
			cJSON_AddBoolToObject(o, "pass", ok);
			cJSON_AddItemToArray(pr, o);
			lynn_tok_ids_release(&ids);
			lynn_buf_release(&back);
		}
		cJSON_AddNumberToObject(gate, "eos_id", lynn_tok_eos_id(tok));
		cJSON_AddNumberToObject(gate, "pad_id", lynn_tok_pad_id(tok));
		if (lynn_tok_eos_id(tok) < 0)
			pack_reason(&g, "eos_token of tokenizer_config.json / generation_config.json does not resolve to an id");
		{
			cJSON *j = tc ? cJSON_Parse(tc) : NULL;
			const cJSON *pad = j ? cJSON_GetObjectItemCaseSensitive(j, "pad_token") : NULL;
			if (pad && !cJSON_IsNull(pad) && lynn_tok_pad_id(tok) < 0)
				pack_reason(&g, "pad_token of tokenizer_config.json does not resolve to an id");
			cJSON_Delete(j);
		}
		{
			size_t n = 0;
			const int32_t *eog = lynn_tok_eog_ids(tok, &n);
			for (size_t k = 0; k < n; k++)
				if (eog[k] < 0 || eog[k] >= lynn_tok_n_vocab(tok) ||
				    (vocab > 0 && eog[k] >= vocab))
					pack_reason(&g, "end-of-generation id %d is outside the vocab",
						    (int)eog[k]);
		}
		/* the chat template: chat_template.jinja, else tokenizer_config.json */
		tpl_src = read_text(resolve, ctx, "chat_template.jinja", LYNN_JSON_MAX_SIZE, &tpl_len);
		if (tpl_src) {
			tpl = lynn_chat_template_from_string("chat_template.jinja", tpl_src, tpl_len,
							     NULL, NULL, &err);
		} else {
			/* lynn_chat_template_load reads the folder's tokenizer_config.json */
			char *p = resolve(ctx, "tokenizer_config.json"), *d = p ? strdup(p) : NULL;
			char *sl = d ? strrchr(d, '/') : NULL;
			if (sl)
				*sl = 0;
			tpl = d ? lynn_chat_template_load(d, &err) : NULL;
			free(p);
			free(d);
		}
		if (!tpl) {
			pack_reason(&g, "chat template does not load: %s", err.msg);
		} else {
			struct lynn_chat_input in = {
				.messages_json = "[{\"role\": \"user\", \"content\": \"Hello\"}]",
				.add_generation_prompt = true,
				.enable_thinking = 0,
			};
			char *out = NULL;
			size_t out_len = 0;
			if (lynn_chat_render(tpl, &in, &out, &out_len, &err))
				pack_reason(&g, "chat template does not render a one-turn conversation: %s",
					    err.msg);
			else if (!out_len || !strstr(out, "Hello"))
				pack_reason(&g, "chat template renders a one-turn conversation without its text");
			else
				cJSON_AddNumberToObject(gate, "template_bytes", (double)out_len);
			free(out);
		}
		lynn_chat_template_free(tpl);
		free(tpl_src);
		lynn_tok_free(tok);
	}
out:
	free(tj);
	free(tc);
	free(gc);
	free(cfg_path);
	return pack_gate_finish(&g);
}
