/*
 * score.h - text similarity scores (SPEC §6) and the gate graders (SPEC §5).
 *
 * Similarity:
 *   chrF / chrF++      exactly sacreBLEU 2.x CHRF (sentence and corpus level)
 *   ROUGE-L            exactly Google rouge-score on ASCII text, extended so
 *                      every non-Latin letter is one token (SPEC §6)
 *   composite          0.5·chrF/100 + 0.5·ROUGE-L F1 (quant-verify)
 *   sequence ratio     Python difflib.SequenceMatcher(None, a, b).ratio(),
 *                      autojunk included, on Unicode code points
 * Graders (the original four_gate_eval.py rules, see docs/grading.md):
 *   style rules (g1), reference similarity (g3), tool calls (g2 v8),
 *   gold string_match / regex (g2 v9), the daily-mix gold grader.
 *
 * Text is UTF-8 passed as (pointer, byte length); it need not be
 * NUL-terminated and may contain NUL. Every malformed byte counts as one
 * U+FFFD, the way Python decodes with errors="replace" per byte, so no text
 * is ever an error: the only failure of the scorers is -LYNN_ENOMEM.
 * Lengths, n-grams and positions are in code points, as Python's str does.
 *
 * Scratch memory: every scorer takes a `struct lynn_score_ctx *` that holds
 * buffers reused across calls (create one per thread; NULL is allowed and
 * then each call allocates its own). A ctx is not thread-safe.
 */
#ifndef LYNN_SCORE_H
#define LYNN_SCORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "lynn/err.h"

struct lynn_score_ctx;

/* New scratch context. Caller frees with lynn_score_ctx_free (NULL ok). */
struct lynn_score_ctx *lynn_score_ctx_create(struct lynn_err *err);
void lynn_score_ctx_free(struct lynn_score_ctx *ctx);

/* Python's round(x, ndigits): the exact binary value rounded half-even to
 * `ndigits` decimals (the original toolkit rounds its scores this way). */
double lynn_score_round(double x, int ndigits);

/* ===== chrF / chrF++ (sacreBLEU 2.x, Popović 2015/2017) ===== */

#define LYNN_CHRF_MAX_CHAR_ORDER 10
#define LYNN_CHRF_MAX_WORD_ORDER 4
#define LYNN_CHRF_MAX_STATS (3 * (LYNN_CHRF_MAX_CHAR_ORDER + LYNN_CHRF_MAX_WORD_ORDER))

struct lynn_chrf_opts {
	int char_order;     /* 6 (1..LYNN_CHRF_MAX_CHAR_ORDER) */
	int word_order;     /* 0 = chrF, 2 = chrF++ (0..LYNN_CHRF_MAX_WORD_ORDER) */
	int beta;           /* 2 */
	bool whitespace;    /* false: whitespace removed before char n-grams */
	bool eps_smoothing; /* false: sacreBLEU's effective-order rule */
};
#define LYNN_CHRF_OPTS_DEFAULT { 6, 0, 2, false, false }
#define LYNN_CHRFPP_OPTS_DEFAULT { 6, 2, 2, false, false }

/* Sufficient statistics of one segment (or a corpus, when summed):
 * v[3*i .. 3*i+2] = hypothesis n-grams, reference n-grams, matches for
 * order i (char orders 1..char_order, then word orders 1..word_order). */
struct lynn_chrf_stats {
	int n_orders; /* char_order + word_order */
	int64_t v[LYNN_CHRF_MAX_STATS];
};

/* Statistics of hyp against one reference (sacreBLEU's
 * _compute_segment_statistics). -LYNN_EINVAL for orders out of range. */
int lynn_chrf_stats_compute(struct lynn_score_ctx *ctx, const struct lynn_chrf_opts *o,
			    const char *hyp, size_t hyp_len, const char *ref, size_t ref_len,
			    struct lynn_chrf_stats *out, struct lynn_err *err);
/* acc += s (acc->n_orders 0 takes s's). The corpus score is the score of
 * the summed statistics, as sacreBLEU's corpus_score. */
void lynn_chrf_stats_add(struct lynn_chrf_stats *acc, const struct lynn_chrf_stats *s);
/* chrF (0..100) of statistics (sacreBLEU's _compute_f_score). */
double lynn_chrf_stats_score(const struct lynn_chrf_opts *o, const struct lynn_chrf_stats *s);
/* Sentence chrF (0..100): sacreBLEU CHRF(...).sentence_score(hyp, [ref]). */
int lynn_chrf_sentence(struct lynn_score_ctx *ctx, const struct lynn_chrf_opts *o,
		       const char *hyp, size_t hyp_len, const char *ref, size_t ref_len,
		       double *score, struct lynn_err *err);

/* ===== ROUGE-L (Google rouge-score, extended per SPEC §6) ===== */

enum lynn_rouge_flags {
	/* Porter stemmer (NLTK's, as rouge-score's use_stemmer=True) on
	 * [a-z0-9] tokens longer than 3 characters. */
	LYNN_ROUGE_F_STEM = 1 << 0,
	/* Exactly rouge-score: drop non-ASCII letters instead of making each
	 * a token (on ASCII text both modes agree). */
	LYNN_ROUGE_F_ASCII_ONLY = 1 << 1,
};

struct lynn_rouge {
	double precision; /* LCS / hypothesis tokens */
	double recall;    /* LCS / reference tokens */
	double fmeasure;  /* 2PR/(P+R); 0 when either side has no token */
};

/* ROUGE-L of hyp (rouge-score's "prediction") against ref ("target"). */
int lynn_rouge_l(struct lynn_score_ctx *ctx, const char *hyp, size_t hyp_len,
		 const char *ref, size_t ref_len, unsigned flags, struct lynn_rouge *out,
		 struct lynn_err *err);

/* Tokens of `text` as the ROUGE-L scorer sees them, joined by single spaces
 * into a fresh NUL-terminated string (caller frees). For tests and docs. */
char *lynn_rouge_tokens(const char *text, size_t len, unsigned flags, struct lynn_err *err);

/* NLTK PorterStemmer().stem(word) (mode NLTK_EXTENSIONS) of a lowercase
 * ASCII word, into out (NUL-terminated, at most n_max bytes with the NUL).
 * Returns the stem length, or -LYNN_EINVAL when out is too small. */
int lynn_porter_stem(const char *word, size_t len, char *out, size_t n_max);

/* ===== Composite similarity (quant-verify, SPEC §6) ===== */

struct lynn_similarity {
	double chrf;    /* sentence chrF, 0..100 */
	double rouge_l; /* ROUGE-L F1, 0..1 */
	double score;   /* 0.5·chrf/100 + 0.5·rouge_l */
};

/* chrf_word_order 0 (chrF) or 2 (chrF++); rouge_flags as lynn_rouge_l. */
int lynn_similarity(struct lynn_score_ctx *ctx, const char *hyp, size_t hyp_len,
		    const char *ref, size_t ref_len, int chrf_word_order, unsigned rouge_flags,
		    struct lynn_similarity *out, struct lynn_err *err);

/* ===== difflib SequenceMatcher ratio ===== */

/* difflib.SequenceMatcher(None, a, b).ratio() over code point arrays:
 * 2·M/(|a|+|b|) with M the matched characters, 1.0 when both are empty.
 * Autojunk: when |b| ≥ 200, code points occurring more than |b|/100 + 1
 * times in b are "popular" and never start a match, as in difflib. */
int lynn_seq_ratio_cp(struct lynn_score_ctx *ctx, const uint32_t *a, size_t la,
		      const uint32_t *b, size_t lb, double *ratio, struct lynn_err *err);
/* The same on UTF-8 text, each side cut to its first max_chars code points
 * (0 = no cut): the toolkit's SequenceMatcher(None, o[:5000], r[:5000]). */
int lynn_seq_ratio(struct lynn_score_ctx *ctx, const char *a, size_t a_len, const char *b,
		   size_t b_len, size_t max_chars, double *ratio, struct lynn_err *err);

/* ===== g1 style rules ===== */

enum lynn_style_rule {
	LYNN_STYLE_LENGTH_OK = 0,        /* 50 ≤ code points ≤ 8000 */
	LYNN_STYLE_NO_TAIL_REPETITION,   /* no 8-char window ×5 in the second half */
	LYNN_STYLE_NO_GARBAGE,           /* ≥ 60% CJK ideographs or common ASCII */
	LYNN_STYLE_NO_CLICHE,            /* no configured opening phrase */
	LYNN_STYLE_FORMAT_MATCH,         /* code / digits / braces / table per prompt */
	LYNN_STYLE_N_RULES
};

/* Rule name as the original reports it ("length_ok", "no_tail_repetition",
 * "no_garbage", "no_cliche", "format_match"). */
const char *lynn_style_rule_name(int rule);

/* The cliché openings; NULL or n_cliches 0 means the built-in list
 * (lynn_style_default_cliches). Borrowed for the duration of a call. */
struct lynn_style_opts {
	const char *const *cliches;
	size_t n_cliches;
};

/* The built-in cliché list (static storage): "I'd be happy to help",
 * "Let me break this down", "As an AI", "I cannot", "好的,我来帮", "首先,让我",
 * "当然可以,", "好的,", "当然,". Returns the count. */
size_t lynn_style_default_cliches(const char *const **out);

struct lynn_style_result {
	bool rules[LYNN_STYLE_N_RULES];
	int n_pass;          /* rules passed, 0..5 */
	double pass_ratio;   /* n_pass / 5 */
	bool overall_pass;   /* n_pass ≥ 4 */
};

/* Score one output for its prompt (four_gate_eval.score_rule_based). */
int lynn_style_score(const struct lynn_style_opts *o, const char *prompt, size_t prompt_len,
		     const char *output, size_t output_len, struct lynn_style_result *out,
		     struct lynn_err *err);

/* ===== g3 reference similarity ===== */

struct lynn_text_features {
	int headers, bullets, code_blocks, tables, paragraphs, numbers;
};

struct lynn_refsim {
	bool has_reference; /* false: the rule fallback (score = style pass ratio) */
	double score;       /* rounded to 4 decimals, as the original reports it */
	double score_raw;   /* the same before rounding */
	/* components, unrounded (the original rounds each to 4 in its report) */
	double trigram_f1, bigram_f1, sequence, number_f1, term_f1, structure, floor_penalty;
	struct lynn_text_features out_features, ref_features;
	struct lynn_style_result style; /* style rules of the output */
};

/* four_gate_eval.reference_similarity_score(prompt, output, reference). A
 * zero-length reference selects the rule fallback. */
int lynn_refsim_score(struct lynn_score_ctx *ctx, const struct lynn_style_opts *o,
		      const char *prompt, size_t prompt_len, const char *output, size_t output_len,
		      const char *reference, size_t reference_len, struct lynn_refsim *out,
		      struct lynn_err *err);

/* Structure features of a text (headers, bullets, code blocks, table lines,
 * paragraphs, distinct numbers), as the reference similarity counts them. */
int lynn_text_features(const char *text, size_t len, struct lynn_text_features *out,
		       struct lynn_err *err);

/* ===== g2 v8 tool calls ===== */

enum lynn_tool_via {
	LYNN_TOOL_VIA_STRUCTURED = 0,      /* a structured call has the expected name */
	LYNN_TOOL_VIA_STRUCTURED_MISMATCH, /* structured calls, none with the name */
	LYNN_TOOL_VIA_SUBSTRING,           /* no structured call: name + one hint in text */
};
/* "structured", "structured_mismatch", "substring_fallback". */
const char *lynn_tool_via_name(enum lynn_tool_via via);

/* The structured tool calls in a model output, as a fresh cJSON array of
 * {"name": ..., "arguments": {...}} (caller frees with cJSON_Delete):
 *   1. <tool_call>{json}</tool_call> blocks whose JSON is an object with a
 *      non-empty "name" (the Hermes / Qwen3 form);
 *   2. <tool_call><function=NAME><parameter=K>V</parameter>…</function>
 *      </tool_call> (the Qwen3.5 / Qwen3-Coder XML form; values stay strings);
 *   3. only when 1 and 2 find nothing: inline {"name": "...", "arguments":
 *      {flat object}} JSON in the text (the original's fallback).
 * NULL only on out-of-memory. */
cJSON *lynn_tool_calls_extract(const char *output, size_t len, struct lynn_err *err);

struct lynn_tool_result {
	bool pass;
	enum lynn_tool_via via;
	int n_calls;    /* structured calls found */
	bool has_name;  /* substring fallback: expected name in the text */
	bool has_param; /* substring fallback: a hint of some key in the text */
};

/* four_gate_eval.score_tool_call: `expected_name` is expected.tool_name,
 * `param_hints` expected.param_hints ({key: [hint, ...]}, NULL = none: any
 * text then satisfies the hint test). -LYNN_EFORMAT when param_hints is not
 * an object of string arrays. */
int lynn_grade_tool_call(const char *output, size_t len, const char *expected_name,
			 const cJSON *param_hints, struct lynn_tool_result *out,
			 struct lynn_err *err);

/* ===== g2 v9 gold answers ===== */

/* verifier "string_match" (or NULL, or any unknown name): the gold with
 * Python-str.strip() whitespace removed is a substring of the output;
 * "regex": the gold, as a PCRE2 pattern (UTF, Unicode properties), matches
 * somewhere in the output. -LYNN_EFORMAT naming the pattern when it does
 * not compile. */
int lynn_grade_gold(const char *output, size_t len, const char *gold, const char *verifier,
		    bool *pass, struct lynn_err *err);

/* ===== daily-mix gold grader (lynn eval --suite, docs/grading.md) ===== */

enum lynn_daily_via {
	LYNN_DAILY_FAIL = 0,
	LYNN_DAILY_EXACT,       /* normalized gold found in the normalized answer */
	LYNN_DAILY_TOKENS,      /* N-of-M token fallback */
};

struct lynn_daily_result {
	bool pass;
	enum lynn_daily_via via;
	int n_gold_tokens;   /* M */
	int n_needed;        /* N */
	int n_found;
};

/* Normalize a gold or an answer (LaTeX \boxed{}, \frac{a}{b}, \text{},
 * $, thousands separators, trailing zeros, case, spaces; docs/grading.md).
 * Fresh NUL-terminated string, caller frees; NULL on out-of-memory. */
char *lynn_daily_normalize(const char *text, size_t len, struct lynn_err *err);

/* Grade an answer (the reasoning already separated out) against a gold. */
int lynn_grade_daily(const char *answer, size_t len, const char *gold,
		     struct lynn_daily_result *out, struct lynn_err *err);

#endif
