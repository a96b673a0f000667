/*
 * quant_verify.h - is each quantized variant still the same model? (SPEC §6)
 *
 * Every variant answers the same prompts greedily; each output is compared
 * with the reference's (similarity = 0.5·chrF/100 + 0.5·ROUGE-L F1, the
 * scorers of score.h) and checked for coherence (the quality rules below).
 * A variant passes when it loads, every output passes quality and the mean
 * similarity reaches the minimum (default 0.70).
 *
 * Steps, kept apart so each can be tested alone:
 *   1. prompts: the 6 built-in bilingual prompts with their semantic anchors,
 *      or a JSONL file (lynn_qv_prompts_*);
 *   2. outputs of one model (struct lynn_qv_run): generated in-process from
 *      a model folder (one model loaded at a time), through an
 *      OpenAI-compatible endpoint (client.h), or read from an outputs file
 *      (offline mode, records {"id", "output"});
 *   3. the report: lynn_qv_report compares the runs and builds the
 *      lynn-quant-verify-v2 JSON, lynn_qv_markdown its table.
 * src/cmd/quant_verify.c strings them together and decides the exit code.
 */
#ifndef LYNN_QUANT_VERIFY_H
#define LYNN_QUANT_VERIFY_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "lynn/err.h"

#define LYNN_QV_SCHEMA "lynn-quant-verify-v2"
#define LYNN_QV_DEFAULT_MAX_TOKENS 64
#define LYNN_QV_DEFAULT_MIN_SIMILARITY 0.70

/* ===== prompts ===== */

struct lynn_qv_prompt {
	char *id;        /* the record's "id" (a string, or a number as text), or "p<N>" (1-based line) */
	char *prompt;
	char **anchors;  /* semantic anchors: the output must contain one (may be 0) */
	size_t n_anchors;
};

struct lynn_qv_prompts {
	struct lynn_qv_prompt *items;
	size_t n;
	bool builtin;
};

/* The 6 built-in prompts (3 English, 3 Chinese, one translation between
 * them), each with its anchors. Release with lynn_qv_prompts_release. */
int lynn_qv_prompts_builtin(struct lynn_qv_prompts *out, struct lynn_err *err);
/* A JSONL file: one object per line with "prompt" (string, required),
 * optional "id" (string or integer; default p<line>) and "anchors" (array of
 * strings). Blank lines are skipped. Errors name the file, line and field
 * (-LYNN_EFORMAT), a repeated id, an empty file, or the missing file
 * (-LYNN_ENOTFOUND). */
int lynn_qv_prompts_load(const char *path, struct lynn_qv_prompts *out, struct lynn_err *err);
void lynn_qv_prompts_release(struct lynn_qv_prompts *p);

/* ===== quality (SPEC §6) ===== */

#define LYNN_QV_MIN_CHARS 8             /* code points after trimming */
#define LYNN_QV_MAX_UNEXPECTED_CHARS 2  /* Arabic, Kana, Cyrillic, Hangul, U+FFFD ... */
#define LYNN_QV_MAX_UNEXPECTED_SHARE 0.03 /* ... and at most this share of the characters */
#define LYNN_QV_MIN_READABLE_SHARE 0.65
#define LYNN_QV_NGRAM_MIN 2             /* a 2..8-gram repeated 3 times in a row */
#define LYNN_QV_NGRAM_MAX 8
#define LYNN_QV_NGRAM_REPEATS 3
#define LYNN_QV_CHAR_RUN 6              /* one character 6 times in a row */

enum lynn_qv_check {
	LYNN_QV_TOO_SHORT = 0,
	LYNN_QV_UNEXPECTED_SCRIPT,
	LYNN_QV_UNREADABLE,
	LYNN_QV_REPEATED_NGRAM,
	LYNN_QV_CHAR_RUN_CHECK,
	LYNN_QV_GIBBERISH,
	LYNN_QV_MISSING_ANCHOR,
	LYNN_QV_NONFINITE_LOGITS,
	LYNN_QV_NO_OUTPUT,        /* generation failed or the outputs file lacks the id */
	LYNN_QV_N_CHECKS
};

/* "too_short", "unexpected_script", "unreadable", "repeated_ngram",
 * "char_run", "gibberish", "missing_anchor", "nonfinite_logits", "no_output". */
const char *lynn_qv_check_name(int check);

/* The known gibberish fragments (static storage; docs/lynn-quant-verify.md
 * explains each). Returns the count. */
size_t lynn_qv_gibberish_fragments(const char *const **out);

struct lynn_qv_quality {
	bool pass;
	bool failed[LYNN_QV_N_CHECKS];
	char detail[LYNN_QV_N_CHECKS][96]; /* why each failed check failed ("" otherwise) */
	size_t n_chars;                    /* code points after trimming */
	size_t n_unexpected;
	double readable_share;
	int anchor_hit;                    /* -1 no anchors, 0 none found, 1 found */
};

/* Check one output (UTF-8, any bytes: malformed ones count as U+FFFD).
 * `anchors` may be NULL when n_anchors is 0. `nonfinite`: the runner saw
 * NaN/Inf logits while generating it. Only -LYNN_ENOMEM can fail. */
int lynn_qv_quality_check(const char *text, size_t len, const char *const *anchors,
			  size_t n_anchors, bool nonfinite, struct lynn_qv_quality *out,
			  struct lynn_err *err);
/* {"pass", "reasons": ["check: detail", ...], "n_chars", "unexpected_script_chars",
 * "readable_share", "anchor_hit" (true/false, null without anchors)}. Caller frees. */
cJSON *lynn_qv_quality_json(const struct lynn_qv_quality *q);

/* ===== outputs of one model ===== */

enum lynn_qv_source {
	LYNN_QV_SRC_FOLDER = 0, /* in-process through the runner */
	LYNN_QV_SRC_ENDPOINT,   /* OpenAI-compatible base URL(s) */
	LYNN_QV_SRC_GGUF,       /* a .gguf file, in-process through the runner (model_gguf.c) */
	LYNN_QV_SRC_OUTPUTS,    /* offline: an outputs JSONL file */
};
/* "folder", "endpoint", "gguf", "outputs". */
const char *lynn_qv_source_name(enum lynn_qv_source s);
/* What `path` is: http(s):// → endpoint, *.gguf → gguf, else folder. */
enum lynn_qv_source lynn_qv_source_of(const char *path);

struct lynn_qv_output {
	char *text;       /* NULL: no output for this prompt */
	int n_tokens;     /* generated tokens (-1 when unknown: endpoints, offline) */
	double gen_s;     /* wall time of this generation (prefill + decode) */
	bool nonfinite;   /* NaN/Inf seen in the logits (in-process only) */
};

struct lynn_qv_run {
	char *label;
	char *path;
	enum lynn_qv_source source;
	bool loaded;
	char *load_error;     /* why it did not load (LOAD_FAIL), or NULL */
	int load_code;        /* its -LYNN_E* code (0 when loaded) */
	double load_time_s;   /* -1 when not applicable (offline) */
	struct lynn_qv_output *outs; /* one per prompt, in prompt order */
	size_t n;
};

struct lynn_qv_gen_opts {
	int max_tokens;       /* new tokens per prompt (default 64) */
	int n_threads;        /* in-process; <= 0 all cores */
	int concurrency;      /* requests in flight (endpoints), generated together
			       * (in-process); default 4 */
	/* endpoints (client.h) */
	double timeout_s;     /* default 600 */
	int max_retries;      /* default 5 */
	double backoff_s;     /* default 1 */
	const char *api_key;  /* never logged; NULL for none */
};
void lynn_qv_gen_opts_init(struct lynn_qv_gen_opts *o);

/* Fill `run` (zeroed; label and path are copied) with the outputs of the
 * model at `path` for every prompt. A model that cannot be loaded (missing
 * folder, bad checkpoint, .gguf, unreachable endpoint) is not an error: the
 * run is marked not loaded with load_error set, and 0 is returned, so the
 * other variants still run. A prompt whose generation fails leaves its
 * output NULL. Only -LYNN_ENOMEM (and -LYNN_EINTR) are returned.
 * In-process (a folder or a .gguf, through engine.h, up to o->concurrency
 * prompts generated together): each prompt as one user message with the
 * model's chat template (enable_thinking=false, generation prompt), greedy
 * until an end-of-generation id or max_tokens; the text is the generated
 * ids decoded with special tokens skipped (as OpenAI-compatible servers
 * return it), a leading <think>…</think> block dropped, trimmed. NaN/Inf in
 * any logits row sets the output's nonfinite flag; n_tokens counts the
 * generated ids (the end-of-generation id included), gen_s is prefill +
 * decode time. */
int lynn_qv_run_generate(struct lynn_qv_run *run, const char *label, const char *path,
			 const struct lynn_qv_prompts *p, const struct lynn_qv_gen_opts *o,
			 struct lynn_err *err);

/* Offline: read `path` (JSONL records {"id": string|integer, "output": string})
 * into `run`, matched to the prompts by id (prompts NULL: the reference's
 * own ids become the prompt list: see lynn_qv_prompts_from_outputs). Ids
 * not in the prompts are ignored; prompts without a record get no output.
 * Errors name the file, line and field (-LYNN_EFORMAT), a repeated id, or
 * the missing file (-LYNN_ENOTFOUND). */
int lynn_qv_run_load(struct lynn_qv_run *run, const char *label, const char *path,
		     const struct lynn_qv_prompts *p, struct lynn_err *err);
/* The prompt list of an outputs file: its ids in file order (prompt text
 * ""), each taking the anchors of the prompt with the same id in `known`
 * (may be NULL: no anchors). */
int lynn_qv_prompts_from_outputs(const char *path, const struct lynn_qv_prompts *known,
				 struct lynn_qv_prompts *out, struct lynn_err *err);
void lynn_qv_run_release(struct lynn_qv_run *run);

/* Write a run's outputs as JSONL {"id", "output"} (the offline format),
 * atomically. */
int lynn_qv_run_write(const struct lynn_qv_run *run, const struct lynn_qv_prompts *p,
		      const char *path, struct lynn_err *err);

/* ===== the report ===== */

struct lynn_qv_opts {
	double min_similarity;   /* default 0.70 */
	int chrf_word_order;     /* 0 chrF (default), 2 chrF++ */
	int max_tokens;          /* reported */
	const char *prompts_src; /* "builtin" or the prompts/outputs file, reported */
	const char *mode;        /* "generate" or "offline", reported */
};

/* Compare every variant with the reference over the prompts and build the
 * lynn-quant-verify-v2 report (caller frees). *all_pass says every variant
 * passed. Per variant: label, path, source, load_time_s, verdict (PASS / FAIL
 * / LOAD_FAIL), reasons, n_items, n_coherent, mean_similarity,
 * avg_tokens_per_sec, items[{id, prompt, output, similarity, chrf, rouge_l,
 * tokens, tokens_per_sec, quality}]. */
cJSON *lynn_qv_report(const struct lynn_qv_prompts *p, const struct lynn_qv_run *ref,
		      const struct lynn_qv_run *variants, size_t n_variants,
		      const struct lynn_qv_opts *o, bool *all_pass, struct lynn_err *err);
/* The Markdown summary: one row per variant (verdict, mean similarity,
 * coherent outputs, tokens/s, load time) and the failure reasons. Caller frees. */
char *lynn_qv_markdown(const cJSON *report);

#endif
