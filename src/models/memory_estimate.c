/* Analytic memory of one training step: weights, gradients, AdamW state, the
 * activations saved for backward and backward's largest transient. docs/config.md lists every saved tensor counted here;
 * the graph memory planner gives the exact figure for a built graph. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cformers/config.h"
#include "cformers/fused.h"
#include "cformers/gemm.h"
#include "cformers/threads.h"
#include "models/family.h"
#include "models/lora.h"

typedef struct lora_count {
    const cf_config *cfg;
    double adapters, frozen_bytes;
} lora_count;

/* One tensor of the model: its adapter's elements when targeted, its frozen bytes. */
static int count_lora(void *ctx, const cf_family_weight *w, long layer) {
    lora_count *c = ctx;
    const cf_model_config *m = &c->cfg->model.model_config;
    const cf_lora_config *l = &c->cfg->lora;
    int64_t shape[2];
    int ndim = cf_weight_shape(m, w, shape);
    double n = ndim == 2 ? (double)shape[0] * (double)shape[1] : (double)shape[0];
    if (cf_lora_patterns_match(l->freeze_exclude, w->name)) return 0; /* trains in full: counted with the model */
    cf_dtype d = ndim == 2 && (!cf_dtype_is_blocks(l->base_dtype) || shape[1] % 32 == 0) ? l->base_dtype : CF_F32;
    c->frozen_bytes += ndim == 2 ? (double)cf_dtype_tensor_bytes(d, 2, shape) : 4 * n;
    if (cf_lora_targets(l, cf_family_of(m->arch), w->role, layer))
        c->adapters += (double)l->rank * (double)(shape[0] + shape[1]);
    return 0;
}

/* One transformer block, per token: the family's terms (family.h; `recomputed` drops what
 * select_recompute rebuilds: the SwiGLU / GELU output and, with unfused attention, the
 * probabilities and the attention output; the inputs of those ops stay, their backward
 * reads them), plus attention: the fused kernel keeps one log-sum-exp per head; the unfused
 * one keeps the probabilities, one row of seq_length per head (causal rows stored in full). */
static cf_saved_terms block_elements(const cf_config *cfg, bool recomputed) {
    const cf_model_config *m = &cfg->model.model_config;
    cf_saved_terms e = cf_family_of(m->arch)->block_saved(m, recomputed);
    double heads = (double)m->num_heads, seq = (double)cfg->runner_config.seq_length;
    bool drops_attention = recomputed && !m->use_flash_attention;
    if (drops_attention) e.compute -= (double)m->hidden_size;
    else e.f32 += m->use_flash_attention ? heads : heads * seq;
    return e;
}

void cf_config_memory_estimate(const cf_config *cfg, cf_memory_estimate *est) {
    const cf_model_config *m = &cfg->model.model_config;
    memset(est, 0, sizeof *est);
    est->params = cf_model_param_count(m);
    double p = (double)est->params;
    if (cf_lora_on(&cfg->lora)) { /* the adapters alone train; the base is held frozen in its dtype */
        lora_count c = {.cfg = cfg};
        cf_weights_foreach(m, count_lora, &c);
        est->lora_params = (int64_t)c.adapters;
        est->frozen_bytes = c.frozen_bytes;
        p = c.adapters;
    }
    est->weights_bytes = p * (double)cf_dtype_size(m->param_init_type);
    if (m->compute_dtype != m->param_init_type) est->compute_weights_bytes = p * (double)cf_dtype_size(m->compute_dtype);
    est->grads_bytes = p * (double)cf_dtype_size(m->param_init_type);
    est->optimizer_bytes = 2 * p * 4;
    const cf_parallel_config *par = &cfg->parallel_config;
    if (par->optimizer_shard && par->data_parallel > 1) est->optimizer_bytes /= (double)par->data_parallel;

    double tokens = (double)(cfg->runner_config.batch_size * cfg->runner_config.seq_length);
    double layers = (double)m->num_layers;
    double csize = (double)cf_dtype_size(m->compute_dtype), fsize = (double)cf_dtype_size(m->softmax_compute_type);
    const cf_recompute_config *rc = &cfg->recompute_config;
    cf_saved_terms full = block_elements(cfg, false), kept = block_elements(cfg, rc->select_recompute);
    /* Layers recomputed whole keep only their input and are rebuilt one at a time, after
     * the other layers' backward; those keep what select_recompute leaves, plus one
     * block's rebuilt part at a time. */
    double whole = !rc->recompute ? 0 : rc->recompute_layers > 0 && rc->recompute_layers < m->num_layers
                                            ? (double)rc->recompute_layers : layers;
    double saved = kept.compute * csize + kept.f32 * fsize, block = full.compute * csize + full.f32 * fsize;
    double checkpoints = whole * (double)m->hidden_size * csize, others = (layers - whole) * saved;
    double rebuilt = rc->select_recompute && whole < layers ? block - saved : 0;
    double per_token = checkpoints + (whole > 0 && block > others + rebuilt ? block : others + rebuilt);
    /* final norm input and output */
    per_token += 2 * (double)m->hidden_size * csize;
    double vocab = (double)m->vocab_size, d = (double)m->hidden_size;
    if (cfg->context.fuse_cross_entropy) {
        /* The fused head keeps the gradient of x it computed in the forward (the output
         * weights' goes straight into the gradient block) and works on one chunk of logits
         * at a time (with bf16 operands: f32 logits for part of it, its gradient bf16). */
        per_token += d * fsize;
        est->activation_bytes = tokens * per_token;
        long chunk = cf_cross_entropy_chunk_rows((long)tokens, (long)vocab);
        est->workspace_bytes = (double)cf_cross_entropy_logits_bytes(chunk, (long)vocab, m->compute_dtype == CF_BF16 ? CF_BF16 : CF_F32);
    } else {
        /* The logits are kept in f32 for the loss; backward starts with every saved
         * activation alive plus the gradient of the logits, and later transients (one
         * block's gradients) are far smaller and meet fewer live tensors. */
        per_token += vocab * fsize;
        est->activation_bytes = tokens * per_token;
        est->workspace_bytes = tokens * vocab * fsize;
    }

    /* f32 products always (the output layer and loss); bf16 ones too under bf16 mixed
     * precision (f16 operands are widened for the f32 kernels). */
    double scratch = (double)cf_gemm_scratch_bytes(CF_F32);
    if (m->compute_dtype == CF_BF16) scratch += (double)cf_gemm_scratch_bytes(CF_BF16);
    est->kernel_scratch_bytes = (double)cf_num_threads() * scratch;

    est->total_bytes = est->weights_bytes + est->compute_weights_bytes + est->grads_bytes + est->optimizer_bytes +
                       est->activation_bytes + est->workspace_bytes + est->kernel_scratch_bytes + est->frozen_bytes;
}

static void format_bytes(double bytes, char *buf, size_t cap) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
}

static void format_thousands(int64_t v, char *buf, size_t cap) {
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%" PRId64, v < 0 ? -v : v), used = 0;
    if (v < 0 && used + 1 < (int)cap) buf[used++] = '-';
    for (int i = 0; i < n && used + 2 < (int)cap; i++) {
        if (i && (n - i) % 3 == 0) buf[used++] = ',';
        buf[used++] = digits[i];
    }
    buf[used] = '\0';
}

static void print_row(FILE *out, const char *label, double bytes, const char *note) {
    char size[32] = "";
    if (bytes >= 0) format_bytes(bytes, size, sizeof size);
    fprintf(out, "  %-38s %12s%s%s\n", label, size, note ? "  " : "", note ? note : "");
}

void cf_memory_estimate_print(FILE *out, const cf_config *cfg, const cf_memory_estimate *est,
                              const cf_memory_row *extra, int n_extra) {
    const cf_model_config *m = &cfg->model.model_config;
    const char *param_type = cf_dtype_name(m->param_init_type), *compute = cf_dtype_name(m->compute_dtype);
    char params[40], label[64], note[96];
    format_thousands(est->params, params, sizeof params);
    fprintf(out, "parameters: %s\n", params);
    if (est->lora_params) {
        format_thousands(est->lora_params, params, sizeof params);
        fprintf(out, "LoRA: rank %" PRId64 ", alpha %g on %s: %s adapter parameters train, the base is frozen\n",
                cfg->lora.rank, cfg->lora.alpha, cfg->lora.target_modules, params);
    }
    fprintf(out, "memory for one training step (batch %" PRId64 " x seq_length %" PRId64 ", compute %s):\n",
            cfg->runner_config.batch_size, cfg->runner_config.seq_length, compute);
    if (est->lora_params) {
        snprintf(label, sizeof label, "frozen base (%s)", cf_dtype_name(cfg->lora.base_dtype));
        print_row(out, label, est->frozen_bytes, "no gradient, no moments; norms f32");
    }
    snprintf(label, sizeof label, est->lora_params ? "LoRA adapters (%s master)" : "weights (%s master)", param_type);
    print_row(out, label, est->weights_bytes, NULL);
    if (est->compute_weights_bytes > 0) {
        snprintf(label, sizeof label, "weights (%s compute copy)", compute);
        print_row(out, label, est->compute_weights_bytes, NULL);
    }
    snprintf(label, sizeof label, "gradients (%s)", param_type);
    print_row(out, label, est->grads_bytes, NULL);
    const cf_parallel_config *par = &cfg->parallel_config;
    if (par->data_parallel > 1 && par->optimizer_shard)
        snprintf(note, sizeof note, "per rank, sharded over %" PRId64 " ranks (ZeRO-1); %.1f MiB unsharded",
                 par->data_parallel, 8.0 * (double)est->params / (1024.0 * 1024.0));
    else if (par->data_parallel > 1)
        snprintf(note, sizeof note, "per rank; %.1f MiB with parallel_config.optimizer_shard",
                 est->optimizer_bytes / (double)par->data_parallel / (1024.0 * 1024.0));
    print_row(out, "optimizer state (AdamW m, v; f32)", est->optimizer_bytes, par->data_parallel > 1 ? note : NULL);
    const cf_recompute_config *rc = &cfg->recompute_config;
    int64_t whole = rc->recompute_layers > 0 && rc->recompute_layers < m->num_layers ? rc->recompute_layers : m->num_layers;
    if (rc->recompute && whole < m->num_layers)
        snprintf(note, sizeof note, "first %" PRId64 " of %" PRId64 " layers recomputed%s", whole, m->num_layers,
                 rc->select_recompute ? ", selective in the others" : "");
    else
        snprintf(note, sizeof note, "%s", rc->recompute ? "full recompute" : rc->select_recompute ? "selective recompute" : "");
    print_row(out, "activations (saved for backward)", est->activation_bytes, note[0] ? note : NULL);
    print_row(out, "backward workspace (logits gradient)", est->workspace_bytes, NULL);
    snprintf(note, sizeof note, "%d threads", cf_num_threads());
    print_row(out, "GEMM packing buffers", est->kernel_scratch_bytes, note);
    print_row(out, "total", est->total_bytes, NULL);
    for (int i = 0; i < n_extra; i++) print_row(out, extra[i].label, extra[i].bytes, extra[i].note);
}
