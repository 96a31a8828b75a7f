/* cformers train: resolve the config, build the trainer, run it. */
#include "cli.h"
#include "cli_parse.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/config.h"
#include "cformers/infer.h"
#include "cformers/model_source.h"
#include "cformers/dist.h"
#include "cformers/threads.h"
#include "cformers/train.h"
#include "io/ckpt_tokenizer.h"
#include "obs/dashboard.h"
#include "train/checkpoint_files.h"

static void print_help(void) {
    printf("usage: cformers train --config FILE|PRESET [--section.key=value ...] [--resume [CKPT]]\n"
           "                      [--overwrite] [--steps N] [--quiet] [--dump-batches FILE]\n"
           "                      [--save-initial CKPT] [--verbose]\n"
           "\n"
           "Trains a model from a YAML config or a named preset (`cformers config list`): random\n"
           "init from `seed` (or `load_checkpoint`), AdamW with the lr_schedule, evaluation on the\n"
           "held-out split every runner_config.eval_interval steps, a text sample every\n"
           "sample_interval steps, checkpoints every save_interval steps and at the end in\n"
           "output_dir, metrics as JSON lines in output_dir/<callbacks.metrics_monitor.file>.\n"
           "\n"
           "options:\n"
           "  --config FILE|PRESET   the run configuration\n"
           "  --section.key=value    override one config key (e.g. --runner_config.batch_size=8)\n"
           "  --resume [CKPT]        continue from CKPT, or from the newest valid checkpoint in\n"
           "                         output_dir; the losses that follow are bit-identical to an\n"
           "                         uninterrupted run; the model and seq_length must not change\n"
           "  --overwrite            start a new run in an output_dir that holds another run's\n"
           "                         checkpoints, deleting them (without it that is refused)\n"
           "  --steps N              stop after N optimizer steps in total (the schedule still spans\n"
           "                         runner_config.train_steps, so a later --resume carries on)\n"
           "  --quiet                no progress display, reports or samples\n"
           "  --verbose              name each config key that has no effect here (MindFormers'\n"
           "                         Ascend settings), instead of one line counting them\n"
           "  --dump-batches FILE    write every training and evaluation batch (token ids) to FILE,\n"
           "                         for replaying the run in PyTorch (docs/training.md)\n"
           "  --save-initial CKPT    write the weights before the first step to checkpoint CKPT\n"
           "  --dashboard [PORT]     serve the live dashboard of output_dir on 127.0.0.1:PORT (default\n"
           "                         8080) while training (cformers dashboard --help)\n"
           "\n"
           "run_mode eval prints the validation loss and perplexity of load_checkpoint on the\n"
           "held-out split; run_mode predict generates from load_checkpoint for predict.input_data\n"
           "(a prompt or a file of prompts). MindFormers YAML files load as they are\n"
           "(docs/mindformers.md). load_checkpoint may name a cformers checkpoint, a Hugging Face\n"
           "directory or a GGUF file (the last two converted in memory, f32, once per run).\n"
           "\n"
           "On a terminal the progress line is rewritten in place; otherwise a line is printed\n"
           "every runner_config.log_interval steps.\n"
           "\n"
           "Profiling: --callbacks.profile_monitor.enable=true times every op of steps start_step..\n"
           "stop_step, then prints a per-op table and writes output_dir/profile.json and a Chrome\n"
           "trace output_dir/<timeline> for chrome://tracing or ui.perfetto.dev (docs/training.md).\n"
           "\n"
           "Signals: SIGTERM or SIGINT saves a checkpoint at the next step boundary and exits,\n"
           "0 after SIGTERM, 130 after SIGINT (a second one exits at once); SIGUSR1 saves a\n"
           "checkpoint and training goes on. With several ranks a signal to any rank acts on all\n"
           "of them after the same step.\n"
           "\n"
           "Data parallel: run under mpirun or `cformers launch -n N -- train ...`; every rank\n"
           "reads its share of each global batch (ranks x batch_size x accumulation rows),\n"
           "gradients are summed while backward runs, rank 0 prints and saves\n"
           "(parallel_config.*, docs/distributed.md).\n"
           "\n"
           "examples (run from the repository root after those of tokenizer, preprocess and train):\n"
           "  cformers train --config tiny_shakespeare --train_dataset.data_dir=out/shards \\\n"
           "      --train_dataset.tokenizer=out/tok.json --output_dir=out/run --steps 2\n"
           "  cformers train --config configs/shakespeare.yaml --output_dir=out/bytes --steps 2 \\\n"
           "    --train_dataset.data_dir=tests/fixtures/data/tok_tok512.txt --runner_config.batch_size=4\n");
}

typedef struct train_args {
    const char *config;
    const char **overrides;
    int n_overrides;
    int dashboard_port; /* -1: no dashboard */
    bool verbose;       /* every config warning, each inert key on its own line */
    cf_train_options opts;
} train_args;

static int parse_args(int argc, char **argv, train_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--config") == 0) {
            if (i + 1 >= argc) return cli_usage_error("train", "--config needs a file or preset name");
            a->config = argv[++i];
        } else if (strncmp(arg, "--config=", 9) == 0) {
            a->config = arg + 9;
        } else if (strcmp(arg, "--resume") == 0) {
            a->opts.resume = i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 ? argv[++i] : "";
        } else if (strcmp(arg, "--steps") == 0) {
            char *end = NULL;
            long long n = i + 1 < argc ? strtoll(argv[++i], &end, 10) : 0;
            if (!end || *end || n < 1) return cli_usage_error("train", "--steps needs a positive step count");
            a->opts.stop_after = n;
        } else if (strcmp(arg, "--dump-batches") == 0 || strcmp(arg, "--save-initial") == 0) {
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
                return cli_usage_error("train", "%s needs a file name", arg);
            const char **file = strcmp(arg, "--dump-batches") == 0 ? &a->opts.dump_batches : &a->opts.save_initial;
            *file = argv[++i];
        } else if (strcmp(arg, "--dashboard") == 0) {
            a->dashboard_port = 8080;
            if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                char *end = NULL;
                long port = strtol(argv[++i], &end, 10);
                if (*end || port < 0 || port > 65535)
                    return cli_usage_error("train", "--dashboard %s is not a port number in 0..65535", argv[i]);
                a->dashboard_port = (int)port;
            }
        } else if (strcmp(arg, "--overwrite") == 0) {
            a->opts.overwrite = true;
        } else if (strcmp(arg, "--quiet") == 0) {
            a->opts.quiet = true;
        } else if (strcmp(arg, "--verbose") == 0) {
            a->verbose = true;
        } else if (cf_config_is_override_arg(arg)) {
            a->overrides[a->n_overrides++] = arg;
            if (strncmp(arg, "--train_dataset.tokenizer=", 26) == 0) a->opts.tokenizer_given = true;
        } else {
            return cli_usage_error("train", "unknown argument '%s'", arg);
        }
    }
    if (!a->config) return cli_usage_error("train", "--config FILE|PRESET is required");
    return 0;
}

/* A run ended early by a signal saved its checkpoint: say where it stopped, on every rank
 * (so a multi-rank job shows they agreed on the step), and return the exit status: 0, or
 * 130 after SIGINT (Ctrl-C), so a script tells an interrupted run from a finished one.
 * SIGTERM, a scheduler's "stop now", exits 0: the job did what was asked of it. */
static int report_stop(const cf_trainer *t, cf_dist *dist) {
    int sig = cf_trainer_stop_signal(t);
    if (!sig) return 0;
    char who[64] = "";
    if (cf_dist_size(dist) > 1) snprintf(who, sizeof who, "rank %d of %d: ", cf_dist_rank(dist), cf_dist_size(dist));
    const char *name = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal to another rank";
    int status = sig == SIGINT ? 130 : 0;
    fprintf(stderr, "cformers train: %sstopped by %s at step %lld with a checkpoint; --resume continues from it%s\n",
            who, name, (long long)cf_trainer_steps_done(t), status ? " (exit 130: interrupted)" : "");
    return status;
}

static void print_piece(void *ctx, int32_t token, const char *piece, size_t len) {
    (void)ctx, (void)token;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
}

/* The prompts of predict.input_data: the lines of a file, or the text itself. */
static char **predict_prompts(const char *input, int *n) {
    char **prompts = NULL;
    *n = 0;
    FILE *f = *input ? fopen(input, "r") : NULL;
    if (!f) {
        prompts = cf_xmalloc(sizeof *prompts);
        prompts[(*n)++] = cf_xstrdup(input);
        return prompts;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (!len) continue;
        prompts = cf_xrealloc(prompts, sizeof *prompts * (size_t)(*n + 1));
        prompts[(*n)++] = cf_xstrdup(line);
    }
    free(line);
    fclose(f);
    return prompts;
}

/* run_mode predict: generation from load_checkpoint for each prompt of predict.input_data,
 * one "prompt + continuation" line each (what `cformers generate` prints). */
static int run_predict(const cf_config *cfg, bool tokenizer_given) {
    const cf_predict_config *p = &cfg->predict;
    cf_error err = {{0}};
    if (!cfg->load_checkpoint[0]) {
        fprintf(stderr, "cformers train: run_mode predict needs load_checkpoint (the model to generate with)\n");
        return 2;
    }
    /* The checkpoint's own tokenizer, unless one is named on the command line (or it has none). */
    cf_tokenizer *tok = NULL;
    bool present = false;
    if (!tokenizer_given) {
        cf_ckpt *c = cf_ckpt_open(cfg->load_checkpoint, false, &err);
        if (c) tok = cf_ckpt_load_tokenizer(c, &present, &err);
        cf_ckpt_close(c);
        if (!c) present = true; /* the error is the checkpoint's */
    }
    if (!present && cfg->train_dataset.tokenizer[0]) tok = cf_tokenizer_load(cfg->train_dataset.tokenizer, &err);
    else if (!present) cf_fail(&err, "%s: no tokenizer embedded; set train_dataset.tokenizer", cfg->load_checkpoint);
    cf_infer_options opt = {.weight_dtype = CF_F32};
    cf_infer_model *m = tok ? cf_infer_load(cfg->load_checkpoint, &opt, &err) : NULL;
    if (!m) {
        fprintf(stderr, "cformers train: run_mode predict: %s\n", err.msg);
        cf_tokenizer_free(tok);
        return 1;
    }
    int n = 0, rc = 0;
    char **prompts = predict_prompts(p->input_data, &n);
    for (int i = 0; i < n && rc == 0; i++) {
        int32_t *ids = NULL;
        long prompt_tokens = cf_tokenizer_encode(tok, prompts[i], strlen(prompts[i]), true, &ids, &err);
        free(ids);
        long budget = p->max_new_tokens;
        if (p->max_length > 0 && prompt_tokens >= 0) budget = p->max_length - prompt_tokens;
        if (p->max_length > 0 && budget > p->max_new_tokens) budget = p->max_new_tokens;
        if (prompt_tokens < 0 || budget < 1) {
            fprintf(stderr, "cformers train: run_mode predict: prompt %d: %s\n", i + 1,
                    prompt_tokens < 0 ? err.msg : "longer than predict.max_length");
            rc = 1;
            break;
        }
        cf_generate_params gp = {.max_new_tokens = budget,
                                 .sampling = {.temperature = p->do_sample ? (float)p->temperature : 0.0f,
                                              .top_k = (int)p->top_k, .top_p = (float)p->top_p,
                                              .seed = (uint64_t)cfg->seed}};
        cf_generate_stats st;
        fputs(prompts[i], stdout);
        if (cf_generate(m, tok, prompts[i], &gp, print_piece, NULL, NULL, &st, &err) != 0) {
            fprintf(stderr, "\ncformers train: run_mode predict: %s\n", err.msg);
            rc = 1;
        }
        printf("\n");
        fflush(stdout);
    }
    for (int i = 0; i < n; i++) free(prompts[i]);
    free(prompts);
    cf_infer_free(m);
    cf_tokenizer_free(tok);
    return rc;
}

int cmd_train(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        print_help();
        return 0;
    }
    train_args a = {.overrides = calloc((size_t)argc, sizeof(char *)), .dashboard_port = -1};
    int rc = parse_args(argc, argv, &a);
    cf_config cfg;
    cf_error err = {{0}};
    if (rc == 0) {
        cli_config_warnings_begin("train", a.verbose);
        if (cf_config_load_for_run(a.config, a.overrides, a.n_overrides, &cfg, &err) != 0) {
            fprintf(stderr, "cformers train: %s\n", err.msg);
            rc = 2;
        }
        cli_config_warnings_end();
    }
    free(a.overrides);
    if (rc != 0) return rc;
    const cf_model_source *converted = cfg.load_checkpoint[0] ? cf_model_source_find(cfg.load_checkpoint) : NULL;
    if (converted) fprintf(stderr, "%s\n", cf_model_source_status(converted));
    if (cfg.context.num_threads > 0 && cf_set_num_threads((int)cfg.context.num_threads, &err) != 0) {
        fprintf(stderr, "cformers train: context.num_threads: %s\n", err.msg);
        return 1;
    }
    cf_dist *dist = cf_dist_open(&err);
    if (!dist) {
        fprintf(stderr, "cformers train: %s\n", err.msg);
        return 1;
    }
    a.opts.dist = dist;
    /* Run again by `cformers launch --max-restarts`: resume what the failed run saved, or
     * start over when it saved nothing. */
    const char *restart = getenv("CFORMERS_LAUNCH_RESTART");
    a.opts.restart = restart ? atoi(restart) : 0;
    a.opts.resume_if_any = a.opts.restart > 0;
    cf_dashboard *dashboard = NULL;
    if (a.dashboard_port >= 0 && cf_dist_rank(dist) == 0) {
        cf_dashboard_options o = {.logdir = cfg.output_dir, .port = a.dashboard_port};
        if (cf_make_dirs(cfg.output_dir, &err) != 0 || !(dashboard = cf_dashboard_start(&o, &err))) {
            fprintf(stderr, "cformers train: --dashboard: %s\n", err.msg);
            cf_dist_abort(dist, 1);
            cf_dist_close(dist);
            return 1;
        }
        printf("dashboard: http://127.0.0.1:%d/\n", cf_dashboard_port(dashboard));
        fflush(stdout);
    }
    if (cfg.run_mode == CF_RUN_PREDICT) {
        int prc = cf_dist_rank(dist) == 0 ? run_predict(&cfg, a.opts.tokenizer_given) : 0;
        cf_dashboard_stop(dashboard);
        cf_dist_close(dist);
        return prc;
    }
    cf_trainer *t = cf_trainer_create(&cfg, &a.opts, &err);
    if (t && cfg.run_mode == CF_RUN_EVAL) {
        /* The validation loss and perplexity of load_checkpoint on the held-out split: the
         * same batches, so the same figure, as the training run's evaluation at that step. */
        double loss = 0;
        int ok = cf_trainer_evaluate(t, &loss, &err) == 0;
        if (ok && cf_dist_rank(dist) == 0)
            printf("%s: validation loss %.4f, perplexity %.4f (%lld batches of %lld x %lld)\n", cfg.load_checkpoint, loss,
                   exp(loss), (long long)cfg.runner_config.eval_steps, (long long)cfg.runner_config.batch_size,
                   (long long)cfg.runner_config.seq_length);
        if (!ok) fprintf(stderr, "cformers train: run_mode eval: %s\n", err.msg);
        cf_trainer_free(t);
        cf_dashboard_stop(dashboard);
        cf_dist_close(dist);
        return ok ? 0 : 1;
    }
    if (!t || cf_trainer_run(t, &err) != 0) {
        if (cf_dist_size(dist) > 1)
            fprintf(stderr, "cformers train: rank %d of %d: %s\n", cf_dist_rank(dist), cf_dist_size(dist), err.msg);
        else
            fprintf(stderr, "cformers train: %s\n", err.msg);
        cf_trainer_free(t);
        cf_dashboard_stop(dashboard);
        cf_dist_abort(dist, 1); /* the other ranks would wait for this one */
        cf_dist_close(dist);
        return 1;
    }
    int status = report_stop(t, dist);
    cf_trainer_free(t);
    cf_dashboard_stop(dashboard);
    cf_dist_close(dist);
    return status;
}
