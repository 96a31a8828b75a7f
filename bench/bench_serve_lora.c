/* Decode steps of the serving path with and without LoRA adapters (docs/lora.md): B
 * sequences at position POS each decode one token a step (cf_infer_forward_paged, as the
 * engine runs them); a base step (every row the base) and an adapter step (row i under
 * adapter i % N of N random rank-R adapters on every layer's q, k, v and o projections)
 * alternate, and the medians of each are compared: the adapters' cost over the shared
 * base product, without HTTP or scheduling noise.
 *
 *   bench_serve_lora MODEL.ckpt [N=4] [R=16] [B=16] [POS=128] [STEPS=20] */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_util.h"
#include "cformers/infer.h"
#include "cformers/threads.h"
#include "infer/paged_kv.h"
#include "io/lora_adapter.h"
#include "obs/clock.h"

static float uniform(uint64_t *s, float scale) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)(*s >> 40) / (float)(1 << 24) - 0.5f);
}

/* A random adapter on q, k, v and o of every layer, written as a PEFT directory. */
static int write_adapter(const cf_model_config *c, long rank, uint64_t seed, const char *dir, cf_error *err) {
    static const cf_weight_role roles[] = {WR_WQ, WR_WK, WR_WV, WR_WO};
    const cf_family *f = cf_family_of(c->arch);
    cf_lora_adapter a = {.rank = rank, .alpha = 2.0 * (double)rank};
    a.n = (int)(4 * c->num_layers);
    a.pairs = cf_xcalloc((size_t)a.n, sizeof *a.pairs);
    for (long l = 0; l < c->num_layers; l++)
        for (int k = 0; k < 4; k++) {
            cf_lora_pair *p = &a.pairs[4 * l + k];
            int64_t shape[2];
            cf_weight_shape(c, cf_family_weight_of(f, roles[k]), shape);
            p->role = roles[k], p->layer = l, p->out = shape[0], p->in = shape[1];
            p->a = cf_xmalloc(sizeof(float) * (size_t)(rank * p->in));
            p->b = cf_xmalloc(sizeof(float) * (size_t)(rank * p->out));
            for (long i = 0; i < rank * p->in; i++) p->a[i] = uniform(&seed, 1.0f);
            for (long i = 0; i < rank * p->out; i++) p->b[i] = uniform(&seed, 0.02f);
        }
    int rc = cf_lora_peft_write(dir, c, &a, err);
    cf_lora_adapter_free(&a);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_serve_lora MODEL.ckpt [ADAPTERS=4] [RANK=16] [BATCH=16] [POS=128] [STEPS=20]\n");
        return 2;
    }
    long n_lora = argc > 2 ? atol(argv[2]) : 4, rank = argc > 3 ? atol(argv[3]) : 16;
    long batch = argc > 4 ? atol(argv[4]) : 16, pos = argc > 5 ? atol(argv[5]) : 128;
    int steps = argc > 6 ? atoi(argv[6]) : 20;
    if (n_lora < 1 || n_lora > 64 || rank < 1 || batch < 1 || batch > 64 || pos < 1 || steps < 1) {
        fprintf(stderr, "bench_serve_lora: ADAPTERS 1..64, RANK >= 1, BATCH 1..64, POS >= 1, STEPS >= 1\n");
        return 2;
    }
    cf_error err;
    cf_infer_options opt = {.weight_dtype = CF_DTYPE_COUNT, .max_seq = pos + 2};
    cf_infer_model *m = cf_infer_load(argv[1], &opt, &err);
    if (!m) {
        fprintf(stderr, "bench_serve_lora: %s\n", err.msg);
        return 1;
    }
    for (long k = 0; k < n_lora; k++) {
        char dir[128];
        snprintf(dir, sizeof dir, "/tmp/cf_bench_serve_lora_%d_%ld", (int)getpid(), k);
        if (write_adapter(cf_infer_config(m), rank, 1 + (uint64_t)k, dir, &err) != 0 || cf_infer_add_lora(m, dir, &err) < 0) {
            fprintf(stderr, "bench_serve_lora: %s\n", err.msg);
            return 1;
        }
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "bench_serve_lora: could not remove %s\n", dir);
    }
    long blocks_per = (pos + 1 + KV_BLOCK - 1) / KV_BLOCK;
    infer_kv_pool *p = cf_infer_kv_pool_new(m, batch * blocks_per, &err);
    if (!p) {
        fprintf(stderr, "bench_serve_lora: %s\n", err.msg);
        return 1;
    }
    int32_t *tables = cf_xmalloc(sizeof(int32_t) * (size_t)(batch * blocks_per)), tok[64];
    infer_segment segs[64];
    for (long i = 0; i < batch * blocks_per; i++) tables[i] = (int32_t)i;
    for (long i = 0; i < batch; i++) tok[i] = (int32_t)(3 + i);
    double *base = cf_xmalloc(sizeof(double) * (size_t)steps), *lora = cf_xmalloc(sizeof(double) * (size_t)steps);
    for (int s = -2; s < steps; s++) /* 2 warm-up rounds; keys at POS are rewritten each step */
        for (int with = 0; with < 2; with++) {
            for (long i = 0; i < batch; i++)
                segs[i] = (infer_segment){.tokens = &tok[i], .n = 1, .pos = pos, .blocks = tables + i * blocks_per,
                                          .lora = with ? (int)(i % n_lora) + 1 : 0};
            double t0 = cf_clock_seconds();
            if (cf_infer_forward_paged(m, p, segs, (int)batch, &err) != 0) {
                fprintf(stderr, "bench_serve_lora: %s\n", err.msg);
                return 1;
            }
            if (s >= 0) (with ? lora : base)[s] = cf_clock_seconds() - t0;
        }
    double mb = bench_median(base, steps), ml = bench_median(lora, steps);
    printf("%s (%s weights), %d threads: %ld decode rows at position %ld, %ld adapters of rank %ld on q, k, v, o\n",
           argv[1], cf_dtype_name(cf_infer_weight_dtype(m)), cf_num_threads(), batch, pos, n_lora, rank);
    printf("base step %.2f ms, adapters' step %.2f ms (medians of %d, interleaved): %.3fx the base's tokens/s\n",
           1e3 * mb, 1e3 * ml, steps, mb / ml);
    free(base), free(lora), free(tables);
    cf_infer_kv_pool_free(p);
    cf_infer_free(m);
    return 0;
}
