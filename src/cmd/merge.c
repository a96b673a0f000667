/*
 * merge.c - `lynn merge`: a LoRA adapter into its base, streamed (SPEC §4).
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "lynn/engine.h"
#include "lynn/fs.h"
#include "lynn/json.h"
#include "lynn/log.h"
#include "lynn/lora.h"
#include "lynn/progress.h"
#include "lynn/st.h"
#include "lynn/utf8.h"
#include "lynn/util.h"

static const char usage[] =
	"usage: lynn merge --base DIR --adapter DIR --output DIR [--shard-size 5GB]\n"
	"                  [--dtype keep|bf16|f16|f32] [--skip-coherence] [--force] [--threads N]\n"
	"                  [-q|-v]\n"
	"\n"
	"Merge a PEFT LoRA adapter into its base: W' = W + s*B*A (s = alpha/r, alpha/sqrt(r)\n"
	"with use_rslora; rank_pattern/alpha_pattern honoured), computed in f32 and rounded to\n"
	"nearest-even into the stored dtype. Untargeted tensors are copied byte for byte. Writes\n"
	"shards model-0000k-of-0000n.safetensors + index (or model.safetensors), config.json,\n"
	"generation_config.json, the tokenizer files, chat_template.jinja and preprocessor\n"
	"configs. The output folder appears only when complete.\n"
	"\n"
	"Before writing, unless --skip-coherence: greedy 15 tokens from the base on 2 probe\n"
	"prompts must be readable text (share of letters/digits/CJK/punctuation >= 0.6), else\n"
	"exit 1 with FAIL_COHERENCE.\n"
	"\n"
	"exit: 0 merged, 1 FAIL_COHERENCE, 2 bad arguments or input, 3 I/O failure\n";

/* Files copied from the base folder next to the merged weights. */
static const char *const ship_files[] = {
	"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
	"chat_template.jinja", "special_tokens_map.json", "vocab.json", "merges.txt",
	"added_tokens.json", "preprocessor_config.json", "video_preprocessor_config.json",
};

/* Share of readable characters: printable ASCII and whitespace, CJK
 * ideographs, CJK and fullwidth punctuation. */
static double readable_share(const char *s, size_t len)
{
	size_t i = 0, n = 0, good = 0;
	while (i < len) {
		uint32_t cp = lynn_utf8_next((const unsigned char *)s, len, &i);
		n++;
		if ((cp >= 0x20 && cp < 0x7F) || cp == '\n' || cp == '\t' || cp == '\r' ||
		    (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
		    (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFF00 && cp <= 0xFFEF) ||
		    cp == 0x2018 || cp == 0x2019 || cp == 0x201C || cp == 0x201D || cp == 0x2026 ||
		    cp == 0x2014)
			good++;
	}
	return n ? (double)good / (double)n : 0.0;
}

#define COHERENCE_TOKENS 15
#define COHERENCE_MIN_SHARE 0.6

/* Greedy 15 tokens from the base on the first two probe prompts: 0 when both
 * read as text, 1 when not (FAIL_COHERENCE), negative on error. */
static int coherence_check(const char *base, int threads, struct lynn_err *err)
{
	struct lynn_engine_opts eo = { .n_threads = threads };
	struct lynn_engine *eng = lynn_engine_open(base, &eo, err);
	int rc = 0;

	if (!eng)
		return err->code;
	for (int p = 0; p < 2 && rc == 0; p++) {
		struct lynn_tok_ids ids = LYNN_TOK_IDS_INIT;
		struct lynn_gen_result res = { 0 };
		struct lynn_gen_opts go = { .max_tokens = COHERENCE_TOKENS };
		lynn_sample_params_init(&go.sample);
		rc = lynn_engine_encode_prompt(eng, lynn_probe_prompts[p], false, &ids, err);
		if (!rc)
			rc = lynn_engine_generate(eng, ids.ids, ids.n, &go, &res, err);
		if (!rc) {
			double share = readable_share(res.text.data ? res.text.data : "", res.text.len);
			lynn_log_info("coherence probe %d: readable share %.2f: %s", p, share,
				      res.text.data ? res.text.data : "");
			if (share < COHERENCE_MIN_SHARE || res.nonfinite) {
				fprintf(stderr, "lynn: merge: the base's greedy output on probe %d is not "
						"readable text (share %.2f < %.2f): were its experts loaded?\n",
					p, share, COHERENCE_MIN_SHARE);
				rc = 1;
			}
		}
		lynn_tok_ids_release(&ids);
		lynn_gen_result_release(&res);
	}
	lynn_engine_close(eng);
	return rc;
}

static int parse_dtype(const char *s, int *out)
{
	if (!strcmp(s, "keep"))
		*out = -1;
	else if (!strcmp(s, "bf16"))
		*out = LYNN_DTYPE_BF16;
	else if (!strcmp(s, "f16"))
		*out = LYNN_DTYPE_F16;
	else if (!strcmp(s, "f32"))
		*out = LYNN_DTYPE_F32;
	else
		return -1;
	return 0;
}

/* Copy the ship files; with a new dtype, config.json's dtype fields follow. */
static int copy_ship_files(const char *base, const char *out, int dtype, struct lynn_err *err)
{
	for (size_t i = 0; i < LYNN_ARRAY_LEN(ship_files); i++) {
		char *src = lynn_path_join(base, ship_files[i]), *dst = lynn_path_join(out, ship_files[i]);
		int rc = 0;
		if (!src || !dst)
			rc = lynn_errf(err, -LYNN_ENOMEM, "merge: out of memory");
		else if (lynn_file_exists(src)) {
			if (dtype >= 0 && !strcmp(ship_files[i], "config.json")) {
				const char *name = dtype == LYNN_DTYPE_BF16 ? "bfloat16"
						   : dtype == LYNN_DTYPE_F16 ? "float16" : "float32";
				cJSON *cfg = lynn_json_load(src, LYNN_JSON_MAX_SIZE, err);
				cJSON *tc;
				if (!cfg)
					rc = err->code;
				else {
					const char *keys[] = { "dtype", "torch_dtype" };
					tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
					for (int k = 0; k < 2; k++) {
						if (cJSON_HasObjectItem(cfg, keys[k]))
							cJSON_ReplaceItemInObjectCaseSensitive(cfg, keys[k], cJSON_CreateString(name));
						if (cJSON_IsObject(tc) && cJSON_HasObjectItem(tc, keys[k]))
							cJSON_ReplaceItemInObjectCaseSensitive(tc, keys[k], cJSON_CreateString(name));
					}
					rc = lynn_json_write(dst, cfg, err);
					cJSON_Delete(cfg);
				}
			} else {
				rc = lynn_file_copy(src, dst, err);
			}
		}
		free(src);
		free(dst);
		if (rc)
			return rc;
	}
	return 0;
}

int cmd_merge(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "base", required_argument, NULL, 'b' },
		{ "adapter", required_argument, NULL, 'a' },
		{ "output", required_argument, NULL, 'o' },
		{ "shard-size", required_argument, NULL, 's' },
		{ "dtype", required_argument, NULL, 'd' },
		{ "skip-coherence", no_argument, NULL, 'C' },
		{ "force", no_argument, NULL, 'f' },
		{ "threads", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *base = NULL, *adapter = NULL, *output = NULL;
	struct lynn_merge_opts opts = { .shard_size = 5000000000ull, .dtype = -1 };
	bool skip_coherence = false, force = false;
	struct lynn_err err = { 0 };
	struct lynn_ckpt *ck = NULL;
	struct lynn_lora *lora = NULL;
	struct lynn_tmpdir td = { 0 };
	struct lynn_progress_bar bar;
	int c, status = 0;
	long threads = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "hqv", longopts, NULL)) != -1) {
		if (cmd_common_opt(c))
			continue;
		switch (c) {
		case 'b': base = optarg; break;
		case 'a': adapter = optarg; break;
		case 'o': output = optarg; break;
		case 's':
			if (lynn_parse_size(optarg, &opts.shard_size, &err))
				return cmd_usage_error("merge", "--shard-size: %s", err.msg);
			break;
		case 'd':
			if (parse_dtype(optarg, &opts.dtype))
				return cmd_usage_error("merge", "--dtype must be keep, bf16, f16 or f32");
			break;
		case 'C': skip_coherence = true; break;
		case 'f': force = true; break;
		case 'T':
			if (cmd_opt_long("merge", "--threads", optarg, 1, 4096, &threads))
				return 2;
			break;
		case 'h': fputs(usage, stdout); return 0;
		default: return cmd_usage_error("merge", "unknown option");
		}
	}
	if (optind < argc)
		return cmd_usage_error("merge", "unexpected argument '%s'", argv[optind]);
	if (!base || !adapter || !output)
		return cmd_usage_error("merge", "--base, --adapter and --output are required");
	if (!strcmp(base, output) || !strcmp(adapter, output))
		return cmd_usage_error("merge", "--output must not be an input folder");

	ck = lynn_ckpt_open(base, &err);
	if (!ck)
		goto fail;
	lora = lynn_lora_open(adapter, &err);
	if (!lora || lynn_lora_bind(lora, ck, &err))
		goto fail;
	if (!skip_coherence) {
		status = coherence_check(base, (int)threads, &err);
		if (status < 0)
			goto fail;
		if (status == 1) {
			printf("FAIL_COHERENCE\n");
			goto out;
		}
	}
	opts.n_threads = (int)threads;
	if (lynn_tmpdir_create(&td, output, force, &err))
		goto fail;
	lynn_progress_bar_init(&bar, "merge", true, stderr, cmd_progress_enabled());
	opts.progress = lynn_progress_bar_update;
	opts.progress_ud = &bar;
	if (lynn_lora_merge(lora, ck, td.path, &opts, &err) ||
	    copy_ship_files(lynn_ckpt_dir(ck), td.path, opts.dtype, &err))
		goto fail_tmp;
	lynn_progress_bar_finish(&bar);
	if (lynn_tmpdir_commit(&td, &err))
		goto fail;
	lynn_log_info("merged %d adapter modules into '%s'", lynn_lora_n_modules(lora), output);
	printf("%s\n", output);
	goto out;
fail_tmp:
	lynn_tmpdir_abort(&td);
fail:
	status = cmd_fail(&err);
out:
	lynn_lora_free(lora);
	lynn_ckpt_close(ck);
	return status;
}
