/* Data pipeline throughput, all in one run on this machine:
 *   1. preprocessing MB/s (text -> record shards) with 1 and 2 workers, SentencePiece
 *      (LLaMA 2) and GPT-2 tokenizers;
 *   2. loader tokens/s from records (prefetching, 2 workers) against the on-the-fly
 *      baseline: read raw text and tokenize documents as batches are needed.
 * Each figure is the median of --runs runs. The corpus is Tiny Shakespeare repeated
 * --repeat times. The training-step wait on the loader needs a real training run: the
 * trainer reports it (cf_dataset_stats.wait_seconds, `make bench-train`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cformers/dataset.h"
#include "cformers/records.h"
#include "cformers/tokenizer.h"
#include "data/preprocess.h"

#include "bench_util.h"

enum { BATCH = 8, SEQ = 256 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Returns MB/s, leaving the records in `out` when keep is set. */
static double preprocess_once(const char *corpus, const char *tok, const char *out, int workers, bool keep) {
    const char *inputs[] = {corpus};
    cf_preprocess_options o = {.inputs = inputs, .n_inputs = 1, .tokenizer = tok, .output_dir = out,
                               .workers = workers, .valid_fraction = 0.01, .text_key = "text"};
    cf_preprocess_result r;
    cf_error err = {{0}};
    if (cf_preprocess(&o, &r, &err) != 0) {
        fprintf(stderr, "bench_data: %s\n", err.msg);
        exit(1);
    }
    if (!keep) cf_record_remove(out);
    return (double)r.bytes / 1e6 / r.seconds;
}

static double loader_tokens_per_s(const char *dir, int batches) {
    cf_dataset_options o = cf_dataset_default_options();
    o.dir = dir;
    o.batch_size = BATCH;
    o.seq_len = SEQ;
    o.num_workers = 2;
    cf_error err = {{0}};
    cf_dataset *ds = cf_dataset_open(&o, &err);
    if (!ds) {
        fprintf(stderr, "bench_data: %s\n", err.msg);
        exit(1);
    }
    int32_t *buf = malloc(sizeof(int32_t) * BATCH * (SEQ + 1));
    double t0 = now();
    for (int i = 0; i < batches; i++) cf_dataset_next(ds, buf, &err);
    double dt = now() - t0;
    cf_dataset_close(ds);
    free(buf);
    return (double)batches * BATCH * (SEQ + 1) / dt;
}

/* The baseline: with the raw text in memory and the tokenizer loaded (not timed, as the
 * records loader's open is not), tokenize blank-line-separated documents in order,
 * packing ids with EOS, until the batches are filled. */
static double on_the_fly_tokens_per_s(const char *corpus, const char *tok_path, int batches) {
    cf_error err = {{0}};
    cf_tokenizer *tok = cf_tokenizer_load(tok_path, &err);
    FILE *f = fopen(corpus, "rb");
    fseek(f, 0, SEEK_END);
    size_t len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(len + 1);
    len = fread(text, 1, len, f);
    fclose(f);
    size_t need = (size_t)BATCH * (SEQ + 1), have = 0, cap = need * 4, pos = 0;
    int32_t *pending = malloc(cap * sizeof *pending), *batch = malloc(need * sizeof *batch);
    double t0 = now();
    for (int b = 0; b < batches; b++) {
        while (have < need) {
            const char *end = strstr(text + pos, "\n\n");
            size_t doc_end = end ? (size_t)(end - text) : len;
            int32_t *ids;
            long n = cf_tokenizer_encode(tok, text + pos, doc_end - pos, false, &ids, &err);
            if (have + (size_t)n + 1 > cap) pending = realloc(pending, (cap = (have + (size_t)n + 1) * 2) * sizeof *pending);
            memcpy(pending + have, ids, (size_t)n * sizeof *ids);
            have += (size_t)n;
            pending[have++] = cf_tokenizer_eos(tok);
            free(ids);
            pos = end ? doc_end + 2 : 0;
        }
        memcpy(batch, pending, need * sizeof *batch);
        memmove(pending, pending + need, (have - need) * sizeof *pending);
        have -= need;
    }
    double dt = now() - t0;
    free(pending);
    free(batch);
    free(text);
    cf_tokenizer_free(tok);
    return (double)batches * (double)need / dt;
}

int main(int argc, char **argv) {
    int runs = 3, repeat = 4, batches = 400;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--runs") == 0) runs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--repeat") == 0) repeat = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--batches") == 0) batches = atoi(argv[i + 1]);
    }
    if (runs < 1 || runs > 15) runs = 3;
    const char *data = getenv("CFORMERS_DATA_DIR") ? getenv("CFORMERS_DATA_DIR") : "../shared/data";
    char src[4096], corpus[] = "/tmp/cf_bench_data_XXXXXX", tok_sp[4096], tok_gpt2[4096];
    snprintf(src, sizeof src, "%s/tinyshakespeare/input.txt", data);
    snprintf(tok_sp, sizeof tok_sp, "%s/llama2c-tokenizer/tokenizer.model", data);
    snprintf(tok_gpt2, sizeof tok_gpt2, "%s/gpt2-tokenizer", data);
    FILE *in = fopen(src, "rb");
    int fd = mkstemp(corpus);
    if (!in || fd < 0) {
        fprintf(stderr, "bench_data: cannot read %s (set CFORMERS_DATA_DIR)\n", src);
        return 1;
    }
    char *text = malloc(2 << 20);
    size_t len = fread(text, 1, 2 << 20, in);
    fclose(in);
    FILE *out = fdopen(fd, "wb");
    for (int r = 0; r < repeat; r++) fwrite(text, 1, len, out);
    fclose(out);
    free(text);
    double load = 0;
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf", &load) != 1) load = 0;
        fclose(la);
    }
    printf("corpus: Tiny Shakespeare x%d = %.1f MB; median of %d runs; batches of %d x %d tokens\n"
           "machine: %ld cores, load average %.1f at start (figures are only comparable within a quiet run)\n\n",
           repeat, (double)len * repeat / 1e6, runs, BATCH, SEQ + 1, sysconf(_SC_NPROCESSORS_ONLN), load);

    const char *toks[2][2] = {{"sentencepiece (llama2)", tok_sp}, {"gpt2 byte-level", tok_gpt2}};
    double *v = malloc((size_t)runs * sizeof *v);
    printf("%-24s %12s %12s\n", "preprocess MB/s", "1 worker", "2 workers");
    for (int t = 0; t < 2; t++) {
        double m[2];
        for (int w = 1; w <= 2; w++) {
            for (int r = 0; r < runs; r++) v[r] = preprocess_once(corpus, toks[t][1], "/tmp/cf_bench_data_out", w, false);
            m[w - 1] = bench_median(v, runs);
        }
        printf("%-24s %12.2f %12.2f\n", toks[t][0], m[0], m[1]);
    }

    printf("\n%-24s %14s %14s %8s\n", "loader tokens/s", "records", "on the fly", "ratio");
    for (int t = 0; t < 2; t++) {
        preprocess_once(corpus, toks[t][1], "/tmp/cf_bench_data_out", 2, true);
        double rec, fly;
        for (int r = 0; r < runs; r++) v[r] = loader_tokens_per_s("/tmp/cf_bench_data_out", batches);
        rec = bench_median(v, runs);
        for (int r = 0; r < runs; r++) v[r] = on_the_fly_tokens_per_s(corpus, toks[t][1], batches);
        fly = bench_median(v, runs);
        cf_record_remove("/tmp/cf_bench_data_out");
        printf("%-24s %14.3g %14.3g %7.1fx\n", toks[t][0], rec, fly, rec / fly);
    }
    printf("\ntraining-step wait on the loader: measured by the trainer during a real run\n"
           "(cf_dataset_stats.wait_seconds; see `make bench-train`).\n");
    free(v);
    unlink(corpus);
    return 0;
}
