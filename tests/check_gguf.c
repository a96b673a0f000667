/*
 * check_gguf.c - src/formats/gguf.c: a GGUF image built byte by byte in the
 * test (values known by construction), llama.cpp's vocab GGUF files read
 * against what gguf-py (llama.cpp's Python reader) reports for them, and a
 * table of broken images.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/fs.h"
#include "lynn/gguf.h"
#include "testutil.h"

/* ===== a tiny GGUF image for the tests ===== */

/* header + 4 KVs + one F32 tensor [4, 2] at offset 0 */
static void build(struct lynn_buf *b, uint64_t n_tensors)
{
	lynn_buf_append(b, "GGUF", 4);
	tu_put_u32(b, 3);
	tu_put_u64(b, n_tensors);
	tu_put_u64(b, 4);
	tu_put_str(b, "general.architecture");
	tu_put_u32(b, LYNN_GGUF_STRING);
	tu_put_str(b, "qwen35moe");
	tu_put_str(b, "n.layers");
	tu_put_u32(b, LYNN_GGUF_UINT32);
	tu_put_u32(b, 40);
	tu_put_str(b, "names");
	tu_put_u32(b, LYNN_GGUF_ARRAY);
	tu_put_u32(b, LYNN_GGUF_STRING);
	tu_put_u64(b, 3);
	tu_put_str(b, "a");
	tu_put_str(b, "");
	tu_put_str(b, "ccc");
	tu_put_str(b, "ints");
	tu_put_u32(b, LYNN_GGUF_ARRAY);
	tu_put_u32(b, LYNN_GGUF_INT32);
	tu_put_u64(b, 2);
	tu_put_u32(b, (uint32_t)-5);
	tu_put_u32(b, 7);
	for (uint64_t i = 0; i < n_tensors; i++) {
		tu_put_str(b, "w");
		tu_put_u32(b, 2);
		tu_put_u64(b, 4);
		tu_put_u64(b, 2);
		tu_put_u32(b, 0); /* F32 */
		tu_put_u64(b, 0);
	}
	while (b->len % 32)
		lynn_buf_putc(b, 0);
	for (int i = 0; i < 8; i++) {
		float f = (float)i;
		lynn_buf_append(b, &f, 4);
	}
}

START_TEST(test_gguf_small)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	struct lynn_err err = { 0 };
	build(&b, 1);
	struct lynn_gguf *g = lynn_gguf_open_mem("small", b.data, b.len, &err);
	ck_assert_msg(g, "%s", err.msg);
	ck_assert_uint_eq(lynn_gguf_version(g), 3);
	ck_assert_uint_eq(lynn_gguf_n_kv(g), 4);
	const char *s;
	size_t n;
	ck_assert_int_eq(lynn_gguf_get_str(g, "general.architecture", true, &s, &n, &err), 0);
	ck_assert(n == 9 && !memcmp(s, "qwen35moe", 9));
	int64_t v = 0;
	ck_assert_int_eq(lynn_gguf_get_int(g, "n.layers", true, &v, &err), 0);
	ck_assert_int_eq(v, 40);
	ck_assert_int_eq(lynn_gguf_get_int(g, "missing", true, &v, &err), -LYNN_ENOTFOUND);
	ck_assert_int_eq(lynn_gguf_get_int(g, "missing", false, &v, &err), 0);
	ck_assert_int_eq(lynn_gguf_get_str(g, "n.layers", true, &s, &n, &err), -LYNN_EFORMAT);
	ck_assert(strstr(err.msg, "n.layers"));
	struct lynn_gguf_arr a;
	ck_assert_int_eq(lynn_gguf_get_arr(g, "names", true, &a, &err), 0);
	ck_assert_uint_eq(a.n, 3);
	lynn_gguf_arr_str(&a, 1, &s, &n);
	ck_assert_uint_eq(n, 0);
	lynn_gguf_arr_str(&a, 2, &s, &n);
	ck_assert(n == 3 && !memcmp(s, "ccc", 3));
	ck_assert_int_eq(lynn_gguf_get_arr(g, "ints", true, &a, &err), 0);
	ck_assert_int_eq(lynn_gguf_arr_int(&a, 0), -5);
	ck_assert_int_eq(lynn_gguf_arr_int(&a, 1), 7);
	ck_assert_uint_eq(lynn_gguf_n_tensors(g), 1);
	const struct lynn_gguf_tensor *t = lynn_gguf_find_tensor(g, "w");
	ck_assert(t && t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 2 && t->size == 32);
	float f;
	memcpy(&f, (const char *)t->data + 12, 4);
	ck_assert(f == 3.0f);
	ck_assert_str_eq(lynn_gguf_type_name(12), "Q4_K");
	lynn_gguf_close(g);
	lynn_buf_release(&b);
}
END_TEST

/* llama.cpp's vocab files, as gguf-py reads them (checked 2026-11-30):
 * 151936 tokens, 151387 merges, pre "qwen35", eos = bos = pad = 151643. */
START_TEST(test_gguf_llama_vocab)
{
	const char *p = "tests/node/llama.cpp/models/ggml-vocab-qwen35.gguf";
	if (!lynn_file_exists(p)) {
		fprintf(stderr, "gguf: SKIP: %s is absent\n", p);
		return;
	}
	struct lynn_err err = { 0 };
	struct lynn_gguf *g = lynn_gguf_open(p, &err);
	ck_assert_msg(g, "%s", err.msg);
	struct lynn_gguf_arr a;
	ck_assert_int_eq(lynn_gguf_get_arr(g, "tokenizer.ggml.tokens", true, &a, &err), 0);
	ck_assert_uint_eq(a.n, 151936);
	ck_assert_int_eq(lynn_gguf_get_arr(g, "tokenizer.ggml.merges", true, &a, &err), 0);
	ck_assert_uint_eq(a.n, 151387);
	const char *s;
	size_t n;
	ck_assert_int_eq(lynn_gguf_get_str(g, "tokenizer.ggml.pre", true, &s, &n, &err), 0);
	ck_assert(n == 6 && !memcmp(s, "qwen35", 6));
	int64_t v;
	ck_assert_int_eq(lynn_gguf_get_int(g, "tokenizer.ggml.eos_token_id", true, &v, &err), 0);
	ck_assert_int_eq(v, 151643);
	ck_assert_uint_eq(lynn_gguf_n_tensors(g), 0);
	ck_assert_uint_eq(lynn_gguf_n_kv(g), 20);
	lynn_gguf_close(g);
}
END_TEST

/* Broken images: each is a clear -LYNN_EFORMAT / EUNSUPPORTED, no crash. */
enum { B_TRUNC, B_MAGIC, B_VERSION, B_HUGE_KV, B_STRLEN, B_ARRAY_N, B_TYPE, B_DUPKEY,
       B_NDIMS, B_OFFSET, B_BEYOND, B_ALIGN, B_N };

START_TEST(test_gguf_bad)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	struct lynn_err err = { 0 };
	build(&b, 1);
	uint8_t *d = (uint8_t *)b.data;
	size_t len = b.len;
	/* offsets in the image built above */
	size_t kv0 = 24, arch_len = kv0 + 8 + 20 + 4; /* value string length */
	size_t names_n = 24 + (8 + 20 + 4 + 8 + 9) + (8 + 8 + 4 + 4) + (8 + 5 + 4 + 4);
	size_t tinfo = len - 32 - 64; /* upper bound; searched below */
	for (size_t i = 0; i + 9 < len; i++)
		if (!memcmp(d + i, "\x01\0\0\0\0\0\0\0w\x02", 10)) {
			tinfo = i;
			break;
		}
	uint64_t big = 1ull << 60;
	switch (_i) {
	case B_TRUNC: len = 100; break; /* inside the 'names' array */
	case B_MAGIC: d[0] = 'X'; break;
	case B_VERSION: d[4] = 9; break;
	case B_HUGE_KV: memcpy(d + 16, &big, 8); break;
	case B_STRLEN: memcpy(d + arch_len, &big, 8); break;
	case B_ARRAY_N: memcpy(d + names_n, &big, 8); break;
	case B_TYPE: d[kv0 + 8 + 20] = 77; break;
	case B_DUPKEY: break;
	case B_NDIMS: d[tinfo + 9] = 7; break;
	case B_OFFSET: d[tinfo + 9 + 4 + 16 + 4] = 4; break;  /* misaligned */
	case B_BEYOND: d[tinfo + 9 + 4 + 16 + 4] = 64; break; /* past the end */
	case B_ALIGN: break;
	}
	if (_i == B_ALIGN || _i == B_DUPKEY) {
		/* general.alignment that is not a power of two; a key given twice */
		struct lynn_buf c = LYNN_BUF_INIT;
		lynn_buf_append(&c, "GGUF", 4);
		tu_put_u32(&c, 3);
		tu_put_u64(&c, 0);
		tu_put_u64(&c, 2);
		for (int k = 0; k < 2; k++) {
			tu_put_str(&c, _i == B_ALIGN && k ? "general.alignment" : "x.n");
			tu_put_u32(&c, LYNN_GGUF_UINT32);
			tu_put_u32(&c, 24);
		}
		lynn_buf_release(&b);
		b = c;
		d = (uint8_t *)b.data;
		len = b.len;
	}
	struct lynn_gguf *g = lynn_gguf_open_mem("bad", d, len, &err);
	ck_assert_msg(!g, "case %d opened", _i);
	ck_assert(err.code == -LYNN_EFORMAT || err.code == -LYNN_EUNSUPPORTED);
	ck_assert_msg(strstr(err.msg, "gguf: bad"), "case %d: '%s'", _i, err.msg);
	if (getenv("GGUF_DEBUG"))
		fprintf(stderr, "case %d: %s\n", _i, err.msg);
	lynn_buf_release(&b);
}
END_TEST

Suite *gguf_suite(void)
{
	Suite *s = suite_create("gguf");
	TCase *tc = tcase_create("gguf");
	tcase_add_test(tc, test_gguf_small);
	tcase_add_test(tc, test_gguf_llama_vocab);
	tcase_add_loop_test(tc, test_gguf_bad, 0, B_N);
	suite_add_tcase(s, tc);
	return s;
}
