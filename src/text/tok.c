/*
 * tok.c - byte-level BPE from a Hugging Face tokenizer.json (include/lynn/tok.h).
 *
 * References: the tokenizers library's semantics (added_vocabulary.rs
 * find_matches, models/bpe/word.rs merge_all, pre_tokenizers/byte_level.rs
 * bytes_to_unicode, decoders ByteLevel), checked id for id against
 * @huggingface/tokenizers on the corpus in tests/fixtures/tok.
 *
 * Layout: every id has its decode bytes in one arena; the model vocab is an
 * open-addressing hash from token bytes to id, the merges a hash from the id
 * pair to (rank, merged id). tokenizer.json is read from an mmap by a small
 * JSON scanner that decodes the vocab and merges in place (cJSON would build
 * ~600k nodes for the Qwen files); the small sections go through cJSON.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "lynn/tok.h"

#include <errno.h>
#include <pcre2.h>
#include <pthread.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/util.h"
#include "text/tok_internal.h"

/* Caps that bound what a hostile tokenizer.json can make us allocate. */
#define MAX_IDS (1 << 24)        /* highest id + 1 */
#define MAX_SPLITS 8             /* Split stages in a pre-tokenizer */
#define MAX_NORMS 8              /* normalizers in a Sequence */
#define MAX_JSON_DEPTH 128
#define MAX_TOKENIZER_JSON (1u << 30)
#define REGEX_MATCH_LIMIT 10000000u
/* Pieces up to this many bytes merge with a linear scan; longer ones use a
 * heap (O(n log n), the bound on hostile input). */
#define BPE_SMALL 64
/* tokenizer.json files with more than this many bytes after the vocab key
 * scan their merges on a second thread */
#define MERGES_THREAD_MIN (1 << 20)

enum {
	IDF_USED = 1,    /* the id exists */
	IDF_ADDED = 2,   /* an added token */
	IDF_SPECIAL = 4, /* added with "special": true */
	IDF_VOCAB = 8,   /* in the model vocab hash */
	IDF_ENC = 16,    /* vocab key is byte-level (reachable by BPE) */
};

struct added_tok {
	char *text;       /* what is matched (NFC'd content when normalized) */
	size_t len;
	int32_t id;
	bool special, lstrip, rstrip, single_word, normalized;
};

/* Added tokens of one kind (raw or normalized) by first byte, longest first. */
struct added_set {
	uint32_t *idx; /* indexes into tok->added */
	uint32_t start[257];
	size_t n;
};

/* A vocab key: bytes at arena + off; len has VK_ENC set for byte-level keys. */
struct vkey {
	uint32_t off, len;
};
#define VK_ENC 0x80000000u

/* A merge result: rank (UINT32_MAX: none) and the merged id. */
struct bpair {
	uint32_t rank;
	int32_t id;
};

struct mslot {
	uint64_t key; /* left << 32 | right; UINT64_MAX empty */
	uint32_t rank;
	int32_t id; /* the merged token */
};

struct split_stage {
	pcre2_code *re;
	bool jit;
};

struct lynn_tok {
	int32_t n_ids;
	uint32_t *doff, *dlen; /* decode bytes per id in arena */
	struct vkey *vk;       /* vocab key bytes per id in arena */
	uint8_t *flags;
	uint8_t *arena;
	size_t arena_len, arena_cap;

	uint64_t *vh; /* vocab hash: hash tag << 32 | (id + 1), 0 empty */
	uint32_t vh_mask;
	struct mslot *ms; /* merge hash */
	/* merges of two single-byte tokens by the bytes' values, [a * 256 + b]
	 * (every first-round lookup of BPE; 512 KiB, stays in cache) */
	struct bpair *byte_pairs;
	uint32_t mh_mask;
	size_t n_merges;

	int32_t byte_id[256];
	int16_t cp_to_byte[324]; /* GPT-2 bytes_to_unicode, inverted */
	int32_t unk_id;
	bool ignore_merges;

	struct added_tok *added;
	size_t n_added;
	struct added_set raw_set, norm_set;

	int norm_opts[MAX_NORMS]; /* utf8proc option sets, applied in order */
	int n_norms;
	bool nfc_only;

	struct split_stage splits[MAX_SPLITS];
	int n_splits;
	pcre2_match_context *mctx;

	int32_t bos, eos, pad;
	int32_t *eog;
	size_t n_eog;
	bool add_bos;
};

/* ===== UTF-8 ===== */

/* Length of the valid sequence at s (1..4), or 0 when invalid; *sub gets the
 * length of the maximal subpart to replace by one U+FFFD (Unicode 3.9,
 * Table 3-7), and *incomplete says the bytes run out inside a sequence that
 * could still become valid. */
static int utf8_seq(const uint8_t *s, size_t n, size_t *sub, bool *incomplete)
{
	uint8_t c = s[0], lo = 0x80, hi = 0xBF;
	int need;

	*incomplete = false;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		need = 1;
	else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		if (c == 0xE0)
			lo = 0xA0;
		if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		if (c == 0xF0)
			lo = 0x90;
		if (c == 0xF4)
			hi = 0x8F;
	} else {
		*sub = 1;
		return 0;
	}
	for (int i = 1; i <= need; i++) {
		if ((size_t)i >= n) {
			*sub = (size_t)i;
			*incomplete = true;
			return 0;
		}
		if (s[i] < lo || s[i] > hi) {
			*sub = (size_t)i;
			return 0;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need + 1;
}

static uint32_t utf8_cp(const uint8_t *s, int len)
{
	switch (len) {
	case 1: return s[0];
	case 2: return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
	case 3: return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
	default:
		return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
		       (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
	}
}

static int utf8_put(uint8_t *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (uint8_t)(0xC0 | cp >> 6);
		o[1] = (uint8_t)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (uint8_t)(0xE0 | cp >> 12);
		o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (uint8_t)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (uint8_t)(0xF0 | cp >> 18);
	o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (uint8_t)(0x80 | (cp & 0x3F));
	return 4;
}

/* Index of the first invalid byte (n when all valid). */
static size_t utf8_valid_prefix(const uint8_t *s, size_t n)
{
	size_t i = 0, sub;
	bool inc;
	while (i < n) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		int l = utf8_seq(s + i, n - i, &sub, &inc);
		if (!l)
			return i;
		i += (size_t)l;
	}
	return n;
}

/* Append s to b with every maximal invalid subpart replaced by U+FFFD. */
int lynn_tok_append_lossy(struct lynn_buf *b, const uint8_t *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		size_t v = utf8_valid_prefix(s + i, n - i);
		if (v && lynn_buf_append(b, s + i, v))
			return -LYNN_ENOMEM;
		i += v;
		if (i < n) {
			size_t sub;
			bool inc;
			utf8_seq(s + i, n - i, &sub, &inc);
			if (lynn_buf_append(b, "\xEF\xBF\xBD", 3))
				return -LYNN_ENOMEM;
			i += sub;
		}
	}
	return 0;
}

/* ===== Byte-level map (GPT-2 bytes_to_unicode) ===== */

static void bytelevel_init_tables(struct lynn_tok *t)
{
	int n = 0;
	for (int c = 0; c < 324; c++)
		t->cp_to_byte[c] = -1;
	for (int b = 0; b < 256; b++) {
		bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
		t->cp_to_byte[keep ? b : 256 + n++] = (int16_t)b;
	}
}

/* Convert a token string in byte-level form to its bytes in `o` (room for n
 * bytes). Returns the byte count, or -1 if a character is outside the map
 * (or the string is not valid UTF-8): then the token is kept as raw UTF-8. */
static long bytelevel_decode(const struct lynn_tok *t, const uint8_t *s, size_t n, uint8_t *o)
{
	size_t i = 0, k = 0;
	/* the map's characters are all below U+0144: one or two UTF-8 bytes */
	while (i < n) {
		uint32_t cp;
		uint8_t c = s[i];
		if (c < 0x80) {
			cp = c;
			i++;
		} else if (c >= 0xC2 && c <= 0xC5 && i + 1 < n && (s[i + 1] & 0xC0) == 0x80) {
			cp = (uint32_t)(c & 0x1F) << 6 | (s[i + 1] & 0x3F);
			i += 2;
		} else {
			return -1;
		}
		if (cp >= 324 || t->cp_to_byte[cp] < 0)
			return -1;
		o[k++] = (uint8_t)t->cp_to_byte[cp];
	}
	return (long)k;
}

/* ===== Hash tables ===== */

static inline uint64_t hash_bytes(const uint8_t *s, size_t n, bool enc)
{
	/* 8 bytes per step (tokens are short), then a murmur3-style finalizer:
	 * low bits index the table, the high 32 are the tag */
	uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ull ^ (enc ? 0x5851F42D4C957F2Dull : 0);
	for (; n >= 8; n -= 8, s += 8) {
		uint64_t w;
		memcpy(&w, s, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	if (n) {
		uint64_t w = 0;
		for (size_t i = 0; i < n; i++)
			w |= (uint64_t)s[i] << (8 * i);
		h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	return h ^ (h >> 33);
}

static inline uint64_t hash_pair(uint64_t k)
{
	k *= 0x9E3779B97F4A7C15ull;
	return k ^ (k >> 31);
}

static int32_t vocab_find(const struct lynn_tok *t, const uint8_t *s, size_t n, bool enc)
{
	if (!t->vh)
		return -1;
	uint64_t h = hash_bytes(s, n, enc);
	uint32_t i = (uint32_t)h & t->vh_mask, tag = (uint32_t)(h >> 32);
	for (;;) {
		uint64_t v = t->vh[i];
		if (!v)
			return -1;
		if ((uint32_t)(v >> 32) == tag) {
			int32_t id = (int32_t)(uint32_t)v - 1;
			const struct vkey *k = &t->vk[id];
			if (k->len == ((uint32_t)n | (enc ? VK_ENC : 0)) &&
			    !memcmp(t->arena + k->off, s, n))
				return id;
		}
		i = (i + 1) & t->vh_mask;
	}
}

/* Insert id (its key must be set) with hash h; returns -1, or the id that
 * already holds the same key. */
static int32_t vocab_insert(struct lynn_tok *t, int32_t id, uint64_t h)
{
	const struct vkey *k = &t->vk[id];
	uint32_t i = (uint32_t)h & t->vh_mask, tag = (uint32_t)(h >> 32);
	for (;;) {
		uint64_t v = t->vh[i];
		if (!v)
			break;
		if ((uint32_t)(v >> 32) == tag) {
			int32_t o = (int32_t)(uint32_t)v - 1;
			const struct vkey *ko = &t->vk[o];
			if (ko->len == k->len &&
			    !memcmp(t->arena + ko->off, t->arena + k->off, k->len & ~VK_ENC))
				return o;
		}
		i = (i + 1) & t->vh_mask;
	}
	t->vh[i] = (uint64_t)tag << 32 | ((uint32_t)id + 1);
	return -1;
}

static uint64_t vkey_hash(const struct lynn_tok *t, int32_t id)
{
	const struct vkey *k = &t->vk[id];
	return hash_bytes(t->arena + k->off, k->len & ~VK_ENC, k->len & VK_ENC);
}

static inline bool merge_get(const struct lynn_tok *t, int32_t l, int32_t r, uint32_t *rank,
			     int32_t *id)
{
	uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
	uint32_t i = (uint32_t)hash_pair(k) & t->mh_mask;
	for (;;) {
		const struct mslot *m = &t->ms[i];
		if (m->key == k) {
			*rank = m->rank;
			*id = m->id;
			return true;
		}
		if (m->key == UINT64_MAX)
			return false;
		i = (i + 1) & t->mh_mask;
	}
}

static inline void merge_prefetch(const struct lynn_tok *t, int32_t l, int32_t r)
{
	uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
	__builtin_prefetch(&t->ms[(uint32_t)hash_pair(k) & t->mh_mask]);
}

static void merge_put(struct lynn_tok *t, int32_t l, int32_t r, uint32_t rank, int32_t id)
{
	uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
	uint32_t i = (uint32_t)hash_pair(k) & t->mh_mask;
	while (t->ms[i].key != UINT64_MAX && t->ms[i].key != k)
		i = (i + 1) & t->mh_mask;
	if (t->ms[i].key == UINT64_MAX)
		t->n_merges++;
	t->ms[i] = (struct mslot){ k, rank, id };
	/* a merge of two byte tokens also goes in the byte-pair table */
	if (t->vk[l].len == (1 | VK_ENC) && t->vk[r].len == (1 | VK_ENC)) {
		uint8_t a = t->arena[t->vk[l].off], b = t->arena[t->vk[r].off];
		if (t->byte_id[a] == l && t->byte_id[b] == r)
			t->byte_pairs[a * 256 + b] = (struct bpair){ rank, id };
	}
}

/* Allocate the merge table with room for about n merges. */
static int merges_alloc(struct lynn_tok *t, size_t n)
{
	size_t cap = 16;
	while (cap < n + n / 2 + 2 && cap < (1u << 28))
		cap <<= 1;
	free(t->ms);
	t->ms = malloc(cap * sizeof *t->ms);
	if (!t->ms)
		return -LYNN_ENOMEM;
	memset(t->ms, 0xff, cap * sizeof *t->ms);
	t->mh_mask = (uint32_t)cap - 1;
	t->n_merges = 0;
	/* emptied with the table (a rehash re-puts the byte merges) */
	for (int i = 0; i < 65536; i++)
		t->byte_pairs[i] = (struct bpair){ UINT32_MAX, -1 };
	return 0;
}

/* Keep the load factor under 3/4 (linear probing over 16-byte slots). */
static int merges_reserve(struct lynn_tok *t)
{
	if ((t->n_merges + 1) * 4 <= ((size_t)t->mh_mask + 1) * 3)
		return 0;
	struct mslot *old = t->ms;
	size_t oc = (size_t)t->mh_mask + 1;
	t->ms = NULL;
	if (oc >= (1u << 28) || merges_alloc(t, oc)) {
		free(t->ms);
		t->ms = old;
		return -LYNN_ENOMEM;
	}
	for (size_t q = 0; q < oc; q++)
		if (old[q].key != UINT64_MAX)
			merge_put(t, (int32_t)(old[q].key >> 32), (int32_t)(uint32_t)old[q].key,
				  old[q].rank, old[q].id);
	free(old);
	return 0;
}

static uint32_t pow2_at_least(size_t n)
{
	uint32_t c = 16;
	while (c < n && c < (1u << 30))
		c <<= 1;
	return c;
}

/* ===== The arena and per-id arrays ===== */

static int arena_add(struct lynn_tok *t, const void *s, size_t n, uint32_t *off)
{
	if (t->arena_len + n > UINT32_MAX)
		return -LYNN_ENOMEM;
	if (t->arena_len + n > t->arena_cap) {
		size_t c = t->arena_cap ? t->arena_cap : 4096;
		while (c < t->arena_len + n)
			c *= 2;
		uint8_t *a = realloc(t->arena, c);
		if (!a)
			return -LYNN_ENOMEM;
		t->arena = a;
		t->arena_cap = c;
	}
	if (n)
		memcpy(t->arena + t->arena_len, s, n);
	*off = (uint32_t)t->arena_len;
	t->arena_len += n;
	return 0;
}

/* Make ids 0..n-1 addressable (zeroed flags for new ones). */
static int ids_grow(struct lynn_tok *t, int32_t n)
{
	if (n <= t->n_ids)
		return 0;
	size_t nn = (size_t)n;
	uint32_t *a = realloc(t->doff, nn * 4), *b;
	if (!a)
		return -LYNN_ENOMEM;
	t->doff = a;
	if (!(b = realloc(t->dlen, nn * 4)))
		return -LYNN_ENOMEM;
	t->dlen = b;
	struct vkey *c = realloc(t->vk, nn * sizeof *c);
	if (!c)
		return -LYNN_ENOMEM;
	t->vk = c;
	uint8_t *f = realloc(t->flags, nn);
	if (!f)
		return -LYNN_ENOMEM;
	t->flags = f;
	size_t o = (size_t)t->n_ids;
	memset(t->doff + o, 0, (nn - o) * 4);
	memset(t->dlen + o, 0, (nn - o) * 4);
	memset(t->vk + o, 0, (nn - o) * sizeof *t->vk);
	memset(t->flags + o, 0, nn - o);
	t->n_ids = n;
	return 0;
}

/* ===== A small JSON scanner over the mmap ===== */

struct js {
	const uint8_t *p, *end, *base;
	const char *what;
	struct lynn_err *err;
};

static int js_fail(struct js *j, const char *msg)
{
	return lynn_errf(j->err, -LYNN_EFORMAT, "tok: %s: %s at byte %zu", j->what, msg,
			 (size_t)(j->p - j->base));
}

/* tokenizer.json is pretty-printed: most of its bytes are indentation and
 * short strings, so both scans go 16 bytes at a time where SSE2 exists. */
static inline void js_ws(struct js *j)
{
#ifdef __SSE2__
	const __m128i sp = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n');
	const __m128i cr = _mm_set1_epi8('\r'), tb = _mm_set1_epi8('\t');
	while (j->end - j->p >= 16) {
		__m128i x = _mm_loadu_si128((const __m128i *)j->p);
		__m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, sp), _mm_cmpeq_epi8(x, nl)),
					 _mm_or_si128(_mm_cmpeq_epi8(x, cr), _mm_cmpeq_epi8(x, tb)));
		unsigned m = (unsigned)_mm_movemask_epi8(w);
		if (m != 0xFFFF) {
			j->p += __builtin_ctz(~m);
			return;
		}
		j->p += 16;
	}
#endif
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
		j->p++;
}

/* First byte at or after q that is '"', '\\' or a control character. */
static inline const uint8_t *js_str_end(const uint8_t *q, const uint8_t *end)
{
#ifdef __SSE2__
	const __m128i qu = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\');
	const __m128i c1f = _mm_set1_epi8(0x1F);
	while (end - q >= 16) {
		__m128i x = _mm_loadu_si128((const __m128i *)q);
		__m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, qu), _mm_cmpeq_epi8(x, bs)),
					 _mm_cmpeq_epi8(_mm_max_epu8(x, c1f), c1f));
		unsigned m = (unsigned)_mm_movemask_epi8(w);
		if (m)
			return q + __builtin_ctz(m);
		q += 16;
	}
#endif
	while (q < end && *q != '"' && *q != '\\' && *q >= 0x20)
		q++;
	return q;
}

static int js_expect(struct js *j, char c)
{
	js_ws(j);
	if (j->p >= j->end)
		return js_fail(j, "unexpected end of JSON");
	if (*j->p != (uint8_t)c) {
		char m[40];
		snprintf(m, sizeof m, "expected '%c'", c);
		return js_fail(j, m);
	}
	j->p++;
	return 0;
}

static int hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int js_hex4(struct js *j, uint32_t *v)
{
	if (j->end - j->p < 4)
		return js_fail(j, "truncated \\u escape");
	uint32_t x = 0;
	for (int i = 0; i < 4; i++) {
		int h = hexval(j->p[i]);
		if (h < 0)
			return js_fail(j, "bad \\u escape");
		x = x << 4 | (uint32_t)h;
	}
	j->p += 4;
	*v = x;
	return 0;
}

/* Decode a JSON string into b (reset first; NUL-terminated). */
static int js_str(struct js *j, struct lynn_buf *b)
{
	lynn_buf_reset(b);
	js_ws(j);
	if (j->p >= j->end || *j->p != '"')
		return js_fail(j, j->p >= j->end ? "unexpected end of JSON" : "expected a string");
	j->p++;
	for (;;) {
		const uint8_t *s = j->p;
		j->p = js_str_end(j->p, j->end);
		if (j->p > s && lynn_buf_append(b, s, (size_t)(j->p - s)))
			return lynn_errf(j->err, -LYNN_ENOMEM, "tok: out of memory");
		if (j->p >= j->end)
			return js_fail(j, "unterminated string");
		if (*j->p == '"') {
			j->p++;
			if (!b->data && lynn_buf_append(b, "", 0))
				return lynn_errf(j->err, -LYNN_ENOMEM, "tok: out of memory");
			return 0;
		}
		if (*j->p < 0x20)
			return js_fail(j, "control character in string");
		j->p++; /* backslash */
		if (j->p >= j->end)
			return js_fail(j, "unterminated string");
		uint8_t c = *j->p++, o[4];
		int ol = 1;
		switch (c) {
		case '"': case '\\': case '/': o[0] = c; break;
		case 'b': o[0] = '\b'; break;
		case 'f': o[0] = '\f'; break;
		case 'n': o[0] = '\n'; break;
		case 'r': o[0] = '\r'; break;
		case 't': o[0] = '\t'; break;
		case 'u': {
			uint32_t cp, lo;
			if (js_hex4(j, &cp))
				return j->err ? j->err->code : -LYNN_EFORMAT;
			if (cp >= 0xD800 && cp <= 0xDBFF && j->end - j->p >= 6 && j->p[0] == '\\' &&
			    j->p[1] == 'u') {
				const uint8_t *save = j->p;
				j->p += 2;
				if (js_hex4(j, &lo))
					return -LYNN_EFORMAT;
				if (lo >= 0xDC00 && lo <= 0xDFFF)
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
				else
					j->p = save;
			}
			if (cp >= 0xD800 && cp <= 0xDFFF)
				cp = 0xFFFD; /* lone surrogate */
			ol = utf8_put(o, cp);
			break;
		}
		default:
			return js_fail(j, "bad escape in string");
		}
		if (lynn_buf_append(b, o, (size_t)ol))
			return lynn_errf(j->err, -LYNN_ENOMEM, "tok: out of memory");
	}
}

/* A string as a view: into the JSON itself when it has no escapes, else
 * decoded into b. */
static int js_strv(struct js *j, struct lynn_buf *b, const char **s, size_t *n)
{
	js_ws(j);
	if (j->p < j->end && *j->p == '"') {
		const uint8_t *st = j->p + 1, *q = js_str_end(st, j->end);
		if (q < j->end && *q == '"') {
			*s = (const char *)st;
			*n = (size_t)(q - st);
			j->p = q + 1;
			return 0;
		}
	}
	int rc = js_str(j, b);
	if (rc)
		return rc;
	*s = b->data;
	*n = b->len;
	return 0;
}

static int js_int(struct js *j, int64_t *v)
{
	js_ws(j);
	bool neg = false;
	int64_t x = 0;
	int nd = 0;
	if (j->p < j->end && *j->p == '-') {
		neg = true;
		j->p++;
	}
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
		if (x > (INT64_MAX - 9) / 10)
			return js_fail(j, "integer too large");
		x = x * 10 + (*j->p++ - '0');
		nd++;
	}
	if (!nd)
		return js_fail(j, "expected an integer");
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
		return js_fail(j, "expected an integer");
	*v = neg ? -x : x;
	return 0;
}

static int js_skip(struct js *j, int depth)
{
	js_ws(j);
	if (j->p >= j->end)
		return js_fail(j, "unexpected end of JSON");
	if (depth > MAX_JSON_DEPTH)
		return js_fail(j, "nesting too deep");
	uint8_t c = *j->p;
	if (c == '"') {
		j->p++;
		while (j->p < j->end && *j->p != '"') {
			if (*j->p == '\\' && j->end - j->p > 1)
				j->p++;
			j->p++;
		}
		if (j->p >= j->end)
			return js_fail(j, "unterminated string");
		j->p++;
		return 0;
	}
	if (c == '{' || c == '[') {
		uint8_t close = c == '{' ? '}' : ']';
		j->p++;
		js_ws(j);
		if (j->p < j->end && *j->p == close) {
			j->p++;
			return 0;
		}
		for (;;) {
			if (c == '{') {
				js_ws(j);
				if (j->p >= j->end || *j->p != '"')
					return js_fail(j, j->p >= j->end ? "unexpected end of JSON"
									 : "expected a key");
				if (js_skip(j, depth + 1) || js_expect(j, ':'))
					return -LYNN_EFORMAT;
			}
			if (js_skip(j, depth + 1))
				return -LYNN_EFORMAT;
			js_ws(j);
			if (j->p >= j->end)
				return js_fail(j, "unexpected end of JSON");
			if (*j->p == ',') {
				j->p++;
				continue;
			}
			if (*j->p == close) {
				j->p++;
				return 0;
			}
			return js_fail(j, "expected ',' or a closing bracket");
		}
	}
	const uint8_t *s = j->p;
	while (j->p < j->end && ((*j->p >= '0' && *j->p <= '9') || (*j->p >= 'a' && *j->p <= 'z') || *j->p == '-' || *j->p == '+' || *j->p == '.'))
		j->p++;
	if (j->p == s)
		return js_fail(j, "unexpected character");
	return 0;
}

/* Start of an object or array; returns 1 if it is empty (consumed). */
static int js_open(struct js *j, char c)
{
	if (js_expect(j, c))
		return -LYNN_EFORMAT;
	js_ws(j);
	if (j->p < j->end && *j->p == (c == '{' ? '}' : ']')) {
		j->p++;
		return 1;
	}
	return 0;
}

/* After a member: 1 more follow, 0 closed, <0 error. */
static int js_next(struct js *j, char close)
{
	js_ws(j);
	if (j->p >= j->end)
		return js_fail(j, "unexpected end of JSON");
	if (*j->p == ',') {
		j->p++;
		return 1;
	}
	if (*j->p == (uint8_t)close) {
		j->p++;
		return 0;
	}
	return js_fail(j, "expected ',' or a closing bracket");
}

static bool js_is(struct js *j, uint8_t c)
{
	js_ws(j);
	return j->p < j->end && *j->p == c;
}

static bool js_is_null(struct js *j)
{
	js_ws(j);
	return j->end - j->p >= 4 && !memcmp(j->p, "null", 4);
}

/* ===== Loading: model.vocab and model.merges ===== */

struct vent {
	uint64_t h;
	uint32_t off, len; /* key bytes in arena */
	int32_t id;
	bool enc;
};

#define MERGE_BATCH 32

struct mpend {
	size_t i;             /* rank */
	uint32_t dec, la, lb; /* decoded a then b, contiguous at bytes + dec */
	uint32_t raw, ra, rb; /* raw strings (for messages) at bytes + raw */
	uint64_t ha, hb;
	int32_t ia, ib, im;
	bool enc;             /* both parts byte-level */
};

/* Merges parsed and not yet resolved to ids. */
struct mqueue {
	struct mpend *v;
	size_t n, cap;
	struct lynn_buf bytes;
};

static void mqueue_release(struct mqueue *q)
{
	free(q->v);
	q->v = NULL;
	q->n = q->cap = 0;
	lynn_buf_release(&q->bytes);
}

struct loader {
	struct lynn_tok *t;
	struct js j;
	struct lynn_buf s1, s2, s3, unk;
	uint8_t *conv; /* scratch for byte-level conversion */
	size_t conv_cap;
	bool have_vocab;
	const uint8_t *merges_at; /* merges met before vocab: parse later */
	/* merges wait in a batch so that their hash slots can be prefetched */
	struct mqueue q;
	int64_t guess; /* merged id - rank of the last merge */
	/* merges scanned by a second thread while this one read the vocab */
	const uint8_t *merges_key_at, *merges_end;
	bool merges_done;
};


static int conv_reserve(struct loader *L, size_t n)
{
	if (n <= L->conv_cap)
		return 0;
	size_t c = L->conv_cap ? L->conv_cap : 256;
	while (c < n)
		c *= 2;
	uint8_t *p = realloc(L->conv, c);
	if (!p)
		return -LYNN_ENOMEM;
	L->conv = p;
	L->conv_cap = c;
	return 0;
}

/* Vocab-form token string -> id in the model vocab, or -1. */
static int32_t vocab_lookup_form(struct loader *L, const uint8_t *s, size_t n)
{
	if (conv_reserve(L, n + 1))
		return -2;
	long k = bytelevel_decode(L->t, s, n, L->conv);
	if (k >= 0)
		return vocab_find(L->t, L->conv, (size_t)k, true);
	return vocab_find(L->t, s, n, false);
}

static int parse_vocab(struct loader *L)
{
	struct lynn_tok *t = L->t;
	struct js *j = &L->j;
	struct vent *v = NULL;
	size_t nv = 0, cv = 0;
	int64_t maxid = -1;
	int rc = js_open(j, '{');

	if (rc < 0)
		return rc;
	while (rc == 0) {
		int64_t id = 0;
		const char *ks;
		size_t kn;
		if (js_strv(j, &L->s1, &ks, &kn) || js_expect(j, ':') || js_int(j, &id)) {
			rc = -LYNN_EFORMAT;
			goto out;
		}
		if (id < 0 || id >= MAX_IDS) {
			rc = lynn_errf(L->j.err, -LYNN_EFORMAT,
				       "tok: %s: model.vocab: id %lld of '%.*s' out of range",
				       j->what, (long long)id, (int)LYNN_MIN(kn, 40), ks);
			goto out;
		}
		if (nv == cv) {
			cv = cv ? cv * 2 : 1024;
			struct vent *nvp = realloc(v, cv * sizeof *v);
			if (!nvp) {
				rc = lynn_errf(j->err, -LYNN_ENOMEM, "tok: out of memory");
				goto out;
			}
			v = nvp;
		}
		if (conv_reserve(L, kn + 1)) {
			rc = lynn_errf(j->err, -LYNN_ENOMEM, "tok: out of memory");
			goto out;
		}
		long k = bytelevel_decode(t, (const uint8_t *)ks, kn, L->conv);
		struct vent *e = &v[nv++];
		e->id = (int32_t)id;
		e->enc = k >= 0;
		if (k >= 0)
			rc = arena_add(t, L->conv, (size_t)k, &e->off), e->len = (uint32_t)k;
		else
			rc = arena_add(t, ks, kn, &e->off), e->len = (uint32_t)kn;
		if (rc) {
			rc = lynn_errf(j->err, -LYNN_ENOMEM, "tok: out of memory");
			goto out;
		}
		if (id > maxid)
			maxid = id;
		rc = js_next(j, '}');
		if (rc < 0)
			goto out;
		rc = rc ? 0 : 1;
	}
	/* Bound: sparse ids may not make us allocate far beyond the input. */
	if (maxid >= (int64_t)nv * 4 + 65536) {
		rc = lynn_errf(j->err, -LYNN_EFORMAT,
			       "tok: %s: model.vocab: id %lld is far beyond the %zu entries", j->what,
			       (long long)maxid, nv);
		goto out;
	}
	if ((rc = ids_grow(t, (int32_t)(maxid + 1)))) {
		lynn_errf(j->err, rc, "tok: out of memory");
		goto out;
	}
	t->vh_mask = pow2_at_least(nv * 2 + 1) - 1;
	t->vh = calloc((size_t)t->vh_mask + 1, sizeof *t->vh);
	if (!t->vh) {
		rc = lynn_errf(j->err, -LYNN_ENOMEM, "tok: out of memory");
		goto out;
	}
	for (size_t i = 0; i < nv; i++) {
		struct vent *e = &v[i];
		if (t->flags[e->id] & IDF_USED) {
			rc = lynn_errf(j->err, -LYNN_EFORMAT,
				       "tok: %s: model.vocab: duplicate id %d", j->what, e->id);
			goto out;
		}
		t->doff[e->id] = e->off;
		t->dlen[e->id] = e->len;
		t->vk[e->id] = (struct vkey){ e->off, e->len | (e->enc ? VK_ENC : 0) };
		t->flags[e->id] = IDF_USED | IDF_VOCAB | (e->enc ? IDF_ENC : 0);
		if (e->enc && e->len == 1)
			t->byte_id[t->arena[e->off]] = e->id;
		e->h = vkey_hash(t, e->id);
	}
	/* insert with the slots of later entries prefetched: the table is
	 * larger than the caches */
	for (size_t i = 0; i < nv; i++) {
		if (i + 16 < nv)
			__builtin_prefetch(&t->vh[(uint32_t)v[i + 16].h & t->vh_mask], 1);
		struct vent *e = &v[i];
		int32_t o = vocab_insert(t, e->id, e->h);
		if (o >= 0) {
			rc = lynn_errf(j->err, -LYNN_EFORMAT,
				       "tok: %s: model.vocab: duplicate token '%.*s' (ids %d and %d)",
				       j->what, (int)LYNN_MIN(e->len, 40u),
				       (const char *)t->arena + e->off, o, e->id);
			goto out;
		}
	}
	L->have_vocab = true;
	rc = 0;
out:
	free(v);
	return rc;
}

/* Candidate id for hash h (its tag matches), prefetching its key; -1 if none. */
static int32_t vocab_probe(const struct lynn_tok *t, uint64_t h)
{
	uint32_t i = (uint32_t)h & t->vh_mask, tag = (uint32_t)(h >> 32);
	for (;;) {
		uint64_t v = t->vh[i];
		if (!v)
			return -1;
		if ((uint32_t)(v >> 32) == tag)
			return (int32_t)(uint32_t)v - 1;
		i = (i + 1) & t->vh_mask;
	}
}

static bool vkey_eq(const struct lynn_tok *t, int32_t id, const uint8_t *s, size_t n, bool enc)
{
	const struct vkey *k = &t->vk[id];
	return k->len == ((uint32_t)n | (enc ? VK_ENC : 0)) && !memcmp(t->arena + k->off, s, n);
}

static int merge_error(struct loader *L, const struct mqueue *q, const struct mpend *m)
{
	const char *raw = q->bytes.data + m->raw;
	const char *a = raw, *b = raw + m->ra;
	if (m->ia < 0 || m->ib < 0) {
		bool left = m->ia < 0;
		return lynn_errf(L->j.err, -LYNN_EFORMAT,
				 "tok: %s: model.merges[%zu]: token '%.*s' is not in the vocab",
				 L->j.what, m->i, (int)LYNN_MIN(left ? m->ra : m->rb, 60),
				 left ? a : b);
	}
	return lynn_errf(L->j.err, -LYNN_EFORMAT,
			 "tok: %s: model.merges[%zu]: merged token '%.*s%.*s' is not in the vocab",
			 L->j.what, m->i, (int)LYNN_MIN(m->ra, 40), a, (int)LYNN_MIN(m->rb, 40), b);
}

/* Resolve the queued merges (at most MERGE_BATCH) to ids and insert them,
 * in rank order; the hash slots of each step are prefetched a step ahead
 * (the tables are larger than the caches). */
static int merge_resolve(struct loader *L, struct mqueue *q)
{
	struct lynn_tok *t = L->t;
	const uint8_t *mb = (const uint8_t *)q->bytes.data;
	struct mpend *v = q->v;
	size_t n = q->n;
	int32_t ca[MERGE_BATCH], cb[MERGE_BATCH];

	/* 0: prefetch the vocab slots */
	for (size_t k = 0; k < n; k++) {
		if (!v[k].enc)
			continue;
		__builtin_prefetch(&t->vh[(uint32_t)v[k].ha & t->vh_mask]);
		__builtin_prefetch(&t->vh[(uint32_t)v[k].hb & t->vh_mask]);
	}
	/* 1: probe the slots, prefetch the keys */
	for (size_t k = 0; k < n; k++) {
		struct mpend *m = &v[k];
		if (!m->enc)
			continue;
		ca[k] = vocab_probe(t, m->ha);
		cb[k] = vocab_probe(t, m->hb);
		if (ca[k] >= 0)
			__builtin_prefetch(&t->vk[ca[k]]);
		if (cb[k] >= 0)
			__builtin_prefetch(&t->vk[cb[k]]);
	}
	/* 2: prefetch the key bytes */
	for (size_t k = 0; k < n; k++) {
		if (!v[k].enc)
			continue;
		if (ca[k] >= 0)
			__builtin_prefetch(t->arena + t->vk[ca[k]].off);
		if (cb[k] >= 0)
			__builtin_prefetch(t->arena + t->vk[cb[k]].off);
	}
	/* 3: verify, find the merged token, prefetch the merge slot */
	for (size_t k = 0; k < n; k++) {
		struct mpend *m = &v[k];
		if (m->enc) {
			const uint8_t *a = mb + m->dec, *b = a + m->la;
			m->ia = ca[k] >= 0 && vkey_eq(t, ca[k], a, m->la, true)
					? ca[k] : vocab_find(t, a, m->la, true);
			m->ib = cb[k] >= 0 && vkey_eq(t, cb[k], b, m->lb, true)
					? cb[k] : vocab_find(t, b, m->lb, true);
			int64_t g = (int64_t)m->i + L->guess;
			size_t km = (size_t)m->la + m->lb;
			if (g >= 0 && g < t->n_ids && vkey_eq(t, (int32_t)g, a, km, true))
				m->im = (int32_t)g;
			else
				m->im = vocab_find(t, a, km, true);
		} else {
			/* a part outside the byte map: raw UTF-8 tokens */
			const uint8_t *raw = mb + m->raw;
			m->ia = vocab_lookup_form(L, raw, m->ra);
			m->ib = vocab_lookup_form(L, raw + m->ra, m->rb);
			m->im = -1;
			if (m->ia < -1 || m->ib < -1)
				return lynn_errf(L->j.err, -LYNN_ENOMEM, "tok: out of memory");
			if (m->ia >= 0 && m->ib >= 0)
				m->im = vocab_find(t, raw, (size_t)m->ra + m->rb, false);
		}
		if (m->ia < 0 || m->ib < 0 || m->im < 0)
			return merge_error(L, q, m);
		L->guess = (int64_t)m->im - (int64_t)m->i;
		uint64_t key = (uint64_t)(uint32_t)m->ia << 32 | (uint32_t)m->ib;
		__builtin_prefetch(&t->ms[(uint32_t)hash_pair(key) & t->mh_mask], 1);
	}
	/* 4: insert */
	for (size_t k = 0; k < n; k++) {
		struct mpend *m = &v[k];
		if (merges_reserve(t))
			return lynn_errf(L->j.err, -LYNN_ENOMEM, "tok: out of memory");
		merge_put(t, m->ia, m->ib, (uint32_t)m->i, m->im);
	}
	return 0;
}

/* Resolve what the loader's own queue holds and empty it. */
static int merge_flush(struct loader *L)
{
	int rc = merge_resolve(L, &L->q);
	L->q.n = 0;
	lynn_buf_reset(&L->q.bytes);
	return rc;
}

/* Queue merge i = "a" + "b" (strings in vocab form): the parts decoded
 * from the byte-level form and hashed. Reads only t->cp_to_byte, so the
 * second thread runs it while the vocab is still being built. */
static int queue_merge(const struct lynn_tok *t, struct mqueue *q, size_t i, const char *a,
		       size_t al, const char *b, size_t bl)
{
	struct mpend *m;
	size_t need = 2 * (al + bl) + 8;

	if (q->n == q->cap) {
		size_t c = q->cap ? q->cap * 2 : MERGE_BATCH;
		struct mpend *nv = realloc(q->v, c * sizeof *nv);
		if (!nv)
			return -LYNN_ENOMEM;
		q->v = nv;
		q->cap = c;
	}
	if (al + bl > UINT32_MAX / 4 || q->bytes.len + need > UINT32_MAX ||
	    lynn_buf_reserve(&q->bytes, need))
		return -LYNN_ENOMEM;
	m = &q->v[q->n++];
	m->i = i;
	m->raw = (uint32_t)q->bytes.len;
	m->ra = (uint32_t)al;
	m->rb = (uint32_t)bl;
	memcpy(q->bytes.data + q->bytes.len, a, al);
	memcpy(q->bytes.data + q->bytes.len + al, b, bl);
	q->bytes.len += al + bl;
	uint8_t *d = (uint8_t *)q->bytes.data + q->bytes.len;
	long ka = bytelevel_decode(t, (const uint8_t *)a, al, d);
	long kb = ka < 0 ? -1 : bytelevel_decode(t, (const uint8_t *)b, bl, d + ka);
	m->enc = ka >= 0 && kb >= 0;
	m->ia = m->ib = m->im = -1;
	if (m->enc) {
		m->dec = (uint32_t)q->bytes.len;
		m->la = (uint32_t)ka;
		m->lb = (uint32_t)kb;
		q->bytes.len += (size_t)(ka + kb);
		m->ha = hash_bytes(d, (size_t)ka, true);
		m->hb = hash_bytes(d + ka, (size_t)kb, true);
	}
	return 0;
}

/* Scan model.merges at j (a JSON array of "a b" or ["a", "b"]) into q;
 * each full batch goes to sink(ctx, q), which empties q. */
typedef int (*merge_sink)(void *ctx, struct mqueue *q);

static int scan_merges(const struct lynn_tok *t, struct js *j, struct lynn_buf *s1,
		       struct lynn_buf *s2, struct mqueue *q, merge_sink sink, void *ctx)
{
	size_t i = 0;
	int rc = js_open(j, '[');

	if (rc < 0)
		return rc;
	while (rc == 0) {
		const char *a, *b;
		size_t al, bl;
		if (js_is(j, '[')) {
			j->p++;
			/* the first view may point into s1, the second into s2 */
			if (js_strv(j, s1, &a, &al) || js_expect(j, ',') || js_strv(j, s2, &b, &bl) ||
			    js_expect(j, ']'))
				return -LYNN_EFORMAT;
		} else {
			const char *m;
			size_t ml;
			if (js_strv(j, s1, &m, &ml))
				return -LYNN_EFORMAT;
			const char *sp = memchr(m, ' ', ml);
			if (!sp || memchr(sp + 1, ' ', ml - (size_t)(sp + 1 - m)))
				return lynn_errf(j->err, -LYNN_EFORMAT,
						 "tok: %s: model.merges[%zu]: '%.*s' is not two tokens "
						 "separated by one space",
						 j->what, i, (int)LYNN_MIN(ml, 60), m);
			a = m, al = (size_t)(sp - m);
			b = sp + 1, bl = ml - al - 1;
		}
		if (queue_merge(t, q, i, a, al, b, bl))
			return lynn_errf(j->err, -LYNN_ENOMEM, "tok: out of memory");
		if (q->n == MERGE_BATCH && (rc = sink(ctx, q)))
			return rc;
		i++;
		rc = js_next(j, ']');
		if (rc < 0)
			return rc;
		rc = rc ? 0 : 1;
	}
	return 0;
}

static int sink_resolve(void *ctx, struct mqueue *q)
{
	(void)q;
	return merge_flush(ctx);
}

static int parse_merges(struct loader *L)
{
	struct js *j = &L->j;
	int rc;

	if (merges_alloc(L->t, (size_t)L->t->n_ids))
		return lynn_errf(j->err, -LYNN_ENOMEM, "tok: out of memory");
	rc = scan_merges(L->t, j, &L->s1, &L->s2, &L->q, sink_resolve, L);
	/* merges queued before a syntax error are checked first: a bad merge
	 * there is the earlier error */
	if (rc == -LYNN_EFORMAT && L->q.n) {
		struct lynn_err keep = j->err ? *j->err : (struct lynn_err){ 0 };
		if (!merge_flush(L) && j->err)
			*j->err = keep;
		return rc;
	}
	return rc ? rc : merge_flush(L);
}

/* ===== The merges on a second thread =====
 * While this thread parses model.vocab, a second one skips it, finds
 * model.merges after it and scans it (JSON, byte-level decoding, hashing:
 * most of the load time) into blocks of MERGE_BATCH merges, handed over
 * under a mutex; this thread resolves them to ids as they come. Any failure
 * of the second thread falls back to the one-thread parse, which then gives
 * the same errors as always. */

struct mblock {
	struct mqueue q;
	struct mblock *next;
};

struct mthread {
	const struct lynn_tok *t;
	struct js j; /* at the vocab value */
	struct lynn_err err;
	struct lynn_buf s1, s2, key;
	struct mqueue q;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* under mu: */
	struct mblock *head, *tail;
	bool finished, cancel, found;
	int rc; /* once finished: 0 when all of model.merges was scanned */
	const uint8_t *key_at, *end;
};

static int sink_publish(void *ctx, struct mqueue *q)
{
	struct mthread *m = ctx;
	struct mblock *b = calloc(1, sizeof *b);
	if (!b)
		return -LYNN_ENOMEM;
	b->q = *q; /* the block takes the arrays; the scanner starts anew */
	memset(q, 0, sizeof *q);
	pthread_mutex_lock(&m->mu);
	bool cancel = m->cancel;
	if (!cancel) {
		if (m->tail)
			m->tail->next = b;
		else
			m->head = b;
		m->tail = b;
		pthread_cond_signal(&m->cv);
	}
	pthread_mutex_unlock(&m->mu);
	if (cancel) {
		mqueue_release(&b->q);
		free(b);
		return -LYNN_EINTR;
	}
	return 0;
}

static void *merges_thread(void *arg)
{
	struct mthread *m = arg;
	struct js *j = &m->j;
	int rc = -1;
	const uint8_t *key_at = NULL;

	if (js_skip(j, 2))
		goto out;
	for (;;) {
		if (js_next(j, '}') <= 0)
			goto out; /* the end of model (no merges after the vocab), or bad JSON */
		if (js_str(j, &m->key) || js_expect(j, ':'))
			goto out;
		if (!strcmp(m->key.data, "merges"))
			break;
		if (js_skip(j, 2))
			goto out;
	}
	js_ws(j);
	key_at = j->p;
	pthread_mutex_lock(&m->mu);
	m->found = true;
	pthread_mutex_unlock(&m->mu);
	rc = scan_merges(m->t, j, &m->s1, &m->s2, &m->q, sink_publish, m);
	if (!rc && m->q.n)
		rc = sink_publish(m, &m->q);
out:
	pthread_mutex_lock(&m->mu);
	m->rc = rc;
	m->key_at = key_at;
	m->end = j->p;
	m->finished = true;
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* Parse the vocab at L->j, with the merges after it scanned by a second
 * thread and resolved here. */
static int parse_vocab_and_merges(struct loader *L)
{
	struct mthread m = { 0 };
	pthread_t th;
	bool started = false;
	int rc;

	js_ws(&L->j);
	if (L->j.end - L->j.p > MERGES_THREAD_MIN) {
		m.t = L->t;
		m.j = L->j;
		m.j.err = &m.err;
		if (pthread_mutex_init(&m.mu, NULL) == 0) {
			if (pthread_cond_init(&m.cv, NULL) == 0) {
				started = pthread_create(&th, NULL, merges_thread, &m) == 0;
				if (!started)
					pthread_cond_destroy(&m.cv);
			}
			if (!started)
				pthread_mutex_destroy(&m.mu);
		}
	}
	rc = parse_vocab(L);
	if (!started)
		return rc;
	bool ok = !rc && !merges_alloc(L->t, (size_t)L->t->n_ids);
	int rrc = 0;
	for (;;) {
		pthread_mutex_lock(&m.mu);
		if (!ok || rrc)
			m.cancel = true;
		while (!m.head && !m.finished)
			pthread_cond_wait(&m.cv, &m.mu);
		struct mblock *b = m.head;
		m.head = m.tail = NULL;
		bool fin = m.finished;
		pthread_mutex_unlock(&m.mu);
		while (b) {
			struct mblock *nx = b->next;
			if (ok && !rrc)
				rrc = merge_resolve(L, &b->q);
			mqueue_release(&b->q);
			free(b);
			b = nx;
		}
		if (fin)
			break;
	}
	pthread_join(th, NULL);
	pthread_cond_destroy(&m.cv);
	pthread_mutex_destroy(&m.mu);
	if (ok && !rrc && m.rc == 0) {
		L->merges_key_at = m.key_at;
		L->merges_end = m.end;
		L->merges_done = true;
	} else if (ok && m.found) {
		/* the second thread or the resolving failed: the one-thread parse
		 * of model.merges (from a fresh table) reports it */
		if (L->j.err)
			lynn_err_clear(L->j.err);
		if (merges_alloc(L->t, 8))
			rc = lynn_errf(L->j.err, -LYNN_ENOMEM, "tok: out of memory");
	}
	if (!ok && !rc)
		rc = lynn_errf(L->j.err, -LYNN_ENOMEM, "tok: out of memory");
	lynn_buf_release(&m.s1);
	lynn_buf_release(&m.s2);
	lynn_buf_release(&m.key);
	mqueue_release(&m.q);
	return rc;
}

static int parse_model(struct loader *L)
{
	struct js *j = &L->j;
	struct lynn_buf key = LYNN_BUF_INIT;
	bool have_merges = false;
	int rc = js_open(j, '{');

	if (rc < 0)
		return rc;
	while (rc == 0) {
		if ((rc = js_str(j, &key)) || (rc = js_expect(j, ':')))
			goto out;
		if (!strcmp(key.data, "type")) {
			if ((rc = js_str(j, &L->s1)))
				goto out;
			if (strcmp(L->s1.data, "BPE")) {
				rc = lynn_errf(j->err, -LYNN_EUNSUPPORTED,
					       "tok: %s: model.type '%.40s' is not supported (only BPE)",
					       j->what, L->s1.data);
				goto out;
			}
		} else if (!strcmp(key.data, "vocab")) {
			if (L->have_vocab) {
				rc = js_fail(j, "model.vocab given twice");
				goto out;
			}
			if ((rc = L->merges_at ? parse_vocab(L) : parse_vocab_and_merges(L)))
				goto out;
			if (L->merges_at) {
				const uint8_t *save = j->p;
				j->p = L->merges_at;
				if ((rc = parse_merges(L)))
					goto out;
				j->p = save;
				have_merges = true;
			}
		} else if (!strcmp(key.data, "merges")) {
			if (have_merges || L->merges_at) {
				rc = js_fail(j, "model.merges given twice");
				goto out;
			}
			js_ws(j);
			if (L->merges_done && j->p == L->merges_key_at) {
				j->p = L->merges_end; /* read by the second thread */
				have_merges = true;
			} else if (L->have_vocab) {
				if ((rc = parse_merges(L)))
					goto out;
				have_merges = true;
			} else {
				js_ws(j);
				L->merges_at = j->p;
				if ((rc = js_skip(j, 2)))
					goto out;
			}
		} else if (!strcmp(key.data, "unk_token")) {
			if (js_is_null(j)) {
				j->p += 4;
			} else {
				/* resolved after the vocab */
				if ((rc = js_str(j, &L->unk)))
					goto out;
			}
		} else if (!strcmp(key.data, "ignore_merges")) {
			js_ws(j);
			L->t->ignore_merges = j->end - j->p >= 4 && !memcmp(j->p, "true", 4);
			if ((rc = js_skip(j, 2)))
				goto out;
		} else if (!strcmp(key.data, "byte_fallback") || !strcmp(key.data, "fuse_unk")) {
			js_ws(j);
			bool yes = j->end - j->p >= 4 && !memcmp(j->p, "true", 4);
			if (yes && !strcmp(key.data, "byte_fallback")) {
				rc = lynn_errf(j->err, -LYNN_EUNSUPPORTED,
					       "tok: %s: model.byte_fallback is not supported", j->what);
				goto out;
			}
			if ((rc = js_skip(j, 2)))
				goto out;
		} else if (!strcmp(key.data, "continuing_subword_prefix") ||
			   !strcmp(key.data, "end_of_word_suffix")) {
			if (js_is_null(j)) {
				j->p += 4;
			} else {
				if ((rc = js_str(j, &L->s2)))
					goto out;
				if (L->s2.len) {
					rc = lynn_errf(j->err, -LYNN_EUNSUPPORTED,
						       "tok: %s: model.%s is not supported", j->what,
						       key.data);
					goto out;
				}
			}
		} else if (!strcmp(key.data, "dropout")) {
			if (js_is_null(j)) {
				j->p += 4;
			} else {
				const uint8_t *s = (js_ws(j), j->p);
				if ((rc = js_skip(j, 2)))
					goto out;
				double d = strtod((const char *)s, NULL);
				if (d > 0) {
					rc = lynn_errf(j->err, -LYNN_EUNSUPPORTED,
						       "tok: %s: model.dropout is not supported", j->what);
					goto out;
				}
			}
		} else if ((rc = js_skip(j, 2))) {
			goto out;
		}
		rc = js_next(j, '}');
		if (rc < 0)
			goto out;
		rc = rc ? 0 : 1;
	}
	if (!L->have_vocab) {
		rc = lynn_errf(j->err, -LYNN_EFORMAT, "tok: %s: model.vocab is missing", j->what);
		goto out;
	}
	if (!have_merges && !L->merges_at) {
		/* a BPE with no merges: every piece stays bytes; allowed */
		if (merges_alloc(L->t, 8)) {
			rc = lynn_errf(j->err, -LYNN_ENOMEM, "tok: out of memory");
			goto out;
		}
	}
	if (L->unk.data) {
		L->t->unk_id = vocab_lookup_form(L, (const uint8_t *)L->unk.data, L->unk.len);
		if (L->t->unk_id < 0) {
			rc = lynn_errf(j->err, -LYNN_EFORMAT,
				       "tok: %s: model.unk_token '%.40s' is not in the vocab", j->what,
				       L->unk.data);
			goto out;
		}
	}
	rc = 0;
out:
	lynn_buf_release(&key);
	return rc;
}

/* ===== Loading: added tokens, normalizer, pre-tokenizer, decoder ===== */

static int normalize(const struct lynn_tok *t, const uint8_t *s, size_t n, struct lynn_buf *out);

struct added_key {
	uint8_t first;
	size_t len;
	int32_t id;
	uint32_t idx;
};

/* by first byte, then longest first */
static int cmp_added(const void *pa, const void *pb)
{
	const struct added_key *a = pa, *b = pb;
	if (a->first != b->first)
		return a->first < b->first ? -1 : 1;
	if (a->len != b->len)
		return a->len > b->len ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

static int build_set(struct lynn_tok *t, struct added_set *s, bool normalized)
{
	struct added_key *keys = malloc((t->n_added + 1) * sizeof *keys);
	s->n = 0;
	s->idx = malloc((t->n_added + 1) * sizeof *s->idx);
	if (!s->idx || !keys) {
		free(keys);
		return -LYNN_ENOMEM;
	}
	for (size_t i = 0; i < t->n_added; i++) {
		const struct added_tok *a = &t->added[i];
		if (a->normalized == normalized)
			keys[s->n++] = (struct added_key){ (uint8_t)a->text[0], a->len, a->id,
							   (uint32_t)i };
	}
	qsort(keys, s->n, sizeof *keys, cmp_added);
	for (size_t i = 0; i < s->n; i++)
		s->idx[i] = keys[i].idx;
	free(keys);
	size_t k = 0;
	for (int b = 0; b < 256; b++) {
		s->start[b] = (uint32_t)k;
		while (k < s->n && (uint8_t)t->added[s->idx[k]].text[0] == b)
			k++;
	}
	s->start[256] = (uint32_t)k;
	return 0;
}

static int parse_added(struct lynn_tok *t, const cJSON *arr, const char *what,
		       struct lynn_err *err)
{
	int rc = 0;
	struct lynn_buf nb = LYNN_BUF_INIT;

	if (!arr || cJSON_IsNull(arr))
		goto sets;
	if (!cJSON_IsArray(arr))
		return lynn_errf(err, -LYNN_EFORMAT, "tok: %s: added_tokens must be an array", what);
	int n = cJSON_GetArraySize(arr);
	t->added = calloc((size_t)n + 1, sizeof *t->added);
	if (!t->added)
		return lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
	const cJSON *e;
	int i = 0;
	cJSON_ArrayForEach(e, arr)
	{
		char fw[64];
		int64_t id = -1;
		const char *content = NULL;
		struct added_tok *a = &t->added[t->n_added];
		snprintf(fw, sizeof fw, "%s added_tokens[%d]", what, i++);
		if ((rc = lynn_json_get_int(e, "id", true, &id, fw, err)) ||
		    (rc = lynn_json_get_str(e, "content", true, &content, fw, err)))
			goto out;
		if (id < 0 || id >= MAX_IDS) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "tok: %s: id %lld out of range", fw,
				       (long long)id);
			goto out;
		}
		if (!*content) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "tok: %s: empty content", fw);
			goto out;
		}
		a->special = false;
		if ((rc = lynn_json_get_bool(e, "special", false, &a->special, fw, err)))
			goto out;
		a->normalized = !a->special;
		if ((rc = lynn_json_get_bool(e, "lstrip", false, &a->lstrip, fw, err)) ||
		    (rc = lynn_json_get_bool(e, "rstrip", false, &a->rstrip, fw, err)) ||
		    (rc = lynn_json_get_bool(e, "single_word", false, &a->single_word, fw, err)) ||
		    (rc = lynn_json_get_bool(e, "normalized", false, &a->normalized, fw, err)))
			goto out;
		if (id >= (int64_t)t->n_ids + n + 65536) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "tok: %s: id %lld is far beyond the vocab",
				       fw, (long long)id);
			goto out;
		}
		if ((rc = ids_grow(t, (int32_t)id + 1)))
			goto out;
		if (t->flags[id] & IDF_ADDED) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "tok: %s: duplicate id %lld", fw,
				       (long long)id);
			goto out;
		}
		a->id = (int32_t)id;
		size_t cl = strlen(content);
		/* Decode bytes: the ByteLevel decoder maps the content when all of
		 * it is in the byte map, else keeps the UTF-8 (decoders/byte_level.rs). */
		uint8_t *tmp = malloc(cl + 1);
		if (!tmp) {
			rc = -LYNN_ENOMEM;
			goto out;
		}
		long k = bytelevel_decode(t, (const uint8_t *)content, cl, tmp);
		uint32_t off;
		rc = k >= 0 ? arena_add(t, tmp, (size_t)k, &off) : arena_add(t, content, cl, &off);
		free(tmp);
		if (rc)
			goto out;
		t->doff[id] = off;
		t->dlen[id] = k >= 0 ? (uint32_t)k : (uint32_t)cl;
		t->flags[id] |= IDF_USED | IDF_ADDED | (a->special ? IDF_SPECIAL : 0);
		/* matched text: content, normalized when the token is */
		if (a->normalized && t->n_norms) {
			if ((rc = normalize(t, (const uint8_t *)content, cl, &nb))) {
				if (rc != -LYNN_ENOMEM)
					rc = lynn_errf(err, rc, "tok: %s: content is not valid UTF-8", fw);
				goto out;
			}
			a->text = strndup(nb.data ? nb.data : "", nb.len);
			a->len = nb.len;
		} else {
			a->text = strndup(content, cl);
			a->len = cl;
		}
		if (!a->text) {
			rc = -LYNN_ENOMEM;
			goto out;
		}
		t->n_added++;
		if (!a->len) { /* normalized to nothing: never matches */
			free(a->text);
			t->n_added--;
		}
	}
sets:
	if ((rc = build_set(t, &t->raw_set, false)) || (rc = build_set(t, &t->norm_set, true)))
		goto out;
out:
	lynn_buf_release(&nb);
	if (rc == -LYNN_ENOMEM)
		lynn_errf(err, rc, "tok: out of memory");
	return rc;
}

static const char *jtype(const cJSON *o)
{
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
	return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

static int parse_normalizer(struct lynn_tok *t, const cJSON *o, const char *what, int depth,
			    struct lynn_err *err)
{
	const char *ty;
	if (!o || cJSON_IsNull(o))
		return 0;
	if (!cJSON_IsObject(o) || !(ty = jtype(o)))
		return lynn_errf(err, -LYNN_EFORMAT, "tok: %s: normalizer: missing 'type'", what);
	if (!strcmp(ty, "Sequence")) {
		const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "normalizers"), *e;
		if (!cJSON_IsArray(arr) || depth > 4)
			return lynn_errf(err, -LYNN_EFORMAT,
					 "tok: %s: normalizer: Sequence needs a 'normalizers' array", what);
		cJSON_ArrayForEach(e, arr)
		{
			int rc = parse_normalizer(t, e, what, depth + 1, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	int opts;
	if (!strcmp(ty, "NFC"))
		opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
	else if (!strcmp(ty, "NFD"))
		opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
	else if (!strcmp(ty, "NFKC"))
		opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
	else if (!strcmp(ty, "NFKD"))
		opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
	else
		return lynn_errf(err, -LYNN_EUNSUPPORTED,
				 "tok: %s: normalizer type '%.40s' is not supported", what, ty);
	if (t->n_norms >= MAX_NORMS)
		return lynn_errf(err, -LYNN_EUNSUPPORTED, "tok: %s: too many normalizers", what);
	t->norm_opts[t->n_norms++] = opts;
	return 0;
}

static int add_split(struct lynn_tok *t, const char *pat, size_t len, bool literal,
		     const char *what, struct lynn_err *err)
{
	int ec;
	PCRE2_SIZE eo;
	if (t->n_splits >= MAX_SPLITS)
		return lynn_errf(err, -LYNN_EUNSUPPORTED, "tok: %s: too many Split pre-tokenizers",
				 what);
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len,
				       PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0), &ec,
				       &eo, NULL);
	if (!re) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(ec, msg, sizeof msg);
		return lynn_errf(err, -LYNN_EFORMAT,
				 "tok: %s: pre_tokenizer regex: %s at offset %zu", what,
				 (const char *)msg, (size_t)eo);
	}
	struct split_stage *s = &t->splits[t->n_splits++];
	s->re = re;
	s->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
	return 0;
}

/* GPT-2's pattern, used by ByteLevel with use_regex (pre_tokenizers/byte_level.rs). */
static const char GPT2_RE[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int parse_pretok(struct lynn_tok *t, const cJSON *o, const char *what, int depth,
			bool *bytelevel, struct lynn_err *err)
{
	const char *ty;
	if (!o || cJSON_IsNull(o))
		return 0;
	if (!cJSON_IsObject(o) || !(ty = jtype(o)))
		return lynn_errf(err, -LYNN_EFORMAT, "tok: %s: pre_tokenizer: missing 'type'", what);
	if (!strcmp(ty, "Sequence")) {
		const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers"), *e;
		if (!cJSON_IsArray(arr) || depth > 4)
			return lynn_errf(err, -LYNN_EFORMAT,
					 "tok: %s: pre_tokenizer: Sequence needs a 'pretokenizers' array",
					 what);
		cJSON_ArrayForEach(e, arr)
		{
			int rc = parse_pretok(t, e, what, depth + 1, bytelevel, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (!strcmp(ty, "Split")) {
		const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
		const cJSON *beh = cJSON_GetObjectItemCaseSensitive(o, "behavior");
		const cJSON *inv = cJSON_GetObjectItemCaseSensitive(o, "invert");
		const cJSON *re = pat ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
		const cJSON *st = pat ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
		if (*bytelevel)
			return lynn_errf(err, -LYNN_EUNSUPPORTED,
					 "tok: %s: pre_tokenizer: Split after ByteLevel is not supported",
					 what);
		if (!cJSON_IsString(re) && !cJSON_IsString(st))
			return lynn_errf(err, -LYNN_EFORMAT,
					 "tok: %s: pre_tokenizer: Split needs pattern.Regex or pattern.String",
					 what);
		if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") ||
		    cJSON_IsTrue(inv))
			return lynn_errf(err, -LYNN_EUNSUPPORTED,
					 "tok: %s: pre_tokenizer: Split behavior '%.30s'%s is not supported "
					 "(only Isolated)",
					 what, cJSON_IsString(beh) ? beh->valuestring : "?",
					 cJSON_IsTrue(inv) ? " with invert" : "");
		const char *p = cJSON_IsString(re) ? re->valuestring : st->valuestring;
		return add_split(t, p, strlen(p), !cJSON_IsString(re), what, err);
	}
	if (!strcmp(ty, "ByteLevel")) {
		const cJSON *aps = cJSON_GetObjectItemCaseSensitive(o, "add_prefix_space");
		const cJSON *ur = cJSON_GetObjectItemCaseSensitive(o, "use_regex");
		if (cJSON_IsTrue(aps))
			return lynn_errf(err, -LYNN_EUNSUPPORTED,
					 "tok: %s: pre_tokenizer: ByteLevel add_prefix_space is not "
					 "supported",
					 what);
		*bytelevel = true;
		/* use_regex defaults to true */
		if (!cJSON_IsFalse(ur))
			return add_split(t, GPT2_RE, sizeof GPT2_RE - 1, false, what, err);
		return 0;
	}
	return lynn_errf(err, -LYNN_EUNSUPPORTED,
			 "tok: %s: pre_tokenizer type '%.40s' is not supported", what, ty);
}

static int parse_decoder(const cJSON *o, const char *what, int depth, struct lynn_err *err)
{
	const char *ty;
	if (!o || cJSON_IsNull(o))
		return 0;
	if (!cJSON_IsObject(o) || !(ty = jtype(o)))
		return lynn_errf(err, -LYNN_EFORMAT, "tok: %s: decoder: missing 'type'", what);
	if (!strcmp(ty, "ByteLevel"))
		return 0;
	if (!strcmp(ty, "Sequence") && depth < 4) {
		const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "decoders"), *e;
		if (!cJSON_IsArray(arr))
			return lynn_errf(err, -LYNN_EFORMAT,
					 "tok: %s: decoder: Sequence needs a 'decoders' array", what);
		cJSON_ArrayForEach(e, arr)
		{
			int rc = parse_decoder(e, what, depth + 1, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	return lynn_errf(err, -LYNN_EUNSUPPORTED, "tok: %s: decoder type '%.40s' is not supported",
			 what, ty);
}

/* A token field of tokenizer_config.json: "x" or {"content": "x"}. */
static int config_token(const struct lynn_tok *t, const cJSON *cfg, const char *key,
			int32_t *id, const char *what, struct lynn_err *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	if (cJSON_IsObject(v))
		v = cJSON_GetObjectItemCaseSensitive(v, "content");
	if (!cJSON_IsString(v))
		return lynn_errf(err, -LYNN_EFORMAT, "tok: %s: field '%s' must be a token string",
				 what, key);
	int32_t x = lynn_tok_token_id(t, v->valuestring);
	if (x < 0)
		return lynn_errf(err, -LYNN_EFORMAT, "tok: %s: %s '%.40s' is not a known token", what,
				 key, v->valuestring);
	*id = x;
	return 0;
}

static int add_eog(struct lynn_tok *t, int32_t id)
{
	if (id < 0)
		return 0;
	for (size_t i = 0; i < t->n_eog; i++)
		if (t->eog[i] == id)
			return 0;
	int32_t *p = realloc(t->eog, (t->n_eog + 1) * sizeof *p);
	if (!p)
		return -LYNN_ENOMEM;
	t->eog = p;
	t->eog[t->n_eog++] = id;
	return 0;
}

static int gen_id(const struct lynn_tok *t, const cJSON *v, int32_t *out, const char *what,
		  const char *key, struct lynn_err *err)
{
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= t->n_ids ||
	    v->valuedouble != (double)(int32_t)v->valuedouble)
		return lynn_errf(err, -LYNN_EFORMAT, "tok: %s: '%s' is not a token id", what, key);
	*out = (int32_t)v->valuedouble;
	return 0;
}

static int parse_configs(struct lynn_tok *t, const char *config_json, const char *gen_json,
			 struct lynn_err *err)
{
	int rc = 0;
	cJSON *cfg = NULL, *gen = NULL;
	if (config_json) {
		if (!(cfg = lynn_json_parse("'tokenizer_config.json'", config_json,
					    strlen(config_json), err)))
			return err ? err->code : -LYNN_EFORMAT;
		const char *w = "'tokenizer_config.json'";
		if (!cJSON_IsObject(cfg)) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "tok: %s: not an object", w);
			goto out;
		}
		if ((rc = config_token(t, cfg, "bos_token", &t->bos, w, err)) ||
		    (rc = config_token(t, cfg, "eos_token", &t->eos, w, err)) ||
		    (rc = config_token(t, cfg, "pad_token", &t->pad, w, err)) ||
		    (rc = lynn_json_get_bool(cfg, "add_bos_token", false, &t->add_bos, w, err)))
			goto out;
	}
	if (gen_json) {
		const char *w = "'generation_config.json'";
		if (!(gen = lynn_json_parse(w, gen_json, strlen(gen_json), err))) {
			rc = err ? err->code : -LYNN_EFORMAT;
			goto out;
		}
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id"), *e;
		int32_t x;
		if (cJSON_IsArray(v)) {
			cJSON_ArrayForEach(e, v)
			{
				if ((rc = gen_id(t, e, &x, w, "eos_token_id", err)))
					goto out;
				if (t->eos < 0)
					t->eos = x;
				if ((rc = add_eog(t, x)))
					goto out;
			}
		} else if (v && !cJSON_IsNull(v)) {
			if ((rc = gen_id(t, v, &x, w, "eos_token_id", err)))
				goto out;
			if (t->eos < 0)
				t->eos = x;
			if ((rc = add_eog(t, x)))
				goto out;
		}
		v = cJSON_GetObjectItemCaseSensitive(gen, "bos_token_id");
		if (v && !cJSON_IsNull(v) && t->bos < 0 && (rc = gen_id(t, v, &t->bos, w, "bos_token_id", err)))
			goto out;
		v = cJSON_GetObjectItemCaseSensitive(gen, "pad_token_id");
		if (v && !cJSON_IsNull(v) && t->pad < 0 && (rc = gen_id(t, v, &t->pad, w, "pad_token_id", err)))
			goto out;
	}
	rc = add_eog(t, t->eos);
out:
	cJSON_Delete(cfg);
	cJSON_Delete(gen);
	return rc;
}

static struct lynn_tok *tok_new(void)
{
	struct lynn_tok *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	bytelevel_init_tables(t);
	if (!(t->byte_pairs = malloc(65536 * sizeof *t->byte_pairs))) {
		free(t);
		return NULL;
	}
	for (int i = 0; i < 65536; i++)
		t->byte_pairs[i] = (struct bpair){ UINT32_MAX, -1 };
	for (int b = 0; b < 256; b++)
		t->byte_id[b] = -1;
	t->unk_id = -1;
	t->bos = t->eos = t->pad = -1;
	return t;
}

int lynn_tok_finish(struct lynn_tok *t, struct lynn_err *err)
{
	t->mctx = pcre2_match_context_create(NULL);
	if (!t->mctx)
		return lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
	pcre2_set_match_limit(t->mctx, REGEX_MATCH_LIMIT);
	t->nfc_only = t->n_norms == 1 && t->norm_opts[0] == (UTF8PROC_STABLE | UTF8PROC_COMPOSE);
	return 0;
}

struct lynn_tok *lynn_tok_load_json(const char *what, const char *json, size_t len,
				    const char *config_json, const char *gen_config_json,
				    struct lynn_err *err)
{
	struct loader L = { 0 };
	struct lynn_buf key = LYNN_BUF_INIT;
	const uint8_t *span_added = NULL, *span_norm = NULL, *span_pre = NULL, *span_dec = NULL;
	const uint8_t *end_added = NULL, *end_norm = NULL, *end_pre = NULL, *end_dec = NULL;
	cJSON *jadd = NULL, *jnorm = NULL, *jpre = NULL, *jdec = NULL;
	bool have_model = false, bytelevel = false;
	int rc;
	struct lynn_tok *t = tok_new();

	if (!t) {
		lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
		return NULL;
	}
	L.t = t;
	L.j.p = L.j.base = (const uint8_t *)json;
	L.j.end = L.j.p + len;
	L.j.what = what;
	L.j.err = err;
	t->arena_cap = len / 2 + 4096;
	if (!(t->arena = malloc(t->arena_cap))) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
		goto out;
	}

	rc = js_open(&L.j, '{');
	if (rc < 0)
		goto out;
	while (rc == 0) {
		if ((rc = js_str(&L.j, &key)) || (rc = js_expect(&L.j, ':')))
			goto out;
		const uint8_t **sp = NULL, **ep = NULL;
		if (!strcmp(key.data, "model")) {
			if (have_model) {
				rc = js_fail(&L.j, "'model' given twice");
				goto out;
			}
			if ((rc = parse_model(&L)))
				goto out;
			have_model = true;
		} else {
			if (!strcmp(key.data, "added_tokens"))
				sp = &span_added, ep = &end_added;
			else if (!strcmp(key.data, "normalizer"))
				sp = &span_norm, ep = &end_norm;
			else if (!strcmp(key.data, "pre_tokenizer"))
				sp = &span_pre, ep = &end_pre;
			else if (!strcmp(key.data, "decoder"))
				sp = &span_dec, ep = &end_dec;
			js_ws(&L.j);
			if (sp)
				*sp = L.j.p;
			if ((rc = js_skip(&L.j, 1)))
				goto out;
			if (ep)
				*ep = L.j.p;
		}
		rc = js_next(&L.j, '}');
		if (rc < 0)
			goto out;
		rc = rc ? 0 : 1;
	}
	js_ws(&L.j);
	if (L.j.p != L.j.end) {
		rc = js_fail(&L.j, "trailing data after the JSON object");
		goto out;
	}
	if (!have_model) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "tok: %s: missing field 'model'", what);
		goto out;
	}
#define SUBPARSE(span, end, dst, name)                                                            \
	if (span) {                                                                               \
		char w[320];                                                                      \
		snprintf(w, sizeof w, "%s %s", what, name);                                       \
		if (!(dst = lynn_json_parse(w, (const char *)span, (size_t)(end - span), err))) { \
			rc = err ? err->code : -LYNN_EFORMAT;                                     \
			goto out;                                                                 \
		}                                                                                 \
	}
	SUBPARSE(span_norm, end_norm, jnorm, "normalizer")
	SUBPARSE(span_pre, end_pre, jpre, "pre_tokenizer")
	SUBPARSE(span_dec, end_dec, jdec, "decoder")
	SUBPARSE(span_added, end_added, jadd, "added_tokens")
#undef SUBPARSE
	if ((rc = parse_normalizer(t, jnorm, what, 0, err)) ||
	    (rc = parse_pretok(t, jpre, what, 0, &bytelevel, err)) ||
	    (rc = parse_decoder(jdec, what, 0, err)))
		goto out;
	if (!bytelevel) {
		rc = lynn_errf(err, -LYNN_EUNSUPPORTED,
			       "tok: %s: no ByteLevel pre-tokenizer: only byte-level BPE is supported",
			       what);
		goto out;
	}
	if ((rc = parse_added(t, jadd, what, err)) || (rc = lynn_tok_finish(t, err)) ||
	    (rc = parse_configs(t, config_json, gen_config_json, err)))
		goto out;
	rc = 0;
out:
	cJSON_Delete(jadd);
	cJSON_Delete(jnorm);
	cJSON_Delete(jpre);
	cJSON_Delete(jdec);
	lynn_buf_release(&key);
	lynn_buf_release(&L.s1);
	lynn_buf_release(&L.s2);
	lynn_buf_release(&L.s3);
	lynn_buf_release(&L.unk);
	mqueue_release(&L.q);
	free(L.conv);
	if (rc) {
		if (err && !err->code)
			lynn_errf(err, rc, "tok: %s: failed to load", what);
		lynn_tok_free(t);
		return NULL;
	}
	return t;
}

static char *read_opt(const char *dir, const char *name, struct lynn_err *err, int *rc)
{
	char *p = lynn_path_join(dir, name), *txt = NULL;
	size_t n;
	*rc = 0;
	if (!p) {
		*rc = lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
		return NULL;
	}
	if (lynn_file_exists(p))
		*rc = lynn_file_read(p, LYNN_JSON_MAX_SIZE, &txt, &n, err);
	free(p);
	return txt;
}

struct lynn_tok *lynn_tok_load(const char *path, struct lynn_err *err)
{
	struct lynn_tok *t = NULL;
	struct lynn_map map = { 0 };
	char *jpath = NULL, *dir = NULL, *cfg = NULL, *gen = NULL, what[300];
	size_t pl = strlen(path);
	int rc;

	if (pl > 5 && !strcmp(path + pl - 5, ".gguf"))
		return lynn_tok_load_gguf(path, err);
	if (lynn_dir_exists(path)) {
		dir = strdup(path);
		jpath = lynn_path_join(path, "tokenizer.json");
	} else {
		jpath = strdup(path);
		const char *sl = strrchr(path, '/');
		dir = sl ? strndup(path, (size_t)(sl - path) + (sl == path)) : strdup(".");
	}
	if (!dir || !jpath) {
		lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
		goto out;
	}
	if (!lynn_file_exists(jpath)) {
		lynn_errf(err, -LYNN_ENOTFOUND, "tok: '%s': no tokenizer.json", jpath);
		goto out;
	}
	if (lynn_map_open(&map, jpath, err))
		goto out;
	if (map.size > MAX_TOKENIZER_JSON) {
		lynn_errf(err, -LYNN_EFORMAT, "tok: '%s': file too large", jpath);
		goto out;
	}
	cfg = read_opt(dir, "tokenizer_config.json", err, &rc);
	if (rc)
		goto out;
	gen = read_opt(dir, "generation_config.json", err, &rc);
	if (rc)
		goto out;
	snprintf(what, sizeof what, "'%s'", jpath);
	t = lynn_tok_load_json(what, (const char *)map.data, map.size, cfg, gen, err);
out:
	lynn_map_close(&map);
	free(jpath);
	free(dir);
	free(cfg);
	free(gen);
	return t;
}

void lynn_tok_free(struct lynn_tok *t)
{
	if (!t)
		return;
	free(t->doff);
	free(t->dlen);
	free(t->vk);
	free(t->flags);
	free(t->arena);
	free(t->vh);
	free(t->ms);
	free(t->byte_pairs);
	for (size_t i = 0; i < t->n_added; i++)
		free(t->added[i].text);
	free(t->added);
	free(t->raw_set.idx);
	free(t->norm_set.idx);
	for (int i = 0; i < t->n_splits; i++)
		pcre2_code_free(t->splits[i].re);
	pcre2_match_context_free(t->mctx);
	free(t->eog);
	free(t);
}

/* ===== Builders for other front ends (GGUF) ===== */

struct lynn_tok *lynn_tok_builder_new(int32_t n_ids, struct lynn_err *err)
{
	struct lynn_tok *t = tok_new();
	if (!t || ids_grow(t, n_ids)) {
		lynn_tok_free(t);
		lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
		return NULL;
	}
	t->vh_mask = pow2_at_least((size_t)n_ids * 2 + 1) - 1;
	t->vh = calloc((size_t)t->vh_mask + 1, sizeof *t->vh);
	if (!t->vh) {
		lynn_tok_free(t);
		lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
		return NULL;
	}
	return t;
}

int lynn_tok_builder_set(struct lynn_tok *t, int32_t id, const char *s, size_t n, int kind,
			 struct lynn_err *err)
{
	uint8_t *tmp;
	uint32_t off;
	long k;
	int rc;

	if (id < 0 || id >= t->n_ids)
		return lynn_errf(err, -LYNN_EFORMAT, "tok: token id %d out of range", id);
	if (!(tmp = malloc(n + 1)))
		return lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
	k = bytelevel_decode(t, (const uint8_t *)s, n, tmp);
	rc = k >= 0 ? arena_add(t, tmp, (size_t)k, &off) : arena_add(t, s, n, &off);
	free(tmp);
	if (rc)
		return lynn_errf(err, rc, "tok: out of memory");
	t->doff[id] = off;
	t->dlen[id] = k >= 0 ? (uint32_t)k : (uint32_t)n;
	t->flags[id] = IDF_USED;
	if (kind == LYNN_TOK_KIND_NORMAL) {
		bool enc = k >= 0;
		if (vocab_find(t, t->arena + off, t->dlen[id], enc) >= 0)
			return 0; /* duplicate string: the first id keeps it */
		t->vk[id] = (struct vkey){ off, t->dlen[id] | (enc ? VK_ENC : 0) };
		t->flags[id] |= IDF_VOCAB | (enc ? IDF_ENC : 0);
		vocab_insert(t, id, vkey_hash(t, id));
		if (enc && t->dlen[id] == 1)
			t->byte_id[t->arena[off]] = id;
		return 0;
	}
	/* control / user-defined tokens: matched whole, like HF added tokens */
	struct added_tok *a = realloc(t->added, (t->n_added + 1) * sizeof *a);
	if (!a)
		return lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
	t->added = a;
	a = &t->added[t->n_added];
	memset(a, 0, sizeof *a);
	if (!n)
		return 0;
	if (!(a->text = strndup(s, n)))
		return lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
	a->len = n;
	a->id = id;
	a->special = kind == LYNN_TOK_KIND_CONTROL;
	t->flags[id] |= IDF_ADDED | (a->special ? IDF_SPECIAL : 0);
	/* raw text for decode: user-defined tokens in llama.cpp are plain text */
	t->doff[id] = 0;
	if ((rc = arena_add(t, s, n, &off)))
		return lynn_errf(err, rc, "tok: out of memory");
	t->doff[id] = off;
	t->dlen[id] = (uint32_t)n;
	t->n_added++;
	return 0;
}

int lynn_tok_builder_merges(struct lynn_tok *t, const char *const *merges, size_t n,
			    struct lynn_err *err)
{
	struct loader L = { 0 };
	int rc = 0;

	L.t = t;
	L.j.what = "gguf tokenizer.ggml.merges";
	L.j.err = err;
	if (merges_alloc(t, n))
		return lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
	for (size_t i = 0; i < n; i++) {
		const char *m = merges[i], *sp = strchr(m, ' ');
		if (!sp) {
			rc = lynn_errf(err, -LYNN_EFORMAT, "tok: merges[%zu]: '%.60s' has no space", i,
				       m);
			goto out;
		}
		if (queue_merge(t, &L.q, i, m, (size_t)(sp - m), sp + 1, strlen(sp + 1))) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
			goto out;
		}
		if (L.q.n == MERGE_BATCH && (rc = merge_flush(&L)))
			goto out;
	}
	rc = merge_flush(&L);
out:
	mqueue_release(&L.q);
	lynn_buf_release(&L.s3);
	free(L.conv);
	return rc;
}

int lynn_tok_builder_finish(struct lynn_tok *t, const char *regex, int32_t bos, int32_t eos,
			    const int32_t *eog, size_t n_eog, bool add_bos, struct lynn_err *err)
{
	int rc;
	if (regex && (rc = add_split(t, regex, strlen(regex), false, "gguf", err)))
		return rc;
	if ((rc = build_set(t, &t->raw_set, false)) || (rc = build_set(t, &t->norm_set, true)))
		return lynn_errf(err, rc, "tok: out of memory");
	t->bos = bos;
	t->eos = eos;
	t->add_bos = add_bos;
	if ((rc = add_eog(t, eos)))
		return lynn_errf(err, rc, "tok: out of memory");
	for (size_t i = 0; i < n_eog; i++)
		if ((rc = add_eog(t, eog[i])))
			return lynn_errf(err, rc, "tok: out of memory");
	return lynn_tok_finish(t, err);
}

void lynn_tok_builder_set_pad(struct lynn_tok *t, int32_t pad) { t->pad = pad; }

/* ===== Encode ===== */

struct sym {
	int32_t id;
	int32_t prev, next;
};

#define WC_SIZE 4096 /* entries, a power of two */
#define WC_KEY 24    /* longest cached piece, bytes */
#define WC_IDS 6     /* most ids of a cached piece */
#define WC_MIN_INPUT 4096 /* inputs shorter than this go without the cache */

struct wc_ent {
	uint64_t h;
	uint32_t len, n;
	uint8_t key[WC_KEY];
	int32_t ids[WC_IDS];
};

struct enc {
	const struct lynn_tok *t;
	struct wc_ent *wc;
	unsigned flags;
	struct lynn_tok_ids *out;
	pcre2_match_data *md[MAX_SPLITS];
	struct lynn_buf norm;
	struct sym *syms;
	struct bpair *pairs;
	uint64_t *heap;
	size_t cap;
	struct lynn_err *err;
};

static int ids_push(struct lynn_tok_ids *v, int32_t id)
{
	if (v->n == v->cap) {
		size_t c = v->cap ? v->cap * 2 : 256;
		int32_t *p = realloc(v->ids, c * sizeof *p);
		if (!p)
			return -LYNN_ENOMEM;
		v->ids = p;
		v->cap = c;
	}
	v->ids[v->n++] = id;
	return 0;
}

void lynn_tok_ids_release(struct lynn_tok_ids *v)
{
	if (!v)
		return;
	free(v->ids);
	v->ids = NULL;
	v->n = v->cap = 0;
}

static int enc_reserve(struct enc *e, size_t n)
{
	if (n <= e->cap)
		return 0;
	size_t c = e->cap ? e->cap : 256;
	while (c < n)
		c *= 2;
	struct sym *s = realloc(e->syms, c * sizeof *s);
	if (!s)
		return -LYNN_ENOMEM;
	e->syms = s;
	struct bpair *r = realloc(e->pairs, c * sizeof *r);
	if (!r)
		return -LYNN_ENOMEM;
	e->pairs = r;
	uint64_t *h = realloc(e->heap, c * sizeof *h);
	if (!h)
		return -LYNN_ENOMEM;
	e->heap = h;
	e->cap = c;
	return 0;
}

static inline void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
	size_t i = (*n)++;
	while (i) {
		size_t p = (i - 1) / 2;
		if (h[p] <= v)
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = v;
}

static inline uint64_t heap_pop(uint64_t *h, size_t *n)
{
	uint64_t top = h[0], v = h[--(*n)];
	size_t i = 0, m = *n;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= m)
			break;
		if (c + 1 < m && h[c + 1] < h[c])
			c++;
		if (v <= h[c])
			break;
		h[i] = h[c];
		i = c;
	}
	if (m)
		h[i] = v;
	return top;
}

/* BPE over one pre-tokenized piece (models/bpe/word.rs merge_all: the pair
 * of lowest rank merges first, the leftmost on ties). */
static int bpe_merge(struct enc *e, const uint8_t *s, size_t n);

/* Pieces repeat (words, indentation): a long input keeps a per-call cache
 * of short pieces and their ids, direct-mapped by hash (HF keeps a word
 * cache too). Per call, so a loaded tokenizer stays immutable. */
static int bpe(struct enc *e, const uint8_t *s, size_t n)
{
	struct wc_ent *c = NULL;
	uint64_t h = 0;
	if (e->wc && n <= WC_KEY) {
		h = hash_bytes(s, n, true);
		c = &e->wc[h & (WC_SIZE - 1)];
		if (c->h == h && c->len == n && !memcmp(c->key, s, n)) {
			for (uint32_t i = 0; i < c->n; i++)
				if (ids_push(e->out, c->ids[i]))
					return -LYNN_ENOMEM;
			return 0;
		}
	}
	size_t n0 = e->out->n;
	int rc = bpe_merge(e, s, n);
	if (!rc && c && e->out->n - n0 <= WC_IDS) {
		c->h = h;
		c->len = (uint32_t)n;
		c->n = (uint32_t)(e->out->n - n0);
		memcpy(c->key, s, n);
		memcpy(c->ids, e->out->ids + n0, c->n * sizeof *c->ids);
	}
	return rc;
}

static int bpe_merge(struct enc *e, const uint8_t *s, size_t n)
{
	const struct lynn_tok *t = e->t;
	size_t m = 0;
	uint32_t rank = 0;
	int32_t nid = -1;

	if (!n)
		return 0;
	if (t->ignore_merges) {
		int32_t id = vocab_find(t, s, n, true);
		if (id >= 0)
			return ids_push(e->out, id);
	}
	if (enc_reserve(e, n + 1))
		return -LYNN_ENOMEM;
	struct sym *sy = e->syms;
	bool all_bytes = true;
	for (size_t i = 0; i < n; i++) {
		int32_t id = t->byte_id[s[i]];
		if (id < 0) {
			all_bytes = false;
			id = t->unk_id;
		}
		if (id < 0)
			continue; /* no unk: HF drops the character */
		sy[m].id = id;
		m++;
	}
	if (n <= BPE_SMALL) {
		/* linear scan over an array; pr[i] caches the merge of pair (i, i+1) */
		struct bpair *pr = e->pairs;
		if (all_bytes) {
			for (size_t i = 0; i + 1 < m; i++)
				pr[i] = t->byte_pairs[s[i] * 256 + s[i + 1]];
		} else {
			for (size_t i = 0; i + 1 < m; i++)
				if (!merge_get(t, sy[i].id, sy[i + 1].id, &pr[i].rank, &pr[i].id))
					pr[i].rank = UINT32_MAX;
		}
		while (m > 1) {
			size_t best = 0;
			uint32_t br = pr[0].rank;
			for (size_t i = 1; i + 1 < m; i++)
				if (pr[i].rank < br)
					br = pr[i].rank, best = i;
			if (br == UINT32_MAX)
				break;
			sy[best].id = pr[best].id;
			memmove(sy + best + 1, sy + best + 2, (m - best - 2) * sizeof *sy);
			if (m >= best + 3)
				memmove(pr + best + 1, pr + best + 2, (m - best - 3) * sizeof *pr);
			m--;
			/* the two new pairs: look both up with their slots prefetched */
			bool right = best + 1 < m, left = best > 0;
			if (right)
				merge_prefetch(t, sy[best].id, sy[best + 1].id);
			if (left)
				merge_prefetch(t, sy[best - 1].id, sy[best].id);
			if (right && !merge_get(t, sy[best].id, sy[best + 1].id, &pr[best].rank,
						&pr[best].id))
				pr[best].rank = UINT32_MAX;
			if (left && !merge_get(t, sy[best - 1].id, sy[best].id, &pr[best - 1].rank,
					       &pr[best - 1].id))
				pr[best - 1].rank = UINT32_MAX;
		}
		for (size_t i = 0; i < m; i++)
			if (ids_push(e->out, sy[i].id))
				return -LYNN_ENOMEM;
		return 0;
	}
	/* linked list + heap of (rank << 32 | position) */
	uint64_t *h = e->heap;
	size_t hn = 0;
	for (size_t i = 0; i < m; i++) {
		sy[i].prev = (int32_t)i - 1;
		sy[i].next = i + 1 < m ? (int32_t)i + 1 : -1;
	}
	for (size_t i = 0; i + 1 < m; i++)
		if (merge_get(t, sy[i].id, sy[i + 1].id, &rank, &nid))
			heap_push(h, &hn, (uint64_t)rank << 32 | i);
	while (hn) {
		uint64_t top = heap_pop(h, &hn);
		uint32_t r = (uint32_t)(top >> 32), p = (uint32_t)top;
		if (sy[p].id < 0 || sy[p].next < 0)
			continue;
		int32_t q = sy[p].next;
		if (!merge_get(t, sy[p].id, sy[q].id, &rank, &nid) || rank != r)
			continue;
		sy[p].id = nid;
		sy[q].id = -1;
		sy[p].next = sy[q].next;
		if (sy[q].next >= 0)
			sy[sy[q].next].prev = (int32_t)p;
		if (sy[p].prev >= 0 && merge_get(t, sy[sy[p].prev].id, nid, &rank, &nid))
			heap_push(h, &hn, (uint64_t)rank << 32 | (uint32_t)sy[p].prev);
		if (sy[p].next >= 0 && merge_get(t, sy[p].id, sy[sy[p].next].id, &rank, &nid))
			heap_push(h, &hn, (uint64_t)rank << 32 | p);
	}
	for (int32_t i = 0; i >= 0 && (size_t)i < m; i = sy[i].next)
		if (ids_push(e->out, sy[i].id))
			return -LYNN_ENOMEM;
	return 0;
}

/* Pre-tokenize with Split stage k (Isolated: matches and the gaps between
 * them are pieces), recursing into the next stage, then BPE. */
static int split_stage(struct enc *e, int k, const uint8_t *s, size_t n)
{
	const struct lynn_tok *t = e->t;
	if (k == t->n_splits)
		return bpe(e, s, n);
	const struct split_stage *st = &t->splits[k];
	pcre2_match_data *md = e->md[k];
	size_t pos = 0, last = 0;
	int rc;

	while (pos < n) {
		int r = st->jit ? pcre2_jit_match(st->re, s, n, pos, PCRE2_NO_UTF_CHECK, md, t->mctx)
				: pcre2_match(st->re, s, n, pos, PCRE2_NO_UTF_CHECK, md, t->mctx);
		if (r == PCRE2_ERROR_NOMATCH)
			break;
		if (r < 0) {
			PCRE2_UCHAR msg[120];
			pcre2_get_error_message(r, msg, sizeof msg);
			return lynn_errf(e->err, -LYNN_EFORMAT, "tok: pre-tokenizer regex: %s",
					 (const char *)msg);
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		size_t ms = ov[0], me = ov[1];
		if (me == ms) {
			/* empty match: step one character */
			pos = ms + 1;
			while (pos < n && (s[pos] & 0xC0) == 0x80)
				pos++;
			continue;
		}
		if (ms > last && (rc = split_stage(e, k + 1, s + last, ms - last)))
			return rc;
		if ((rc = split_stage(e, k + 1, s + ms, me - ms)))
			return rc;
		last = pos = me;
	}
	if (last < n)
		return split_stage(e, k + 1, s + last, n - last);
	return 0;
}

/* NFC quick check for one character: true when it can neither change under
 * NFC nor combine with its neighbours: combining class 0, no canonical
 * decomposition (precomposed letters take the slow path: utf8proc does not
 * flag every composition exclusion), not the second half of a canonical
 * composition, not a conjoining Hangul jamo. */
static bool nfc_safe_cp(uint32_t c)
{
	if (c < 0x300 || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3))
		return true;
	if (c >= 0x1100 && c <= 0x11FF)
		return false;
	const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)c);
	return p->combining_class == 0 && (p->comb_index == UINT16_MAX || p->comb_index < 0x8000) &&
	       (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0);
}

static bool all_ascii(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] >= 0x80)
			return false;
	return true;
}

/* Run the normalizers on valid UTF-8 into out (reset first). */
/* Append utf8proc's transform of s[0..n) to out. */
static int map_append(const uint8_t *s, size_t n, int opts, struct lynn_buf *out)
{
	utf8proc_uint8_t *dst = NULL;
	utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
					  (utf8proc_option_t)opts);
	if (r < 0) {
		free(dst);
		return r == UTF8PROC_ERROR_NOMEM ? -LYNN_ENOMEM : -LYNN_EFORMAT;
	}
	int rc = lynn_buf_append(out, dst, (size_t)r) ? -LYNN_ENOMEM : 0;
	free(dst);
	return rc;
}

/* NFC of valid UTF-8, touching only the spans that can change: a character
 * that passes nfc_safe_cp is a boundary (UAX #15: NFC(A + B) = NFC(A) +
 * NFC(B) when B starts with such a character), so each run of unsafe
 * characters is normalized together with the safe character before it. */
static int nfc_spans(const uint8_t *s, size_t n, struct lynn_buf *out)
{
	size_t copied = 0, last_safe = 0, i = 0;
	while (i < n) {
		if (s[i] < 0x80) {
			last_safe = i++;
			continue;
		}
		size_t sub;
		bool inc;
		int l = utf8_seq(s + i, n - i, &sub, &inc);
		if (!l)
			return -LYNN_EFORMAT;
		if (nfc_safe_cp(utf8_cp(s + i, l))) {
			last_safe = i;
			i += (size_t)l;
			continue;
		}
		/* unsafe: the span runs from the last boundary to the next one */
		size_t start = last_safe > copied ? last_safe : copied;
		size_t end = i + (size_t)l;
		while (end < n) {
			if (s[end] < 0x80)
				break;
			int l2 = utf8_seq(s + end, n - end, &sub, &inc);
			if (!l2)
				return -LYNN_EFORMAT;
			if (nfc_safe_cp(utf8_cp(s + end, l2)))
				break;
			end += (size_t)l2;
		}
		if (lynn_buf_append(out, s + copied, start - copied))
			return -LYNN_ENOMEM;
		int rc = map_append(s + start, end - start, UTF8PROC_STABLE | UTF8PROC_COMPOSE, out);
		if (rc)
			return rc;
		copied = end;
		last_safe = end; /* the next character is a boundary (or the end) */
		i = end;
	}
	return lynn_buf_append(out, s + copied, n - copied) ? -LYNN_ENOMEM : 0;
}

/* Run the normalizers on valid UTF-8 into out (reset first). */
static int normalize(const struct lynn_tok *t, const uint8_t *s, size_t n, struct lynn_buf *out)
{
	lynn_buf_reset(out);
	if (t->nfc_only)
		return nfc_spans(s, n, out);
	if (lynn_buf_append(out, s, n))
		return -LYNN_ENOMEM;
	for (int i = 0; i < t->n_norms; i++) {
		if (all_ascii((const uint8_t *)out->data, out->len))
			break;
		struct lynn_buf tmp = LYNN_BUF_INIT;
		int rc = map_append((const uint8_t *)out->data, out->len, t->norm_opts[i], &tmp);
		if (rc) {
			lynn_buf_release(&tmp);
			return rc;
		}
		lynn_buf_release(out);
		*out = tmp;
	}
	return 0;
}

/* Rust char::is_whitespace (Unicode White_Space). */
static bool is_ws_cp(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
	       c == 0x205F || c == 0x3000;
}

/* Rust char::is_alphanumeric, approximated by the L and N categories. */
static bool is_alnum_cp(uint32_t c)
{
	utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
	return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
	       (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* The character ending right before `end` (s valid UTF-8); its start in *st. */
static uint32_t cp_before(const uint8_t *s, size_t end, size_t *st)
{
	size_t i = end - 1;
	while (i > 0 && (s[i] & 0xC0) == 0x80)
		i--;
	size_t sub;
	bool inc;
	int l = utf8_seq(s + i, end - i, &sub, &inc);
	*st = i;
	return l ? utf8_cp(s + i, l) : 0xFFFD;
}

static uint32_t cp_at(const uint8_t *s, size_t n, size_t i, int *len)
{
	size_t sub;
	bool inc;
	int l = utf8_seq(s + i, n - i, &sub, &inc);
	*len = l ? l : 1;
	return l ? utf8_cp(s + i, l) : 0xFFFD;
}

/* Leftmost-longest search for an added token of `set` at or after pos. */
static bool find_added(const struct lynn_tok *t, const struct added_set *set, const uint8_t *s,
		       size_t n, size_t pos, bool no_special, size_t *ms, const struct added_tok **hit)
{
	if (!set->n)
		return false;
	for (size_t i = pos; i < n; i++) {
		uint32_t a = set->start[s[i]], b = set->start[s[i] + 1];
		for (uint32_t k = a; k < b; k++) {
			const struct added_tok *x = &t->added[set->idx[k]];
			if (x->len <= n - i && !memcmp(s + i, x->text, x->len)) {
				if (no_special && x->special)
					continue;
				*ms = i;
				*hit = x;
				return true;
			}
		}
	}
	return false;
}

typedef int (*seg_fn)(struct enc *e, const uint8_t *s, size_t n);

/* Split text on the added tokens of `set` (added_vocabulary.rs find_matches):
 * text between them goes to `fn`, token ids to the output. */
static int split_added(struct enc *e, const struct added_set *set, const uint8_t *s, size_t n,
		       seg_fn fn)
{
	const struct lynn_tok *t = e->t;
	bool no_special = e->flags & LYNN_TOK_F_NO_SPECIAL;
	size_t start_off = 0, pos = 0, ms;
	const struct added_tok *x;
	int rc;

	while (pos < n && find_added(t, set, s, n, pos, no_special, &ms, &x)) {
		size_t start = ms, stop = ms + x->len;
		pos = stop; /* the automaton resumes after the raw match */
		if (x->single_word) {
			size_t st;
			int l;
			bool ok_l = start == 0 || !is_alnum_cp(cp_before(s, start, &st));
			bool ok_r = stop == n || !is_alnum_cp(cp_at(s, n, stop, &l));
			if (!ok_l || !ok_r)
				continue;
		}
		if (x->lstrip) {
			size_t ns = start, st;
			while (ns > 0 && is_ws_cp(cp_before(s, ns, &st)))
				ns = st;
			start = LYNN_MAX(ns, start_off);
		}
		if (x->rstrip) {
			int l;
			while (stop < n && is_ws_cp(cp_at(s, n, stop, &l)))
				stop += (size_t)l;
		}
		if (start_off < start && (rc = fn(e, s + start_off, start - start_off)))
			return rc;
		if ((rc = ids_push(e->out, x->id)))
			return rc;
		start_off = stop;
		if (pos < stop)
			pos = stop;
	}
	if (start_off < n)
		return fn(e, s + start_off, n - start_off);
	return 0;
}

static int seg_pretok(struct enc *e, const uint8_t *s, size_t n)
{
	return split_stage(e, 0, s, n);
}

/* A segment of raw text between non-normalized added tokens. */
static int seg_raw(struct enc *e, const uint8_t *s, size_t n)
{
	const struct lynn_tok *t = e->t;
	int rc;
	if (!t->n_norms)
		return split_added(e, &t->norm_set, s, n, seg_pretok);
	/* one buffer suffices: the pieces of this segment are done before the
	 * next segment is normalized */
	if ((rc = normalize(t, s, n, &e->norm)))
		return rc == -LYNN_ENOMEM ? rc
					  : lynn_errf(e->err, rc, "tok: normalizer rejected the text");
	return split_added(e, &t->norm_set, (const uint8_t *)e->norm.data, e->norm.len, seg_pretok);
}

int lynn_tok_encode(const struct lynn_tok *t, const char *text, size_t len, unsigned flags,
		    struct lynn_tok_ids *out, struct lynn_err *err)
{
	struct enc e = { 0 };
	struct lynn_buf fixed = LYNN_BUF_INIT;
	const uint8_t *s = (const uint8_t *)text;
	size_t n0 = out->n;
	int rc = 0;

	e.t = t;
	e.flags = flags;
	e.out = out;
	e.err = err;
	if (len >= WC_MIN_INPUT && !(e.wc = calloc(WC_SIZE, sizeof *e.wc))) {
		rc = -LYNN_ENOMEM;
		goto out;
	}
	if ((flags & LYNN_TOK_F_ADD_SPECIAL) && t->add_bos && t->bos >= 0 &&
	    (rc = ids_push(out, t->bos)))
		goto out;
	if (!len)
		goto out;
	if (utf8_valid_prefix(s, len) != len) {
		if ((rc = lynn_tok_append_lossy(&fixed, s, len)))
			goto out;
		s = (const uint8_t *)fixed.data;
		len = fixed.len;
	}
	for (int k = 0; k < t->n_splits; k++)
		if (!(e.md[k] = pcre2_match_data_create_from_pattern(t->splits[k].re, NULL))) {
			rc = -LYNN_ENOMEM;
			goto out;
		}
	rc = split_added(&e, &t->raw_set, s, len, seg_raw);
out:
	for (int k = 0; k < t->n_splits; k++)
		pcre2_match_data_free(e.md[k]);
	free(e.syms);
	free(e.pairs);
	free(e.wc);
	free(e.heap);
	lynn_buf_release(&e.norm);
	lynn_buf_release(&fixed);
	if (rc) {
		out->n = n0;
		if (rc == -LYNN_ENOMEM)
			lynn_errf(err, rc, "tok: out of memory");
		else if (err && !err->code)
			lynn_errf(err, rc, "tok: encode failed");
	}
	return rc;
}

/* ===== Decode ===== */

static int id_check(const struct lynn_tok *t, int32_t id, struct lynn_err *err)
{
	if (id < 0 || id >= t->n_ids || !(t->flags[id] & IDF_USED))
		return lynn_errf(err, -LYNN_EINVAL, "tok: id %d is not in the vocab (%d ids)", id,
				 t->n_ids);
	return 0;
}

int lynn_tok_decode(const struct lynn_tok *t, const int32_t *ids, size_t n, unsigned flags,
		    struct lynn_buf *out, struct lynn_err *err)
{
	struct lynn_buf raw = LYNN_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t id = ids[i];
		if ((rc = id_check(t, id, err)))
			goto out;
		if ((flags & LYNN_TOK_F_SKIP_SPECIAL) && (t->flags[id] & IDF_SPECIAL))
			continue;
		if (lynn_buf_append(&raw, t->arena + t->doff[id], t->dlen[id])) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
			goto out;
		}
	}
	if (lynn_tok_append_lossy(out, (const uint8_t *)raw.data, raw.len) ||
	    (!out->data && lynn_buf_append(out, "", 0)))
		rc = lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
out:
	lynn_buf_release(&raw);
	return rc;
}

void lynn_tok_stream_init(struct lynn_tok_stream *s, const struct lynn_tok *t, unsigned flags)
{
	memset(s, 0, sizeof *s);
	s->tok = t;
	s->flags = flags;
}

/* Append s lossily up to an incomplete final sequence; *kept = its length. */
static int append_lossy_stream(struct lynn_buf *out, const uint8_t *s, size_t n, size_t *kept)
{
	size_t i = 0;
	while (i < n) {
		size_t v = utf8_valid_prefix(s + i, n - i), sub;
		bool inc;
		if (v && lynn_buf_append(out, s + i, v))
			return -LYNN_ENOMEM;
		i += v;
		if (i >= n)
			break;
		utf8_seq(s + i, n - i, &sub, &inc);
		if (inc)
			break;
		if (lynn_buf_append(out, "\xEF\xBF\xBD", 3))
			return -LYNN_ENOMEM;
		i += sub;
	}
	*kept = n - i;
	return 0;
}

int lynn_tok_stream_push(struct lynn_tok_stream *s, int32_t id, struct lynn_buf *out,
			 struct lynn_err *err)
{
	const struct lynn_tok *t = s->tok;
	uint8_t small[64], *tmp = small;
	size_t n, kept;
	int rc;

	if ((rc = id_check(t, id, err)))
		return rc;
	if ((s->flags & LYNN_TOK_F_SKIP_SPECIAL) && (t->flags[id] & IDF_SPECIAL))
		return 0;
	n = (size_t)s->n_pend + t->dlen[id];
	if (n > sizeof small && !(tmp = malloc(n)))
		return lynn_errf(err, -LYNN_ENOMEM, "tok: out of memory");
	memcpy(tmp, s->pend, (size_t)s->n_pend);
	memcpy(tmp + s->n_pend, t->arena + t->doff[id], t->dlen[id]);
	rc = append_lossy_stream(out, tmp, n, &kept);
	if (!rc) {
		/* an incomplete sequence is at most 3 bytes */
		memcpy(s->pend, tmp + n - kept, kept);
		s->n_pend = (int)kept;
	}
	if (tmp != small)
		free(tmp);
	return rc ? lynn_errf(err, rc, "tok: out of memory") : 0;
}

int lynn_tok_stream_flush(struct lynn_tok_stream *s, struct lynn_buf *out)
{
	int rc = 0;
	if (s->n_pend)
		rc = lynn_tok_append_lossy(out, s->pend, (size_t)s->n_pend);
	s->n_pend = 0;
	return rc;
}

/* ===== Vocabulary accessors ===== */

int32_t lynn_tok_n_vocab(const struct lynn_tok *t) { return t->n_ids; }

int32_t lynn_tok_token_id(const struct lynn_tok *t, const char *token)
{
	size_t n = strlen(token);
	for (size_t i = 0; i < t->n_added; i++) {
		const struct added_tok *a = &t->added[i];
		if (a->len == n && !memcmp(a->text, token, n))
			return a->id;
	}
	uint8_t *tmp = malloc(n + 1);
	if (!tmp)
		return -1;
	long k = bytelevel_decode(t, (const uint8_t *)token, n, tmp);
	int32_t id = k >= 0 ? vocab_find(t, tmp, (size_t)k, true) : vocab_find(t, (const uint8_t *)token, n, false);
	free(tmp);
	return id;
}

const uint8_t *lynn_tok_token_bytes(const struct lynn_tok *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->n_ids || !(t->flags[id] & IDF_USED))
		return NULL;
	*len = t->dlen[id];
	return t->arena + t->doff[id];
}

bool lynn_tok_is_added(const struct lynn_tok *t, int32_t id)
{
	return id >= 0 && id < t->n_ids && (t->flags[id] & IDF_ADDED);
}

bool lynn_tok_is_special(const struct lynn_tok *t, int32_t id)
{
	return id >= 0 && id < t->n_ids && (t->flags[id] & IDF_SPECIAL);
}

int32_t lynn_tok_bos_id(const struct lynn_tok *t) { return t->bos; }
int32_t lynn_tok_eos_id(const struct lynn_tok *t) { return t->eos; }
int32_t lynn_tok_pad_id(const struct lynn_tok *t) { return t->pad; }
bool lynn_tok_add_bos(const struct lynn_tok *t) { return t->add_bos; }

const int32_t *lynn_tok_eog_ids(const struct lynn_tok *t, size_t *n)
{
	*n = t->n_eog;
	return t->eog;
}

bool lynn_tok_is_eog(const struct lynn_tok *t, int32_t id)
{
	for (size_t i = 0; i < t->n_eog; i++)
		if (t->eog[i] == id)
			return true;
	return false;
}
