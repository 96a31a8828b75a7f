/* Generation speed: prefill and decode tokens/s on stories260K and on a ~110M LLaMA with
 * random weights (llama2.c's stories110M shape), 1 and 2 threads, f32, bf16, q8_0 and q4_0 weights.
 * Decode reads every matmul weight once per token, so it is compared against this
 * machine's read bandwidth, measured in the same run (just before each decode measurement)
 * by a STREAM-like sum over 1 GiB (larger than any cache) on the same number of threads.
 *
 *   bench_generate [--runs R] [--prefill P] [--decode D] [--skip-110m] [--compete]
 *   bench_generate --model CKPT --threads N [--dtype f32|bf16|q8_0|q4_0] [--runs R] [--prefill P] [--decode D]
 *   bench_generate --write-llama2c OUT.bin
 *
 * --compete runs a busy loop in a child process for the whole run (a machine where another
 * process wants a core): 2 threads should then not fall far below 1.
 *
 * --model measures one checkpoint with matmuls in --dtype (default f32; give the stored one)
 * on N threads the way llama-bench does (pp P: a P-token prompt from position 0; tg D: D
 * tokens decoded one at a time from position 0), printing one line "prefill_tps decode_tps
 * prefill_cpu_tps", the last per second of the process's CPU time (less stretched by other
 * jobs on a shared machine than the wall clock) (bench/bench_llamacpp.sh compares it with llama.cpp on the same weights). --write-llama2c writes the random ~110M model
 * below as a llama2.c v1 file (f32, untied head, norms 1), for `cformers convert`.
 *
 * Each figure is the median of R runs (default 3). */
#include <immintrin.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cformers/convert.h"
#include "cformers/cpu.h"
#include "cformers/infer.h"
#include "cformers/threads.h"
#include "obs/clock.h"

#include "bench_util.h"

enum { STREAM_FLOATS = 1 << 28 }; /* 1 GiB */

/* ---- read bandwidth ---- */

typedef struct stream_job {
    const float *a;
    long n;
    int streams;   /* per thread: 1, 4 or STREAMS */
    bool prefetch; /* software prefetch into L2 */
    long piece;    /* floats read as one piece of `streams`, 0: the thread's whole share */
    float sums[64];
} stream_job;

/* `streams` equal pieces of a[0, n) read side by side, one accumulator each, prefetched into
 * L2 8 KiB ahead as the grouped decode kernels are (src/infer/matvec.h), or not, as the
 * AVX2 streaming twins are. Machines differ in which pattern reads fastest: on the Intel
 * machine this was written on several prefetched streams kept more cache-line fills in
 * flight than one (about 30% more per core; without the prefetch the kernels beat this
 * probe by a quarter); Zen 3 read one prefetched stream faster than eight (12-13 against
 * 8-11 GB/s on one core) and four streams without prefetch faster still: 17-18 GB/s a
 * quarter MiB apart in each MiB, as the AVX2 streaming twins read their ranges, against
 * 12-14 a quarter of a GiB apart. So the probe is the best of the PATTERNS: the machine's
 * read bandwidth, whichever access pattern gets it. */
enum { STREAMS = 8, PREFETCH_FLOATS = 2048, PIECE_FLOATS = 1 << 18 };
static const struct {
    int streams;
    bool prefetch;
    long piece; /* as in stream_job */
} PATTERNS[] = {{1, true, 0}, {STREAMS, true, 0}, {4, false, PIECE_FLOATS}};

/* The sum of acc[0, n)'s lanes. */
__attribute__((target("avx2"))) static float fold(__m256 *acc, int n) {
    for (int s = 1; s < n; s++) acc[0] = _mm256_add_ps(acc[0], acc[s]);
    float out[8];
    _mm256_storeu_ps(out, acc[0]);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

/* N streams (a constant, so the accumulators stay in registers). */
__attribute__((target("avx2"), always_inline)) static inline float sum_streams(const float *a, long len, const int N,
                                                                                bool prefetch) {
    __m256 acc[STREAMS];
    for (int s = 0; s < N; s++) acc[s] = _mm256_setzero_ps();
    for (long i = 0; i < len; i += 8)
        for (int s = 0; s < N; s++) {
            if (prefetch && i % 16 == 0) _mm_prefetch((const char *)(a + s * len + i + PREFETCH_FLOATS), _MM_HINT_T1);
            acc[s] = _mm256_add_ps(acc[s], _mm256_loadu_ps(a + s * len + i));
        }
    return fold(acc, N);
}

__attribute__((target("avx2"))) static float sum_avx2(const float *a, long n, int streams, bool prefetch) {
    long len = n / streams / 8 * 8;
    if (streams == 4) return sum_streams(a, len, 4, prefetch);
    if (streams == STREAMS) return sum_streams(a, len, STREAMS, prefetch);
    /* one stream, its 8 accumulators along it */
    __m256 acc[STREAMS];
    for (int s = 0; s < STREAMS; s++) acc[s] = _mm256_setzero_ps();
    for (long i = 0; i < len / 64 * 64; i += 64) {
        if (prefetch)
            for (int l = 0; l < 64; l += 16) _mm_prefetch((const char *)(a + i + l + PREFETCH_FLOATS), _MM_HINT_T1);
        for (int s = 0; s < STREAMS; s++) acc[s] = _mm256_add_ps(acc[s], _mm256_loadu_ps(a + i + 8 * s));
    }
    return fold(acc, STREAMS);
}

static void stream_part(void *arg, int thread, int n_threads) {
    stream_job *j = arg;
    long begin, end;
    cf_split_range(j->n, n_threads, thread, &begin, &end);
    long piece = j->piece > 0 ? j->piece : end - begin;
    float sum = 0.0f;
    for (long p = begin; p < end; p += piece) sum += sum_avx2(j->a + p, end - p < piece ? end - p : piece, j->streams, j->prefetch);
    j->sums[thread % 64] = sum;
}

/* CPU seconds of the whole process: on one thread, the time the work had a core, which a
 * machine shared with other jobs does not stretch (wall time does, by whatever share of
 * the core the others take). */
static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Wall-clock read bandwidth, and per CPU second in *per_cpu: for each of the PATTERNS the
 * median of `runs`, the highest of those (see sum_avx2). */
static double read_bandwidth_gbs(const float *a, int runs, double *per_cpu) {
    double best = 0.0;
    *per_cpu = 0.0;
    for (size_t p = 0; p < sizeof PATTERNS / sizeof PATTERNS[0]; p++) {
        stream_job job = {.a = a, .n = STREAM_FLOATS, .streams = PATTERNS[p].streams, .prefetch = PATTERNS[p].prefetch,
                          .piece = PATTERNS[p].piece};
        double t[16], c[16];
        for (int r = 0; r < runs; r++) {
            double t0 = cf_clock_seconds(), c0 = cpu_seconds();
            cf_parallel_team(stream_part, &job);
            t[r] = cf_clock_seconds() - t0, c[r] = cpu_seconds() - c0;
        }
        double wall = (double)STREAM_FLOATS * sizeof(float) / bench_median(t, runs) / 1e9;
        if (wall > best) best = wall, *per_cpu = (double)STREAM_FLOATS * sizeof(float) / bench_median(c, runs) / 1e9;
    }
    return best;
}

/* ---- the random ~110M model ---- */

typedef struct random_weights {
    float *data;
    size_t used, size;
} random_weights;

static const float *random_lookup(void *ctx, const char *name, int ndim, const int64_t *shape) {
    random_weights *w = ctx;
    size_t n = (size_t)(ndim == 2 ? shape[0] * shape[1] : shape[0]);
    if (w->used + n > w->size) return NULL;
    const float *p = w->data + w->used;
    w->used += n;
    (void)name;
    return p;
}

static void fill_random(float *x, size_t n) {
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 9) / 8388608.0f - 1.0f) * 0.02f;
    }
}

static void config_110m(cf_model_config *m) {
    memset(m, 0, sizeof *m);
    m->arch = CF_ARCH_LLAMA;
    m->vocab_size = 32000, m->hidden_size = 768, m->num_layers = 12, m->num_heads = 12, m->num_kv_heads = 12;
    m->intermediate_size = 2048, m->max_position_embeddings = 1024, m->rope_theta = 10000.0, m->rms_norm_eps = 1e-5;
    m->bos_token_id = 1, m->eos_token_id = 2, m->pad_token_id = -1;
}

/* The random ~110M model as a llama2.c v1 file at `path` (temp + rename): the 256-byte header,
 * then f32 norms (1), embedding, wq, wk, wv, wo, w1, w2, w3 and the untied head, the matrices
 * fill_random's stream in that order. */
static int write_llama2c(const char *path) {
    cf_model_config c;
    config_110m(&c);
    long dim = c.hidden_size, hid = c.intermediate_size, L = c.num_layers, V = c.vocab_size;
    size_t matrices = (size_t)(V * dim * 2 + L * (4 * dim * dim + 3 * dim * hid));
    float *w = cf_aligned_alloc(sizeof(float) * matrices);
    float *ones = malloc(sizeof(float) * (size_t)((2 * L + 1) * dim));
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!w || !ones || !f) {
        fprintf(stderr, "bench_generate: %s: cannot write (or out of memory)\n", tmp);
        if (f) fclose(f), unlink(tmp);
        return cf_aligned_free(w), free(ones), 1;
    }
    fill_random(w, matrices);
    for (long i = 0; i < (2 * L + 1) * dim; i++) ones[i] = 1.0f;
    unsigned char header[256] = {0};
    int32_t h[9] = {0x616b3432, 1, (int32_t)dim, (int32_t)hid, (int32_t)L, (int32_t)c.num_heads,
                    (int32_t)c.num_kv_heads, (int32_t)V, (int32_t)c.max_position_embeddings};
    memcpy(header, h, sizeof h); /* then shared_classifier = 0 at byte 36 */
    bool ok = fwrite(header, 1, sizeof header, f) == sizeof header &&
              fwrite(ones, sizeof(float), (size_t)((2 * L + 1) * dim), f) == (size_t)((2 * L + 1) * dim) &&
              fwrite(w, sizeof(float), matrices, f) == matrices;
    ok = fclose(f) == 0 && ok;
    cf_aligned_free(w);
    free(ones);
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "bench_generate: %s: write failed\n", path);
        unlink(tmp);
        return 1;
    }
    return 0;
}

/* ---- timing ---- */

typedef struct speed {
    double prefill_tps, decode_tps, decode_cpu_tps, prefill_cpu_tps; /* the last two per CPU second */
} speed;

/* Prefill of `prefill` tokens from position 0, then `decode` tokens one at a time: after the
 * prompt, or (from_start) from position 0 again, as llama-bench's tg test does. */
static int measure(cf_infer_model *m, long prefill, long decode, bool from_start, int runs, speed *out) {
    long vocab = cf_infer_config(m)->vocab_size;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(prefill + decode));
    float *logits = malloc(sizeof(float) * (size_t)vocab);
    for (long i = 0; i < prefill + decode; i++) tokens[i] = (int32_t)((i * 7919 + 3) % vocab);
    double pre[16], dec[16], dec_cpu[16], pre_cpu[16];
    cf_error err;
    int rc = 0;
    for (int r = 0; r < runs && rc == 0; r++) {
        double t0 = cf_clock_seconds(), c0 = cpu_seconds();
        rc = cf_infer_forward(m, tokens, prefill, 0, logits, false, &err);
        double t1 = cf_clock_seconds(), c1 = cpu_seconds();
        long pos0 = from_start ? 0 : prefill;
        for (long i = 0; i < decode && rc == 0; i++)
            rc = cf_infer_forward(m, &tokens[prefill + i], 1, pos0 + i, logits, false, &err);
        double t2 = cf_clock_seconds(), c2 = cpu_seconds();
        pre[r] = (double)prefill / (t1 - t0);
        pre_cpu[r] = (double)prefill / (c1 - c0);
        dec[r] = (double)decode / (t2 - t1);
        dec_cpu[r] = (double)decode / (c2 - c1);
    }
    if (rc != 0) fprintf(stderr, "bench_generate: %s\n", err.msg);
    out->prefill_tps = bench_median(pre, runs);
    out->decode_tps = bench_median(dec, runs);
    out->decode_cpu_tps = bench_median(dec_cpu, runs);
    out->prefill_cpu_tps = bench_median(pre_cpu, runs);
    free(tokens);
    free(logits);
    return rc;
}

/* One checkpoint, matmuls in `dtype` (the stored one: no conversion at load), `threads`
 * threads: llama-bench's pp and tg measures. */
static int bench_checkpoint(const char *ckpt, cf_dtype dtype, int threads, long prefill, long decode, int runs) {
    cf_error err;
    cf_infer_options opt = {.weight_dtype = dtype, .max_seq = prefill > decode ? prefill : decode};
    cf_infer_model *m = cf_infer_load(ckpt, &opt, &err);
    if (!m) {
        fprintf(stderr, "bench_generate: %s\n", err.msg);
        return 1;
    }
    cf_set_num_threads(threads, NULL);
    int32_t bos = 1;
    float *logits = malloc(sizeof(float) * (size_t)cf_infer_config(m)->vocab_size);
    int rc = logits ? cf_infer_forward(m, &bos, 1, 0, logits, false, &err) : -1; /* warm-up: every weight once */
    free(logits);
    speed sp;
    if (rc == 0) rc = measure(m, prefill, decode, true, runs, &sp);
    if (rc == 0) printf("%.2f %.2f %.2f\n", sp.prefill_tps, sp.decode_tps, sp.prefill_cpu_tps);
    cf_infer_free(m);
    return rc;
}

typedef struct model_source {
    const char *label;
    const char *ckpt;          /* load from this checkpoint, or */
    const cf_model_config *cfg; /* build over random weights */
    random_weights *weights;
    long prefill, decode;
} model_source;

static cf_infer_model *open_model(const model_source *s, cf_dtype dtype, long max_seq, cf_error *err) {
    cf_infer_options opt = {.weight_dtype = dtype, .max_seq = max_seq};
    if (s->ckpt) return cf_infer_load(s->ckpt, &opt, err);
    s->weights->used = 0;
    return cf_infer_from_weights(s->cfg, random_lookup, s->weights, &opt, err);
}

/* The read bandwidth is measured right before each decode measurement at the same thread
 * count, so both see the same machine load (other processes come and go on a shared box). */
static int bench_model(const model_source *s, const float *stream, int runs) {
    static const cf_dtype dtypes[] = {CF_F32, CF_BF16, CF_Q8_0, CF_Q4_0};
    for (int d = 0; d < (int)(sizeof dtypes / sizeof dtypes[0]); d++) {
        cf_error err;
        cf_infer_model *m = open_model(s, dtypes[d], s->prefill + s->decode, &err);
        if (!m) {
            fprintf(stderr, "bench_generate: %s: %s\n", s->label, err.msg);
            return 1;
        }
        for (int threads = 1; threads <= 2; threads++) {
            cf_set_num_threads(threads, NULL);
            double read_cpu, bandwidth = read_bandwidth_gbs(stream, runs, &read_cpu);
            speed sp;
            if (measure(m, s->prefill, s->decode, false, runs, &sp) != 0) return cf_infer_free(m), 1;
            double gbs = (double)cf_infer_weight_bytes(m) * sp.decode_tps / 1e9;
            printf("%-12s %-5s %7d | %10.0f %10.1f | %8.2f %8.1f %8.1f%%", s->label, cf_dtype_name(dtypes[d]), threads,
                   sp.prefill_tps, sp.decode_tps, gbs, bandwidth, 100.0 * gbs / bandwidth);
            if (threads == 1) { /* per CPU second: what a core achieves while it has one */
                double gbs_cpu = (double)cf_infer_weight_bytes(m) * sp.decode_cpu_tps / 1e9;
                printf(" | %8.2f %8.1f %8.1f%%", gbs_cpu, read_cpu, 100.0 * gbs_cpu / read_cpu);
            }
            printf("\n");
            fflush(stdout);
        }
        cf_infer_free(m);
    }
    return 0;
}

int main(int argc, char **argv) {
    int runs = 3;
    long prefill = 128, decode = 64;
    bool skip_110m = false, compete = false;
    const char *model = NULL, *write_path = NULL;
    cf_dtype dtype = CF_F32;
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--prefill") == 0 && i + 1 < argc) prefill = atol(argv[++i]);
        else if (strcmp(argv[i], "--decode") == 0 && i + 1 < argc) decode = atol(argv[++i]);
        else if (strcmp(argv[i], "--skip-110m") == 0) skip_110m = true;
        else if (strcmp(argv[i], "--compete") == 0) compete = true;
        else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) model = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc && cf_dtype_parse(argv[i + 1], &dtype) == 0) i++;
        else if (strcmp(argv[i], "--write-llama2c") == 0 && i + 1 < argc) write_path = argv[++i];
        else {
            fprintf(stderr, "usage: bench_generate [--runs R] [--prefill P] [--decode D] [--skip-110m] [--compete]\n"
                            "       bench_generate --model CKPT --threads N [--dtype D] [--runs R] [--prefill P] [--decode D]\n"
                            "       bench_generate --write-llama2c OUT.bin\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 16 || prefill < 1 || decode < 1) {
        fprintf(stderr, "bench_generate: --runs must be 1..16, --prefill and --decode positive\n");
        return 2;
    }
    if (write_path) return write_llama2c(write_path);
    if (model) {
        if (threads < 1 || threads > 256) {
            fprintf(stderr, "bench_generate: --model needs --threads 1..256\n");
            return 2;
        }
        return bench_checkpoint(model, dtype, threads, prefill, decode, runs);
    }
    if (!cf_cpu()->avx2) {
        fprintf(stderr, "bench_generate: the bandwidth probe needs AVX2\n");
        return 1;
    }
    pid_t busy = compete ? fork() : -1;
    if (busy == 0)
        for (volatile unsigned long spin = 0;; spin++) {
        }
    float *stream = cf_aligned_alloc(sizeof(float) * STREAM_FLOATS);
    fill_random(stream, STREAM_FLOATS);
    printf("%s kernels%s; read = STREAM-like sum over 1 GiB (the best of 1 and 8 prefetched streams and 4 unprefetched per MiB, a thread) just before each decode measurement%s\n\n",
           cf_isa_name(cf_isa_active()), cf_cpu()->avx512_vnni ? " (VNNI for q8_0)" : "",
           busy > 0 ? "; a busy loop competes for a core" : "");
    printf("%-12s %-5s %7s | %10s %10s | %8s %8s %9s | %8s %8s %9s\n", "model", "dtype", "threads", "prefill/s",
           "decode/s", "GB/s", "read", "of read", "cpu GB/s", "cpu read", "of read");

    int rc = 0;
    const char *dir = getenv("CFORMERS_DATA_DIR");
    char bin[4096], ckpt[64];
    snprintf(bin, sizeof bin, "%s/stories260K/stories260K.bin", dir && *dir ? dir : "../shared/data");
    snprintf(ckpt, sizeof ckpt, "/tmp/bench_generate_%d.ckpt", (int)getpid());
    cf_convert_options opt = {.dtype = CF_F32};
    cf_error err;
    if (access(bin, R_OK) != 0) {
        printf("stories260K: %s not found, skipped\n", bin);
    } else if (cf_import_llama2c(bin, ckpt, &opt, &err) != 0) {
        fprintf(stderr, "bench_generate: %s\n", err.msg);
        rc = 1;
    } else {
        model_source s = {.label = "stories260K", .ckpt = ckpt, .prefill = 256, .decode = 256};
        rc = bench_model(&s, stream, runs);
        unlink(ckpt);
    }
    if (!skip_110m && rc == 0) {
        cf_model_config cfg;
        config_110m(&cfg);
        random_weights w = {.size = 135u * 1000 * 1000}; /* 110M plus the untied output head */
        w.data = cf_aligned_alloc(sizeof(float) * w.size);
        fill_random(w.data, w.size);
        model_source s = {.label = "llama-110M", .cfg = &cfg, .weights = &w, .prefill = prefill, .decode = decode};
        rc = bench_model(&s, stream, runs);
        cf_aligned_free(w.data);
    }
    cf_aligned_free(stream);
    if (busy > 0) kill(busy, SIGKILL), waitpid(busy, NULL, 0);
    printf("\nGB/s = matmul weight bytes read per decoded token x decode tokens/s; \"of read\" compares it with\n"
           "the read bandwidth measured just before it at the same thread count. cpu: the same per second\n"
           "of CPU time (1 thread only), which other jobs sharing the machine do not stretch.\n");
    return rc;
}
