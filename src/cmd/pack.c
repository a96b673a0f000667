/*
 * pack.c - `lynn pack BF16_DIR QUANT_DIR [--dry-run] [--json] [--report FILE]
 * [--write-index] [--scan-scales]` (SPEC §3, docs/lynn-pack.md): complete a
 * quantized folder from its BF16 source and run the ship gates.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/json.h"
#include "lynn/pack.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: lynn pack BF16_DIR QUANT_DIR [--dry-run] [--json] [--report FILE]\n"
		   "                 [--write-index] [--scan-scales]\n\n"
		   "Copy the tokenizer, template and config files that QUANT_DIR lacks from\n"
		   "BF16_DIR (never overwriting, never the BF16 index), then check QUANT_DIR:\n"
		   "gate 1 files, gate 2 tokenizer and chat template, gate 3 weights against\n"
		   "config.json. Exit 0 when every gate passes, 1 when one fails.\n\n"
		   "  --dry-run       report what would be copied; change nothing\n"
		   "  --json          print the lynn-pack-v1 report as JSON\n"
		   "  --report FILE   also write the report to FILE\n"
		   "  --write-index   build model.safetensors.index.json from QUANT_DIR's shards\n"
		   "  --scan-scales   also check every NVFP4 block scale (reads them all)\n"
		   "  -q, -v          quieter / more verbose logs\n");
}

static void print_gate(const cJSON *gates, const char *key, const char *title)
{
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(gates, key);
	const cJSON *r;
	bool pass = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "pass"));
	printf("%s gate %s\n", pass ? "\xe2\x9c\x93" : "\xe2\x9c\x97", title);
	cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(g, "reasons"))
		printf("    - %s\n", r->valuestring);
}

int cmd_pack(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "dry-run", no_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ "report", required_argument, NULL, 'r' },
		{ "write-index", no_argument, NULL, 'w' },
		{ "scan-scales", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct lynn_pack_opts po = { 0 };
	struct lynn_err err = { 0 };
	const char *report_path = NULL;
	bool json = false, pass = false;
	cJSON *rep = NULL;
	int opt, rc;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "hqv", opts, NULL)) != -1) {
		if (cmd_common_opt(opt))
			continue;
		switch (opt) {
		case 'n':
			po.dry_run = true;
			break;
		case 'j':
			json = true;
			break;
		case 'r':
			report_path = optarg;
			break;
		case 'w':
			po.write_index = true;
			break;
		case 's':
			po.scan_scales = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return cmd_usage_error("pack", "unknown option");
		}
	}
	if (optind != argc - 2)
		return cmd_usage_error("pack", "expected BF16_DIR and QUANT_DIR");
	rc = lynn_pack_run(argv[optind], argv[optind + 1], &po, &rep, &pass, &err);
	if (rc)
		return cmd_fail(&err);
	if (report_path && lynn_json_write(report_path, rep, &err)) {
		cJSON_Delete(rep);
		return cmd_fail(&err);
	}
	if (json) {
		char *s = lynn_json_print_pretty(rep);
		if (s)
			fputs(s, stdout);
		free(s);
	} else {
		const cJSON *c, *copied = cJSON_GetObjectItemCaseSensitive(rep, "copied");
		const cJSON *ix = cJSON_GetObjectItemCaseSensitive(rep, "index");
		const cJSON *gates = cJSON_GetObjectItemCaseSensitive(rep, "gates");
		printf("%s %d file%s from %s\n", po.dry_run ? "would copy" : "copied",
		       cJSON_GetArraySize(copied), cJSON_GetArraySize(copied) == 1 ? "" : "s",
		       argv[optind]);
		cJSON_ArrayForEach(c, copied)
			printf("    %s\n", c->valuestring);
		if (cJSON_IsString(ix))
			printf("index: %s\n", ix->valuestring);
		print_gate(gates, "files", "1 files");
		print_gate(gates, "tokenizer", "2 tokenizer");
		print_gate(gates, "weights", "3 weights");
		printf("%s\n", pass ? "PASS" : "FAIL");
	}
	cJSON_Delete(rep);
	return pass ? 0 : 1;
}
