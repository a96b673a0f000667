/*
 * template.c - `lynn template`: render a chat prompt with the model's own chat template,
 * byte-exact with transformers' apply_chat_template (SPEC §2).
 *
 *   lynn template --model PATH --messages FILE.json [--tools FILE.json] [--think]
 *                 [--no-generation-prompt] [--kwargs JSON]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/chat.h"
#include "lynn/fs.h"

#define INPUT_MAX_SIZE (256u << 20)

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lynn template --model PATH --messages FILE.json [--tools FILE.json] [--think]\n"
		"                     [--no-generation-prompt] [--kwargs JSON]\n\n"
		"Print the prompt the model's chat template renders (no newline added).\n\n"
		"  --model PATH             model folder (chat_template.jinja or tokenizer_config.json)\n"
		"                           or a .jinja file\n"
		"  --messages FILE.json     OpenAI-style messages array ('-' reads stdin)\n"
		"  --tools FILE.json        OpenAI-style tools array\n"
		"  --think                  enable_thinking=true (default false)\n"
		"  --no-generation-prompt   add_generation_prompt=false (default true)\n"
		"  --kwargs JSON            extra chat_template_kwargs (a JSON object; overrides --think)\n");
}

static int read_input(const char *path, char **out, struct lynn_err *err)
{
	size_t len;
	if (strcmp(path, "-"))
		return lynn_file_read(path, INPUT_MAX_SIZE, out, &len, err);
	{
		size_t cap = 1 << 16, n = 0, r;
		char *b = malloc(cap);
		while (b && (r = fread(b + n, 1, cap - n - 1, stdin)) > 0) {
			n += r;
			if (n + 1 == cap) {
				char *nb = cap < INPUT_MAX_SIZE ? realloc(b, cap * 2) : NULL;
				if (!nb) {
					free(b);
					return lynn_errf(err, -LYNN_EINVAL, "template: stdin is too large");
				}
				b = nb;
				cap *= 2;
			}
		}
		if (!b)
			return lynn_errf(err, -LYNN_ENOMEM, "template: out of memory");
		b[n] = 0;
		*out = b;
		return 0;
	}
}

int cmd_template(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "messages", required_argument, NULL, 'M' },
		{ "tools", required_argument, NULL, 't' },
		{ "think", no_argument, NULL, 'T' },
		{ "no-generation-prompt", no_argument, NULL, 'G' },
		{ "kwargs", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *model = NULL, *msgs_path = NULL, *tools_path = NULL, *kwargs = NULL;
	bool think = false, gen = true;
	struct lynn_err err = { 0 };
	struct lynn_chat_template *t = NULL;
	char *msgs = NULL, *tools = NULL, *out = NULL;
	size_t out_len = 0;
	struct lynn_chat_input in = { 0 };
	int c, status = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
		switch (c) {
		case 'm': model = optarg; break;
		case 'M': msgs_path = optarg; break;
		case 't': tools_path = optarg; break;
		case 'T': think = true; break;
		case 'G': gen = false; break;
		case 'k': kwargs = optarg; break;
		case 'h': usage(stdout); return 0;
		default:
			if (cmd_common_opt(c))
				break;
			return cmd_usage_error("template", "unknown option");
		}
	}
	if (optind < argc)
		return cmd_usage_error("template", "unexpected argument '%s'", argv[optind]);
	if (!model || !msgs_path)
		return cmd_usage_error("template", "--model and --messages are required");

	if (lynn_dir_exists(model)) {
		t = lynn_chat_template_load(model, &err);
	} else {
		char *src = NULL;
		size_t len = 0;
		if (!lynn_file_read(model, 16u << 20, &src, &len, &err))
			t = lynn_chat_template_from_string(model, src, len, NULL, NULL, &err);
		free(src);
	}
	if (!t)
		goto fail;
	if (read_input(msgs_path, &msgs, &err))
		goto fail;
	if (tools_path && read_input(tools_path, &tools, &err))
		goto fail;
	in.messages_json = msgs;
	in.tools_json = tools;
	in.kwargs_json = kwargs;
	in.add_generation_prompt = gen;
	in.enable_thinking = think ? 1 : 0;
	if (lynn_chat_render(t, &in, &out, &out_len, &err))
		goto fail;
	if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout)) {
		lynn_errf(&err, -LYNN_EIO, "template: writing stdout failed");
		goto fail;
	}
	goto out;
fail:
	status = cmd_fail(&err);
out:
	free(out);
	free(msgs);
	free(tools);
	lynn_chat_template_free(t);
	return status;
}
