/*
 * eval.h - the four-gate ship verdict and the daily-mix comparison (SPEC §5).
 *
 * Three steps, kept apart so each can be tested alone:
 *   1. prompt sets: lynn_eval_set_load reads the JSONL sets (style, v8, v9);
 *   2. outputs: lynn_eval_generate fills, for one model source, the outputs
 *      of a set through the output cache (cache.h) and a generator (an
 *      endpoint client, or in-process);
 *   3. verdict: lynn_eval_report computes gates g1..g3, thresholds, the
 *      verdict and the lynn-4gate-v1 report from the outputs (the graders of
 *      score.h), lynn_eval_markdown the summary beside it.
 * src/cmd/eval.c strings them together and decides the exit code.
 */
#ifndef LYNN_EVAL_H
#define LYNN_EVAL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "lynn/cache.h"
#include "lynn/client.h"
#include "lynn/err.h"
#include "lynn/progress.h"

#define LYNN_EVAL_SCHEMA "lynn-4gate-v1"
#define LYNN_DAILY_SCHEMA "lynn-daily-mix-v1"

/* The thresholds of SPEC §5 (fixed; reported under "thresholds"). */
#define LYNN_EVAL_MIN_NET_SCORE 10.0
#define LYNN_EVAL_MAX_REGRESSION_PP (-5.0)
#define LYNN_EVAL_MIN_AVG_STYLE 4.0
#define LYNN_EVAL_MIN_CLICHE_FREE_PCT 90.0
#define LYNN_EVAL_MIN_REFERENCE_WIN_DELTA 0.03

/* ===== prompt sets ===== */

enum lynn_eval_kind {
	LYNN_EVAL_STYLE = 0, /* g1/g3: id, category, prompt, reference_output */
	LYNN_EVAL_V8,        /* g2: tools, expected{tool_name, param_hints} */
	LYNN_EVAL_V9,        /* g2: gold_answer, verifier */
};

struct lynn_eval_item {
	char *id;        /* the record's id, or NULL when it has none */
	char *category;  /* "" when absent */
	char *prompt;    /* first present of prompt, user, problem ("" if none) */
	char *reference; /* reference_output, or NULL */
	cJSON *tools;    /* v8 tools array, or NULL */
	char *tool_name; /* v8 expected.tool_name ("" if absent) */
	cJSON *param_hints; /* v8 expected.param_hints, or NULL */
	char *gold;      /* v9 gold_answer as text (numbers as Python str()), or NULL */
	char *verifier;  /* v9 verifier ("string_match" when absent) */
	char *answer;    /* v9 plain answer (daily-mix), or NULL */
	int max_tokens;  /* SPEC §5: style 1024 (long/research) or 384; v8 256; v9 512 */
};

struct lynn_eval_set {
	enum lynn_eval_kind kind;
	struct lynn_eval_item *items;
	size_t n;
};

/* Append the records of the JSONL file `path` to `set` (set->kind decides
 * the fields read and the max tokens). Blank lines are skipped. Errors name
 * the file, line and field (-LYNN_EFORMAT), or the missing file
 * (-LYNN_ENOTFOUND). */
int lynn_eval_set_load(struct lynn_eval_set *set, const char *path, struct lynn_err *err);
void lynn_eval_set_release(struct lynn_eval_set *set);

/* ===== outputs ===== */

/* One output of one model source. */
struct lynn_eval_output {
	char *text;       /* stripped like Python str.strip() */
	char *reasoning;  /* "" unless thinking was on */
	double latency_s;
	bool cached;      /* came from the cache (resume) */
};

/* A generator: runs requests and calls `done` per finished output (the
 * client's contract, client.h). An endpoint source uses lynn_client_run. */
typedef int (*lynn_eval_gen_fn)(void *gen_ud, const struct lynn_chat_req *reqs, size_t n,
				lynn_client_done_fn done, void *done_ud, struct lynn_err *err);

struct lynn_eval_source {
	const char *model;      /* identity in cache keys: path or URL + model id */
	const char *adapter;    /* adapter path / served LoRA name, or NULL */
	const char *req_model;  /* request "model" override (served LoRA), or NULL */
	bool think;
	lynn_eval_gen_fn gen;
	void *gen_ud;
};

/* One generation job: every item of `set` answered by `src` into
 * outputs[0 .. set->n) (zeroed slots; release with lynn_eval_outputs_release).
 * `label` names the step in progress logs ("g1 style (candidate)"). */
struct lynn_eval_job {
	const struct lynn_eval_source *src;
	const struct lynn_eval_set *set;
	struct lynn_eval_output *outputs;
	const char *label;
	size_t n_gen, n_cached; /* out: generated now / taken from the cache */
};

/* Fill the outputs of all jobs: from the cache when a record with the same
 * key exists, else generated and appended to the cache the moment it
 * arrives. Jobs whose sources share a generator (same gen and gen_ud) go
 * into one request queue, so `concurrency` requests stay in flight across
 * sets and sides; requests carry each source's req_model. */
int lynn_eval_generate(struct lynn_eval_job *jobs, size_t n_jobs, struct lynn_cache *cache,
		       bool progress_bar, struct lynn_err *err);
void lynn_eval_outputs_release(struct lynn_eval_output *outputs, size_t n);

/* In-process generation (src/eval/inproc.c): a lynn_eval_gen_fn whose
 * gen_ud is a struct lynn_eval_engine. Requests run greedy, up to `batch`
 * generated together (continuous batching; the answers come in the order
 * they finish); the requests with `model` set run with the engine's adapter
 * on (the candidate), then those without it with the adapter off (the
 * base). The answer is the decode of the generated ids with special tokens
 * skipped, as the toolkit decodes. */
struct lynn_engine;
struct lynn_eval_engine {
	struct lynn_engine *engine; /* borrowed */
	int batch;                  /* requests generated together (<= 1: one at a time) */
	bool think;
	int n_nonfinite;            /* answers whose logits had NaN/Inf */
	bool last_nonfinite;        /* the answer just handed to `done` */
};
int lynn_eval_engine_gen(void *ud, const struct lynn_chat_req *reqs, size_t n,
			 lynn_client_done_fn done, void *done_ud, struct lynn_err *err);

/* Python str.strip() in place (Unicode whitespace at both ends). */
void lynn_eval_strip(char *s);

/* ===== the four gates ===== */

struct lynn_eval_inputs {
	const char *runner, *model_tag, *base, *adapter; /* report metadata (adapter may be NULL) */
	const struct lynn_eval_set *style, *v8, *v9;
	/* outputs, one per item; cand = model (+adapter), base = baseline */
	const struct lynn_eval_output *style_cand, *style_base;
	const struct lynn_eval_output *v8_cand, *v8_base;
	const struct lynn_eval_output *v9_cand, *v9_base;
	const cJSON *sanity; /* lynn_eval_sanity() */
	double runtime_s;
	const char *const *cliches; /* NULL: the built-in list */
	size_t n_cliches;
};

/* The sanity object: from a lynn-diff-sanity-v1 file (`json_path`), or the
 * --sanity-pass flag, else implicit false (the toolkit's resolve_sanity). A
 * missing or unreadable file is not an error: pass false with the source
 * "json_missing" / "json_parse_error:…". Caller frees. */
cJSON *lynn_eval_sanity(const char *json_path, bool flag_pass);

/* Compute gates, deltas, verdict and hard_fail_reasons into a new
 * lynn-4gate-v1 report (caller frees). *net_win says the verdict. */
cJSON *lynn_eval_report(const struct lynn_eval_inputs *in, bool *net_win, struct lynn_err *err);

/* The Markdown summary of a report (verdict, thresholds, gates, per-item
 * table). Caller frees. */
char *lynn_eval_markdown(const cJSON *report);

/* Python's repr() of a float ("4.0", "85.71", "-10.0"), as the toolkit
 * writes numbers into hard_fail_reasons. */
void lynn_eval_pyfloat(double x, char *buf, size_t cap);

/* ===== daily-mix comparison (--suite) ===== */

/* Grade one model's v8 and v9 outputs for the daily-mix table: v8 by the
 * tool-call scorer, v9 by the normalized gold grader (score.h). Returns the
 * per-model object {label, model, suites{v8|v9:{n, pass, pass_pct}}, total,
 * items}; suites not loaded (set NULL) are left out. */
cJSON *lynn_eval_daily_model(const char *label, const char *model, const struct lynn_eval_set *v8,
			     const struct lynn_eval_output *v8_out, const struct lynn_eval_set *v9,
			     const struct lynn_eval_output *v9_out, struct lynn_err *err);
/* The Markdown table of a lynn-daily-mix-v1 report (one column per model). */
char *lynn_eval_daily_markdown(const cJSON *report);

#endif
