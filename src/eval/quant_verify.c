/*
 * quant_verify.c - prompts, quality checks, runs and the report of
 * `lynn quant-verify` (SPEC §6; include/lynn/quant_verify.h).
 *
 * Similarity comes from score.h (lynn_similarity: sacreBLEU chrF and the
 * SPEC §6 ROUGE-L); the UTF-8 decoding and Unicode classes are score's
 * (lynn/utf8.h), so quality and similarity see the same characters.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/buf.h"
#include "lynn/client.h"
#include "lynn/engine.h"
#include "lynn/eval.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/log.h"
#include "lynn/progress.h"
#include "lynn/quant_verify.h"
#include "lynn/score.h"
#include "lynn/utf8.h"
#include "lynn/util.h"

#define QV_MAX_FILE (256u << 20) /* prompts / outputs files larger than this are refused */
#define QV_MAX_ITEMS 100000

/* ===== prompts ===== */

struct builtin_prompt {
	const char *id, *prompt;
	const char *anchors[6];
};

/* Short factual questions whose first 64 tokens must contain the answer:
 * an anchor (case-insensitive) is a word any correct answer uses. */
static const struct builtin_prompt BUILTIN[] = {
	{ "en_capital", "What is the capital of France? Answer in one sentence.",
	  { "Paris", NULL } },
	{ "zh_capital", "中国的首都是哪座城市?请用一句话回答。", { "北京", "Beijing", NULL } },
	{ "en_sky", "In two sentences, explain why the sky looks blue during the day.",
	  { "scatter", "Rayleigh", "wavelength", NULL } },
	{ "zh_photosynthesis", "用两三句话解释什么是光合作用。",
	  { "叶绿", "二氧化碳", "氧气", "葡萄糖", "能量", "阳光" } },
	{ "en_math", "What is 12 multiplied by 7? Give the number, then one short sentence.",
	  { "84", NULL } },
	{ "zh_translate", "请把这句英文翻译成中文:\"I am very happy to meet you today.\"",
	  { "高兴", "开心", "见到", "认识", "快乐", NULL } },
};

static void prompt_release(struct lynn_qv_prompt *q)
{
	free(q->id);
	free(q->prompt);
	for (size_t k = 0; k < q->n_anchors; k++)
		free(q->anchors[k]);
	free(q->anchors);
}

void lynn_qv_prompts_release(struct lynn_qv_prompts *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++)
		prompt_release(&p->items[i]);
	free(p->items);
	memset(p, 0, sizeof(*p));
}

static int prompts_grow(struct lynn_qv_prompts *p, size_t *cap, struct lynn_err *err)
{
	if (p->n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 16;
	void *n = realloc(p->items, nc * sizeof(*p->items));
	if (!n)
		return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	p->items = n;
	*cap = nc;
	return 0;
}

static int anchors_copy(struct lynn_qv_prompt *q, const char *const *a, size_t n,
			struct lynn_err *err)
{
	if (!n)
		return 0;
	q->anchors = calloc(n, sizeof(char *));
	if (!q->anchors)
		return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	for (size_t k = 0; k < n; k++) {
		if (!(q->anchors[k] = strdup(a[k])))
			return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		q->n_anchors++;
	}
	return 0;
}

int lynn_qv_prompts_builtin(struct lynn_qv_prompts *out, struct lynn_err *err)
{
	memset(out, 0, sizeof(*out));
	out->items = calloc(LYNN_ARRAY_LEN(BUILTIN), sizeof(*out->items));
	if (!out->items)
		return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	out->builtin = true;
	for (size_t i = 0; i < LYNN_ARRAY_LEN(BUILTIN); i++) {
		struct lynn_qv_prompt *q = &out->items[out->n++];
		size_t na = 0;
		while (na < LYNN_ARRAY_LEN(BUILTIN[i].anchors) && BUILTIN[i].anchors[na])
			na++;
		if (!(q->id = strdup(BUILTIN[i].id)) || !(q->prompt = strdup(BUILTIN[i].prompt)) ||
		    anchors_copy(q, BUILTIN[i].anchors, na, err)) {
			lynn_qv_prompts_release(out);
			return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		}
	}
	return 0;
}

/* The "id" of a record as text: a string, or an integer. */
static int record_id(const cJSON *rec, const char *path, size_t line, bool required, char **out,
		     struct lynn_err *err)
{
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(rec, "id");
	char buf[32];
	*out = NULL;
	if (!id || cJSON_IsNull(id)) {
		if (required)
			return lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: no field 'id'",
					 path, line);
		snprintf(buf, sizeof(buf), "p%zu", line);
	} else if (cJSON_IsString(id)) {
		if (!id->valuestring[0])
			return lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: field 'id' is empty",
					 path, line);
		*out = strdup(id->valuestring);
		return *out ? 0 : lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	} else if (cJSON_IsNumber(id) && id->valuedouble == floor(id->valuedouble) &&
		   fabs(id->valuedouble) < 1e15) {
		snprintf(buf, sizeof(buf), "%.0f", id->valuedouble);
	} else {
		return lynn_errf(err, -LYNN_EFORMAT,
				 "quant-verify: '%s' line %zu: field 'id' is not a string or an integer",
				 path, line);
	}
	*out = strdup(buf);
	return *out ? 0 : lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
}

/* Prompt ids -> index: an open-addressing table kept in step with the
 * prompt list (items appended since the last call are added first), so
 * loading n records is O(n). On out-of-memory it falls back to a linear
 * search: slower, same answers. */
struct id_index {
	size_t *slot; /* index + 1, 0 = empty */
	size_t cap, n;
	bool broken;
};

static void idx_release(struct id_index *ix)
{
	free(ix->slot);
	memset(ix, 0, sizeof(*ix));
}

static void idx_insert(struct id_index *ix, const struct lynn_qv_prompts *p, size_t i)
{
	size_t m = ix->cap - 1, h = (size_t)lynn_hash_str(p->items[i].id) & m;
	while (ix->slot[h])
		h = (h + 1) & m;
	ix->slot[h] = i + 1;
}

static bool idx_sync(struct id_index *ix, const struct lynn_qv_prompts *p)
{
	if (ix->broken)
		return false;
	if (2 * p->n >= ix->cap) {
		size_t cap = 64;
		while (cap <= 2 * p->n)
			cap *= 2;
		size_t *s = calloc(cap, sizeof(*s));
		if (!s) {
			ix->broken = true;
			return false;
		}
		free(ix->slot);
		ix->slot = s;
		ix->cap = cap;
		ix->n = 0;
	}
	for (; ix->n < p->n; ix->n++)
		idx_insert(ix, p, ix->n);
	return true;
}

static ssize_t prompts_find(struct id_index *ix, const struct lynn_qv_prompts *p, const char *id)
{
	if (!p)
		return -1;
	if (!idx_sync(ix, p)) {
		for (size_t i = 0; i < p->n; i++)
			if (!strcmp(p->items[i].id, id))
				return (ssize_t)i;
		return -1;
	}
	for (size_t m = ix->cap - 1, h = (size_t)lynn_hash_str(id) & m; ix->slot[h]; h = (h + 1) & m)
		if (!strcmp(p->items[ix->slot[h] - 1].id, id))
			return (ssize_t)(ix->slot[h] - 1);
	return -1;
}

/* Walk the JSONL lines of `text`: calls fn for every non-blank line's object. */
typedef int (*line_fn)(void *ud, const cJSON *rec, size_t line, struct lynn_err *err);

static int jsonl_each(const char *path, line_fn fn, void *ud, struct lynn_err *err)
{
	char *text = NULL;
	size_t len = 0, line = 0, n_rec = 0;
	int rc;

	if (!lynn_file_exists(path))
		return lynn_errf(err, -LYNN_ENOTFOUND, "quant-verify: '%s' not found", path);
	if ((rc = lynn_file_read(path, QV_MAX_FILE, &text, &len, err)))
		return rc;
	for (size_t a = 0; a < len && !rc;) {
		size_t b = a;
		while (b < len && text[b] != '\n')
			b++;
		line++;
		size_t s = a, e = b;
		while (s < e && (text[s] == ' ' || text[s] == '\t' || text[s] == '\r'))
			s++;
		while (e > s && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r'))
			e--;
		if (e > s) {
			cJSON *rec = cJSON_ParseWithLength(text + s, e - s);
			if (!rec || !cJSON_IsObject(rec)) {
				rc = lynn_errf(err, -LYNN_EFORMAT,
					       "quant-verify: '%s' line %zu: not a JSON object", path, line);
			} else if (++n_rec > QV_MAX_ITEMS) {
				rc = lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s': more than %d records",
					       path, QV_MAX_ITEMS);
			} else {
				rc = fn(ud, rec, line, err);
			}
			cJSON_Delete(rec);
		}
		a = b + 1;
	}
	free(text);
	if (!rc && !n_rec)
		rc = lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s': no records", path);
	return rc;
}

struct load_ctx {
	const char *path;
	struct lynn_qv_prompts *p;
	size_t cap;
	const struct lynn_qv_prompts *known;
	struct id_index ix, ix_known;
};

/* A record's id must not repeat an earlier record's in the same file. */
static int load_id_new(struct load_ctx *c, const char *id, size_t line, struct lynn_err *err)
{
	if (prompts_find(&c->ix, c->p, id) >= 0)
		return lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: id '%s' repeated",
				 c->path, line, id);
	return 0;
}

/* Append q to the list being loaded, which owns it from then on; on failure
 * q is released. */
static int load_push(struct load_ctx *c, struct lynn_qv_prompt *q, struct lynn_err *err)
{
	int rc = prompts_grow(c->p, &c->cap, err);
	if (rc) {
		prompt_release(q);
		return rc;
	}
	c->p->items[c->p->n++] = *q;
	return 0;
}

static int prompt_line(void *ud, const cJSON *rec, size_t line, struct lynn_err *err)
{
	struct load_ctx *c = ud;
	const cJSON *pr = cJSON_GetObjectItemCaseSensitive(rec, "prompt");
	const cJSON *an = cJSON_GetObjectItemCaseSensitive(rec, "anchors");
	struct lynn_qv_prompt q = { 0 };
	int rc;

	if (!cJSON_IsString(pr))
		return lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: field 'prompt' %s",
				 c->path, line, pr ? "is not a string" : "is missing");
	if (!pr->valuestring[0])
		return lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: field 'prompt' is empty",
				 c->path, line);
	if (an && !cJSON_IsNull(an) && !cJSON_IsArray(an))
		return lynn_errf(err, -LYNN_EFORMAT,
				 "quant-verify: '%s' line %zu: field 'anchors' is not an array of strings",
				 c->path, line);
	if ((rc = record_id(rec, c->path, line, false, &q.id, err)))
		return rc;
	if ((rc = load_id_new(c, q.id, line, err)))
		goto fail;
	if (!(q.prompt = strdup(pr->valuestring))) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		goto fail;
	}
	int na = cJSON_IsArray(an) ? cJSON_GetArraySize(an) : 0;
	if (na > 0 && !(q.anchors = calloc((size_t)na, sizeof(char *)))) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		goto fail;
	}
	for (int k = 0; k < na; k++) {
		const cJSON *a = cJSON_GetArrayItem(an, k);
		if (!cJSON_IsString(a) || !a->valuestring[0]) {
			rc = lynn_errf(err, -LYNN_EFORMAT,
				       "quant-verify: '%s' line %zu: anchors[%d] is not a non-empty string",
				       c->path, line, k);
			goto fail;
		}
		if (!(q.anchors[q.n_anchors] = strdup(a->valuestring))) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
			goto fail;
		}
		q.n_anchors++;
	}
	return load_push(c, &q, err);
fail:
	prompt_release(&q);
	return rc;
}

int lynn_qv_prompts_load(const char *path, struct lynn_qv_prompts *out, struct lynn_err *err)
{
	struct load_ctx c = { .path = path, .p = out };
	memset(out, 0, sizeof(*out));
	int rc = jsonl_each(path, prompt_line, &c, err);
	idx_release(&c.ix);
	if (rc)
		lynn_qv_prompts_release(out);
	return rc;
}

static int output_id_line(void *ud, const cJSON *rec, size_t line, struct lynn_err *err)
{
	struct load_ctx *c = ud;
	struct lynn_qv_prompt q = { 0 };
	int rc = record_id(rec, c->path, line, true, &q.id, err);
	if (rc)
		return rc;
	if ((rc = load_id_new(c, q.id, line, err)))
		goto fail;
	ssize_t k = prompts_find(&c->ix_known, c->known, q.id);
	if (!(q.prompt = strdup(k >= 0 ? c->known->items[k].prompt : ""))) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		goto fail;
	}
	if (k >= 0 && (rc = anchors_copy(&q, (const char *const *)c->known->items[k].anchors,
					 c->known->items[k].n_anchors, err)))
		goto fail;
	return load_push(c, &q, err);
fail:
	prompt_release(&q);
	return rc;
}

int lynn_qv_prompts_from_outputs(const char *path, const struct lynn_qv_prompts *known,
				 struct lynn_qv_prompts *out, struct lynn_err *err)
{
	struct load_ctx c = { .path = path, .p = out, .known = known };
	memset(out, 0, sizeof(*out));
	int rc = jsonl_each(path, output_id_line, &c, err);
	idx_release(&c.ix);
	idx_release(&c.ix_known);
	if (rc)
		lynn_qv_prompts_release(out);
	return rc;
}

/* ===== quality ===== */

static const char *const CHECK_NAMES[LYNN_QV_N_CHECKS] = {
	"too_short", "unexpected_script", "unreadable", "repeated_ngram", "char_run",
	"gibberish", "missing_anchor", "nonfinite_logits", "no_output",
};

const char *lynn_qv_check_name(int check)
{
	return check >= 0 && check < LYNN_QV_N_CHECKS ? CHECK_NAMES[check] : "unknown";
}

/* Fragments that only appear when decoding went wrong (docs/lynn-quant-verify.md). */
static const char *const GIBBERISH[] = {
	"<|", "|>",                 /* special-token syntax leaking into text */
	"<unk>", "[UNK]", "<pad>", "</s>", "<0x", /* unknown / padding / byte-fallback tokens */
	"<tts_", "<think>", "</think>", /* Qwen3.5 added tokens that must not reach the answer */
	"\xc4\xa0", "\xc4\x8a",     /* "Ġ" "Ċ": byte-level BPE symbols left undecoded */
	"\xc3\xa2\xe2\x82\xac",     /* "â€": UTF-8 read as cp1252 (’ “ ” — …) */
	"\xc3\x83\xc2",             /* "Ã" + C2 byte: UTF-8 read as Latin-1 (é → Ã©) */
	"\xc3\xaf\xc2\xbc",         /* "ï¼": fullwidth punctuation read as Latin-1 */
	"\xc3\xa4\xc2\xb8",         /* "ä¸": CJK (一 丁 上 …) read as Latin-1 */
	"\xc3\xa3\xc2\x80",         /* "ã\u0080": CJK punctuation (、。) read as Latin-1 */
};

size_t lynn_qv_gibberish_fragments(const char *const **out)
{
	*out = GIBBERISH;
	return LYNN_ARRAY_LEN(GIBBERISH);
}

static bool in(uint32_t c, uint32_t lo, uint32_t hi)
{
	return c >= lo && c <= hi;
}

/* Arabic, Kana, Cyrillic, Hangul and U+FFFD: scripts a Chinese/English
 * model should not drift into. */
static bool unexpected_cp(uint32_t c)
{
	return c == 0xFFFD ||
	       /* Arabic */
	       in(c, 0x0600, 0x06FF) || in(c, 0x0750, 0x077F) || in(c, 0x08A0, 0x08FF) ||
	       in(c, 0xFB50, 0xFDFF) || in(c, 0xFE70, 0xFEFF) ||
	       /* Kana */
	       in(c, 0x3040, 0x30FF) || in(c, 0x31F0, 0x31FF) || in(c, 0xFF66, 0xFF9F) ||
	       /* Cyrillic */
	       in(c, 0x0400, 0x052F) || in(c, 0x1C80, 0x1C8F) || in(c, 0x2DE0, 0x2DFF) ||
	       in(c, 0xA640, 0xA69F) ||
	       /* Hangul */
	       in(c, 0x1100, 0x11FF) || in(c, 0x3130, 0x318F) || in(c, 0xA960, 0xA97F) ||
	       in(c, 0xAC00, 0xD7FF) || in(c, 0xFFA0, 0xFFDC);
}

/* Characters a reader of Chinese or English text expects. */
static bool readable_cp(uint32_t c)
{
	return in(c, 0x20, 0x7E) || c == '\t' || c == '\n' || c == '\r' ||
	       in(c, 0x00A0, 0x024F) ||  /* Latin-1 and Latin Extended-A/B */
	       in(c, 0x0370, 0x03FF) ||  /* Greek (math) */
	       in(c, 0x2000, 0x22FF) ||  /* punctuation, super/subscripts, currency, letterlike,
				      * number forms, arrows, math operators */
	       in(c, 0x3000, 0x303F) ||  /* CJK symbols and punctuation */
	       in(c, 0x3400, 0x4DBF) || in(c, 0x4E00, 0x9FFF) || in(c, 0xF900, 0xFAFF) ||
	       in(c, 0x20000, 0x2FA1F) || /* CJK ideographs */
	       in(c, 0xFE10, 0xFE1F) || in(c, 0xFE30, 0xFE4F) || /* CJK vertical/compat forms */
	       in(c, 0xFF01, 0xFF65) || in(c, 0xFFE0, 0xFFEE); /* fullwidth forms */
}

static bool is_ascii_digit(uint32_t c)
{
	return c >= '0' && c <= '9';
}

/* A block of L code points starting at i repeated `reps` times in a row,
 * the block holding at least one letter (so "---|---|---|" and "  " runs
 * are not repetition). Returns the start or -1. */
static ssize_t find_repeat_cp(const uint32_t *cp, size_t n, size_t *L_out)
{
	for (size_t L = LYNN_QV_NGRAM_MIN; L <= LYNN_QV_NGRAM_MAX; L++) {
		if (n < L * LYNN_QV_NGRAM_REPEATS)
			break;
		for (size_t i = 0; i + L * LYNN_QV_NGRAM_REPEATS <= n; i++) {
			size_t j;
			for (j = 0; j < L * (LYNN_QV_NGRAM_REPEATS - 1); j++)
				if (cp[i + j] != cp[i + L + j])
					break;
			if (j < L * (LYNN_QV_NGRAM_REPEATS - 1))
				continue;
			bool letter = false;
			for (size_t k = 0; k < L && !letter; k++)
				letter = lynn_uc_is_letter(cp[i + k]);
			if (letter) {
				*L_out = L;
				return (ssize_t)i;
			}
		}
	}
	return -1;
}

/* The same over ROUGE tokens (words; each non-Latin letter one token):
 * a phrase of 2..8 words said three times in a row. */
static int find_repeat_words(const char *text, size_t len, char *detail, size_t cap,
			     struct lynn_err *err)
{
	char *toks = lynn_rouge_tokens(text, len, 0, err);
	char **w = NULL;
	size_t n = 0, capw = 0;
	int found = 0;

	if (!toks)
		return -LYNN_ENOMEM;
	for (char *p = toks; *p;) {
		char *e = strchr(p, ' ');
		if (n == capw) {
			size_t nc = capw ? capw * 2 : 64;
			char **nw = realloc(w, nc * sizeof(*w));
			if (!nw) {
				found = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
				goto out;
			}
			w = nw;
			capw = nc;
		}
		w[n++] = p;
		if (!e)
			break;
		*e = 0;
		p = e + 1;
	}
	for (size_t L = LYNN_QV_NGRAM_MIN; L <= LYNN_QV_NGRAM_MAX && !found; L++) {
		for (size_t i = 0; i + L * LYNN_QV_NGRAM_REPEATS <= n && !found; i++) {
			size_t j;
			for (j = 0; j < L * (LYNN_QV_NGRAM_REPEATS - 1); j++)
				if (strcmp(w[i + j], w[i + L + j]))
					break;
			if (j == L * (LYNN_QV_NGRAM_REPEATS - 1)) {
				struct lynn_buf b = LYNN_BUF_INIT;
				for (size_t k = 0; k < L; k++)
					lynn_buf_printf(&b, "%s%s", k ? " " : "", w[i + k]);
				snprintf(detail, cap, "%zu-word phrase \"%.40s\" x%d", L,
					 b.data ? b.data : "", LYNN_QV_NGRAM_REPEATS);
				lynn_buf_release(&b);
				found = 1;
			}
		}
	}
out:
	free(w);
	free(toks);
	return found;
}

/* Lowercase ASCII copy. */
static char *ascii_lower(const char *s, size_t len)
{
	char *o = malloc(len + 1);
	if (!o)
		return NULL;
	for (size_t i = 0; i < len; i++)
		o[i] = (s[i] >= 'A' && s[i] <= 'Z') ? (char)(s[i] - 'A' + 'a') : s[i];
	o[len] = 0;
	return o;
}

/* Printable excerpt of n code points at cp (for details). */
static void cp_excerpt(const uint32_t *cp, size_t n, char *out, size_t cap)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 5 < cap; i++) {
		uint32_t c = cp[i];
		if (c < 0x20 || c == '"' || c == '\\')
			c = '?';
		o += (size_t)lynn_utf8_put(c, out + o);
	}
	out[o] = 0;
}

static void fail_check(struct lynn_qv_quality *q, int check, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail_check(struct lynn_qv_quality *q, int check, const char *fmt, ...)
{
	va_list ap;
	q->failed[check] = true;
	q->pass = false;
	va_start(ap, fmt);
	vsnprintf(q->detail[check], sizeof(q->detail[check]), fmt, ap);
	va_end(ap);
}

int lynn_qv_quality_check(const char *text, size_t len, const char *const *anchors,
			  size_t n_anchors, bool nonfinite, struct lynn_qv_quality *out,
			  struct lynn_err *err)
{
	uint32_t *cp = NULL;
	char *low = NULL;
	size_t n, a = 0, b;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	out->pass = true;
	out->anchor_hit = n_anchors ? 0 : -1;
	if (!text) {
		fail_check(out, LYNN_QV_NO_OUTPUT, "no output for this prompt");
		fail_check(out, LYNN_QV_TOO_SHORT, "0 chars < %d", LYNN_QV_MIN_CHARS);
		if (n_anchors)
			fail_check(out, LYNN_QV_MISSING_ANCHOR, "none of %zu anchors found", n_anchors);
		if (nonfinite)
			fail_check(out, LYNN_QV_NONFINITE_LOGITS, "NaN or Inf in the logits");
		return 0;
	}
	cp = malloc((len + 1) * sizeof(*cp));
	if (!cp)
		return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	n = lynn_utf8_decode(text, len, cp);
	b = n;
	while (a < b && lynn_uc_isspace(cp[a]))
		a++;
	while (b > a && lynn_uc_isspace(cp[b - 1]))
		b--;
	const uint32_t *c = cp + a;
	n = b - a;
	out->n_chars = n;

	if (n < LYNN_QV_MIN_CHARS)
		fail_check(out, LYNN_QV_TOO_SHORT, "%zu chars < %d", n, LYNN_QV_MIN_CHARS);

	size_t n_read = 0, first_bad = SIZE_MAX;
	for (size_t i = 0; i < n; i++) {
		if (unexpected_cp(c[i])) {
			out->n_unexpected++;
			if (first_bad == SIZE_MAX)
				first_bad = i;
		}
		n_read += readable_cp(c[i]);
	}
	out->readable_share = n ? (double)n_read / (double)n : 0.0;
	if (out->n_unexpected > LYNN_QV_MAX_UNEXPECTED_CHARS ||
	    (n && (double)out->n_unexpected > LYNN_QV_MAX_UNEXPECTED_SHARE * (double)n))
		fail_check(out, LYNN_QV_UNEXPECTED_SCRIPT, "%zu chars (%.1f%%; first U+%04" PRIX32 ")",
			   out->n_unexpected, 100.0 * (double)out->n_unexpected / (double)n,
			   c[first_bad]);
	if (out->readable_share < LYNN_QV_MIN_READABLE_SHARE)
		fail_check(out, LYNN_QV_UNREADABLE, "readable share %.3f < %.2f", out->readable_share,
			   LYNN_QV_MIN_READABLE_SHARE);

	size_t L = 0;
	ssize_t at = find_repeat_cp(c, n, &L);
	if (at >= 0) {
		char ex[64];
		cp_excerpt(c + at, L, ex, sizeof(ex));
		fail_check(out, LYNN_QV_REPEATED_NGRAM, "\"%s\" x%d at char %zd", ex,
			   LYNN_QV_NGRAM_REPEATS, at);
	} else {
		char det[96];
		rc = find_repeat_words(text, len, det, sizeof(det), err);
		if (rc < 0)
			goto out;
		if (rc > 0)
			fail_check(out, LYNN_QV_REPEATED_NGRAM, "%s", det);
		rc = 0;
	}

	for (size_t i = 0, run = 1; i < n; i++) {
		run = (i && c[i] == c[i - 1]) ? run + 1 : 1;
		if (run >= LYNN_QV_CHAR_RUN && !lynn_uc_isspace(c[i]) && !is_ascii_digit(c[i])) {
			char ex[8];
			cp_excerpt(c + i, 1, ex, sizeof(ex));
			fail_check(out, LYNN_QV_CHAR_RUN_CHECK, "\"%s\" %d+ times in a row at char %zu", ex,
				   LYNN_QV_CHAR_RUN, i + 1 - run);
			break;
		}
	}

	for (size_t g = 0; g < LYNN_ARRAY_LEN(GIBBERISH); g++) {
		if (memmem(text, len, GIBBERISH[g], strlen(GIBBERISH[g]))) {
			char ex[48];
			size_t k = 0;
			for (const char *p = GIBBERISH[g]; *p && k + 1 < sizeof(ex); p++)
				ex[k++] = (*p == '"' || *p == '\\') ? '?' : *p;
			ex[k] = 0;
			fail_check(out, LYNN_QV_GIBBERISH, "fragment \"%s\"", ex);
			break;
		}
	}

	if (n_anchors) {
		if (!(low = ascii_lower(text, len))) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
			goto out;
		}
		for (size_t k = 0; k < n_anchors && out->anchor_hit != 1; k++) {
			char *al = ascii_lower(anchors[k], strlen(anchors[k]));
			if (!al) {
				rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
				goto out;
			}
			if (*al && memmem(low, len, al, strlen(al)))
				out->anchor_hit = 1;
			free(al);
		}
		if (out->anchor_hit != 1)
			fail_check(out, LYNN_QV_MISSING_ANCHOR, "none of %zu anchors (\"%.30s\"%s) found",
				   n_anchors, anchors[0], n_anchors > 1 ? ", ..." : "");
	}
	if (nonfinite)
		fail_check(out, LYNN_QV_NONFINITE_LOGITS, "NaN or Inf in the logits");
out:
	free(low);
	free(cp);
	return rc;
}

cJSON *lynn_qv_quality_json(const struct lynn_qv_quality *q)
{
	cJSON *o = cJSON_CreateObject(), *r;
	char buf[160];
	if (!o)
		return NULL;
	cJSON_AddBoolToObject(o, "pass", q->pass);
	r = cJSON_AddArrayToObject(o, "reasons");
	for (int k = 0; k < LYNN_QV_N_CHECKS; k++) {
		if (!q->failed[k])
			continue;
		snprintf(buf, sizeof(buf), "%s: %s", CHECK_NAMES[k], q->detail[k]);
		cJSON_AddItemToArray(r, cJSON_CreateString(buf));
	}
	cJSON_AddNumberToObject(o, "n_chars", (double)q->n_chars);
	cJSON_AddNumberToObject(o, "unexpected_script_chars", (double)q->n_unexpected);
	cJSON_AddNumberToObject(o, "readable_share", q->readable_share);
	if (q->anchor_hit < 0)
		cJSON_AddNullToObject(o, "anchor_hit");
	else
		cJSON_AddBoolToObject(o, "anchor_hit", q->anchor_hit == 1);
	return o;
}

/* ===== runs ===== */

const char *lynn_qv_source_name(enum lynn_qv_source s)
{
	switch (s) {
	case LYNN_QV_SRC_FOLDER: return "folder";
	case LYNN_QV_SRC_ENDPOINT: return "endpoint";
	case LYNN_QV_SRC_GGUF: return "gguf";
	case LYNN_QV_SRC_OUTPUTS: return "outputs";
	}
	return "unknown";
}

enum lynn_qv_source lynn_qv_source_of(const char *path)
{
	size_t n = strlen(path);
	if (!strncmp(path, "http://", 7) || !strncmp(path, "https://", 8))
		return LYNN_QV_SRC_ENDPOINT;
	if (n >= 5 && !strcasecmp(path + n - 5, ".gguf"))
		return LYNN_QV_SRC_GGUF;
	return LYNN_QV_SRC_FOLDER;
}

void lynn_qv_gen_opts_init(struct lynn_qv_gen_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->max_tokens = LYNN_QV_DEFAULT_MAX_TOKENS;
	o->concurrency = 4;
	o->timeout_s = 600;
	o->max_retries = 5;
	o->backoff_s = 1;
}

void lynn_qv_run_release(struct lynn_qv_run *run)
{
	if (!run)
		return;
	for (size_t i = 0; run->outs && i < run->n; i++)
		free(run->outs[i].text);
	free(run->outs);
	free(run->label);
	free(run->path);
	free(run->load_error);
	memset(run, 0, sizeof(*run));
}

static int run_init(struct lynn_qv_run *run, const char *label, const char *path, size_t n,
		    struct lynn_err *err)
{
	memset(run, 0, sizeof(*run));
	run->label = strdup(label);
	run->path = strdup(path);
	run->outs = calloc(n ? n : 1, sizeof(*run->outs));
	run->n = n;
	run->load_time_s = -1;
	if (!run->label || !run->path || !run->outs) {
		lynn_qv_run_release(run);
		return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	}
	for (size_t i = 0; i < n; i++)
		run->outs[i].n_tokens = -1;
	return 0;
}

static int load_fail(struct lynn_qv_run *run, int code, const char *msg, struct lynn_err *err)
{
	run->loaded = false;
	run->load_code = code ? code : -LYNN_EIO;
	free(run->load_error);
	run->load_error = strdup(msg && *msg ? msg : "unknown error");
	if (!run->load_error)
		return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	lynn_log_warn("quant-verify: %s: LOAD_FAIL: %s", run->label, run->load_error);
	return 0;
}

struct client_ud {
	struct lynn_qv_run *run;
	size_t done, total;
};

static int on_client_done(void *ud, size_t idx, const struct lynn_chat_out *out,
			  struct lynn_err *err)
{
	struct client_ud *c = ud;
	struct lynn_qv_output *o = &c->run->outs[idx];
	free(o->text);
	if (!(o->text = strdup(out->text ? out->text : "")))
		return lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	lynn_eval_strip(o->text);
	o->gen_s = out->latency_s;
	o->n_tokens = -1;
	c->done++;
	lynn_log_debug("quant-verify: %s: %zu/%zu done", c->run->label, c->done, c->total);
	return 0;
}

static int run_endpoint(struct lynn_qv_run *run, const struct lynn_qv_prompts *p,
			const struct lynn_qv_gen_opts *o, struct lynn_err *err)
{
	struct lynn_client_opts co = { 0 };
	struct lynn_chat_req *reqs = NULL;
	struct lynn_client *cl;
	struct lynn_err cerr = { 0 };
	struct client_ud ud = { .run = run, .total = p->n };
	double t0 = lynn_now();
	int rc = 0;

	co.urls = run->path;
	co.concurrency = o->concurrency > 0 ? o->concurrency : 4;
	co.timeout_s = o->timeout_s > 0 ? o->timeout_s : 600;
	co.max_retries = o->max_retries >= 0 ? o->max_retries : 5;
	co.backoff_s = o->backoff_s > 0 ? o->backoff_s : 1;
	co.think = false;
	co.api_key = o->api_key;
	cl = lynn_client_create(&co, &cerr);
	if (!cl)
		return load_fail(run, cerr.code, cerr.msg, err);
	run->load_time_s = lynn_now() - t0;
	reqs = calloc(p->n ? p->n : 1, sizeof(*reqs));
	if (!reqs) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		goto out;
	}
	for (size_t i = 0; i < p->n; i++) {
		reqs[i].prompt = p->items[i].prompt;
		reqs[i].max_tokens = o->max_tokens;
	}
	run->loaded = true;
	if (lynn_client_run(cl, reqs, p->n, on_client_done, &ud, &cerr)) {
		if (cerr.code == -LYNN_ENOMEM) {
			rc = lynn_errf(err, cerr.code, "%s", cerr.msg);
			goto out;
		}
		if (ud.done == 0)
			rc = load_fail(run, cerr.code, cerr.msg, err);
		else
			lynn_log_warn("quant-verify: %s: %s (%zu of %zu outputs arrived)", run->label,
				      cerr.msg, ud.done, p->n);
	}
out:
	free(reqs);
	lynn_client_free(cl);
	return rc;
}

/* Drop a leading "<think>…</think>" block (what an endpoint moves to
 * reasoning_content), then strip like Python str.strip(). */
static void drop_think(char *s)
{
	const char *p = s;
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	if (!strncmp(p, "<think>", 7)) {
		const char *e = strstr(p, "</think>");
		if (e)
			memmove(s, e + 8, strlen(e + 8) + 1);
	}
	lynn_eval_strip(s);
}

/* lynn_engine_generate_many's callbacks over one run's prompts */
struct folder_ctx {
	struct lynn_engine *e;
	struct lynn_qv_run *run;
	const struct lynn_qv_prompts *p;
	int max_tokens;
};

static int folder_start(void *ud, size_t i, struct lynn_tok_ids *ids, struct lynn_gen_opts *go,
			struct lynn_err *err)
{
	const struct folder_ctx *c = ud;
	struct lynn_err perr = { 0 };
	lynn_sample_params_init(&go->sample); /* greedy */
	go->max_tokens = c->max_tokens;
	int rc = lynn_engine_encode_prompt(c->e, c->p->items[i].prompt, false, ids, &perr);
	if (rc == -LYNN_ENOMEM)
		return lynn_errf(err, rc, "%s", perr.msg);
	if (rc) /* this prompt has no output; the others go on */
		lynn_log_warn("quant-verify: %s: prompt '%s': %s", c->run->label, c->p->items[i].id, perr.msg);
	return rc ? 1 : 0;
}

/* A finished generation as prompt i's output: the ids decoded with special
 * tokens skipped (the final end-of-generation id is not text), a leading
 * think block dropped, trimmed. */
static int folder_done(void *ud, size_t i, const struct lynn_gen_result *r, const struct lynn_err *gerr,
		       struct lynn_err *err)
{
	const struct folder_ctx *c = ud;
	struct lynn_qv_output *out = &c->run->outs[i];
	struct lynn_buf text = LYNN_BUF_INIT;
	if (!r) {
		lynn_log_warn("quant-verify: %s: prompt '%s': %s", c->run->label, c->p->items[i].id, gerr->msg);
		return 0;
	}
	int rc = lynn_tok_decode(lynn_engine_tok(c->e), r->ids.ids, lynn_gen_n_text_ids(r), LYNN_TOK_F_SKIP_SPECIAL,
				 &text, err);
	if (!rc && !(out->text = text.data ? lynn_buf_detach(&text) : strdup("")))
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
	lynn_buf_release(&text);
	if (rc)
		return rc;
	drop_think(out->text);
	out->n_tokens = (int)r->ids.n;
	out->gen_s = r->t_prefill_s + r->t_decode_s;
	out->nonfinite = r->nonfinite;
	lynn_log_info("quant-verify: %s: '%s': %d tokens in %.2f s%s", c->run->label, c->p->items[i].id,
		      out->n_tokens, out->gen_s, out->nonfinite ? " (NaN/Inf logits)" : "");
	return 0;
}

static int run_folder(struct lynn_qv_run *run, const struct lynn_qv_prompts *p,
		      const struct lynn_qv_gen_opts *o, struct lynn_err *err)
{
	struct lynn_engine_opts eo = { .n_threads = o->n_threads };
	struct lynn_err lerr = { 0 };
	double t0 = lynn_now();
	struct lynn_engine *e;

	bool gguf = run->source == LYNN_QV_SRC_GGUF;
	if (gguf ? !lynn_file_exists(run->path) : !lynn_dir_exists(run->path)) {
		char msg[300];
		snprintf(msg, sizeof(msg), "quant-verify: %s '%.200s' not found",
			 gguf ? "GGUF file" : "model folder", run->path);
		return load_fail(run, -LYNN_ENOTFOUND, msg, err);
	}
	e = lynn_engine_open(run->path, &eo, &lerr);
	if (e && (!lynn_engine_tok(e) || !lynn_engine_template(e))) {
		lynn_errf(&lerr, -LYNN_ENOTFOUND, "quant-verify: '%.200s' has no %s", run->path,
			  lynn_engine_tok(e)
				  ? (gguf ? "chat template (tokenizer.chat_template)"
					  : "chat template (chat_template.jinja or tokenizer_config.json)")
				  : (gguf ? "tokenizer (tokenizer.ggml.model gpt2, tokens, merges)"
					  : "tokenizer (tokenizer.json)"));
		lynn_engine_close(e);
		e = NULL;
	}
	if (!e)
		return lerr.code == -LYNN_ENOMEM ? lynn_errf(err, lerr.code, "%s", lerr.msg)
						 : load_fail(run, lerr.code, lerr.msg, err);
	run->load_time_s = lynn_now() - t0;
	run->loaded = true;
	struct folder_ctx c = { e, run, p, o->max_tokens };
	struct lynn_err gerr = { 0 };
	int rc = lynn_engine_generate_many(e, p->n, o->concurrency, folder_start, folder_done, &c, &gerr);
	lynn_engine_close(e);
	if (rc == -LYNN_ENOMEM || rc == -LYNN_EINTR)
		return lynn_errf(err, rc, "%s", gerr.msg);
	if (rc) /* a failed step: the prompts not answered yet have no output */
		lynn_log_warn("quant-verify: %s: %s", run->label, gerr.msg);
	return 0;
}

int lynn_qv_run_generate(struct lynn_qv_run *run, const char *label, const char *path,
			 const struct lynn_qv_prompts *p, const struct lynn_qv_gen_opts *o,
			 struct lynn_err *err)
{
	int rc = run_init(run, label, path, p->n, err);
	if (rc)
		return rc;
	run->source = lynn_qv_source_of(path);
	switch (run->source) {
	case LYNN_QV_SRC_ENDPOINT:
		return run_endpoint(run, p, o, err);
	case LYNN_QV_SRC_GGUF: /* in-process: the runner binds .gguf files (model_gguf.c) */
	default:
		return run_folder(run, p, o, err);
	}
}

struct outputs_ctx {
	const char *path;
	const struct lynn_qv_prompts *p;
	struct lynn_qv_run *run;
	struct id_index ix;
};

static int output_line(void *ud, const cJSON *rec, size_t line, struct lynn_err *err)
{
	struct outputs_ctx *c = ud;
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(rec, "output");
	char *id = NULL;
	int rc = record_id(rec, c->path, line, true, &id, err);
	if (rc)
		return rc;
	if (!cJSON_IsString(o)) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: field 'output' %s",
			       c->path, line, o ? "is not a string" : "is missing");
		goto out;
	}
	ssize_t k = prompts_find(&c->ix, c->p, id);
	if (k < 0) {
		lynn_log_debug("quant-verify: '%s' line %zu: id '%s' is not a prompt; ignored", c->path,
			       line, id);
		goto out;
	}
	if (c->run->outs[k].text) {
		rc = lynn_errf(err, -LYNN_EFORMAT, "quant-verify: '%s' line %zu: id '%s' repeated",
			       c->path, line, id);
		goto out;
	}
	if (!(c->run->outs[k].text = strdup(o->valuestring)))
		rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
out:
	free(id);
	return rc;
}

int lynn_qv_run_load(struct lynn_qv_run *run, const char *label, const char *path,
		     const struct lynn_qv_prompts *p, struct lynn_err *err)
{
	int rc = run_init(run, label, path, p->n, err);
	if (rc)
		return rc;
	run->source = LYNN_QV_SRC_OUTPUTS;
	struct outputs_ctx c = { .path = path, .p = p, .run = run };
	rc = jsonl_each(path, output_line, &c, err);
	idx_release(&c.ix);
	if (rc) {
		lynn_qv_run_release(run);
		return rc;
	}
	run->loaded = true;
	return 0;
}

int lynn_qv_run_write(const struct lynn_qv_run *run, const struct lynn_qv_prompts *p,
		      const char *path, struct lynn_err *err)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; i < p->n && i < run->n && !rc; i++) {
		if (!run->outs[i].text)
			continue;
		cJSON *o = cJSON_CreateObject();
		char *s = NULL;
		if (o && cJSON_AddStringToObject(o, "id", p->items[i].id) &&
		    cJSON_AddStringToObject(o, "output", run->outs[i].text))
			s = cJSON_PrintUnformatted(o);
		if (!s || lynn_buf_puts(&b, s) || lynn_buf_putc(&b, '\n'))
			rc = lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
		free(s);
		cJSON_Delete(o);
	}
	if (!rc)
		rc = lynn_write_atomic(path, b.data ? b.data : "", b.len, err);
	lynn_buf_release(&b);
	return rc;
}

/* ===== the report ===== */

static void add_num_or_null(cJSON *o, const char *k, double v, bool ok)
{
	if (ok && isfinite(v))
		cJSON_AddNumberToObject(o, k, v);
	else
		cJSON_AddNullToObject(o, k);
}

/* Tokens/s over the items that report token counts. */
static bool run_tps(const struct lynn_qv_run *r, double *tps)
{
	double tok = 0, s = 0;
	bool any = false;
	for (size_t i = 0; i < r->n; i++) {
		if (!r->outs[i].text || r->outs[i].n_tokens < 0)
			continue;
		tok += r->outs[i].n_tokens;
		s += r->outs[i].gen_s;
		any = true;
	}
	*tps = s > 0 ? tok / s : 0;
	return any && s > 0;
}

static cJSON *run_header(const struct lynn_qv_run *r)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "label", r->label);
	cJSON_AddStringToObject(o, "path", r->path);
	cJSON_AddStringToObject(o, "source", lynn_qv_source_name(r->source));
	add_num_or_null(o, "load_time_s", r->load_time_s, r->loaded && r->load_time_s >= 0);
	return o;
}

static int item_quality(const struct lynn_qv_prompt *q, const struct lynn_qv_output *out,
			struct lynn_qv_quality *qq, struct lynn_err *err)
{
	return lynn_qv_quality_check(out->text, out->text ? strlen(out->text) : 0,
				     (const char *const *)q->anchors, q->n_anchors, out->nonfinite, qq,
				     err);
}

static void add_tokens(cJSON *it, const struct lynn_qv_output *out)
{
	if (out->text && out->n_tokens >= 0) {
		cJSON_AddNumberToObject(it, "tokens", out->n_tokens);
		add_num_or_null(it, "tokens_per_sec", out->n_tokens / out->gen_s, out->gen_s > 0);
	} else {
		cJSON_AddNullToObject(it, "tokens");
		cJSON_AddNullToObject(it, "tokens_per_sec");
	}
	cJSON_AddNumberToObject(it, "gen_time_s", out->gen_s);
}

cJSON *lynn_qv_report(const struct lynn_qv_prompts *p, const struct lynn_qv_run *ref,
		      const struct lynn_qv_run *variants, size_t n_variants,
		      const struct lynn_qv_opts *o, bool *all_pass, struct lynn_err *err)
{
	struct lynn_score_ctx *ctx = NULL;
	cJSON *rep = lynn_json_report_new(LYNN_QV_SCHEMA), *vs, *r, *items, *t;
	size_t n_pass = 0;
	double tps;
	char buf[400];

	*all_pass = false;
	if (!rep || !(ctx = lynn_score_ctx_create(err)))
		goto oom;
	cJSON_AddStringToObject(rep, "mode", o->mode ? o->mode : "generate");
	t = cJSON_AddObjectToObject(rep, "settings");
	cJSON_AddNumberToObject(t, "max_tokens", o->max_tokens);
	cJSON_AddNumberToObject(t, "min_similarity", o->min_similarity);
	cJSON_AddNumberToObject(t, "chrf_word_order", o->chrf_word_order);
	cJSON_AddStringToObject(t, "similarity",
				o->chrf_word_order ? "0.5*chrF++/100 + 0.5*ROUGE-L F1"
						   : "0.5*chrF/100 + 0.5*ROUGE-L F1");
	cJSON_AddStringToObject(t, "prompts", o->prompts_src ? o->prompts_src : "builtin");
	cJSON_AddNumberToObject(t, "n_prompts", (double)p->n);

	/* the reference */
	if (!(r = run_header(ref)))
		goto oom;
	cJSON_AddItemToObject(rep, "reference", r);
	add_num_or_null(r, "avg_tokens_per_sec", 0, false);
	if (run_tps(ref, &tps))
		cJSON_ReplaceItemInObject(r, "avg_tokens_per_sec", cJSON_CreateNumber(tps));
	items = cJSON_AddArrayToObject(r, "items");
	size_t ref_coherent = 0;
	for (size_t i = 0; i < p->n; i++) {
		struct lynn_qv_quality q;
		if (item_quality(&p->items[i], &ref->outs[i], &q, err))
			goto fail;
		cJSON *it = cJSON_CreateObject();
		cJSON_AddItemToArray(items, it);
		cJSON_AddStringToObject(it, "id", p->items[i].id);
		cJSON_AddStringToObject(it, "prompt", p->items[i].prompt);
		if (ref->outs[i].text)
			cJSON_AddStringToObject(it, "output", ref->outs[i].text);
		else
			cJSON_AddNullToObject(it, "output");
		add_tokens(it, &ref->outs[i]);
		cJSON_AddItemToObject(it, "quality", lynn_qv_quality_json(&q));
		ref_coherent += q.pass;
	}
	cJSON_AddNumberToObject(r, "n_coherent", (double)ref_coherent);

	vs = cJSON_AddArrayToObject(rep, "variants");
	for (size_t v = 0; v < n_variants; v++) {
		const struct lynn_qv_run *vr = &variants[v];
		cJSON *reasons, *vo = run_header(vr);
		if (!vo)
			goto oom;
		cJSON_AddItemToArray(vs, vo);
		if (!vr->loaded) {
			cJSON_AddStringToObject(vo, "verdict", "LOAD_FAIL");
			reasons = cJSON_AddArrayToObject(vo, "reasons");
			snprintf(buf, sizeof(buf), "load failed: %s", vr->load_error ? vr->load_error : "");
			cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
			cJSON_AddNumberToObject(vo, "n_items", 0);
			cJSON_AddNumberToObject(vo, "n_coherent", 0);
			cJSON_AddNullToObject(vo, "mean_similarity");
			cJSON_AddNullToObject(vo, "avg_tokens_per_sec");
			cJSON_AddArrayToObject(vo, "items");
			continue;
		}
		cJSON *verdict = cJSON_AddStringToObject(vo, "verdict", "FAIL");
		reasons = cJSON_AddArrayToObject(vo, "reasons");
		cJSON_AddNumberToObject(vo, "n_items", (double)p->n);
		cJSON *ncoh = cJSON_AddNumberToObject(vo, "n_coherent", 0);
		cJSON *mean = cJSON_AddNumberToObject(vo, "mean_similarity", 0);
		add_num_or_null(vo, "avg_tokens_per_sec", 0, false);
		if (run_tps(vr, &tps))
			cJSON_ReplaceItemInObject(vo, "avg_tokens_per_sec", cJSON_CreateNumber(tps));
		items = cJSON_AddArrayToObject(vo, "items");
		double sum = 0;
		size_t n_coh = 0;
		struct lynn_buf bad = LYNN_BUF_INIT;
		for (size_t i = 0; i < p->n; i++) {
			const struct lynn_qv_output *out = &vr->outs[i];
			const char *rt = ref->outs[i].text ? ref->outs[i].text : "";
			struct lynn_similarity sim = { 0 };
			struct lynn_qv_quality q;
			if (out->text && lynn_similarity(ctx, out->text, strlen(out->text), rt, strlen(rt),
							 o->chrf_word_order, 0, &sim, err)) {
				lynn_buf_release(&bad);
				goto fail;
			}
			if (item_quality(&p->items[i], out, &q, err)) {
				lynn_buf_release(&bad);
				goto fail;
			}
			sum += sim.score;
			n_coh += q.pass;
			cJSON *it = cJSON_CreateObject();
			cJSON_AddItemToArray(items, it);
			cJSON_AddStringToObject(it, "id", p->items[i].id);
			cJSON_AddStringToObject(it, "prompt", p->items[i].prompt);
			if (out->text)
				cJSON_AddStringToObject(it, "output", out->text);
			else
				cJSON_AddNullToObject(it, "output");
			cJSON_AddNumberToObject(it, "similarity", sim.score);
			cJSON_AddNumberToObject(it, "chrf", sim.chrf);
			cJSON_AddNumberToObject(it, "rouge_l", sim.rouge_l);
			add_tokens(it, out);
			cJSON_AddItemToObject(it, "quality", lynn_qv_quality_json(&q));
			if (!q.pass) {
				lynn_buf_printf(&bad, "%s%s (", bad.len ? "; " : "", p->items[i].id);
				bool first = true;
				for (int k = 0; k < LYNN_QV_N_CHECKS; k++)
					if (q.failed[k]) {
						lynn_buf_printf(&bad, "%s%s", first ? "" : ", ", CHECK_NAMES[k]);
						first = false;
					}
				lynn_buf_putc(&bad, ')');
			}
		}
		double m = p->n ? sum / (double)p->n : 0;
		cJSON_SetNumberValue(mean, m);
		cJSON_SetNumberValue(ncoh, (double)n_coh);
		bool pass = n_coh == p->n && m >= o->min_similarity;
		if (m < o->min_similarity) {
			snprintf(buf, sizeof(buf), "mean_similarity %.4f < %.2f", m, o->min_similarity);
			cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
		}
		if (n_coh < p->n) {
			snprintf(buf, sizeof(buf), "%zu of %zu outputs failed quality: %.300s",
				 p->n - n_coh, p->n, bad.data ? bad.data : "");
			cJSON_AddItemToArray(reasons, cJSON_CreateString(buf));
		}
		lynn_buf_release(&bad);
		if (pass) {
			cJSON_SetValuestring(verdict, "PASS");
			n_pass++;
		}
	}
	cJSON_AddStringToObject(rep, "verdict", n_pass == n_variants ? "PASS" : "FAIL");
	cJSON_AddNumberToObject(rep, "n_variants", (double)n_variants);
	cJSON_AddNumberToObject(rep, "n_pass", (double)n_pass);
	*all_pass = n_pass == n_variants;
	lynn_score_ctx_free(ctx);
	return rep;
oom:
	lynn_errf(err, -LYNN_ENOMEM, "quant-verify: out of memory");
fail:
	lynn_score_ctx_free(ctx);
	cJSON_Delete(rep);
	return NULL;
}

static void md_num(struct lynn_buf *b, const cJSON *o, const char *k, const char *fmt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	if (cJSON_IsNumber(v))
		lynn_buf_printf(b, fmt, v->valuedouble);
	else
		lynn_buf_puts(b, "-");
}

/* A whole Markdown table cell (lynn_buf_md_cell, uncut). */
static void md_cell(struct lynn_buf *b, const char *s)
{
	lynn_buf_md_cell(b, s, SIZE_MAX);
}

char *lynn_qv_markdown(const cJSON *report)
{
	struct lynn_buf b = LYNN_BUF_INIT;
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(report, "settings");
	const cJSON *ref = cJSON_GetObjectItemCaseSensitive(report, "reference");
	const cJSON *vs = cJSON_GetObjectItemCaseSensitive(report, "variants"), *v;
	const cJSON *min = cJSON_GetObjectItemCaseSensitive(st, "min_similarity");
	const cJSON *wo = cJSON_GetObjectItemCaseSensitive(st, "chrf_word_order");

	lynn_buf_puts(&b, "## lynn quant-verify: ");
	lynn_buf_puts(&b, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(report, "verdict")));
	lynn_buf_puts(&b, "\n\nreference: `");
	md_cell(&b, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ref, "path")));
	lynn_buf_printf(&b, "` · %d prompts · max tokens %d · min similarity %.2f · %s\n\n",
			(int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "n_prompts")),
			(int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "max_tokens")),
			cJSON_IsNumber(min) ? min->valuedouble : 0,
			cJSON_IsNumber(wo) && wo->valuedouble > 0 ? "chrF++" : "chrF");
	lynn_buf_puts(&b, "| variant | verdict | mean similarity | coherent | tokens/s | load s | path |\n"
			  "|---|---|---:|---:|---:|---:|---|\n");
	cJSON_ArrayForEach(v, vs) {
		lynn_buf_puts(&b, "| ");
		md_cell(&b, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "label")));
		lynn_buf_puts(&b, " | ");
		md_cell(&b, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "verdict")));
		lynn_buf_puts(&b, " | ");
		md_num(&b, v, "mean_similarity", "%.4f");
		lynn_buf_printf(&b, " | %d/%d | ",
				(int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(v, "n_coherent")),
				(int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(v, "n_items")));
		md_num(&b, v, "avg_tokens_per_sec", "%.1f");
		lynn_buf_puts(&b, " | ");
		md_num(&b, v, "load_time_s", "%.2f");
		lynn_buf_puts(&b, " | `");
		md_cell(&b, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "path")));
		lynn_buf_puts(&b, "` |\n");
	}
	bool any = false;
	cJSON_ArrayForEach(v, vs) {
		const cJSON *rs = cJSON_GetObjectItemCaseSensitive(v, "reasons"), *x;
		cJSON_ArrayForEach(x, rs) {
			if (!any)
				lynn_buf_puts(&b, "\nFailures:\n");
			any = true;
			lynn_buf_puts(&b, "- ");
			md_cell(&b, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "label")));
			lynn_buf_puts(&b, ": ");
			md_cell(&b, cJSON_GetStringValue(x));
			lynn_buf_putc(&b, '\n');
		}
	}
	return lynn_buf_detach(&b);
}
