/* Internal: what the checkpoint writer needs to know of an open checkpoint to store
 * differences against it. */
#ifndef CFORMERS_IO_CHECKPOINT_INTERNAL_H
#define CFORMERS_IO_CHECKPOINT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/checkpoint.h"

/* Whether some tensor of c is stored as a difference against a base. */
bool cf_ckpt_is_delta(const cf_ckpt *c);
/* The checksum of c's index and metadata: a differential file records its base's, so a
 * base replaced by another file of the same name is noticed. */
uint32_t cf_ckpt_trailer_crc(const cf_ckpt *c);

/* A new descriptor of the memory file a model source converted `path` into while it is
 * open (io/model_source.c), which cf_ckpt_open maps instead of the path; -1 when none. */
int cf_model_source_fd(const char *path);

#endif
