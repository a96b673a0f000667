/*
 * chat.h - chat prompts: rendering OpenAI-style messages through a model's
 * chat template (jinja.h), and parsing generated text back into content,
 * reasoning_content and tool_calls (Qwen3.5's <think> and XML <tool_call>
 * forms, and the older <tool_call>{json}</tool_call> form), whole or streamed.
 *
 * Rendering follows transformers' apply_chat_template: the template sees
 * `messages`, `tools` (when given), `add_generation_prompt`, `bos_token`,
 * `eos_token`, `enable_thinking` (when set) and every chat_template_kwargs key.
 * Messages and tools are passed through unchanged as JSON (string or list-of-parts
 * content, tool_calls with arguments as an object or a string, tool role,
 * reasoning_content).
 */
#ifndef LYNN_CHAT_H
#define LYNN_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "lynn/err.h"
#include "lynn/jinja.h"

/* ===== rendering ===== */

/* A loaded chat template with its special tokens (opaque; immutable, usable
 * from several threads). */
struct lynn_chat_template;

/* Load from a model folder: chat_template.jinja if present, else
 * tokenizer_config.json's "chat_template" (a string, or a list of
 * {name, template} where the one named "default" is used). bos/eos come from
 * tokenizer_config.json's bos_token / eos_token (a string or {"content": …});
 * absent ones are "". -LYNN_ENOTFOUND when the folder has no template.
 * Returns NULL on error; free with lynn_chat_template_free. */
struct lynn_chat_template *lynn_chat_template_load(const char *model_dir, struct lynn_err *err);

/* From template text (`name` for errors; bos/eos may be NULL = ""). */
struct lynn_chat_template *lynn_chat_template_from_string(const char *name, const char *src,
							  size_t len, const char *bos,
							  const char *eos, struct lynn_err *err);
void lynn_chat_template_free(struct lynn_chat_template *t);

/* The template's source text and tokens (borrowed, valid until free). */
const char *lynn_chat_template_source(const struct lynn_chat_template *t);
const char *lynn_chat_template_bos(const struct lynn_chat_template *t);
const char *lynn_chat_template_eos(const struct lynn_chat_template *t);

/* Render inputs. JSON fields are text so that ints and floats keep their type. */
struct lynn_chat_input {
	const char *messages_json;   /* JSON array of messages (required) */
	const char *tools_json;      /* JSON array of tools, or NULL for none */
	const char *kwargs_json;     /* JSON object of chat_template_kwargs, or NULL */
	bool add_generation_prompt;
	int enable_thinking;         /* -1: not set (template default), 0: false, 1: true;
				      * a kwargs "enable_thinking" overrides it */
	const struct lynn_jinja_opts *jinja; /* NULL = defaults */
};

/* Render the prompt. On success *out is a heap string (caller frees) of
 * *out_len bytes. Errors: -LYNN_EFORMAT for bad JSON or template errors,
 * -LYNN_EINVAL for the template's raise_exception. */
int lynn_chat_render(const struct lynn_chat_template *t, const struct lynn_chat_input *in,
		     char **out, size_t *out_len, struct lynn_err *err);

/* Render from a whole OpenAI chat request body (JSON text): uses its
 * "messages", "tools", "chat_template_kwargs" and "add_generation_prompt"
 * (default true). `default_thinking` is used when the request sets no
 * enable_thinking (-1 = leave unset). */
int lynn_chat_render_request(const struct lynn_chat_template *t, const char *body, size_t len,
			     int default_thinking, char **out, size_t *out_len,
			     struct lynn_err *err);

/* Does the rendered prompt end inside a think block ("<think>" then only whitespace)?
 * Use it to set lynn_chat_parse_opts.in_think. */
bool lynn_chat_prompt_in_think(const char *prompt, size_t len);

/* ===== parsing generated text ===== */

struct lynn_chat_tool_call {
	char *name;       /* function name */
	char *arguments;  /* JSON object text, e.g. {"city": "Paris", "days": 3} */
};

/* A parsed assistant message (caller-owned; lynn_chat_msg_release frees the
 * fields). content/reasoning_content are "" when empty, never NULL after a
 * successful parse. */
struct lynn_chat_msg {
	char *content;
	char *reasoning_content;
	struct lynn_chat_tool_call *tool_calls;
	size_t n_tool_calls;
};
void lynn_chat_msg_release(struct lynn_chat_msg *m);

struct lynn_chat_parse_opts {
	/* The prompt ended inside a think block (Qwen3.5's generation prompt
	 * "<think>\n" with thinking on): text before "</think>" is reasoning. */
	bool in_think;
	/* Tools JSON array (OpenAI form) or NULL: XML parameter values are
	 * converted by the parameter's JSON-schema type (string stays a string;
	 * integer/number/boolean/null/object/array parse as JSON when they can). */
	const char *tools_json;
	/* Tool calls are not parsed (tool_choice "none"): "<tool_call>" blocks
	 * stay in the content as text. */
	bool no_tools;
};

/* Parse a whole generated text. Rules (vLLM's qwen3 reasoning and qwen3_coder tool parsers):
 * - reasoning: after a leading "<think>", or from the start when opts->in_think, up to
 *   "</think>"; a "<tool_call>" before "</think>" ends it there (a stray "</think>" after that
 *   call is dropped); output that stops before "</think>" is all reasoning. Without in_think or
 *   a leading "<think>", a "</think>" is ordinary content.
 * - tool calls: each "<tool_call>...</tool_call>" (or an unterminated last one) in the XML form
 *   <function=NAME><parameter=K>\nV\n</parameter></function> or the JSON form
 *   {"name": ..., "arguments": {...} or "..."}; text around them is content. A body in neither
 *   form stays in the content, tags included.
 * - content and reasoning are stripped of leading/trailing whitespace.
 * NUL bytes in the text are dropped (the results are C strings).
 * Returns 0, -LYNN_EFORMAT (tools_json not an array) or -LYNN_ENOMEM; `opts` may be NULL. */
int lynn_chat_parse(const char *text, size_t len, const struct lynn_chat_parse_opts *opts,
		    struct lynn_chat_msg *out, struct lynn_err *err);

/* Incremental parser for streaming (opaque). Feed generated text piece by
 * piece; each call appends to `delta` what is now certain: content and
 * reasoning text (never part of a tag: text that may be the start of
 * "<think>", "</think>" or "<tool_call>" is held back) and complete tool
 * calls. lynn_chat_stream_finish flushes what is held back. Concatenating all
 * deltas equals lynn_chat_parse of the whole text. */
struct lynn_chat_stream;
struct lynn_chat_stream *lynn_chat_stream_create(const struct lynn_chat_parse_opts *opts,
						 struct lynn_err *err);
/* `delta` is caller-owned and zero-initialised or released before each call;
 * fields are appended to (heap strings, "" when nothing new). */
int lynn_chat_stream_feed(struct lynn_chat_stream *s, const char *text, size_t len,
			  struct lynn_chat_msg *delta, struct lynn_err *err);
int lynn_chat_stream_finish(struct lynn_chat_stream *s, struct lynn_chat_msg *delta,
			    struct lynn_err *err);
void lynn_chat_stream_free(struct lynn_chat_stream *s);

#endif
