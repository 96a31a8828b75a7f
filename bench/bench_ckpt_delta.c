/* Where a differential checkpoint's bytes go (`make bench-ckpt-delta`, docs/training.md).
 *
 *   bench_ckpt_delta EVERY CKPT...
 *
 * CKPT... are full training checkpoints of one run in step order. As the trainer with
 * callbacks.checkpoint_monitor.full_checkpoint_interval=EVERY would, every EVERY-th is
 * kept full and each other one is written differential against the last full one (to a
 * scratch file, with the real writer); prints each file's size both ways, the total, and
 * by tensor group (weights, Adam's first and second moments) and byte plane (0 = the
 * lowest mantissa byte ... 3 = sign and exponent) the encoded bytes against the raw. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "io/ckpt_delta.h"

enum { GROUPS = 3, PLANES = 4 };
static const char *group_names[GROUPS] = {"weights", "adam_m", "adam_v"};

static int group_of(const char *name) {
    if (strcmp(name, "optimizer.adam_m") == 0) return 1;
    if (strcmp(name, "optimizer.adam_v") == 0) return 2;
    return strncmp(name, "optimizer.", 10) == 0 || strncmp(name, "tokenizer.", 10) == 0 ? -1 : 0;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Writes `c` differential against `base_path` to `out`; 0 on success. */
static int write_delta(const cf_ckpt *c, const char *base_path, const char *out, cf_error *err) {
    cf_ckpt_writer *w = cf_ckpt_writer_open(out, err);
    if (!w) return -1;
    if (cf_ckpt_writer_set_base(w, base_path, err) != 0) {
        cf_ckpt_writer_abort(w);
        return -1;
    }
    for (long i = 0; i < cf_ckpt_num_tensors(c); i++) {
        const cf_ckpt_tensor *t = cf_ckpt_tensor_at(c, i);
        if (cf_ckpt_write_tensor(w, t->name, t->dtype, t->ndim, t->shape, t->data, err) != 0) {
            cf_ckpt_writer_abort(w);
            return -1;
        }
    }
    return cf_ckpt_writer_finish(w, cf_ckpt_metadata(c), err);
}

int main(int argc, char **argv) {
    if (argc < 3 || atoi(argv[1]) < 2) {
        fprintf(stderr, "usage: bench_ckpt_delta EVERY(>=2) CKPT...\n");
        return 2;
    }
    int every = atoi(argv[1]);
    char scratch[] = "/tmp/cformers_delta_bench_XXXXXX";
    if (!mkdtemp(scratch)) return perror("mkdtemp"), 1;
    double full_total = 0, diff_total = 0, raw[GROUPS] = {0}, planes[GROUPS][PLANES] = {{0}};
    const char *base = NULL;
    cf_error err = {{0}};
    printf("%-40s %12s %12s %7s\n", "checkpoint", "full bytes", "written", "ratio");
    for (int i = 2; i < argc; i++) {
        long full = file_size(argv[i]);
        long written = full;
        if ((i - 2) % every == 0) {
            base = argv[i];
        } else {
            cf_ckpt *c = cf_ckpt_open(argv[i], true, &err), *b = cf_ckpt_open(base, true, &err);
            if (!c || !b) return fprintf(stderr, "bench_ckpt_delta: %s\n", err.msg), 1;
            char out[600];
            snprintf(out, sizeof out, "%s/delta.ckpt", scratch);
            /* the base must sit beside the differential file: link it in */
            char link[600];
            snprintf(link, sizeof link, "%s/%s", scratch, strrchr(base, '/') ? strrchr(base, '/') + 1 : base);
            unlink(link);
            if (symlink(realpath(base, NULL), link) != 0) return perror("symlink"), 1;
            if (write_delta(c, link, out, &err) != 0) return fprintf(stderr, "bench_ckpt_delta: %s\n", err.msg), 1;
            written = file_size(out);
            for (long k = 0; k < cf_ckpt_num_tensors(c); k++) {
                const cf_ckpt_tensor *t = cf_ckpt_tensor_at(c, k), *u = cf_ckpt_find(b, t->name);
                int g = group_of(t->name);
                if (g < 0 || !u || t->dtype != CF_F32 || u->nbytes != t->nbytes) continue;
                uint64_t sizes[PLANES];
                cf_delta_plane_sizes(t->data, u->data, t->numel, PLANES, 1, sizes);
                for (int p = 0; p < PLANES; p++) planes[g][p] += (double)sizes[p];
                raw[g] += (double)t->nbytes;
            }
            unlink(out);
            unlink(link);
            cf_ckpt_close(c);
            cf_ckpt_close(b);
        }
        full_total += (double)full;
        diff_total += (double)written;
        printf("%-40s %12ld %12ld %6.1f%%%s\n", strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i], full, written,
               100.0 * (double)written / (double)full, written == full ? "  (full)" : "");
    }
    rmdir(scratch);
    printf("total: %.1f MB full, %.1f MB with a full checkpoint every %d: %.1f%% smaller\n", full_total / 1e6,
           diff_total / 1e6, every, 100.0 * (1.0 - diff_total / full_total));
    printf("\ndifferential checkpoints by group and byte plane (encoded / raw bytes of that plane):\n");
    printf("%-8s %8s %8s %8s %8s %8s\n", "group", "plane 0", "plane 1", "plane 2", "plane 3", "all");
    for (int g = 0; g < GROUPS; g++) {
        if (raw[g] == 0) continue;
        double sum = 0;
        printf("%-8s", group_names[g]);
        for (int p = 0; p < PLANES; p++) {
            printf(" %7.1f%%", 100.0 * planes[g][p] / (raw[g] / PLANES));
            sum += planes[g][p];
        }
        printf(" %7.1f%%\n", 100.0 * sum / raw[g]);
    }
    return 0;
}
