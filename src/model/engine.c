/* engine.c - model + tokenizer + chat template + adapter behind one
 * generate call (include/lynn/engine.h). */
#include "lynn/engine.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/fs.h"
#include "lynn/gguf.h"
#include "lynn/util.h"
#include "lynn/lora.h"
#include "lynn/progress.h"
#include "model_int.h"

const char *const lynn_probe_prompts[LYNN_N_PROBE_PROMPTS] = {
	"Explain in two sentences why the sky is blue.",
	"用两句话解释为什么天空是蓝色的。",
	"Write a Python function that returns the n-th Fibonacci number.",
	"请列出三个提高睡眠质量的建议。",
	"What is 17 times 23? Answer with the number only.",
};

/* A kept sequence state (the prefix cache) and the tokens it went through */
struct kept {
	int32_t *ids;
	size_t n;
	struct lynn_seq *seq;
	size_t bytes;
	uint64_t used; /* the cache's clock at its last use */
};

struct lynn_engine {
	char *dir;
	struct lynn_model *model;
	struct lynn_tok *tok;
	struct lynn_chat_template *tmpl;
	struct lynn_lora *lora;
	struct {
		struct kept *v;
		int n, cap;
		size_t bytes, max; /* max 0: off */
		uint64_t clock;
	} cache;
};

/* A .gguf file's tokenizer (tokenizer.ggml.*, when it has one: converters
 * may write model "none") and chat template (tokenizer.chat_template). */
static int gguf_text(struct lynn_engine *e, const char *path, struct lynn_err *err)
{
	struct lynn_gguf *g = lynn_gguf_open(path, err);
	const char *s = NULL;
	size_t n = 0;
	int rc;
	if (!g)
		return err && err->code ? err->code : -LYNN_EFORMAT;
	if ((rc = lynn_gguf_get_str(g, "tokenizer.ggml.model", false, &s, &n, err)))
		goto out;
	if (!s || (n == 4 && !memcmp(s, "none", 4)))
		goto out;
	if (!(e->tok = lynn_tok_load(path, err))) {
		rc = err && err->code ? err->code : -LYNN_EFORMAT;
		goto out;
	}
	s = NULL;
	if ((rc = lynn_gguf_get_str(g, "tokenizer.chat_template", false, &s, &n, err)) || !s)
		goto out;
	if (!(e->tmpl = lynn_chat_template_from_string(path, s, n, NULL, NULL, err)))
		rc = err && err->code ? err->code : -LYNN_EFORMAT;
out:
	lynn_gguf_close(g);
	return rc;
}

struct lynn_engine *lynn_engine_open(const char *model_dir, const struct lynn_engine_opts *opts,
				     struct lynn_err *err)
{
	struct lynn_engine *e = calloc(1, sizeof *e);
	struct lynn_model_opts mo = { .n_threads = opts ? opts->n_threads : 0,
				      .device = opts ? opts->device : LYNN_DEVICE_AUTO };
	char *tj = NULL;

	if (!e || !(e->dir = strdup(model_dir))) {
		lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
		goto fail;
	}
	e->model = lynn_model_open(model_dir, &mo, err);
	if (!e->model)
		goto fail;
	if (opts && opts->adapter && !(e->lora = lynn_model_lora_load(e->model, opts->adapter, err)))
		goto fail;
	/* tokenizer and template are optional (ids-only use) */
	if (lynn_str_ends_with(model_dir, ".gguf") || lynn_str_ends_with(model_dir, ".GGUF")) {
		if (gguf_text(e, model_dir, err))
			goto fail;
		return e;
	}
	tj = lynn_path_join(model_dir, "tokenizer.json");
	if (tj && lynn_file_exists(tj)) {
		e->tok = lynn_tok_load(model_dir, err);
		if (!e->tok)
			goto fail;
		e->tmpl = lynn_chat_template_load(model_dir, err);
		if (!e->tmpl && err && err->code != -LYNN_ENOTFOUND)
			goto fail;
		lynn_err_clear(err);
	}
	free(tj);
	return e;
fail:
	free(tj);
	lynn_engine_close(e);
	return NULL;
}

void lynn_engine_close(struct lynn_engine *e)
{
	if (!e)
		return;
	lynn_engine_set_cache(e, 0);
	free(e->cache.v);
	lynn_model_close(e->model);
	lynn_lora_free(e->lora); /* after the model: the model borrows its tensors */
	lynn_tok_free(e->tok);
	lynn_chat_template_free(e->tmpl);
	free(e->dir);
	free(e);
}

struct lynn_model *lynn_engine_model(struct lynn_engine *e) { return e->model; }
const struct lynn_tok *lynn_engine_tok(const struct lynn_engine *e) { return e->tok; }
const struct lynn_chat_template *lynn_engine_template(const struct lynn_engine *e) { return e->tmpl; }
bool lynn_engine_has_adapter(const struct lynn_engine *e) { return e->lora != NULL; }

void lynn_engine_adapter_enable(struct lynn_engine *e, bool on)
{
	if (!e->lora)
		return;
	const size_t max = e->cache.max; /* states of the other model go */
	lynn_engine_set_cache(e, 0);
	lynn_model_lora_enable(e->model, on);
	lynn_engine_set_cache(e, max);
}

/* ===== the prefix cache ===== */

static void cache_drop(struct lynn_engine *e, int i)
{
	struct kept *k = &e->cache.v[i];
	e->cache.bytes -= k->bytes;
	lynn_seq_free(k->seq);
	free(k->ids);
	*k = e->cache.v[--e->cache.n];
}

/* the least recently used states go until `need` more bytes fit */
static void cache_fit(struct lynn_engine *e, size_t need)
{
	while (e->cache.n && e->cache.bytes + need > e->cache.max) {
		int lru = 0;
		for (int i = 1; i < e->cache.n; i++)
			if (e->cache.v[i].used < e->cache.v[lru].used)
				lru = i;
		cache_drop(e, lru);
	}
}

void lynn_engine_set_cache(struct lynn_engine *e, size_t max_bytes)
{
	e->cache.max = max_bytes;
	cache_fit(e, 0);
}

/* Whether the state after ids[0..n) is kept (then it counts as used) */
static bool cache_has(struct lynn_engine *e, const int32_t *ids, size_t n)
{
	for (int i = 0; i < e->cache.n; i++) {
		struct kept *k = &e->cache.v[i];
		if (k->n == n && !memcmp(k->ids, ids, n * sizeof *ids)) {
			k->used = ++e->cache.clock;
			return true;
		}
	}
	return false;
}

/* Keep `seq` (taken: kept or freed) as the state after ids[0..n). Nothing
 * is kept that does not fit the budget or is kept already; out of memory,
 * the cache keeps less. */
static void cache_put(struct lynn_engine *e, const int32_t *ids, size_t n, struct lynn_seq *seq)
{
	const size_t bytes = lynn_seq_bytes(seq) + n * sizeof *ids;
	int32_t *copy = NULL;
	if (!n || bytes > e->cache.max || cache_has(e, ids, n))
		goto drop;
	cache_fit(e, bytes);
	if (e->cache.n == e->cache.cap) {
		int cap = e->cache.cap ? 2 * e->cache.cap : 8;
		struct kept *v = realloc(e->cache.v, (size_t)cap * sizeof *v);
		if (!v)
			goto drop;
		e->cache.v = v;
		e->cache.cap = cap;
	}
	if (!(copy = malloc(n * sizeof *copy)))
		goto drop;
	memcpy(copy, ids, n * sizeof *ids);
	e->cache.v[e->cache.n++] = (struct kept){ copy, n, seq, bytes, ++e->cache.clock };
	e->cache.bytes += bytes;
	return;
drop:
	lynn_seq_free(seq);
}

/* The longest kept state whose ids begin `prompt` and leave at least its
 * last token to feed (the first pick needs its logits). */
static const struct kept *cache_find(struct lynn_engine *e, const int32_t *prompt, size_t n)
{
	struct kept *best = NULL;
	for (int i = 0; i < e->cache.n; i++) {
		struct kept *k = &e->cache.v[i];
		if (k->n < n && (!best || k->n > best->n) && !memcmp(k->ids, prompt, k->n * sizeof *prompt))
			best = k;
	}
	if (best)
		best->used = ++e->cache.clock;
	return best;
}

/* A copy of `seq` kept as the state after ids[0..n) */
static void cache_copy(struct lynn_engine *e, const int32_t *ids, size_t n, const struct lynn_seq *seq)
{
	struct lynn_err err = { 0 };
	if (cache_has(e, ids, n))
		return;
	struct lynn_seq *c = lynn_seq_create(e->model, &err);
	if (c && lynn_seq_copy(c, seq, true, &err)) {
		lynn_seq_free(c);
		c = NULL;
	}
	if (c)
		cache_put(e, ids, n, c);
}

static int need_tok(const struct lynn_engine *e, struct lynn_err *err)
{
	if (!e->tok)
		return lynn_errf(err, -LYNN_ENOTFOUND,
				 "engine: '%s' has no tokenizer.json: text needs the tokenizer "
				 "(use token ids instead)", e->dir);
	return 0;
}

int lynn_engine_encode_text(struct lynn_engine *e, const char *text, struct lynn_tok_ids *ids,
			    struct lynn_err *err)
{
	int rc = need_tok(e, err);
	if (rc)
		return rc;
	return lynn_tok_encode(e->tok, text, strlen(text), 0, ids, err);
}

int lynn_engine_encode_chat(struct lynn_engine *e, const struct lynn_chat_input *in,
			    struct lynn_tok_ids *ids, struct lynn_buf *text, struct lynn_err *err)
{
	char *prompt = NULL;
	size_t len = 0;
	int rc = need_tok(e, err);

	if (rc)
		return rc;
	if (!e->tmpl)
		return lynn_errf(err, -LYNN_ENOTFOUND,
				 "engine: '%s' has no chat template (chat_template.jinja or "
				 "tokenizer_config.json's chat_template); use raw text", e->dir);
	if ((rc = lynn_chat_render(e->tmpl, in, &prompt, &len, err)))
		return rc;
	rc = lynn_tok_encode(e->tok, prompt, len, 0, ids, err);
	if (!rc && text && lynn_buf_append(text, prompt, len))
		rc = lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
	free(prompt);
	return rc;
}

int lynn_engine_encode_prompt(struct lynn_engine *e, const char *user_text, bool think,
			      struct lynn_tok_ids *ids, struct lynn_err *err)
{
	cJSON *msgs = cJSON_CreateArray(), *m = cJSON_CreateObject();
	struct lynn_chat_input in = { .add_generation_prompt = true, .enable_thinking = think };
	char *js = NULL;
	int rc;

	if (!msgs || !m) {
		cJSON_Delete(msgs);
		cJSON_Delete(m);
		return lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
	}
	cJSON_AddItemToArray(msgs, m);
	cJSON_AddStringToObject(m, "role", "user");
	cJSON_AddStringToObject(m, "content", user_text);
	js = cJSON_PrintUnformatted(msgs);
	cJSON_Delete(msgs);
	if (!js)
		return lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
	in.messages_json = js;
	rc = lynn_engine_encode_chat(e, &in, ids, NULL, err);
	cJSON_free(js);
	return rc;
}

void lynn_gen_result_release(struct lynn_gen_result *r)
{
	free(r->logprobs);
	r->logprobs = NULL;
	lynn_tok_ids_release(&r->ids);
	lynn_buf_release(&r->text);
}

static bool is_eog(const struct lynn_engine *e, int32_t id)
{
	const struct lynn_config *c = lynn_model_config(e->model);
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos_ids[i] == id)
			return true;
	return e->tok && lynn_tok_is_eog(e->tok, id);
}

/* branch-free, so the scan vectorises: one pass over the vocabulary a token */
static bool all_finite(const float *v, int n)
{
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad |= !(fabsf(v[i]) <= FLT_MAX);
	return !bad;
}

static int push_id(struct lynn_tok_ids *v, int32_t id)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? 2 * v->cap : 64;
		int32_t *p = realloc(v->ids, cap * sizeof *p);
		if (!p)
			return -LYNN_ENOMEM;
		v->ids = p;
		v->cap = cap;
	}
	v->ids[v->n++] = id;
	return 0;
}

/* ===== one sequence being generated ===== */

struct lynn_gen {
	struct lynn_engine *e;
	struct lynn_gen_opts opts;
	int32_t *prompt;
	size_t n_prompt, n_fed;   /* prompt ids, and how many went through the model */
	struct lynn_seq *seq;
	struct lynn_sampler *smp;
	struct lynn_tok_stream ts;
	size_t emitted;           /* bytes of r.text given to on_text */
	size_t stop_max;          /* longest stop string */
	double t_start, t_first;
	struct lynn_gen_result r;
};

struct lynn_gen *lynn_gen_create(struct lynn_engine *e, const int32_t *prompt, size_t n,
				 const struct lynn_gen_opts *opts, struct lynn_err *err)
{
	const int n_vocab = lynn_model_n_vocab(e->model);
	struct lynn_gen *g;
	if (n == 0) {
		lynn_errf(err, -LYNN_EINVAL, "engine: empty prompt");
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (prompt[i] < 0 || prompt[i] >= n_vocab) {
			lynn_errf(err, -LYNN_EINVAL, "engine: prompt token %d at position %zu outside the "
				  "vocabulary (0..%d)", prompt[i], i, n_vocab - 1);
			return NULL;
		}
	if (!(g = calloc(1, sizeof *g)) || !(g->prompt = malloc(n * sizeof *g->prompt))) {
		free(g);
		lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
		return NULL;
	}
	memcpy(g->prompt, prompt, n * sizeof *prompt);
	g->e = e;
	g->opts = *opts;
	g->n_prompt = g->r.n_prompt = n;
	for (int i = 0; i < opts->n_stop; i++)
		g->stop_max = LYNN_MAX(g->stop_max, strlen(opts->stop[i]));
	if (e->tok)
		lynn_tok_stream_init(&g->ts, e->tok, opts->skip_special ? LYNN_TOK_F_SKIP_SPECIAL : 0);
	g->t_start = lynn_now();
	if (opts->max_tokens <= 0) {
		g->r.finish = LYNN_GEN_LENGTH;
		return g;
	}
	if (!(g->seq = lynn_seq_create(e->model, err)) ||
	    !(g->smp = lynn_sampler_create(&opts->sample, n_vocab, err)) ||
	    lynn_sampler_seen(g->smp, prompt, n, false, err)) {
		lynn_gen_free(g);
		return NULL;
	}
	/* a kept state the prompt begins with: only the rest goes through the
	 * model (a copy that fails leaves the whole prompt to feed) */
	const struct kept *k = e->cache.max ? cache_find(e, prompt, n) : NULL;
	struct lynn_err cerr = { 0 };
	if (k && !lynn_seq_copy(g->seq, k->seq, false, &cerr))
		g->n_fed = g->r.n_cached = k->n;
	else if (k)
		lynn_seq_reset(g->seq);
	return g;
}

void lynn_gen_free(struct lynn_gen *g)
{
	if (!g)
		return;
	lynn_gen_result_release(&g->r);
	lynn_sampler_free(g->smp);
	lynn_seq_free(g->seq);
	free(g->prompt);
	free(g);
}

enum lynn_gen_finish lynn_gen_finished(const struct lynn_gen *g) { return g->r.finish; }
const struct lynn_gen_result *lynn_gen_result(const struct lynn_gen *g) { return &g->r; }
size_t lynn_gen_prompt_left(const struct lynn_gen *g) { return g->n_prompt - g->n_fed; }

void lynn_gen_take_result(struct lynn_gen *g, struct lynn_gen_result *r)
{
	*r = g->r;
	g->r.logprobs = NULL;
	memset(&g->r.ids, 0, sizeof g->r.ids);
	memset(&g->r.text, 0, sizeof g->r.text);
}

/* Give on_text what is final: up to a stop string (which ends the
 * generation), else all but a tail that may begin one; everything once
 * `end`. */
static void gen_emit(struct lynn_gen *g, bool end)
{
	struct lynn_buf *t = &g->r.text;
	size_t upto = t->len;
	if (g->opts.n_stop && t->len) {
		size_t from = g->emitted > g->stop_max ? g->emitted - g->stop_max : 0;
		size_t hit = SIZE_MAX;
		for (int i = 0; i < g->opts.n_stop; i++) {
			const char *p = memmem(t->data + from, t->len - from, g->opts.stop[i],
					       strlen(g->opts.stop[i]));
			if (p && (size_t)(p - t->data) < hit)
				hit = (size_t)(p - t->data);
		}
		if (hit != SIZE_MAX) {
			t->len = upto = hit;
			g->r.finish = LYNN_GEN_STOP;
		} else if (!end) {
			/* the longest tail that is a proper prefix of a stop string */
			for (int i = 0; i < g->opts.n_stop; i++) {
				size_t sl = strlen(g->opts.stop[i]);
				for (size_t k = LYNN_MIN(sl - 1, t->len); k > 0; k--)
					if (t->len - k >= g->emitted && t->len - k < upto &&
					    !memcmp(t->data + t->len - k, g->opts.stop[i], k)) {
						upto = t->len - k;
						break;
					}
			}
		}
	}
	if (upto > g->emitted && g->opts.on_text)
		g->opts.on_text(g->opts.ud, t->data + g->emitted, upto - g->emitted);
	if (upto > g->emitted)
		g->emitted = upto;
}

static void gen_end(struct lynn_gen *g, enum lynn_gen_finish why, double now)
{
	if (g->e->tok)
		lynn_tok_stream_flush(&g->ts, &g->r.text);
	g->r.finish = why;
	gen_emit(g, true);
	g->r.t_decode_s = now - g->t_first;
}

/* The log-softmax of `logits` at `id`, and the k most likely ids (k <=
 * LYNN_MAX_TOP_LOGPROBS; lower id first on ties), in double. */
static void logprob_of(const float *logits, int n, int32_t id, int k, struct lynn_gen_logprob *out)
{
	const double lse = lynn_log_sum_exp(logits, n);
	out->logprob = (float)((double)logits[id] - lse);
	out->n_top = 0;
	for (int i = 0; i < n && k > 0; i++) { /* insertion into the sorted top k */
		int j = out->n_top;
		if (j == k && logits[i] <= logits[out->top_ids[k - 1]])
			continue;
		if (j < k)
			out->n_top++;
		else
			j = k - 1;
		while (j > 0 && logits[out->top_ids[j - 1]] < logits[i]) {
			out->top_ids[j] = out->top_ids[j - 1];
			j--;
		}
		out->top_ids[j] = i;
	}
	for (int j = 0; j < out->n_top; j++)
		out->top_logprobs[j] = (float)((double)logits[out->top_ids[j]] - lse);
}

/* One wanted row of a pass: its gen, its logits (NULL where the device
 * picked), and what the pick found. */
struct pick {
	struct lynn_gen *g;
	const float *logits;
	int n_vocab;
	int32_t id;
	bool finite;
};

/* Picks run in parallel over a step's rows: each gen has its own sampler
 * (its RNG and candidate buffer), and a pick touches nothing else. */
static void pick_row(void *ud, int64_t i, int tid)
{
	struct pick *p = (struct pick *)ud + i;
	(void)tid;
	p->finite = all_finite(p->logits, p->n_vocab);
	p->id = lynn_sampler_sample(p->g->smp, p->logits);
}

/* The wanted rows' gens, for need_logits */
struct need_ctx {
	struct lynn_gen *const *wg;
	const struct lynn_row_picks *pk;
};

/* lynn_row_picks.need_logits: whether row w's sampler cannot pick from the
 * device's candidates once it edits them, and needs the row's logits */
static bool need_logits(void *ud, int64_t w)
{
	const struct need_ctx *c = ud;
	const struct lynn_row_picks *pk = c->pk;
	const int n = pk->n_cand[w];
	return lynn_sample_edits_logits(&c->wg[w]->opts.sample) && n > 0 &&
	       lynn_sampler_sample_edited_top(c->wg[w]->smp, pk->cand_x + (size_t)w * LYNN_DEVICE_TOP_K,
					       pk->cand_id + (size_t)w * LYNN_DEVICE_TOP_K, n,
					       n < LYNN_DEVICE_TOP_K, false) == -2;
}

/* The token picked from this pass's logits (pick_row) taken by its gen. */
static int gen_take(struct lynn_gen *g, const struct pick *pk, double now, struct lynn_err *err)
{
	const float *logits = pk->logits;
	const int n_vocab = pk->n_vocab;
	int32_t id = pk->id;
	int rc;
	if (!g->r.ids.n) {
		g->t_first = now;
		g->r.t_prefill_s = now - g->t_start;
	}
	if (!pk->finite)
		g->r.nonfinite = true;
	if (g->opts.logprobs) {
		struct lynn_gen_logprob *lp = realloc(g->r.logprobs, (g->r.ids.n + 1) * sizeof *lp);
		if (!lp)
			return lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
		g->r.logprobs = lp;
		logprob_of(logits, n_vocab, id, LYNN_MIN(LYNN_MAX(g->opts.top_logprobs, 0), LYNN_MAX_TOP_LOGPROBS),
			   &lp[g->r.ids.n]);
	}
	if (push_id(&g->r.ids, id))
		return lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
	if ((rc = lynn_sampler_seen(g->smp, &id, 1, true, err))) /* for the penalties */
		return rc;
	if (g->opts.on_token)
		g->opts.on_token(g->opts.ud, id);
	if (!g->opts.ignore_eos && is_eog(g->e, id)) {
		gen_end(g, LYNN_GEN_EOS, now); /* its text is not part of the answer */
		return 0;
	}
	if (g->e->tok) {
		if ((rc = lynn_tok_stream_push(&g->ts, id, &g->r.text, err)))
			return rc;
		gen_emit(g, false);
		if (g->r.finish == LYNN_GEN_STOP) {
			g->r.t_decode_s = now - g->t_first;
			return 0;
		}
	}
	if (g->r.ids.n >= (size_t)g->opts.max_tokens)
		gen_end(g, LYNN_GEN_LENGTH, now);
	return 0;
}

/* A finished gen's state goes to the cache as that of the ids it went
 * through: its prompt and the tokens it generated but the last. */
static void cache_keep_end(struct lynn_gen *g)
{
	if (!g->seq)
		return;
	const size_t n = (size_t)lynn_seq_pos(g->seq), np = g->n_prompt;
	if (n < np || n - np > g->r.ids.n)
		return;
	int32_t *ids = malloc(n * sizeof *ids);
	if (!ids)
		return;
	memcpy(ids, g->prompt, np * sizeof *ids);
	memcpy(ids + np, g->r.ids.ids, (n - np) * sizeof *ids);
	cache_put(g->e, ids, n, g->seq);
	g->seq = NULL;
	free(ids);
}

int lynn_engine_step(struct lynn_engine *e, struct lynn_gen *const *g, size_t n,
		     int64_t max_prefill, struct lynn_err *err)
{
	const int n_vocab = lynn_model_n_vocab(e->model);
	int64_t rows = 0, budget = max_prefill > 0 ? max_prefill : INT64_MAX, n_want = 0;
	int64_t *take = malloc((n ? n : 1) * sizeof *take); /* prompt tokens each gen feeds; -1: none */
	struct lynn_seq **seqs = NULL;
	int32_t *ids = NULL;
	bool *want = NULL;
	float *logits = NULL;
	struct lynn_row_picks pk = { 0 }; /* what the device gives back instead (dev) */
	int *top_k = NULL;                /* pk's inputs, a wanted row's sampling (dev_topk) */
	float *temp = NULL;
	bool dev = false, dev_topk = false, dev_edits = false;
	struct pick *picks = NULL;
	struct lynn_gen **wg = NULL; /* the wanted rows' gens (dev_edits) */
	struct need_ctx nc = { NULL, &pk };
	int rc = 0;

	if (!take)
		return lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
	/* rows: one per decoding gen, prompt pieces for the others */
	for (size_t i = 0; i < n; i++) {
		const struct lynn_gen *x = g[i];
		take[i] = -1;
		if (x->r.finish)
			continue;
		if (x->n_fed < x->n_prompt) {
			/* a piece ends where a state is to be kept */
			size_t upto = x->n_prompt;
			for (int c = 0; c < LYNN_CACHE_POINTS && e->cache.max; c++)
				if (x->opts.cache_at[c] > x->n_fed && x->opts.cache_at[c] < upto)
					upto = x->opts.cache_at[c];
			take[i] = LYNN_MIN((int64_t)(upto - x->n_fed), budget);
			budget -= take[i];
			rows += take[i];
			n_want += x->n_fed + (size_t)take[i] == x->n_prompt;
		} else {
			rows++;
			n_want++;
		}
	}
	if (!rows)
		goto out;
	/* every gen greedy or top-k (k <= LYNN_DEVICE_TOP_K), without logprobs,
	 * on a model whose logits stay on a device: the device picks (or finds
	 * the top-k candidates the sampler draws from), and the logits never
	 * come back. A gen with penalties or a bias that only lower logits
	 * takes the LYNN_DEVICE_TOP_K best raw candidates, edits them and picks
	 * from them; its row's logits come back only when they cannot tell
	 * (need_logits). Other edits need every logit on the host. */
	dev = n_want && lynn_model_picks_on_device(e->model);
	for (size_t i = 0; dev && i < n; i++) {
		const struct lynn_sample_params *sp = &g[i]->opts.sample;
		const bool sampled = sp->temperature > 0.0f, edits = lynn_sample_edits_logits(sp);
		dev = g[i]->r.finish || (!g[i]->opts.logprobs && (!edits || lynn_sample_edits_lower(sp)) &&
					 (!sampled || (sp->top_k > 0 && sp->top_k <= LYNN_DEVICE_TOP_K)));
		dev_topk |= !g[i]->r.finish && (sampled || edits);
		dev_edits |= !g[i]->r.finish && edits;
	}
	dev_topk &= dev;
	dev_edits &= dev;
	seqs = malloc((size_t)rows * sizeof *seqs);
	ids = malloc((size_t)rows * sizeof *ids);
	want = malloc((size_t)rows * sizeof *want);
	if (dev) {
		pk.greedy = malloc((size_t)n_want * sizeof *pk.greedy);
		pk.finite = malloc((size_t)n_want * sizeof *pk.finite);
		if (dev_topk) {
			pk.top_k = top_k = malloc((size_t)n_want * sizeof *top_k);
			pk.temperature = temp = malloc((size_t)n_want * sizeof *temp);
			pk.n_cand = malloc((size_t)n_want * sizeof *pk.n_cand);
			pk.cand_id = malloc((size_t)n_want * LYNN_DEVICE_TOP_K * sizeof *pk.cand_id);
			pk.cand_x = malloc((size_t)n_want * LYNN_DEVICE_TOP_K * sizeof *pk.cand_x);
		}
		if (dev_edits) { /* (pages of rows that need no logits stay untouched) */
			pk.logits = malloc((size_t)n_want * (size_t)n_vocab * sizeof *pk.logits);
			nc.wg = wg = malloc((size_t)n_want * sizeof *wg);
			pk.need_logits = need_logits;
			pk.ud = &nc;
		}
	} else if (n_want) {
		logits = malloc((size_t)n_want * (size_t)n_vocab * sizeof *logits);
	}
	if (!seqs || !ids || !want || (n_want && !logits && !(pk.greedy && pk.finite)) ||
	    (dev_topk && !(pk.top_k && pk.temperature && pk.n_cand && pk.cand_id && pk.cand_x)) ||
	    (dev_edits && !(pk.logits && wg))) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
		goto out;
	}
	int64_t r = 0, nw = 0;
	for (size_t i = 0; i < n; i++) {
		const struct lynn_gen *x = g[i];
		if (x->r.finish)
			continue;
		const int64_t r0 = r;
		if (x->n_fed < x->n_prompt) {
			for (int64_t k = 0; k < take[i]; k++, r++) {
				seqs[r] = x->seq;
				ids[r] = x->prompt[x->n_fed + (size_t)k];
				want[r] = x->n_fed + (size_t)k + 1 == x->n_prompt;
			}
		} else {
			seqs[r] = x->seq;
			ids[r] = x->r.ids.ids[x->r.ids.n - 1];
			want[r++] = true;
		}
		if (dev_topk && r > r0 && want[r - 1]) { /* its wanted row: how the device picks */
			const struct lynn_sample_params *sp = &x->opts.sample;
			const bool sampled = sp->temperature > 0.0f;
			if (dev_edits)
				wg[nw] = g[i];
			if (lynn_sample_edits_logits(sp)) { /* the best raw logits (at temperature 1 for greedy) */
				top_k[nw] = LYNN_DEVICE_TOP_K;
				temp[nw++] = sampled ? sp->temperature : 1.0f;
			} else {
				top_k[nw] = sampled ? sp->top_k : 0;
				temp[nw++] = sp->temperature;
			}
		}
	}
	rc = dev ? lynn_model_forward_picks(e->model, rows, seqs, ids, want, &pk, err)
		 : lynn_model_forward(e->model, rows, seqs, ids, want, logits, err);
	if (rc)
		goto out;
	/* the wanted rows' gens, in row order (the order of the wanted logits) */
	picks = malloc((size_t)(n_want ? n_want : 1) * sizeof *picks);
	if (!picks) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
		goto out;
	}
	int64_t w = 0;
	for (size_t i = 0; i < n; i++) {
		struct lynn_gen *x = g[i];
		if (x->r.finish)
			continue;
		if (x->n_fed < x->n_prompt) {
			x->n_fed += (size_t)take[i];
			for (int c = 0; c < LYNN_CACHE_POINTS && e->cache.max && take[i] > 0; c++)
				if (x->n_fed == x->opts.cache_at[c] && x->n_fed < x->n_prompt)
					cache_copy(e, x->prompt, x->n_fed, x->seq);
			if (x->n_fed < x->n_prompt)
				continue;
		}
		picks[w] = dev ? (struct pick){ x, NULL, n_vocab, pk.greedy[w], pk.finite[w] }
			       : (struct pick){ x, logits + (size_t)w * (size_t)n_vocab, n_vocab, 0, true };
		/* a sampled row draws from its candidates (none: every logit -inf
		 * or NaN, where the sampler takes the greedy pick too); one that
		 * edits them, from them or, where they cannot tell, from the
		 * row's logits */
		if (dev_edits && lynn_sample_edits_logits(&x->opts.sample) && pk.n_cand[w] > 0) {
			const float *cx = pk.cand_x + (size_t)w * LYNN_DEVICE_TOP_K;
			const int32_t *ci = pk.cand_id + (size_t)w * LYNN_DEVICE_TOP_K;
			const int nc_w = pk.n_cand[w];
			picks[w].id = lynn_sampler_sample_edited_top(x->smp, cx, ci, nc_w, nc_w < LYNN_DEVICE_TOP_K,
								     true);
			if (picks[w].id == -2) /* need_logits brought them */
				picks[w].id = lynn_sampler_sample(x->smp, pk.logits + (size_t)w * (size_t)n_vocab);
			if (picks[w].id < 0) {
				rc = lynn_errf(err, -LYNN_ECUDA, "engine: the device's candidates of row %lld are "
					       "not in order", (long long)w);
				goto out;
			}
		} else if (dev_topk && pk.top_k[w] > 0 && pk.n_cand[w] > 0 &&
		    (picks[w].id = lynn_sampler_sample_top(x->smp, pk.cand_x + (size_t)w * LYNN_DEVICE_TOP_K,
							   pk.cand_id + (size_t)w * LYNN_DEVICE_TOP_K,
							   pk.n_cand[w])) < 0) {
			rc = lynn_errf(err, -LYNN_ECUDA, "engine: the device's top-k candidates of row %lld are "
				       "not in order", (long long)w);
			goto out;
		}
		w++;
	}
	/* the picks on the model's threads (the pass is over; made already on
	 * the device), then each gen takes its token in row order */
	if (!dev)
		lynn_pool_run(e->model->pool, w, pick_row, picks);
	const double now = lynn_now();
	for (int64_t j = 0; j < w && !rc; j++)
		rc = gen_take(picks[j].g, &picks[j], now, err);
	for (int64_t j = 0; j < w && !rc && e->cache.max; j++)
		if (picks[j].g->r.finish)
			cache_keep_end(picks[j].g);
out:
	free(picks);
	free(take);
	free(seqs);
	free(ids);
	free(want);
	free(logits);
	free(pk.greedy);
	free(pk.finite);
	free(top_k);
	free(temp);
	free(pk.n_cand);
	free(pk.cand_id);
	free(pk.cand_x);
	free(pk.logits);
	free(wg);
	return rc;
}

int lynn_engine_generate(struct lynn_engine *e, const int32_t *prompt, size_t n,
			 const struct lynn_gen_opts *opts, struct lynn_gen_result *r,
			 struct lynn_err *err)
{
	struct lynn_gen *g = lynn_gen_create(e, prompt, n, opts, err);
	int rc = 0;
	memset(r, 0, sizeof *r);
	r->n_prompt = n;
	if (!g)
		return err && err->code ? err->code : -LYNN_ENOMEM;
	while (!rc && !g->r.finish)
		rc = lynn_engine_step(e, &g, 1, 0, err);
	lynn_gen_take_result(g, r);
	lynn_gen_free(g);
	return rc;
}

/* One request of lynn_engine_generate_many in flight */
struct many_slot {
	size_t i;
	struct lynn_gen_opts go; /* borrowed by the gen */
	struct lynn_gen *g;
};

int lynn_engine_generate_many(struct lynn_engine *e, size_t n, int batch, lynn_gen_start_fn start,
			      lynn_gen_done_fn done, void *ud, struct lynn_err *err)
{
	const int B = batch > 1 ? batch : 1;
	struct many_slot *s = calloc((size_t)B, sizeof *s);
	struct lynn_gen **gens = calloc((size_t)B, sizeof *gens);
	size_t next = 0;
	int rc = s && gens ? 0 : lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
	while (!rc) {
		int active = 0;
		for (int b = 0; b < B && !rc; b++) { /* free places take the next requests */
			while (!rc && !s[b].g && next < n) {
				struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
				struct lynn_err gerr = { 0 };
				s[b].i = next++;
				memset(&s[b].go, 0, sizeof s[b].go);
				int st = start(ud, s[b].i, &ids, &s[b].go, err);
				if (st < 0)
					rc = st;
				else if (st == 0 && !(s[b].g = lynn_gen_create(e, ids.ids, ids.n, &s[b].go, &gerr)))
					rc = done(ud, s[b].i, NULL, &gerr, err);
				lynn_tok_ids_release(&ids);
			}
			if (s[b].g)
				gens[active++] = s[b].g;
		}
		if (rc || !active || (rc = lynn_engine_step(e, gens, (size_t)active, 0, err)))
			break;
		for (int b = 0; b < B && !rc; b++) {
			if (!s[b].g || !lynn_gen_finished(s[b].g))
				continue;
			rc = done(ud, s[b].i, lynn_gen_result(s[b].g), NULL, err);
			lynn_gen_free(s[b].g);
			s[b].g = NULL;
		}
	}
	for (int b = 0; s && b < B; b++)
		lynn_gen_free(s[b].g);
	free(s);
	free(gens);
	return rc;
}

int lynn_engine_last_logits(struct lynn_engine *e, const int32_t *prompt, size_t n, float *logits,
			    struct lynn_err *err)
{
	struct lynn_seq *seq = lynn_seq_create(e->model, err);
	int rc;
	if (!seq)
		return err ? err->code : -LYNN_ENOMEM;
	rc = lynn_model_prefill(e->model, seq, prompt, (int64_t)n, false, logits, err);
	lynn_seq_free(seq);
	return rc;
}
