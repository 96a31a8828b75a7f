/* Shared by the libFuzzer harnesses (one tests/fuzz/fuzz_<target>.c per parser).
 *
 * Every harness defines LLVMFuzzerTestOneInput; built with CFORMERS_FUZZ=ON it is linked
 * with libFuzzer, and in every build it is also linked with replay_main.c, which feeds it
 * the committed regression inputs and seeds (CTest fuzz_replay_<target>).
 *
 * Inputs that stand for several files (a directory) are the files' bytes joined by
 * FUZZ_SEPARATOR. Files a loader must open by path go to a private scratch directory under
 * $CFORMERS_FUZZ_TMPDIR (default /dev/shm), emptied before each input and removed at exit. */
#ifndef CFORMERS_FUZZ_UTIL_H
#define CFORMERS_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"
#include "cformers/tokenizer.h"

#define FUZZ_SEPARATOR "\n--cf-fuzz-file--\n"
#define FUZZ_MAX_PARTS 8

typedef struct fuzz_part {
    const uint8_t *data;
    size_t size;
} fuzz_part;

/* Splits the input at each FUZZ_SEPARATOR into at most max parts (the last takes the
 * rest); returns how many. */
int fuzz_split(const uint8_t *data, size_t size, fuzz_part *parts, int max);

/* The scratch directory, created on first use and emptied by each call. */
const char *fuzz_scratch(void);
/* Writes bytes to `name` inside the scratch directory and returns its path (a static
 * buffer, valid until the next call). Aborts when the scratch disk fails: that is the
 * harness's environment, not a finding. */
const char *fuzz_write(const char *name, const void *data, size_t size);
/* The path `name` inside the scratch directory (the same static buffer as fuzz_write). */
const char *fuzz_path(const char *name);

/* A scratch cf_error for the next call, its message emptied. Harnesses pass one to every
 * call that takes an err: with NULL, cf_fail formats nothing, so a bad argument in an
 * error message (a freed string, a wrong format) never runs under the fuzzers. */
cf_error *fuzz_err(void);
/* After a call that took fuzz_err(): a failure (`failed`) must say why in one message; an
 * empty one aborts, a finding (a path that returns -1 without cf_fail). Returns failed. */
bool fuzz_failed(bool failed, const cf_error *err, const char *call);

/* A cformers checkpoint with its checksums made right (the fuzzer cannot forge CRC32C
 * values): each index entry's crc32c (when its data range lies in the file), then the
 * trailer and header checksums and file_bytes, re-laying out index and metadata around
 * the new index. When the header's offsets do not describe the file, only the header
 * checksum is redone. Returns a malloc'd copy of *out_size bytes; the caller frees it. */
uint8_t *fuzz_fix_ckpt_checksums(const uint8_t *data, size_t size, size_t *out_size);

/* Runs a loaded tokenizer over a fixed text plus `text` (at most 256 bytes of it), decodes
 * the ids back and asks for the pieces of every id near the ends of the vocabulary. */
void fuzz_exercise_tokenizer(const cf_tokenizer *tok, const uint8_t *text, size_t size);

/* The serve harnesses' engine, made on first use and kept: a 1-layer GPT-2 (hidden 8, 301
 * tokens: the GPT-2 fixture tokenizer, embedded) with fixed weights, a context of
 * FUZZ_SERVE_MAX_SEQ, at most FUZZ_SERVE_MAX_BATCH sequences, a KV pool of 8 16-token blocks
 * and 16 KiB of swap, so that n samples of a long prompt preempt each other. */
enum { FUZZ_SERVE_MAX_SEQ = 128, FUZZ_SERVE_MAX_BATCH = 4 };
struct cf_serve_engine *fuzz_serve_engine(void);

#endif
