/* engine.c - model + tokenizer + chat template + adapter behind one
 * generate call (include/lynn/engine.h). */
#include "lynn/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lynn/fs.h"
#include "lynn/gguf.h"
#include "lynn/util.h"
#include "lynn/lora.h"
#include "lynn/progress.h"

const char *const lynn_probe_prompts[LYNN_N_PROBE_PROMPTS] = {
	"Explain in two sentences why the sky is blue.",
	"用两句话解释为什么天空是蓝色的。",
	"Write a Python function that returns the n-th Fibonacci number.",
	"请列出三个提高睡眠质量的建议。",
	"What is 17 times 23? Answer with the number only.",
};

struct lynn_engine {
	char *dir;
	struct lynn_model *model;
	struct lynn_tok *tok;
	struct lynn_chat_template *tmpl;
	struct lynn_lora *lora;
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
	struct lynn_model_opts mo = { .n_threads = opts ? opts->n_threads : 0 };
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
	if (e->lora)
		lynn_model_lora_enable(e->model, on);
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

static bool all_finite(const float *v, int n)
{
	for (int i = 0; i < n; i++)
		if (!isfinite(v[i]))
			return false;
	return true;
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

int lynn_engine_generate(struct lynn_engine *e, const int32_t *prompt, size_t n,
			 const struct lynn_gen_opts *opts, struct lynn_gen_result *r,
			 struct lynn_err *err)
{
	int n_vocab = lynn_model_n_vocab(e->model);
	struct lynn_seq *seq = NULL;
	struct lynn_sampler *smp = NULL;
	struct lynn_tok_stream ts;
	float *logits = NULL;
	double t0, t1;
	int rc = 0;

	memset(r, 0, sizeof *r);
	r->n_prompt = n;
	if (n == 0)
		return lynn_errf(err, -LYNN_EINVAL, "engine: empty prompt");
	if (!(seq = lynn_seq_create(e->model, err)) ||
	    !(smp = lynn_sampler_create(&opts->sample, n_vocab, err))) {
		rc = err ? err->code : -LYNN_ENOMEM;
		goto out;
	}
	logits = malloc((size_t)n_vocab * sizeof *logits);
	if (!logits) {
		rc = lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
		goto out;
	}
	if (e->tok)
		lynn_tok_stream_init(&ts, e->tok, 0);
	t0 = lynn_now();
	if (opts->max_tokens <= 0)
		goto out;
	if ((rc = lynn_model_prefill(e->model, seq, prompt, (int64_t)n, false, logits, err)))
		goto out;
	t1 = lynn_now();
	r->t_prefill_s = t1 - t0;
	for (int k = 0; k < opts->max_tokens; k++) {
		int32_t id;
		if (!all_finite(logits, n_vocab))
			r->nonfinite = true;
		id = lynn_sampler_sample(smp, logits);
		if (push_id(&r->ids, id)) {
			rc = lynn_errf(err, -LYNN_ENOMEM, "engine: out of memory");
			goto out;
		}
		if (opts->on_token)
			opts->on_token(opts->ud, id);
		if (is_eog(e, id)) {
			r->stopped_eos = true; /* its text is not part of the answer */
			break;
		}
		if (e->tok) {
			size_t before = r->text.len;
			if ((rc = lynn_tok_stream_push(&ts, id, &r->text, err)))
				goto out;
			if (opts->on_text && r->text.len > before)
				opts->on_text(opts->ud, r->text.data + before, r->text.len - before);
		}
		if (k + 1 == opts->max_tokens)
			break;
		if ((rc = lynn_model_decode(e->model, 1, &seq, &id, logits, err)))
			goto out;
	}
	if (e->tok) {
		size_t before = r->text.len;
		lynn_tok_stream_flush(&ts, &r->text);
		if (opts->on_text && r->text.len > before)
			opts->on_text(opts->ud, r->text.data + before, r->text.len - before);
	}
	r->t_decode_s = lynn_now() - t1;
out:
	free(logits);
	lynn_sampler_free(smp);
	lynn_seq_free(seq);
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
