/*
 * tok_internal.h - what the tokenizer's front ends share inside src/text:
 * the GGUF loader builds a struct lynn_tok through these.
 */
#ifndef LYNN_TOK_INTERNAL_H
#define LYNN_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lynn/buf.h"
#include "lynn/err.h"
#include "lynn/tok.h"

enum lynn_tok_kind {
	LYNN_TOK_KIND_NORMAL = 0,  /* a BPE vocab entry, byte-level form */
	LYNN_TOK_KIND_CONTROL = 1, /* special: matched whole unless NO_SPECIAL */
	LYNN_TOK_KIND_USER = 2,    /* non-special added token: always matched */
};

/* Append s with invalid UTF-8 replaced by U+FFFD (maximal subparts). */
int lynn_tok_append_lossy(struct lynn_buf *b, const uint8_t *s, size_t n);

/* Build a tokenizer id by id (GGUF): new with n_ids, set each used id, the
 * merges ("a b", rank = index), then finish with the pre-tokenizer regex. */
struct lynn_tok *lynn_tok_builder_new(int32_t n_ids, struct lynn_err *err);
int lynn_tok_builder_set(struct lynn_tok *t, int32_t id, const char *s, size_t n, int kind,
			 struct lynn_err *err);
int lynn_tok_builder_merges(struct lynn_tok *t, const char *const *merges, size_t n,
			    struct lynn_err *err);
int lynn_tok_builder_finish(struct lynn_tok *t, const char *regex, int32_t bos, int32_t eos,
			    const int32_t *eog, size_t n_eog, bool add_bos, struct lynn_err *err);
void lynn_tok_builder_set_pad(struct lynn_tok *t, int32_t pad);
int lynn_tok_finish(struct lynn_tok *t, struct lynn_err *err);

/* tok_gguf.c */
struct lynn_tok *lynn_tok_load_gguf(const char *path, struct lynn_err *err);

#endif
