/*
 * tok.h - the tokenizer: exact byte-level BPE as the Hugging Face tokenizers
 * library runs it from a tokenizer.json (Qwen2/3/3.5, GPT-2 style), or from
 * the vocab of a .gguf file (llama.cpp's "gpt2" model).
 *
 * Encode pipeline (the order of the HF library):
 *   1. invalid UTF-8 in the input is replaced by U+FFFD, one per maximal
 *      invalid subpart (the WHATWG / Python "replace" / Rust from_utf8_lossy
 *      rule), so lynn sees what a JS or Python caller's string holds;
 *   2. added tokens with normalized=false are matched whole in the raw text,
 *      leftmost first, longest first, honouring lstrip/rstrip/single_word;
 *   3. the normalizer (NFC, NFKC, NFD, NFKD or a Sequence of them; utf8proc)
 *      runs on the text between them; added tokens with normalized=true are
 *      then matched in the normalized text;
 *   4. the pre-tokenizer (Split with a regex, PCRE2 UTF+UCP+JIT, behaviour
 *      Isolated; ByteLevel with or without the GPT-2 regex) cuts pieces;
 *   5. each piece runs through BPE merges by rank (leftmost on ties).
 * Decode maps ids to bytes (ByteLevel decoder; added tokens give their
 * content) and replaces invalid UTF-8 in the result by U+FFFD.
 *
 * A loaded tokenizer is immutable: any number of threads may encode and
 * decode with it at once.
 */
#ifndef LYNN_TOK_H
#define LYNN_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lynn/buf.h"
#include "lynn/err.h"

struct lynn_tok;

enum lynn_tok_flags {
	/* encode: special added tokens ("special": true) written in the text
	 * are plain text (HF split_special_tokens); non-special added tokens
	 * are still matched, as in HF. */
	LYNN_TOK_F_NO_SPECIAL = 1 << 0,
	/* encode: prepend the BOS id when the tokenizer config asks for it
	 * (add_bos_token true and a bos token known); Qwen adds none. */
	LYNN_TOK_F_ADD_SPECIAL = 1 << 1,
	/* decode: drop special added tokens (HF skip_special_tokens). */
	LYNN_TOK_F_SKIP_SPECIAL = 1 << 2,
};

/* A growable id list that encode appends to. Initialize with
 * LYNN_TOK_IDS_INIT; the owner frees with lynn_tok_ids_release. */
struct lynn_tok_ids {
	int32_t *ids;
	size_t n;
	size_t cap;
};
#define LYNN_TOK_IDS_INIT { NULL, 0, 0 }
void lynn_tok_ids_release(struct lynn_tok_ids *v);

/* ===== Loading ===== */

/* Load from `path`: a model folder (tokenizer.json, and when present
 * tokenizer_config.json and generation_config.json), a tokenizer.json file
 * (its folder's config files are read too), or a .gguf file (vocab, merges
 * and special ids from its metadata; no normalizer, as llama.cpp).
 * A tokenizer.json over 1 MiB has its merges scanned on a second thread
 * (joined before this returns).
 * Returns NULL with err set: -LYNN_ENOTFOUND (no tokenizer), -LYNN_EFORMAT
 * (malformed file; the message names file and field), -LYNN_EUNSUPPORTED (a
 * model / normalizer / pre-tokenizer type lynn does not implement).
 * Free with lynn_tok_free. */
struct lynn_tok *lynn_tok_load(const char *path, struct lynn_err *err);

/* Load from a tokenizer.json held in memory (`what` names it in errors);
 * `config_json` / `gen_config_json` are tokenizer_config.json and
 * generation_config.json texts, either may be NULL. Used by fuzzing and by
 * callers that carry the files themselves. */
struct lynn_tok *lynn_tok_load_json(const char *what, const char *json, size_t len,
				    const char *config_json, const char *gen_config_json,
				    struct lynn_err *err);

void lynn_tok_free(struct lynn_tok *tok);

/* ===== Encode and decode ===== */

/* Append the ids of `len` bytes of `text` to *out. Any bytes are accepted
 * (see the replacement rule above). Work is O(len log len).
 * Returns 0, -LYNN_ENOMEM, or -LYNN_EFORMAT if the regex engine gives up
 * (PCRE2 match limit; not reachable with the Qwen patterns). */
int lynn_tok_encode(const struct lynn_tok *tok, const char *text, size_t len,
		    unsigned flags, struct lynn_tok_ids *out, struct lynn_err *err);

/* Append the text of `n` ids to *out (valid UTF-8; invalid byte sequences
 * across the whole run become U+FFFD). An id outside the vocab is
 * -LYNN_EINVAL naming it. flags: LYNN_TOK_F_SKIP_SPECIAL. */
int lynn_tok_decode(const struct lynn_tok *tok, const int32_t *ids, size_t n,
		    unsigned flags, struct lynn_buf *out, struct lynn_err *err);

/* Streaming decode for generation: push ids one at a time, get back only
 * complete UTF-8 characters; an incomplete tail (at most 3 bytes) waits for
 * the next id. Concatenating every push and the final flush gives exactly
 * lynn_tok_decode of the whole id list. Caller-owned, nothing to release. */
struct lynn_tok_stream {
	const struct lynn_tok *tok;
	unsigned flags;
	uint8_t pend[4];
	int n_pend;
};
void lynn_tok_stream_init(struct lynn_tok_stream *s, const struct lynn_tok *tok,
			  unsigned flags);
/* Append the characters completed by `id` to *out. */
int lynn_tok_stream_push(struct lynn_tok_stream *s, int32_t id, struct lynn_buf *out,
			 struct lynn_err *err);
/* End of stream: a pending incomplete sequence becomes U+FFFD. */
int lynn_tok_stream_flush(struct lynn_tok_stream *s, struct lynn_buf *out);

/* ===== Vocabulary ===== */

/* Number of ids (highest id + 1), added tokens included. */
int32_t lynn_tok_n_vocab(const struct lynn_tok *tok);

/* Id of a token written as in tokenizer.json: an added token's content
 * ("<|im_end|>") or a vocab entry in byte-level form ("Ġhello").
 * Returns -1 when there is none. */
int32_t lynn_tok_token_id(const struct lynn_tok *tok, const char *token);

/* The bytes an id decodes to (borrowed, valid until lynn_tok_free; not
 * NUL-terminated, may be a partial UTF-8 character). NULL for an unused id
 * or one out of range. */
const uint8_t *lynn_tok_token_bytes(const struct lynn_tok *tok, int32_t id, size_t *len);

bool lynn_tok_is_added(const struct lynn_tok *tok, int32_t id);
bool lynn_tok_is_special(const struct lynn_tok *tok, int32_t id);

/* Special ids from tokenizer_config.json (bos_token, eos_token, pad_token),
 * generation_config.json or GGUF metadata; -1 when unset. */
int32_t lynn_tok_bos_id(const struct lynn_tok *tok);
int32_t lynn_tok_eos_id(const struct lynn_tok *tok);
int32_t lynn_tok_pad_id(const struct lynn_tok *tok);
/* End-of-generation ids: the eos id plus every generation_config.json
 * eos_token_id (GGUF: eos, eot, eom). Borrowed array of *n ids. */
const int32_t *lynn_tok_eog_ids(const struct lynn_tok *tok, size_t *n);
bool lynn_tok_is_eog(const struct lynn_tok *tok, int32_t id);
/* add_bos_token from tokenizer_config.json (false when absent). */
bool lynn_tok_add_bos(const struct lynn_tok *tok);

#endif
