/* Files that appear complete or not at all: written to PATH.tmp, fsync'd, renamed. */
#ifndef CFORMERS_IO_ATOMIC_FILE_H
#define CFORMERS_IO_ATOMIC_FILE_H

#include <stdint.h>
#include <stdio.h>

#include "cformers/error.h"

typedef struct atomic_file {
    char *path, *tmp_path;
    FILE *f;
    uint64_t offset; /* bytes written so far */
} atomic_file;

int cf_atomic_file_open(atomic_file *a, const char *path, cf_error *err);
/* Appends n bytes; the error names the file and offset. */
int cf_atomic_file_write(atomic_file *a, const void *data, size_t n, cf_error *err);
/* Appends zeros up to the next multiple of align. */
int cf_atomic_file_pad(atomic_file *a, uint64_t align, cf_error *err);
/* Flushes, fsyncs, renames onto the final path and syncs the directory; on failure the
 * temp file is removed. Frees the names either way. */
int cf_atomic_file_commit(atomic_file *a, cf_error *err);
/* Syncs the directory holding `path`: a rename is durable only once the directory entry
 * reaches the disk too. Best effort (nothing to report where it cannot be opened). */
void cf_atomic_file_sync_dir(const char *path);
/* Removes the temp file and frees. */
void cf_atomic_file_abort(atomic_file *a);
/* Writes a whole file of n bytes atomically (open, write, commit). */
int cf_atomic_file_save(const char *path, const void *data, size_t n, cf_error *err);

#endif
