/* The loader: EOS packing, exact batches after a restore (also across epochs and with
 * any number of prefetch workers), disjoint rank shards that together equal one big
 * batch, per-epoch shuffles, and errors for unusable record directories and for a
 * loader thread the system refuses. */
#include <unistd.h>

#include "cformers/dataset.h"
#include "cformers/records.h"
#include "core/fault.h"
#include "test_util.h"

enum { VOCAB = 1000, EOS = 0, N_DOCS = 60 };

static int doc_len(int d) { return 5 + (d * 13) % 40; }
/* Tokens are 1..999 and never EOS, and tell the document apart. */
static int32_t doc_token(int d, int i) { return 1 + (d * 31 + i) % (VOCAB - 1); }

static void write_split(const char *dir, const char *split, int n_docs) {
    cf_record_options opt = {.vocab_size = VOCAB, .eos_id = EOS, .chunk_tokens = 100, .shard_tokens = 400};
    cf_error err = {{0}};
    cf_record_writer *w = cf_record_writer_open(dir, split, &opt, &err);
    int32_t buf[64];
    for (int d = 0; d < n_docs; d++) {
        for (int i = 0; i < doc_len(d); i++) buf[i] = doc_token(d, i);
        cf_record_writer_add(w, buf, (size_t)doc_len(d), &err);
    }
    CHECK_MSG(cf_record_writer_close(w, NULL, &err) == 0, "%s", err.msg);
}

static cf_dataset *open_ds(const char *dir, int B, int T, int rank, int world, bool shuffle, int workers,
                           const cf_dataset_position *start) {
    cf_dataset_options o = cf_dataset_default_options();
    o.dir = dir;
    o.batch_size = B;
    o.seq_len = T;
    o.rank = rank;
    o.world_size = world;
    o.shuffle = shuffle;
    o.seed = 7;
    o.num_workers = workers;
    o.start = start;
    cf_error err = {{0}};
    cf_dataset *ds = cf_dataset_open(&o, &err);
    CHECK_MSG(ds != NULL, "%s", err.msg);
    return ds;
}

/* n batches of B*(T+1) tokens each, concatenated. */
static int32_t *take(cf_dataset *ds, int n, size_t batch) {
    int32_t *out = malloc((size_t)n * batch * sizeof *out);
    for (int i = 0; i < n; i++) CHECK(cf_dataset_next(ds, out + (size_t)i * batch, NULL) == 0);
    return out;
}

static void check_packing(const char *dir) {
    int B = 2, T = 16;
    cf_dataset *ds = open_ds(dir, B, T, 0, 1, false, 1, NULL);
    /* Without shuffling the stream is doc0 EOS doc1 EOS ...; sample i starts at i*T. */
    int32_t *stream = malloc(4096 * sizeof *stream);
    int n = 0;
    for (int d = 0; d < N_DOCS && n < 4000; d++) {
        for (int i = 0; i < doc_len(d); i++) stream[n++] = doc_token(d, i);
        stream[n++] = EOS;
    }
    size_t batch = (size_t)B * (T + 1);
    int32_t *got = take(ds, 3, batch);
    bool same = true;
    for (int s = 0; s < 6; s++)
        for (int t = 0; t <= T; t++) same &= got[s * (T + 1) + t] == stream[s * T + t];
    CHECK_MSG(same, "batches are not the EOS-packed document stream");
    cf_dataset_info info = cf_dataset_get_info(ds);
    CHECK(info.documents == N_DOCS && info.eos_id == EOS && info.vocab_size == VOCAB);
    CHECK(info.steps_per_epoch == (info.tokens + info.documents - 1) / T / B);
    cf_dataset_stats st = cf_dataset_get_stats(ds);
    CHECK(st.batches == 3 && st.tokens == 3 * batch);
    free(got);
    free(stream);
    cf_dataset_close(ds);
}

static void check_resume(const char *dir, int workers_a, int workers_b) {
    int B = 3, T = 20, total = 40, cut = 13;
    size_t batch = (size_t)B * (T + 1);
    cf_dataset *a = open_ds(dir, B, T, 0, 1, true, workers_a, NULL);
    int32_t *whole = take(a, total, batch);
    cf_dataset_close(a);
    cf_dataset *b = open_ds(dir, B, T, 0, 1, true, workers_b, NULL);
    int32_t *first = take(b, cut, batch);
    cf_dataset_position pos = cf_dataset_get_position(b);
    cf_dataset_close(b);
    cf_dataset *c = open_ds(dir, B, T, 0, 1, true, workers_b, &pos);
    int32_t *rest = take(c, total - cut, batch);
    CHECK(memcmp(first, whole, cut * batch * sizeof *whole) == 0);
    CHECK_MSG(memcmp(rest, whole + cut * batch, (total - cut) * batch * sizeof *whole) == 0,
              "resumed batches differ (workers %d/%d)", workers_a, workers_b);
    CHECK(cf_dataset_get_info(c).steps_per_epoch < (uint64_t)total); /* the runs cross an epoch boundary */
    /* Seeking back replays. */
    cf_dataset_position zero = {.epoch = 0, .step = 0, .seed = 7};
    cf_error err = {{0}};
    CHECK(cf_dataset_seek(c, &zero, &err) == 0);
    int32_t *again = take(c, 2, batch);
    CHECK(memcmp(again, whole, 2 * batch * sizeof *whole) == 0);
    cf_dataset_position wrong = {.epoch = 0, .step = 0, .seed = 8};
    CHECK(cf_dataset_seek(c, &wrong, &err) != 0);
    CHECK_CONTAINS(err.msg, "seed");
    free(whole);
    free(first);
    free(rest);
    free(again);
    cf_dataset_close(c);
}

static void check_shuffle(const char *dir) {
    int B = 2, T = 10;
    size_t batch = (size_t)B * (T + 1);
    cf_dataset *ds = open_ds(dir, B, T, 0, 1, true, 2, NULL);
    uint64_t spe = cf_dataset_get_info(ds).steps_per_epoch;
    int32_t *two = take(ds, (int)(2 * spe), batch);
    CHECK_MSG(memcmp(two, two + spe * batch, spe * batch * sizeof *two) != 0, "epochs 0 and 1 have the same order");
    cf_dataset_position p = cf_dataset_get_position(ds);
    CHECK(p.epoch == 2 && p.step == 0);
    free(two);
    cf_dataset_close(ds);
}

static void check_ranks(const char *dir) {
    int B = 2, T = 12, W = 3, steps = 8;
    size_t batch = (size_t)B * (T + 1);
    cf_dataset *big = open_ds(dir, B * W, T, 0, 1, true, 1, NULL);
    int32_t *all = take(big, steps, batch * W);
    for (int r = 0; r < W; r++) {
        cf_dataset *ds = open_ds(dir, B, T, r, W, true, 1, NULL);
        int32_t *mine = take(ds, steps, batch);
        bool same = true;
        for (int s = 0; s < steps; s++)
            same &= memcmp(mine + s * batch, all + (s * W + r) * batch, batch * sizeof *mine) == 0;
        CHECK_MSG(same, "rank %d of %d is not its slice of the global batch", r, W);
        free(mine);
        cf_dataset_close(ds);
    }
    free(all);
    cf_dataset_close(big);
}

static void check_errors(const char *dir) {
    cf_dataset_options o = cf_dataset_default_options();
    cf_error err = {{0}};
    o.dir = dir;
    o.split = "valid";
    o.seq_len = 1000;
    CHECK(cf_dataset_open(&o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "needs"); /* too few tokens for one batch */
    o.split = "test";
    CHECK(cf_dataset_open(&o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "no test-");
    /* The second of 3 prefetch threads is refused (EAGAIN): the open fails, naming it. */
    o.split = "train";
    o.seq_len = 8;
    o.num_workers = 3;
    cf_fault_arm(CF_FAULT_THREAD, 2, CF_FAULT_ENOSPC);
    CHECK(cf_dataset_open(&o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "cannot start loader thread 2 of 3 (train_dataset.num_parallel_workers)");
    o.num_workers = 1;
    /* A shard from another tokenizer in the same split. */
    char other[4096];
    snprintf(other, sizeof other, "%s/mixed", dir);
    mkdir(other, 0755);
    write_split(other, "train", 5);
    cf_record_options opt = {.vocab_size = 2000, .eos_id = 1};
    cf_record_writer *w = cf_record_writer_open(other, "train-z", &opt, &err);
    int32_t ids[3] = {4, 5, 6};
    cf_record_writer_add(w, ids, 3, &err);
    cf_record_writer_close(w, NULL, &err);
    o.dir = other;
    o.split = "train";
    o.seq_len = 4;
    CHECK(cf_dataset_open(&o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "different tokenizer");
    char **paths;
    int n;
    cf_record_list(other, "train", &paths, &n, &err);
    for (int i = 0; i < n; i++) {
        unlink(paths[i]);
        free(paths[i]);
    }
    free(paths);
    rmdir(other);
}

int main(void) {
    char dir[] = "/tmp/cf_test_loader_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    write_split(dir, "train", N_DOCS);
    write_split(dir, "valid", 3);
    check_packing(dir);
    check_resume(dir, 2, 2);
    check_resume(dir, 0, 3);
    check_shuffle(dir);
    check_ranks(dir);
    check_errors(dir);
    char **paths;
    int n;
    for (int s = 0; s < 2; s++) {
        cf_record_list(dir, s ? "valid" : "train", &paths, &n, NULL);
        for (int i = 0; i < n; i++) {
            unlink(paths[i]);
            free(paths[i]);
        }
        free(paths);
    }
    CHECK(rmdir(dir) == 0);
    return test_finish();
}
