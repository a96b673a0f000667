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

/* Gate 2 (pack_tok.c): `dir` is read through resolve() so that a dry run sees
 * files that would be copied. */
bool pack_gate_tokenizer(char *(*resolve)(const void *ctx, const char *name), const void *ctx,
			 cJSON *gate);

#endif
