/* Shared by the tests that train tiny models on a small byte-level text
 * (test_train_resume, mpi_data_parallel): the text, and a config with a 2-layer,
 * 32-wide model over 256 byte ids at sequence length 32. */
#ifndef CFORMERS_TRAIN_TEST_UTIL_H
#define CFORMERS_TRAIN_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "cformers/config.h"

/* About 30 KB of words from a fixed pseudo-random sequence. */
static inline void train_test_write_text(const char *path) {
    static const char *words[] = {"the", "king", "shall", "speak", "of", "love", "and", "war", "to", "thee",
                                  "my", "lord", "what", "news", "from", "rome", "\n", ", ", ". "};
    FILE *f = fopen(path, "w");
    uint32_t x = 12345;
    for (int i = 0; i < 6000; i++) {
        x = x * 1103515245u + 12345u;
        fprintf(f, "%s ", words[(x >> 16) % (sizeof words / sizeof words[0])]);
    }
    fclose(f);
}

/* Defaults, the tiny model of `arch`, seed 7, cosine lr 1e-2 -> 1e-3 after 2 warm-up
 * steps, clipping at 1, the text at `text` with a 10% held-out split. */
static inline void train_test_config(cf_config *cfg, cf_arch arch, const char *text) {
    cf_config_defaults(cfg);
    cf_model_config *m = &cfg->model.model_config;
    m->arch = arch;
    m->tie_word_embeddings = arch == CF_ARCH_GPT2;
    m->vocab_size = 256;
    m->hidden_size = 32;
    m->num_layers = 2;
    m->num_heads = 4;
    m->num_kv_heads = arch == CF_ARCH_GPT2 ? 4 : 2;
    m->intermediate_size = 64;
    m->max_position_embeddings = 32;
    m->rope_theta = 10000.0;
    m->rms_norm_eps = 1e-5;
    m->initializer_range = 0.02;
    if (arch == CF_ARCH_GEMMA2 || arch == CF_ARCH_GEMMA3) { /* local and global layers, Gemma 2's caps, two bases */
        m->sliding_window = 8;
        m->sliding_window_pattern = arch == CF_ARCH_GEMMA2 ? 2 : 3;
        m->attn_logit_softcap = m->final_logit_softcap = arch == CF_ARCH_GEMMA2 ? 5.0 : 0;
        m->rope_local_theta = arch == CF_ARCH_GEMMA3 ? 500.0 : 0;
    }
    cfg->runner_config.seq_length = 32;
    cfg->optimizer.clip_grad_norm = 1.0;
    cfg->lr_schedule = (cf_lr_schedule_config){.type = CF_LR_COSINE, .learning_rate = 1e-2, .lr_end = 1e-3,
                                               .warmup_steps = 2};
    cfg->seed = 7;
    snprintf(cfg->train_dataset.data_dir, sizeof cfg->train_dataset.data_dir, "%s", text);
    cfg->train_dataset.eval_split = 0.1;
}

#endif
