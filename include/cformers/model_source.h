/* Any model file is a model: what every command that reads a model (generate, validate,
 * serve, inspect, train's load_checkpoint) and the Python API open first.
 *
 * cf_model_source_open tells from the content what `path` holds:
 *   - a cformers checkpoint (its magic, "CFCKPT"): used as it is;
 *   - a Hugging Face directory (holding config.json; model.safetensors or the shards of
 *     model.safetensors.index.json; tokenizer.json / tokenizer.model embedded when present);
 *   - a GGUF file (magic "GGUF"; its tokenizer.ggml.* embedded),
 * and converts the last two with the importers (cf_import_hf, cf_import_gguf) into an
 * anonymous memory file (memfd): nothing is written to disk. While the source is open,
 * cf_ckpt_open(path) (so cf_infer_load, the trainer, ...) maps that memory file in place of
 * `path`, and its errors still name `path`. Anything else is refused with an error saying
 * what was found (a directory without config.json and what it holds, a file's first bytes
 * in hex, ...) and what is accepted. */
#ifndef CFORMERS_MODEL_SOURCE_H
#define CFORMERS_MODEL_SOURCE_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>

#include "cformers/dtype.h"
#include "cformers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cf_model_kind {
    CF_MODEL_CHECKPOINT = 0, /* a cformers checkpoint, read in place */
    CF_MODEL_HF_DIR = 1,     /* a Hugging Face directory, converted in memory */
    CF_MODEL_GGUF = 2,       /* a GGUF file, converted in memory */
} cf_model_kind;

typedef struct cf_model_source cf_model_source;

/* Opens `path` as a model. dtype: the weights' dtype a conversion writes (f32, bf16, f16,
 * q8_0, q4_0; CF_DTYPE_COUNT = f32); a checkpoint is read as stored whatever dtype says.
 * A conversion of the same path and dtype already open is shared (counted), not redone. */
cf_model_source *cf_model_source_open(const char *path, cf_dtype dtype, cf_error *err);
/* Drops the source; a converted one's memory goes once its last user closes it and every
 * checkpoint mapped from it is closed (mappings outlive the source). NULL is ignored. */
void cf_model_source_close(cf_model_source *s);

cf_model_kind cf_model_source_kind(const cf_model_source *s);
/* "" for a checkpoint; after a conversion one status line, e.g. "converted Hugging Face
 * directory models/tiny in memory (f32, 1.2 s)". */
const char *cf_model_source_status(const cf_model_source *s);
/* The open conversion of `path` (any dtype, the newest), or NULL: for a caller that
 * reaches a model through a config's path, such as train's load_checkpoint. Borrowed. */
const cf_model_source *cf_model_source_find(const char *path);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
