/*
 * qverify.h - `lynn quant-verify` (SPEC §6): is each quantized variant still
 * the same model as the reference?
 *
 * Per output: the composite similarity to the reference output (score.h:
 * 0.5·chrF/100 + 0.5·ROUGE-L F1) and the quality checks below. A variant
 * passes when it loads, every output passes quality, and the mean
 * similarity reaches the minimum (0.70 by default).
 */
#ifndef LYNN_QVERIFY_H
#define LYNN_QVERIFY_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "lynn/err.h"

#define LYNN_QV_SCHEMA "lynn-quant-verify-v2"
#define LYNN_QV_DEFAULT_MIN_SIMILARITY 0.70
#define LYNN_QV_DEFAULT_MAX_TOKENS 64

/* One probe prompt: text, and the semantic anchors of which at least one
 * must appear (case-insensitively) in a coherent answer (none: no check). */
struct lynn_qv_prompt {
	char *id;
	char *prompt;
	char *task;      /* the anchor group's name ("python_factorial") */
	char **anchors;
	size_t n_anchors;
};

/* The 6 built-in bilingual prompts with their anchors (static storage). */
size_t lynn_qv_builtin_prompts(const struct lynn_qv_prompt **out);

/* Load a --prompts JSONL file: `prompt` (or `user`/`problem`), optional
 * `id`, `anchors` (list of strings) and `task`. Errors name file, line and
 * field. Caller releases with lynn_qv_prompts_free. */
int lynn_qv_prompts_load(const char *path, struct lynn_qv_prompt **out, size_t *n,
			 struct lynn_err *err);
void lynn_qv_prompts_free(struct lynn_qv_prompt *p, size_t n);

/* The quality checks of one output (the original quant_verify.py's
 * quality_check): at least 8 characters; at most 2 characters and 3% of
 * unexpected scripts (Arabic, Kana, Cyrillic, Hangul, U+FFFD); readable share
 * (CJK ideographs, ASCII letters, digits, space, common punctuation) ≥ 0.65;
 * no 2–8-character fragment three times in a row and no character six times
 * in a row (after lowercasing and removing whitespace); no known gibberish
 * fragment; a semantic anchor when the prompt has anchors. Returns the
 * "quality" object {pass, reasons, readable_ratio, script_counts,
 * weird_script_ratio, repetition{…}, semantic{…}} (caller frees) and sets
 * *pass. NULL only when out of memory. */
cJSON *lynn_qv_quality(const char *text, const struct lynn_qv_prompt *p, bool *pass);

#endif
