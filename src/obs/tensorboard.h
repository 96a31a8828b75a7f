/* TensorBoard event files: what `tensorboard --logdir` reads.
 *
 * A file events.out.tfevents.<seconds>.<host>.<pid> holds TFRecord records (a little-endian
 * u64 length, the masked CRC32C of those 8 bytes, the data, the masked CRC32C of the data)
 * whose data are Event protocol buffers: the first says file_version "brain.Event:2", each
 * later one carries wall_time, step and a Summary with scalar values (tag, simple_value).
 * The encoding is written here by hand (a handful of fields; no protobuf library), and
 * every record is flushed as it is written, so a live TensorBoard follows a running job.
 *
 * The reader takes the same files back (framing and both CRCs verified, every length
 * checked against the file) for tests and tools. */
#ifndef CFORMERS_OBS_TENSORBOARD_H
#define CFORMERS_OBS_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"

typedef struct cf_tb_writer cf_tb_writer;

/* Creates a new event file in `dir` (which must exist). */
cf_tb_writer *cf_tb_open(const char *dir, cf_error *err);
/* Closes the file; the first write error, if any, is reported here too. */
int cf_tb_close(cf_tb_writer *w, cf_error *err);
const char *cf_tb_path(const cf_tb_writer *w);

/* One scalar event. Fails (and keeps failing) once a write to the file failed. */
int cf_tb_scalar(cf_tb_writer *w, const char *tag, int64_t step, double wall_time, float value, cf_error *err);

typedef struct cf_tb_scalar_event {
    double wall_time;
    int64_t step;
    char tag[128];
    float value;
} cf_tb_scalar_event;

/* Reads every scalar of an event file into a malloc'd array (*n of them); also checks
 * that the first record is the file_version event. Fails naming the file and the record's
 * offset on bad framing, a CRC mismatch or a malformed Event. */
int cf_tb_read(const char *path, cf_tb_scalar_event **events, size_t *n, cf_error *err);

#endif
