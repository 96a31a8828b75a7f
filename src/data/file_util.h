/* Small file helpers for the data pipeline. */
#ifndef CFORMERS_DATA_FILE_UTIL_H
#define CFORMERS_DATA_FILE_UTIL_H

#include <stddef.h>

#include "cformers/error.h"

/* Reads a whole file into a malloc'd buffer (NUL-terminated, not counted in *size). */
unsigned char *cf_read_file(const char *path, size_t *size, cf_error *err);

#endif
