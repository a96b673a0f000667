/*
 * tokenize.c - `lynn tokenize`: text to ids and ids to text with a model's
 * tokenizer (SPEC §2).
 *
 *   lynn tokenize --model PATH [--text T | stdin] [--json] [--no-special]
 *   lynn tokenize --model PATH --decode "1 2 3" [--json] [--skip-special]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/buf.h"
#include "lynn/json.h"
#include "lynn/tok.h"
#include "lynn/util.h"

/* stdin larger than this is refused (bounded allocation, SPEC §1) */
#define MAX_STDIN (1u << 30)

static void usage(FILE *f)
{
	fprintf(f,
		"usage: lynn tokenize --model PATH [--text T] [--json] [--no-special]\n"
		"       lynn tokenize --model PATH --decode \"1 2 3\" [--json] [--skip-special]\n"
		"\n"
		"Encode text (--text, or all of stdin) to token ids, or decode ids to text.\n"
		"\n"
		"  --model PATH     model folder, tokenizer.json, or .gguf file\n"
		"  --text T         the text to encode (default: read stdin to the end)\n"
		"  --decode IDS     decode ids separated by spaces or commas; prints the\n"
		"                   text with no newline added\n"
		"  --json           encode: {\"ids\":[...]}; decode: {\"text\":\"...\"}\n"
		"  --no-special     special tokens written in the text are plain text\n"
		"  --skip-special   decode: drop special tokens\n"
		"  -q, -v           fewer / more log lines\n"
		"\n"
		"Special tokens written in the text (e.g. <|im_end|>) are matched whole.\n"
		"Invalid UTF-8 in the input is replaced by U+FFFD before encoding.\n"
		"Exit codes: 0 ok, 2 usage or bad input (missing or malformed tokenizer,\n"
		"unknown id), 3 runtime failure.\n");
}

int cmd_tokenize(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "text", required_argument, NULL, 't' },
		{ "decode", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-special", no_argument, NULL, 'N' },
		{ "skip-special", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *model = NULL, *text = NULL, *decode = NULL;
	bool json = false;
	unsigned flags = 0;
	struct lynn_err err = { 0 };
	struct lynn_tok *tok = NULL;
	struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
	struct lynn_buf in = LYNN_BUF_INIT, out = LYNN_BUF_INIT;
	int32_t *dids = NULL;
	size_t n_dids = 0;
	int c, rc = 0;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
		if (cmd_common_opt(c))
			continue;
		switch (c) {
		case 'm': model = optarg; break;
		case 't': text = optarg; break;
		case 'd': decode = optarg; break;
		case 'j': json = true; break;
		case 'N': flags |= LYNN_TOK_F_NO_SPECIAL; break;
		case 'S': flags |= LYNN_TOK_F_SKIP_SPECIAL; break;
		case 'h': usage(stdout); return 0;
		default:
			return cmd_usage_error("tokenize", "unknown or incomplete option '%s'",
					       argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cmd_usage_error("tokenize", "unexpected argument '%s'", argv[optind]);
	if (!model)
		return cmd_usage_error("tokenize", "--model is required");
	if (text && decode)
		return cmd_usage_error("tokenize", "--text and --decode exclude each other");
	if (decode && lynn_parse_ids(decode, &dids, &n_dids, &err))
		return cmd_usage_error("tokenize", "--decode: %s", err.msg);

	if (!(tok = lynn_tok_load(model, &err))) {
		rc = cmd_fail(&err);
		goto out;
	}
	if (decode) {
		if (lynn_tok_decode(tok, dids, n_dids, flags, &out, &err)) {
			rc = cmd_fail(&err);
			goto out;
		}
		if (json) {
			cJSON *o = cJSON_CreateObject();
			char *s;
			if (!o || !cJSON_AddStringToObject(o, "text", out.data) ||
			    !(s = cJSON_PrintUnformatted(o))) {
				cJSON_Delete(o);
				lynn_errf(&err, -LYNN_ENOMEM, "tokenize: out of memory");
				rc = cmd_fail(&err);
				goto out;
			}
			printf("%s\n", s);
			free(s);
			cJSON_Delete(o);
		} else {
			fwrite(out.data, 1, out.len, stdout);
		}
		goto out;
	}
	if (!text) {
		int r = lynn_buf_read_stream(&in, stdin, MAX_STDIN);
		if (r) {
			lynn_errf(&err, r, r == -LYNN_EFORMAT ? "tokenize: stdin is larger than 1 GiB"
							   : "tokenize: cannot read stdin");
			rc = cmd_fail(&err);
			goto out;
		}
	} else if (lynn_buf_puts(&in, text)) {
		lynn_errf(&err, -LYNN_ENOMEM, "tokenize: out of memory");
		rc = cmd_fail(&err);
		goto out;
	}
	if (lynn_tok_encode(tok, in.data ? in.data : "", in.len, flags, &ids, &err)) {
		rc = cmd_fail(&err);
		goto out;
	}
	if (json)
		fputs("{\"ids\":[", stdout);
	for (size_t i = 0; i < ids.n; i++)
		printf(i ? (json ? ",%d" : " %d") : "%d", ids.ids[i]);
	fputs(json ? "]}\n" : "\n", stdout);
out:
	if (fflush(stdout) && !rc) {
		lynn_errf(&err, -LYNN_EIO, "tokenize: cannot write stdout");
		rc = cmd_fail(&err);
	}
	free(dids);
	lynn_tok_ids_release(&ids);
	lynn_buf_release(&in);
	lynn_buf_release(&out);
	lynn_tok_free(tok);
	return rc;
}
