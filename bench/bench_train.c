/* Training throughput of cformers on the LLaMA presets: tokens per second and model FLOPs
 * utilisation against this machine's measured FMA peak, one JSON line per preset.
 *
 *   bench_train [--steps N] [--warmup W] [--recompute none|full|select] PRESET:BATCH:SEQ[:DTYPE] ...
 *
 * DTYPE is model_config.compute_dtype (float32, the default, bfloat16 or float16). MFU is
 * against cf_gemm_peak_gflops of the unit the products run on (bf16: the bf16 unit; f32
 * and f16, whose products are f32: FMA), measured before and after each preset's steps,
 * the higher reading.
 * Each step is a full optimizer step (forward, backward, AdamW) on random tokens; the
 * reported time is the median of the timed steps after the warmup ones. Model FLOPs per
 * token follow the PaLM appendix: 6 * (parameters outside the embedding table, the
 * output head included) + 12 * layers * hidden * seq (attention scores and values).
 * bench/bench_train.sh runs this beside the same models in PyTorch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/config.h"
#include "cformers/gemm.h"
#include "cformers/rng.h"
#include "cformers/threads.h"
#include "cformers/train.h"
#include "obs/clock.h"

#include "bench_util.h"

static double flops_per_token(const cf_config *cfg) {
    return cf_model_train_flops_per_token(&cfg->model.model_config, cfg->runner_config.seq_length);
}

/* recompute_config overrides for --recompute: none, full (whole layers), select. */
static const char *const recompute_modes[][2] = {
    {"recompute_config.recompute=false", "recompute_config.select_recompute=false"},
    {"recompute_config.recompute=true", "recompute_config.select_recompute=false"},
    {"recompute_config.recompute=false", "recompute_config.select_recompute=true"},
};
static const char *const recompute_names[] = {"none", "full", "select"};

/* The measured peak of the unit the products of `compute` run on: bf16 products on the
 * bf16 unit (AMX / vdpbf16ps, else f32 FMA), f32 and f16 (widened to f32) on f32 FMA. */
static double peak_of(cf_dtype compute) {
    return 1e9 * cf_gemm_peak_gflops(compute == CF_BF16 ? CF_BF16 : CF_F32, cf_num_threads());
}

static int bench_one(const char *spec, int warmup, int steps, int recompute) {
    char preset[128], dtype_name[32] = "float32";
    long batch = 0, seq = 0;
    cf_dtype compute;
    int fields = sscanf(spec, "%127[^:]:%ld:%ld:%31s", preset, &batch, &seq, dtype_name);
    if (fields < 3 || cf_dtype_parse(dtype_name, &compute) != 0 ||
        (compute != CF_F32 && compute != CF_BF16 && compute != CF_F16)) {
        fprintf(stderr, "bench_train: '%s' is not PRESET:BATCH:SEQ[:float32|bfloat16|float16]\n", spec);
        return 2;
    }
    double peak = peak_of(compute);
    char o_batch[64], o_seq[64], o_steps[64], o_dtype[96];
    snprintf(o_batch, sizeof o_batch, "runner_config.batch_size=%ld", batch);
    snprintf(o_seq, sizeof o_seq, "runner_config.seq_length=%ld", seq);
    snprintf(o_steps, sizeof o_steps, "runner_config.train_steps=%d", warmup + steps);
    snprintf(o_dtype, sizeof o_dtype, "model.model_config.compute_dtype=%s", dtype_name);
    const char *overrides[] = {o_batch, o_seq, o_steps, "runner_config.gradient_accumulation_steps=1",
                               "train_dataset.data_dir=", o_dtype,
                               "lr_schedule.warmup_steps=0", /* a preset's warmup is longer than a bench run */
                               recompute_modes[recompute][0], recompute_modes[recompute][1]};
    cf_config cfg;
    cf_error err;
    cf_train_options opts = {.quiet = true};
    cf_trainer *t = NULL;
    if (cf_config_load_with_overrides(preset, overrides, 9, &cfg, &err) != 0 ||
        !(t = cf_trainer_create(&cfg, &opts, &err))) {
        fprintf(stderr, "bench_train: %s: %s\n", preset, err.msg);
        return 1;
    }
    size_t n = (size_t)(batch * (seq + 1));
    int32_t *tokens = malloc(n * sizeof *tokens);
    cf_rng rng;
    cf_rng_seed(&rng, 1);
    double *times = calloc((size_t)steps, sizeof *times), loss = 0;
    for (int s = 0; s < warmup + steps; s++) {
        for (size_t i = 0; i < n; i++) tokens[i] = (int32_t)cf_rng_below(&rng, (uint64_t)cfg.model.model_config.vocab_size);
        double t0 = cf_clock_seconds();
        if (cf_trainer_step(t, tokens, &loss, &err) != 0) {
            fprintf(stderr, "bench_train: %s: %s\n", preset, err.msg);
            return 1;
        }
        if (s >= warmup) times[s - warmup] = cf_clock_seconds() - t0;
    }
    /* Measured again after the steps, the higher reading kept: one reading in a busy
     * spell of a shared machine (half the real peak) once put MFU at 128%; the first
     * reading alone (cached per process) put it at 122% on an idle one. */
    peak = 1e9 * cf_gemm_peak_remeasure(compute == CF_BF16 ? CF_BF16 : CF_F32, cf_num_threads());
    double median = bench_median(times, steps), tps = (double)(batch * seq) / median;
    printf("{\"engine\": \"cformers\", \"preset\": \"%s\", \"dtype\": \"%s\", \"params\": %lld, \"batch\": %ld, \"seq\": %ld, "
           "\"threads\": %d, \"step_s\": %.4f, \"tokens_per_s\": %.1f, \"model_gflops\": %.2f, \"peak_gflops\": %.1f, "
           "\"mfu\": %.4f, \"loss\": %.4f, \"recompute\": \"%s\"}\n",
           preset, cf_dtype_name(compute), (long long)cf_model_param_count(&cfg.model.model_config), batch, seq, cf_num_threads(), median, tps,
           tps * flops_per_token(&cfg) / 1e9, peak / 1e9, tps * flops_per_token(&cfg) / peak, loss,
           recompute_names[recompute]);
    fflush(stdout);
    free(times);
    free(tokens);
    cf_trainer_free(t);
    return 0;
}

int main(int argc, char **argv) {
    int warmup = 1, steps = 3, first = 1, recompute = 0;
    for (; first < argc && strncmp(argv[first], "--", 2) == 0; first += 2) {
        if (first + 1 >= argc) break;
        if (strcmp(argv[first], "--steps") == 0) steps = atoi(argv[first + 1]);
        else if (strcmp(argv[first], "--warmup") == 0) warmup = atoi(argv[first + 1]);
        else if (strcmp(argv[first], "--recompute") == 0) {
            for (recompute = 2; recompute >= 0 && strcmp(argv[first + 1], recompute_names[recompute]) != 0;) recompute--;
            if (recompute < 0) break;
        } else break;
    }
    if (first >= argc || steps < 1 || warmup < 0 || recompute < 0) {
        fprintf(stderr, "usage: bench_train [--steps N] [--warmup W] [--recompute none|full|select] PRESET:BATCH:SEQ[:DTYPE] ...\n");
        return 2;
    }
    for (int i = first; i < argc; i++) {
        int rc = bench_one(argv[i], warmup, steps, recompute);
        if (rc) return rc;
    }
    return 0;
}
