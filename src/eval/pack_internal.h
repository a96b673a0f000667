/*
 * pack_internal.h - shared by src/eval/pack*.c: a gate's reasons list.
 */
#ifndef LYNN_PACK_INTERNAL_H
#define LYNN_PACK_INTERNAL_H

#include <stdbool.h>
#include <cjson/cJSON.h>

/* Reasons beyond this many are counted, not listed (reports stay bounded). */
#define PACK_MAX_REASONS 100

struct pack_gate {
	cJSON *obj;     /* the gate's report object (borrowed) */
	cJSON *reasons; /* owned until pack_gate_finish */
	int n, dropped;
};

void pack_gate_init(struct pack_gate *g, cJSON *obj);
void pack_reason(struct pack_gate *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Add "reasons" and "pass" to the gate object; returns pass. */
bool pack_gate_finish(struct pack_gate *g);

/* Gate 3's cross-check against the quantization config (pack_qcfg.c):
 * load it from dir (problems with it become reasons), then tell it each
 * linear's module name and how it is stored, then finish: the mismatches
 * become reasons and "quant_config" goes into the gate's report. */
enum pack_qform { PACK_Q_PLAIN, PACK_Q_FP8, PACK_Q_NVFP4_CT, PACK_Q_NVFP4_MODELOPT };
struct pack_qcfg;
struct pack_qcfg *pack_qcfg_load(const char *dir, struct pack_gate *g);
/* The same from config.json's and hf_quant_config.json's JSON (either may
 * be NULL; both are taken over). */
struct pack_qcfg *pack_qcfg_from(cJSON *config, cJSON *hf, struct pack_gate *g);
void pack_qcfg_linear(struct pack_qcfg *q, const char *module, bool is_linear, enum pack_qform actual);
void pack_qcfg_finish(struct pack_qcfg *q, struct pack_gate *g, cJSON *gate);

/* Gate 2 (pack_tok.c): `dir` is read through resolve() so that a dry run sees
 * files that would be copied. */
bool pack_gate_tokenizer(char *(*resolve)(const void *ctx, const char *name), const void *ctx,
			 cJSON *gate);

#endif
