/* A Hugging Face directory's config.json, read by one reader for `convert --from hf` and
 * for MindFormers' pretrained_model_dir (hf_import.c). */
#ifndef CFORMERS_IO_HF_CONFIG_H
#define CFORMERS_IO_HF_CONFIG_H

#include "cformers/error.h"
#include "cformers/model_config.h"

/* The model dir/config.json describes, read exactly: every key that changes the
 * computation is used or refused naming the key and the file, a present key of the wrong
 * type is an error, keys left out take the HF config class's defaults; the result passes
 * the checkpoint schema's ranges and cf_model_config_check. */
int cf_hf_read_config(const char *dir, cf_model_config *m, cf_error *err);

#endif
