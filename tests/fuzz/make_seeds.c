/* Writes the seeds that must be made by the library itself, from the harnesses' own fixed
 * plan and base: `fuzz_make_seeds DIR` writes
 *   DIR/train_resume/state.ckpt  a training checkpoint of fuzz_train_resume's plan (step 3)
 *   DIR/train_resume/weights.ckpt the same plan's weights without optimizer state
 *   DIR/ckpt_delta/delta.ckpt    a differential checkpoint against fuzz_ckpt_delta's base
 *   DIR/ckpt_delta/codec_*       difference data as the codec inputs lay it out
 * (tests/fuzz/README.md). */
#define FUZZ_NO_ENTRY
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_ckpt_delta.c"
#include "fuzz_train_resume.c"

static void die(const char *what, const cf_error *err) {
    fprintf(stderr, "fuzz_make_seeds: %s: %s\n", what, err->msg);
    exit(1);
}

static int sink(void *ctx, const void *data, size_t n, cf_error *err) {
    (void)err;
    return fwrite(data, 1, n, ctx) == n ? 0 : -1;
}

/* A codec seed: the two option bytes, then n elements of elem bytes encoded against the
 * harness's base, every 7th element changed. */
static void codec_seed(const char *dir, const char *name, uint8_t b0, uint8_t b1, int64_t n, int elem) {
    char path[1024];
    snprintf(path, sizeof path, "%s/ckpt_delta/%s", dir, name);
    FILE *f = fopen(path, "wb");
    unsigned char *base = malloc((size_t)(n * elem)), *data = malloc((size_t)(n * elem));
    fuzz_delta_base_tensor(n, elem, base);
    memcpy(data, base, (size_t)(n * elem));
    for (int64_t i = 0; i < n; i += 7) data[i * elem] ^= 0x5a;
    fputc(b0, f), fputc(b1, f);
    uint64_t stored;
    cf_error err = {{0}};
    if (cf_delta_encode(data, base, n, elem, 1, sink, f, &stored, &err) != 0 || fclose(f) != 0) die(path, &err);
    free(base), free(data);
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: fuzz_make_seeds DIR\n"), 2;
    char path[1024], base[1024];
    cf_error err = {{0}};
    snprintf(path, sizeof path, "%s/train_resume", argv[1]);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/ckpt_delta", argv[1]);
    mkdir(path, 0777);

    cf_model_config m;
    fuzz_train_resume_model(&m);
    cf_plan *plan = fuzz_train_resume_plan();
    cf_train_position pos;
    memset(&pos, 0, sizeof pos);
    pos.step = 3, pos.loss = 2.5, pos.loss_scale.scale = 1.0;
    snprintf(pos.run_id, sizeof pos.run_id, "fuzzseed");
    snprintf(path, sizeof path, "%s/train_resume/state.ckpt", argv[1]);
    if (cf_train_checkpoint_save(path, plan, &m, NULL, &pos, &err) != 0) die(path, &err);

    /* The weights alone: what convert writes (no optimizer state to resume from). */
    snprintf(path, sizeof path, "%s/train_resume/weights.ckpt", argv[1]);
    {
        snprintf(base, sizeof base, "%s/train_resume/state.ckpt", argv[1]);
        cf_ckpt *s = cf_ckpt_open(base, true, &err);
        if (!s) die(base, &err);
        cf_ckpt_writer *w = cf_ckpt_writer_open(path, &err);
        for (long i = 0; w && i < cf_ckpt_num_tensors(s); i++) {
            const cf_ckpt_tensor *t = cf_ckpt_tensor_at(s, i);
            if (strncmp(t->name, "optimizer.", 10) == 0) continue;
            if (cf_ckpt_write_tensor(w, t->name, t->dtype, t->ndim, t->shape, t->data, &err) != 0) die(path, &err);
        }
        char *mc = cf_model_config_to_json(&m), meta[4096];
        snprintf(meta, sizeof meta, "{\"model_config\": %s}", mc);
        free(mc);
        if (!w || cf_ckpt_writer_finish(w, meta, &err) != 0) die(path, &err);
        cf_ckpt_close(s);
    }

    /* The delta: written beside a base in a scratch directory, then copied. */
    char tmp[] = "/tmp/fuzz-seeds-XXXXXX";
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
    snprintf(base, sizeof base, "%s/base.ckpt", tmp);
    if (fuzz_delta_write_base(base, &err) != 0) die(base, &err);
    char delta[1100];
    snprintf(delta, sizeof delta, "%s/delta.ckpt", tmp);
    cf_ckpt *b = cf_ckpt_open(base, true, &err);
    cf_ckpt_writer *w = b ? cf_ckpt_writer_open(delta, &err) : NULL;
    if (!w || cf_ckpt_writer_set_base(w, base, &err) != 0) die(delta, &err);
    for (long i = 0; i < cf_ckpt_num_tensors(b); i++) {
        const cf_ckpt_tensor *t = cf_ckpt_tensor_at(b, i);
        unsigned char *d = malloc(t->nbytes);
        memcpy(d, t->data, t->nbytes);
        if (strcmp(t->name, "h") != 0) d[t->nbytes / 2] ^= 1; /* h unchanged, the others a bit */
        if (cf_ckpt_write_tensor(w, t->name, t->dtype, t->ndim, t->shape, d, &err) != 0) die(delta, &err);
        free(d);
    }
    int64_t three = 3;
    float fresh[3] = {1, 2, 3};
    if (cf_ckpt_write_tensor(w, "fresh", CF_F32, 1, &three, fresh, &err) != 0 ||
        cf_ckpt_writer_finish(w, "{\"step\": 2}", &err) != 0)
        die(delta, &err);
    cf_ckpt_close(b);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp %s %s/ckpt_delta/delta.ckpt && rm -rf %s", delta, argv[1], tmp);
    if (system(cmd) != 0) return 1;

    codec_seed(argv[1], "codec_f32", 0x02, 200, 200, 4);
    codec_seed(argv[1], "codec_bf16", 0x01, 33, 33, 2);
    codec_seed(argv[1], "codec_blocks", 0x0e, 3, 2 * CF_DELTA_BLOCK, 4); /* n = 2 blocks: 0x0e = elem 4, big, +1 block */
    return 0;
}
