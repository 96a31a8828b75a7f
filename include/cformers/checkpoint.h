/* The cformers checkpoint file: named tensors plus a JSON metadata document, in one
 * self-describing, checksummed file (layout in docs/checkpoint-format.md).
 *
 * Writing is streaming (tensors go to disk as they are added) into `PATH.tmp`, which is
 * fsync'd and renamed over PATH only when complete, so a crash or failed save never
 * damages the previous checkpoint at PATH.
 *
 * Reading maps the file read-only; tensor data pointers point into the mapping and
 * stay valid until cf_ckpt_close. The header, the index and the metadata are always
 * validated on open; each tensor's CRC32C is checked either eagerly (all at open) or
 * lazily (the first time cf_ckpt_get returns that tensor). Every error names the file
 * and the tensor or byte offset at fault. */
#ifndef CFORMERS_CHECKPOINT_H
#define CFORMERS_CHECKPOINT_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/dtype.h"
#include "cformers/error.h"
#include "cformers/model_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CF_CKPT_VERSION 2 /* the newest this build reads: 1 full files, 2 those with differential tensors */
#define CF_CKPT_MAX_DIMS 8
#define CF_CKPT_ALIGN 64 /* every tensor's data starts at a multiple of this offset */

/* ---- writing ---- */

typedef struct cf_ckpt_writer cf_ckpt_writer;

/* Starts a checkpoint that will appear at `path` when cf_ckpt_writer_finish succeeds. */
cf_ckpt_writer *cf_ckpt_writer_open(const char *path, cf_error *err);

/* Appends one tensor: `ndim` dims in `shape` (row-major), data of
 * prod(shape) * cf_dtype_size(dtype) bytes. Names must be unique. */
int cf_ckpt_write_tensor(cf_ckpt_writer *w, const char *name, cf_dtype dtype, int ndim, const int64_t *shape,
                         const void *data, cf_error *err);

/* Writes the index and `metadata_json` (a JSON object, or NULL for "{}"), fsyncs,
 * renames onto the final path and frees the writer, on success or failure. */
int cf_ckpt_writer_finish(cf_ckpt_writer *w, const char *metadata_json, cf_error *err);

/* Makes the tensors written next differential against the full checkpoint at
 * `base_path`, which must stay in the same directory as this one: a tensor the base
 * holds with the same dtype and shape is stored as its difference to the base's
 * (lossless: XOR, byte planes, zstd; docs/checkpoint-format.md), and readers rebuild it
 * from both files. -1 with err when the base cannot be read or is itself differential. */
int cf_ckpt_writer_set_base(cf_ckpt_writer *w, const char *base_path, cf_error *err);

/* Bytes written so far (tensor data as stored) and what the same tensors take whole. */
void cf_ckpt_writer_sizes(const cf_ckpt_writer *w, uint64_t *stored, uint64_t *raw);

/* Drops an unfinished checkpoint: removes the temp file, frees the writer. */
void cf_ckpt_writer_abort(cf_ckpt_writer *w);

/* ---- reading ---- */

typedef struct cf_ckpt cf_ckpt;

typedef struct cf_ckpt_tensor {
    const char *name;
    cf_dtype dtype;
    int ndim;
    int64_t shape[CF_CKPT_MAX_DIMS];
    int64_t numel;
    const void *data; /* inside the read-only mapping */
    size_t nbytes;
    uint64_t offset;  /* of the data in the file */
    uint32_t crc32c;
} cf_ckpt_tensor;

/* Maps and validates `path`; with verify_all, also every tensor's checksum (in parallel).
 * A differential checkpoint's tensors are rebuilt at open from it and its base (read from
 * the same directory; an error names the base when it is missing or has changed), and
 * their checksums are those of the rebuilt data. */
cf_ckpt *cf_ckpt_open(const char *path, bool verify_all, cf_error *err);
void cf_ckpt_close(cf_ckpt *c);

const char *cf_ckpt_path(const cf_ckpt *c);
/* The metadata JSON object as written (NUL-terminated). */
const char *cf_ckpt_metadata(const cf_ckpt *c);

/* The file name of the base checkpoint that `path` is differential against, into buf
 * ("" for a full checkpoint). Reads only the header and index. */
int cf_ckpt_base_name(const char *path, char *buf, size_t size, cf_error *err);

/* Tensors in name order. */
long cf_ckpt_num_tensors(const cf_ckpt *c);
const cf_ckpt_tensor *cf_ckpt_tensor_at(const cf_ckpt *c, long index);
/* NULL when absent (no error: callers decide whether the tensor was optional). */
const cf_ckpt_tensor *cf_ckpt_find(const cf_ckpt *c, const char *name);

/* Looks `name` up, checks its dtype and shape (ndim < 0 skips the shape check), verifies
 * its checksum if not done yet, and returns it; NULL with err naming the file and tensor
 * when it is missing, mismatched or corrupt. Not thread-safe (it records verification). */
const cf_ckpt_tensor *cf_ckpt_get(cf_ckpt *c, const char *name, cf_dtype dtype, int ndim, const int64_t *shape,
                                  cf_error *err);

/* The first tensor (name order) that cf_ckpt_get has not returned, not counting optimizer
 * state and an embedded tokenizer (names under "optimizer." and "tokenizer."); NULL when
 * there is none. A loader that has fetched every tensor its config implies calls it to
 * refuse a file that stores more (a num_layers that disagrees with the stored layers). */
const cf_ckpt_tensor *cf_ckpt_first_unused(const cf_ckpt *c);

/* CRC32C (Castagnoli), hardware crc32 instruction where present. Start with crc = 0. */
uint32_t cf_crc32c(uint32_t crc, const void *data, size_t n);

/* ---- model config <-> the "model_config" metadata object ---- */

/* Allocates the JSON object text ({"arch": "llama", "vocab_size": ..., ...}, keys as in
 * the YAML model_config section); the caller frees it. */
char *cf_model_config_to_json(const cf_model_config *m);
/* Reads a model_config object (JSON text); keys not present keep the values already
 * in *m, unknown keys are an error naming the key. */
int cf_model_config_from_json(const char *json, cf_model_config *m, cf_error *err);
/* Every number of m in the range the config schema gives its YAML key (the rule the
 * checkpoint reader applies); importers check it before writing, so no file cformers
 * writes is one it then refuses. The error names the key ("model_config.pad_token_id: -100
 * is out of range (...)"). */
int cf_model_config_check_ranges(const cf_model_config *m, cf_error *err);
/* Reads the "model_config" object of a checkpoint's metadata (LLaMA defaults for keys
 * it lacks); the error names the file. */
int cf_ckpt_model_config(const cf_ckpt *c, cf_model_config *m, cf_error *err);
/* Sets *m to the defaults of a LLaMA model (theta 10000, eps 1e-5, f32, ids -1, ...)
 * with the size keys zero, for importers to fill in. */
void cf_model_config_init_llama(cf_model_config *m);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
