/* I/O error paths under fault injection (core/fault.h): a write that fails at any point of
 * a checkpoint save, a record shard or a metrics line gives a one-line error naming the
 * file, leaves the earlier file intact and no partial file behind; a failed allocation
 * stops the process with a clear message. */
#include <dirent.h>

#include "cformers/checkpoint.h"
#include "cformers/records.h"
#include "core/fault.h"
#include "core/file_util.h"
#include "obs/metrics.h"
#include "test_util.h"

static const cf_fault_mode modes[] = {CF_FAULT_ENOSPC, CF_FAULT_EIO, CF_FAULT_SHORT};
static const char *const mode_names[] = {"No space left on device", "Input/output error", "No space left on device"};

static void check_one_line(const cf_error *err, const char *file) {
    CHECK_MSG(strchr(err->msg, '\n') == NULL, "multi-line error: %s", err->msg);
    CHECK_CONTAINS(err->msg, file);
}

/* Whether the file holds exactly these bytes. */
static bool same_bytes(const char *path, const unsigned char *want, size_t want_size) {
    size_t size;
    unsigned char *got = cf_read_file(path, &size, NULL);
    bool same = got && size == want_size && memcmp(got, want, size) == 0;
    free(got);
    return same;
}

/* Names in dir that end in .tmp. */
static int count_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    return n;
}

/* A writer under test: save(variant 1) writes the original files, save(2) other content
 * over them; intact() says whether the original files are unchanged and no temporary
 * file is left. */
typedef struct write_case {
    const char *target; /* the file or directory the errors must name */
    int (*save)(const char *target, int variant, cf_error *err);
    bool (*intact)(const char *target);
    int min_writes;     /* the save makes at least this many writes */
} write_case;

/* Fails each write of a save in turn, in every mode, until a save gets through unharmed. */
static void check_every_write_fails(const write_case *c) {
    cf_error err;
    CHECK(c->save(c->target, 1, &err) == 0);
    for (int m = 0; m < 3; m++) {
        int failures = 0;
        for (long n = 1; n < 100; n++) {
            cf_fault_arm(CF_FAULT_WRITE, n, modes[m]);
            int rc = c->save(c->target, 2, &err);
            bool fired = cf_fault_fired();
            cf_fault_arm(CF_FAULT_NONE, 0, 0);
            if (!fired) { /* past the last write: the save went through; put the original back */
                CHECK(rc == 0);
                CHECK(c->save(c->target, 1, &err) == 0);
                break;
            }
            failures++;
            CHECK_MSG(rc != 0, "%s: write %ld failed but the save succeeded", c->target, n);
            check_one_line(&err, c->target);
            CHECK_CONTAINS(err.msg, mode_names[m]);
            CHECK_MSG(c->intact(c->target), "%s: write %ld (mode %d) damaged the earlier files", c->target, n, m);
        }
        CHECK_MSG(failures >= c->min_writes, "%s: %d writes", c->target, failures);
    }
}

/* ---- checkpoint writer ---- */

static unsigned char *original;
static size_t original_size;

static int save_checkpoint(const char *path, int variant, cf_error *err) {
    float a[300], b[7];
    for (int i = 0; i < 300; i++) a[i] = (float)(variant * i);
    for (int i = 0; i < 7; i++) b[i] = (float)(-variant * i);
    cf_ckpt_writer *w = cf_ckpt_writer_open(path, err);
    if (!w) return -1;
    if (cf_ckpt_write_tensor(w, "a", CF_F32, 2, (int64_t[]){30, 10}, a, err) != 0 ||
        cf_ckpt_write_tensor(w, "b", CF_F32, 1, (int64_t[]){7}, b, err) != 0) {
        cf_ckpt_writer_abort(w);
        return -1;
    }
    int rc = cf_ckpt_writer_finish(w, "{\"note\": \"fault test\"}", err);
    if (rc == 0 && variant == 1 && !original) original = cf_read_file(path, &original_size, err);
    return rc;
}

static bool checkpoint_intact(const char *path) {
    char tmp[520];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    return same_bytes(path, original, original_size) && access(tmp, F_OK) != 0;
}

static void test_checkpoint_writer(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/model.ckpt", dir);
    /* header, two tensors, index and metadata, header again */
    check_every_write_fails(&(write_case){path, save_checkpoint, checkpoint_intact, 5});
    cf_error err;
    cf_ckpt *c = cf_ckpt_open(path, true, &err);
    CHECK(c != NULL);
    cf_ckpt_close(c);
    free(original);
    unlink(path);
}

/* ---- record writer ---- */

static unsigned char *shards[2];
static size_t shard_size[2];

static const char *shard_path(const char *dir, int s) {
    static char path[512];
    snprintf(path, sizeof path, "%s/train-%05d.cfrec", dir, s);
    return path;
}

/* Two shards of 50 tokens, in chunks of 16. */
static int write_records(const char *dir, int variant, cf_error *err) {
    cf_record_options opt = {.vocab_size = 100, .eos_id = 0, .shard_tokens = 40, .chunk_tokens = 16};
    cf_record_writer *w = cf_record_writer_open(dir, "train", &opt, err);
    if (!w) return -1;
    int32_t doc[25];
    for (int d = 0; d < 4; d++) {
        for (int i = 0; i < 25; i++) doc[i] = (variant * 7 + d * 25 + i) % 99 + 1;
        if (cf_record_writer_add(w, doc, 25, err) != 0) {
            cf_record_writer_discard(w);
            return -1;
        }
    }
    int n_shards, rc = cf_record_writer_close(w, &n_shards, err);
    for (int s = 0; rc == 0 && variant == 1 && s < 2; s++)
        if (!shards[s]) shards[s] = cf_read_file(shard_path(dir, s), &shard_size[s], err);
    return rc;
}

static bool records_intact(const char *dir) {
    return same_bytes(shard_path(dir, 0), shards[0], shard_size[0]) &&
           same_bytes(shard_path(dir, 1), shards[1], shard_size[1]) && count_temp_files(dir) == 0;
}

static void test_record_writer(const char *dir) {
    /* per shard: blank header, chunks, index, header */
    check_every_write_fails(&(write_case){dir, write_records, records_intact, 8});
    cf_error err;
    for (int s = 0; s < 2; s++) {
        cf_record_shard sh;
        CHECK(cf_record_shard_open(&sh, shard_path(dir, s), &err) == 0);
        cf_record_shard_close(&sh);
        free(shards[s]);
    }
    cf_record_remove(dir);
}

/* ---- metrics writer ---- */

static void test_metrics_writer(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    for (int m = 0; m < 3; m++) {
        unlink(path);
        cf_error err;
        cf_metrics *mx = cf_metrics_open(path, &err);
        CHECK(mx != NULL);
        CHECK(cf_metrics_write(mx, "train", json_pack("{s:i}", "step", 1), &err) == 0);
        cf_fault_arm(CF_FAULT_WRITE, 1, modes[m]);
        CHECK(cf_metrics_write(mx, "train", json_pack("{s:i}", "step", 2), &err) != 0);
        check_one_line(&err, path);
        CHECK_CONTAINS(err.msg, mode_names[m]);
        /* Later lines are dropped, not appended after a partial one. */
        CHECK(cf_metrics_write(mx, "train", json_pack("{s:i}", "step", 3), &err) != 0);
        check_one_line(&err, path);
        cf_metrics_close(mx);
        size_t size;
        char *text = (char *)cf_read_file(path, &size, &err);
        CHECK(text != NULL);
        CHECK_MSG(text && strncmp(text, "{\"event\":\"train\"", 16) == 0 && strchr(text, '\n') &&
                      !strstr(text, "\"step\":3"),
                  "metrics file after the failure: %s", text);
        free(text);
    }
    CHECK(cf_metrics_write(NULL, "train", json_object(), NULL) == 0);
    unlink(path);
}

/* ---- allocations and the environment switch ---- */

static void allocate_after_fault(void) {
    cf_fault_arm(CF_FAULT_ALLOC, 2, 0);
    free(cf_xmalloc(16));
    free(cf_xcalloc(4, 4)); /* the second: fails */
}

static void test_alloc_and_spec(void) {
    check_aborts(allocate_after_fault, "out of memory");
    cf_error err;
    CHECK(cf_fault_arm_spec("write:3:short", &err) == 0);
    cf_fault_arm(CF_FAULT_NONE, 0, 0);
    CHECK(cf_fault_arm_spec("alloc:5", &err) == 0);
    cf_fault_arm(CF_FAULT_NONE, 0, 0);
    const char *bad[] = {"write:0:eio", "write:2", "write:2:full", "write:2:eio:", "alloc:x",
                         "alloc:3x",    "alloc:3:eio", "read:1:eio", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(cf_fault_arm_spec(bad[i], &err) != 0, "accepted '%s'", bad[i]);
        CHECK_CONTAINS(err.msg, "CFORMERS_FAULT");
    }
}

int main(void) {
    char dir[] = "/tmp/cf_test_fault_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    test_checkpoint_writer(dir);
    test_metrics_writer(dir);
    test_record_writer(dir); /* last: cf_record_remove removes the emptied directory */
    test_alloc_and_spec();
    rmdir(dir);
    return test_finish();
}
