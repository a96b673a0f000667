/*
 * pack.h - the ship gate (SPEC §3, `lynn pack BF16_DIR QUANT_DIR`): complete a
 * quantized model folder from its BF16 source, then check it with three gates
 * (files, tokenizer, weights). Every problem is listed, not just the first.
 *
 * The report is the lynn-pack-v1 object:
 *   {"schema_version", "created_at", "source", "target", "dry_run", "copied":[...],
 *    "index_written", "gates": {"files": {..., "pass"}, "tokenizer": {..., "pass"},
 *    "weights": {..., "pass"}}, "pass"}
 * where each gate carries "reasons": [...] (empty when it passes).
 */
#ifndef LYNN_PACK_H
#define LYNN_PACK_H

#include <stdbool.h>
#include <cjson/cJSON.h>

#include "lynn/err.h"

/* Files copied from the source when missing in the target (never overwritten;
 * the BF16 model.safetensors.index.json is never copied). NULL-terminated. */
extern const char *const lynn_pack_copy_files[];

struct lynn_pack_opts {
	bool dry_run;      /* report what would be copied / written; change nothing */
	bool write_index;  /* build model.safetensors.index.json from the target's shards */
	bool scan_scales;  /* also check every NVFP4 block scale (reads them all) */
};

/* Run the copy step and the gates. On success returns 0 with *report set
 * (caller frees with cJSON_Delete) and *pass the overall verdict. Gate
 * failures are not errors. Errors: -LYNN_ENOTFOUND / -LYNN_EINVAL for a missing
 * folder or the same folder twice, -LYNN_EIO when the target cannot be
 * written (read-only folder), -LYNN_ENOMEM. */
int lynn_pack_run(const char *src, const char *dst, const struct lynn_pack_opts *opts,
		  cJSON **report, bool *pass, struct lynn_err *err);

/* Gate 3 alone on a model folder: strict headers, index <-> shards both ways,
 * every tensor the config implies with its shape, quantized companions with
 * finite positive per-tensor scales. Adds "reasons" and details to `gate`;
 * returns the verdict. */
bool lynn_pack_gate_weights(const char *dir, bool scan_scales, cJSON *gate);

#endif
