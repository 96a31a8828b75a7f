/* Flag value parsing for subcommands: each returns 0, or prints the usage error
 * ("cformers NAME: --flag: ...") and returns 2 for the caller to return. */
#ifndef CFORMERS_CLI_PARSE_H
#define CFORMERS_CLI_PARSE_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/dtype.h"
#include "cformers/infer.h"
#include "cformers/model_source.h"

/* The value after flag argv[*i]: advances *i; error when it is missing. */
int cli_flag_value(const char *cmd, int argc, char **argv, int *i, const char **value);
int cli_parse_long(const char *cmd, const char *flag, const char *text, long min, long max, long *out);
int cli_parse_double(const char *cmd, const char *flag, const char *text, double min, double max, double *out);
int cli_parse_dtype(const char *cmd, const char *flag, const char *text, cf_dtype *out);
/* The weight dtypes inference runs (--dtype of generate, serve, validate; CF_DTYPE_COUNT:
 * not given, as stored): 0, or a usage error. */
int cli_check_weight_dtype(const char *cmd, cf_dtype dtype);
/* --kv-cache f32|bf16|q8_0. */
int cli_parse_kv_cache(const char *cmd, const char *text, cf_kv_cache_dtype *out);

/* Opens the model a command reads (a checkpoint, a Hugging Face directory or a GGUF file;
 * dtype: the weights' dtype a conversion writes, CF_DTYPE_COUNT = f32), printing a
 * conversion's status line to stderr; NULL after printing "cformers CMD: <why>". The
 * command then reads `path` as a checkpoint until it closes the source. */
cf_model_source *cli_open_model(const char *cmd, const char *path, cf_dtype dtype);

/* Around a command's config load: warnings that a key "has no effect here" (MindFormers'
 * Ascend-only keys: 30-50 in a release YAML) become one summary line at _end naming the
 * file and the count, unless verbose; every other warning is printed as it comes. */
void cli_config_warnings_begin(const char *cmd, bool verbose);
void cli_config_warnings_end(void);

#endif
