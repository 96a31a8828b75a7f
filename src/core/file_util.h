/* Whole-file reading and mapping, shared by every loader. */
#ifndef CFORMERS_CORE_FILE_UTIL_H
#define CFORMERS_CORE_FILE_UTIL_H

#include <stddef.h>

#include "cformers/error.h"

/* Reads a whole file into a malloc'd buffer (NUL-terminated, not counted in *size). */
unsigned char *cf_read_file(const char *path, size_t *size, cf_error *err);

/* Maps a whole file copy-on-write (writes stay private to the process), so large inputs
 * are paged in on demand instead of copied. Returns NULL with err set on failure; an
 * empty file gives a valid pointer and *size 0. Unmap with cf_unmap_file. */
char *cf_map_file(const char *path, size_t *size, cf_error *err);
void cf_unmap_file(char *data, size_t size);

/* mkdir -p: creates path and its missing parents. */
int cf_make_dirs(const char *path, cf_error *err);
/* Creates the directory a file is to be written in (path's parents), when it has one. */
int cf_make_parent_dirs(const char *path, cf_error *err);

#endif
