/*
 * engine.h - a model ready to answer prompts: the CPU runner (model.h), the
 * folder's tokenizer (tok.h) and chat template (chat.h), and optionally a
 * LoRA adapter applied unmerged. One place turns messages into prompt ids,
 * runs prefill + decode with the sampler, stops at the end-of-generation ids
 * and streams the text: generate, sanity, merge's coherence check, eval and
 * quant-verify all go through it.
 *
 * The tokenizer and template are optional: a folder without them still runs
 * on ids (lynn_engine_tok() is NULL and the text calls fail with
 * -LYNN_ENOTFOUND naming the missing file).
 */
#ifndef LYNN_ENGINE_H
#define LYNN_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lynn/buf.h"
#include "lynn/chat.h"
#include "lynn/err.h"
#include "lynn/model.h"
#include "lynn/sample.h"
#include "lynn/tok.h"

struct lynn_engine;

struct lynn_engine_opts {
	int n_threads;         /* <= 0: all cores */
	const char *adapter;   /* PEFT adapter folder or NULL */
	enum lynn_device device; /* AUTO (0): lynn_model_opts */
};

/* Open `model_dir` (see lynn_model_open) with its tokenizer and template when
 * present, and the adapter when given (enabled). Caller frees with
 * lynn_engine_close. opts may be NULL. */
struct lynn_engine *lynn_engine_open(const char *model_dir, const struct lynn_engine_opts *opts,
				     struct lynn_err *err);
void lynn_engine_close(struct lynn_engine *e);

/* Borrowed parts, valid until lynn_engine_close. tok/template may be NULL. */
struct lynn_model *lynn_engine_model(struct lynn_engine *e);
const struct lynn_tok *lynn_engine_tok(const struct lynn_engine *e);
const struct lynn_chat_template *lynn_engine_template(const struct lynn_engine *e);
bool lynn_engine_has_adapter(const struct lynn_engine *e);
/* Turn the adapter on (candidate) or off (base). No-op without an adapter;
 * with one, the prefix cache is emptied. */
void lynn_engine_adapter_enable(struct lynn_engine *e, bool on);

/* The prefix cache (off until set): up to max_bytes of sequence states
 * (host or device memory, where the model runs), the least recently used
 * going first. A gen that finishes leaves its state there, as that of its
 * prompt and the tokens it generated but the last, and one that asks
 * (lynn_gen_opts.cache_at) a copy of the state part way into its prompt.
 * lynn_gen_create starts a prompt from the longest kept state whose tokens
 * begin it (all but its last token at most): a hybrid model's DeltaNet
 * state exists only where a piece of prompt ended, so only whole kept
 * prefixes count. 0 turns it off and frees what is kept. */
void lynn_engine_set_cache(struct lynn_engine *e, size_t max_bytes);

/* Render `in` with the chat template and append the prompt's ids to *ids
 * (special tokens in the rendered text are matched whole). When `text` is
 * non-NULL the rendered prompt is appended to it too. */
int lynn_engine_encode_chat(struct lynn_engine *e, const struct lynn_chat_input *in,
			    struct lynn_tok_ids *ids, struct lynn_buf *text, struct lynn_err *err);
/* One user message, generation prompt added, thinking on or off. */
int lynn_engine_encode_prompt(struct lynn_engine *e, const char *user_text, bool think,
			      struct lynn_tok_ids *ids, struct lynn_err *err);
/* Raw text, no template. */
int lynn_engine_encode_text(struct lynn_engine *e, const char *text, struct lynn_tok_ids *ids,
			    struct lynn_err *err);

#define LYNN_CACHE_POINTS 3
struct lynn_gen_opts {
	int max_tokens;
	struct lynn_sample_params sample;   /* lynn_sample_params_init: greedy */
	/* Stop strings (may be NULL): generation ends where the text first
	 * contains one; it and what follows are not part of the text, and text
	 * that may be the start of one is held back from on_text until it is
	 * known not to be. */
	const char *const *stop;
	int n_stop;
	bool ignore_eos;                    /* run on past end-of-generation ids */
	bool skip_special;                  /* the text leaves out special tokens (tokenizer.json
					     * "special": true; Qwen's <think> and <tool_call> are not) */
	/* Record each generated token's log-probability under the model (the
	 * log-softmax of its raw logits, before temperature and the other
	 * sampling settings) and the top_logprobs (0..LYNN_MAX_TOP_LOGPROBS)
	 * most likely ids at that step. */
	bool logprobs;
	int top_logprobs;
	/* With the prefix cache on: also keep the states after these numbers
	 * of prompt tokens (0 or >= the prompt's length: none), e.g. where a
	 * chat prompt's system message ends, which other conversations begin
	 * with too, where its generation prompt starts, which the
	 * conversation's next request begins with, and at its last token, for
	 * twins of the request (serve's n > 1 choices). */
	size_t cache_at[LYNN_CACHE_POINTS];
	/* Called with each piece of text that is final (tokenizer present:
	 * complete UTF-8 characters, stop strings held back) and each id;
	 * either may be NULL. */
	void (*on_text)(void *ud, const char *text, size_t len);
	void (*on_token)(void *ud, int32_t id);
	void *ud;
};

#define LYNN_MAX_TOP_LOGPROBS 20
struct lynn_gen_logprob {
	float logprob;                              /* of the generated id */
	int n_top;
	int32_t top_ids[LYNN_MAX_TOP_LOGPROBS];     /* most likely first, lower id on ties */
	float top_logprobs[LYNN_MAX_TOP_LOGPROBS];
};

enum lynn_gen_finish {
	LYNN_GEN_RUNNING = 0,
	LYNN_GEN_EOS,      /* an end-of-generation id */
	LYNN_GEN_STOP,     /* a stop string */
	LYNN_GEN_LENGTH,   /* max_tokens */
};

struct lynn_gen_result {
	struct lynn_tok_ids ids;   /* generated ids (the eos id included if hit) */
	struct lynn_gen_logprob *logprobs; /* one per id when opts.logprobs, else NULL */
	struct lynn_buf text;      /* decoded text (special tokens kept unless opts.skip_special; the
				    * final end-of-generation token and any stop string left out),
				    * empty without a tokenizer */
	size_t n_prompt;
	size_t n_cached;           /* prompt tokens whose state came from the prefix cache */
	enum lynn_gen_finish finish;
	bool nonfinite;            /* some logits were NaN or Inf */
	double t_prefill_s;        /* prompt processing, until the first token's logits */
	double t_decode_s;         /* the rest */
};
void lynn_gen_result_release(struct lynn_gen_result *r);
/* The generated ids that make the text: all but a final end-of-generation
 * id. */
static inline size_t lynn_gen_n_text_ids(const struct lynn_gen_result *r)
{
	return r->ids.n - (r->finish == LYNN_GEN_EOS && r->ids.n ? 1 : 0);
}

/* Generate from `prompt` (n ids) on a fresh sequence. End-of-generation ids:
 * the model's eos list (generation_config.json) and the tokenizer's. Caller
 * releases *r (also after an error). This is lynn_gen_create +
 * lynn_engine_step until done. */
int lynn_engine_generate(struct lynn_engine *e, const int32_t *prompt, size_t n,
			 const struct lynn_gen_opts *opts, struct lynn_gen_result *r,
			 struct lynn_err *err);

/* ===== generation one step at a time, many sequences in one batch =====
 * The decode loop of lynn_engine_generate and of `lynn serve`'s continuous
 * batching. A lynn_gen is one sequence being generated (its decode state,
 * sampler, text and stop state); lynn_engine_step advances a set of them by
 * one forward pass: each one past its prompt feeds its last token, the others
 * feed the next piece of their prompt (at most max_prefill prompt tokens in
 * all, first come first served), and every sequence whose logits came back
 * samples its next token. The opts (stop strings included) are borrowed until
 * lynn_gen_free. */
struct lynn_gen;
/* -LYNN_EINVAL for an empty prompt or an id outside the vocabulary. */
struct lynn_gen *lynn_gen_create(struct lynn_engine *e, const int32_t *prompt, size_t n,
				 const struct lynn_gen_opts *opts, struct lynn_err *err);
void lynn_gen_free(struct lynn_gen *g);
/* LYNN_GEN_RUNNING until the generation ended. */
enum lynn_gen_finish lynn_gen_finished(const struct lynn_gen *g);
/* The result so far (borrowed; the text is complete once finished). */
const struct lynn_gen_result *lynn_gen_result(const struct lynn_gen *g);
/* Prompt tokens not yet through the model. */
size_t lynn_gen_prompt_left(const struct lynn_gen *g);
/* Move the result out (the gen keeps an empty one). */
void lynn_gen_take_result(struct lynn_gen *g, struct lynn_gen_result *r);
/* One forward pass over the unfinished gens of `g` (n of them, distinct;
 * finished ones are skipped). max_prefill <= 0: no limit. On an error (out
 * of memory) every gen of the step is left as it was before the pass's
 * sampling, and should be dropped. */
int lynn_engine_step(struct lynn_engine *e, struct lynn_gen *const *g, size_t n,
		     int64_t max_prefill, struct lynn_err *err);

/* Generate n requests, up to `batch` of them together (continuous
 * batching: a finished one's place goes to the next request at once).
 * start(ud, i, ids, go, err) gives request i's prompt ids (appended to the
 * empty *ids) and options (*go, zeroed before; it lives until request i is
 * done): 0 to run it, 1 to skip it, negative to stop. done(ud, i, r, gerr)
 * gets each request as it finishes (r borrowed, released after), or r NULL
 * with gerr saying why lynn_gen_create refused it: 0 to go on, nonzero to
 * stop. A failed step stops everything (its error returned). */
typedef int (*lynn_gen_start_fn)(void *ud, size_t i, struct lynn_tok_ids *ids, struct lynn_gen_opts *go,
				 struct lynn_err *err);
typedef int (*lynn_gen_done_fn)(void *ud, size_t i, const struct lynn_gen_result *r,
				const struct lynn_err *gerr, struct lynn_err *err);
int lynn_engine_generate_many(struct lynn_engine *e, size_t n, int batch, lynn_gen_start_fn start,
			      lynn_gen_done_fn done, void *ud, struct lynn_err *err);

/* The 5 built-in bilingual probe prompts of `lynn sanity` (SPEC §4); the
 * first two are merge's coherence probes. tests/tools/gen_fixtures.py holds
 * the same strings. */
#define LYNN_N_PROBE_PROMPTS 5
extern const char *const lynn_probe_prompts[LYNN_N_PROBE_PROMPTS];

/* Last-position logits of `prompt` (n_vocab floats into `logits`). */
int lynn_engine_last_logits(struct lynn_engine *e, const int32_t *prompt, size_t n, float *logits,
			    struct lynn_err *err);

#endif
