/*
 * st.h - safetensors files and checkpoints (a single file, or a folder with
 * model.safetensors or an index plus shards). Strict: every rule of the
 * reference reader (SPEC §8; docs/reference weight-formats.md §1.3) is
 * enforced, and errors name the file and the tensor at fault.
 *
 * Opening reads headers only; tensor data is a zero-copy view into a
 * read-only mmap that stays valid until the file/checkpoint is closed.
 */
#ifndef LYNN_ST_H
#define LYNN_ST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lynn/err.h"

/* ===== dtypes ===== */
enum lynn_dtype {
	LYNN_DTYPE_BOOL,
	LYNN_DTYPE_U8,
	LYNN_DTYPE_I8,
	LYNN_DTYPE_F8_E4M3,
	LYNN_DTYPE_F8_E5M2,
	LYNN_DTYPE_I16,
	LYNN_DTYPE_U16,
	LYNN_DTYPE_F16,
	LYNN_DTYPE_BF16,
	LYNN_DTYPE_I32,
	LYNN_DTYPE_U32,
	LYNN_DTYPE_F32,
	LYNN_DTYPE_I64,
	LYNN_DTYPE_U64,
	LYNN_DTYPE_F64,
	LYNN_DTYPE_COUNT
};

/* Name as written in headers ("BF16"), or NULL for an invalid value. */
const char *lynn_dtype_name(enum lynn_dtype dt);
/* Parse a header dtype name; false if unknown. */
bool lynn_dtype_parse(const char *name, enum lynn_dtype *out);
/* Bytes per element. */
size_t lynn_dtype_size(enum lynn_dtype dt);

#define LYNN_MAX_DIMS 8

/* One tensor: a borrowed view, valid until its file/checkpoint closes. */
struct lynn_tensor {
	const char *name;
	enum lynn_dtype dtype;
	int n_dims;
	int64_t shape[LYNN_MAX_DIMS];
	int64_t n_elems;      /* product of shape (1 for a scalar) */
	const void *data;     /* into the mmap; little-endian, C order */
	uint64_t nbytes;
	const char *file;     /* path of the .safetensors holding it */
};

/* ===== one .safetensors file ===== */
struct lynn_st_file;

/* Open and validate `path`. Caller closes with lynn_st_close. */
struct lynn_st_file *lynn_st_open(const char *path, struct lynn_err *err);
void lynn_st_close(struct lynn_st_file *f);
int64_t lynn_st_n_tensors(const struct lynn_st_file *f);
/* Tensors in data-offset order. */
const struct lynn_tensor *lynn_st_tensor(const struct lynn_st_file *f, int64_t i);
const struct lynn_tensor *lynn_st_find(const struct lynn_st_file *f, const char *name);
/* `__metadata__` value for key, or NULL. */
const char *lynn_st_metadata(const struct lynn_st_file *f, const char *key);
uint64_t lynn_st_header_size(const struct lynn_st_file *f); /* 8 + N */
uint64_t lynn_st_file_size(const struct lynn_st_file *f);
/* The path given at open (or the name given to lynn_st_open_mem). */
const char *lynn_st_path(const struct lynn_st_file *f);
/* `__metadata__` entries in header order: count, and the i-th key/value. */
int lynn_st_n_metadata(const struct lynn_st_file *f);
void lynn_st_metadata_at(const struct lynn_st_file *f, int i, const char **key,
			 const char **value);
/* Validate a whole safetensors file held in memory (`data`, `size` bytes;
 * borrowed: it must outlive the result). `name` names it in errors and in
 * each tensor's `file`. Same rules as lynn_st_open; used by the fuzzer and
 * by tests. Caller closes with lynn_st_close. */
struct lynn_st_file *lynn_st_open_mem(const void *data, uint64_t size, const char *name,
				      struct lynn_err *err);

/* Header length limit of the reference reader (SPEC §8). */
#define LYNN_ST_MAX_HEADER 100000000ull

/* ===== checkpoints: a .safetensors path or a model folder ===== */
struct lynn_ckpt;

/* Open a folder (model.safetensors, or model.safetensors.index.json and every
 * shard it names; index and shards must agree both ways) or a single file. */
struct lynn_ckpt *lynn_ckpt_open(const char *path, struct lynn_err *err);
void lynn_ckpt_close(struct lynn_ckpt *c);
int64_t lynn_ckpt_n_tensors(const struct lynn_ckpt *c);
const struct lynn_tensor *lynn_ckpt_tensor(const struct lynn_ckpt *c, int64_t i);
const struct lynn_tensor *lynn_ckpt_find(const struct lynn_ckpt *c, const char *name);
int lynn_ckpt_n_files(const struct lynn_ckpt *c);
const char *lynn_ckpt_file(const struct lynn_ckpt *c, int i);
const char *lynn_ckpt_dir(const struct lynn_ckpt *c); /* folder holding the weights */
/* The i-th opened file (borrowed; 0 <= i < lynn_ckpt_n_files). */
const struct lynn_st_file *lynn_ckpt_st(const struct lynn_ckpt *c, int i);
/* Path of model.safetensors.index.json when the checkpoint came from one, else NULL. */
const char *lynn_ckpt_index_path(const struct lynn_ckpt *c);

/* Find a decoder weight by its text-model name ("embed_tokens.weight",
 * "layers.3.mlp.gate.weight", "norm.weight", "lm_head.weight"), trying the
 * multimodal prefix "model.language_model.", then "model.", then (lm_head)
 * the top level and "model.". NULL when absent. */
const struct lynn_tensor *lynn_ckpt_find_decoder(const struct lynn_ckpt *c, const char *name);

/* ===== what a checkpoint holds (SPEC §2 `lynn inspect`, §8) ===== */
/* Is `name` a quantization scale rather than a parameter? Suffixes
 * weight_scale, weight_scale_2, weight_scale_inv, weight_global_scale,
 * input_scale, input_global_scale, weight_zero_point, k_scale, v_scale (after
 * '.' or '_', so fused "gate_up_proj_weight_scale" counts too). */
bool lynn_tensor_is_scale(const char *name);
/* Is `name` a routed-expert weight of a MoE block (".experts." in the name,
 * per-expert or fused 3-D; the shared expert is not)? */
bool lynn_tensor_is_routed_expert(const char *name);
/* Logical parameters in t: 0 for a scale; two per byte for packed 4-bit U8
 * weights (a name ending "_packed", or a U8 "weight" with an F8_E4M3
 * "weight_scale" sibling as ModelOpt writes); else the element count. */
int64_t lynn_ckpt_tensor_params(const struct lynn_ckpt *c, const struct lynn_tensor *t);

enum lynn_quant_flags {
	LYNN_QUANT_NVFP4_CT = 1 << 0,       /* weight_packed + weight_scale + weight_global_scale */
	LYNN_QUANT_NVFP4_MODELOPT = 1 << 1, /* U8 weight + F8 weight_scale + weight_scale_2 */
	LYNN_QUANT_FP8 = 1 << 2,            /* F8_E4M3 weight + weight_scale_inv (or weight_scale) */
};
/* The quantized-linear formats present (a mix of flags, 0 for none); with
 * counts[3] non-NULL, the number of quantized weights of each, in flag order. */
unsigned lynn_ckpt_quant_formats(const struct lynn_ckpt *c, int64_t counts[3]);

/* ===== streaming writer ===== */
/* Writes `<dir>/model.safetensors`, or with more than one shard
 * `<dir>/model-0000k-of-0000n.safetensors` plus model.safetensors.index.json
 * (metadata.total_size = sum of tensor bytes). Tensors are declared first
 * (so shards and headers can be planned), then their bytes are written in
 * declaration order, tensor by tensor, in as many pieces as the caller likes.
 * Shards are cut in declaration order (a new shard when the next tensor would
 * pass max_shard_bytes of tensor data); inside a file tensors are laid out as
 * the reference writer does (dtype, then name), so a file holding the same
 * tensors and metadata as one Hugging Face wrote is byte-identical to it.
 * Every file is written atomically (temp + fsync + rename). */
struct lynn_st_writer;

/* max_shard_bytes 0 = one file. Caller frees with lynn_st_writer_free. */
struct lynn_st_writer *lynn_st_writer_create(const char *dir, uint64_t max_shard_bytes,
					     struct lynn_err *err);
int lynn_st_writer_set_metadata(struct lynn_st_writer *w, const char *key, const char *value,
				struct lynn_err *err);
int lynn_st_writer_declare(struct lynn_st_writer *w, const char *name, enum lynn_dtype dtype,
			   int n_dims, const int64_t *shape, struct lynn_err *err);
/* Append bytes of the current tensor (declaration order). */
int lynn_st_writer_write(struct lynn_st_writer *w, const void *data, size_t len,
			 struct lynn_err *err);
/* Check every tensor got exactly its bytes; commit shards and index. */
int lynn_st_writer_finish(struct lynn_st_writer *w, struct lynn_err *err);
/* Abort (temp files removed) if not finished, then free. Accepts NULL. */
void lynn_st_writer_free(struct lynn_st_writer *w);

/* ===== dtype conversion (correct rounding) ===== */
float lynn_bf16_to_f32(uint16_t h);
uint16_t lynn_f32_to_bf16(float f);   /* round to nearest even, NaN kept quiet */
float lynn_f16_to_f32(uint16_t h);
uint16_t lynn_f32_to_f16(float f);    /* round to nearest even, overflow -> inf */
float lynn_e4m3_to_f32(uint8_t b);    /* F8_E4M3 (fn): bias 7, max 448, 0x7f/0xff NaN */
/* Convert n elements of a tensor's data to f32 (BF16, F16, F32, F64, F8_E4M3,
 * integer types). */
int lynn_convert_to_f32(enum lynn_dtype dt, const void *src, float *dst, size_t n,
			struct lynn_err *err);

#endif
