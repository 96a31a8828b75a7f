#include "io/model_import.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/checkpoint.h"
#include "cformers/tokenizer.h"
#include "io/ckpt_tokenizer.h"

typedef struct import_ctx {
    const cf_model_config *cfg;
    const cf_convert_options *opt;
    cf_ckpt_writer *w;
    model_fill_fn fill;
    model_q8_fn q8;
    void *fill_ctx;
    float *f32;    /* the largest tensor, reused */
    void *narrow;  /* its bf16/f16 copy */
    cf_error *err;
} import_ctx;

static int import_one(void *arg, const cf_family_weight *wt, long layer) {
    import_ctx *c = arg;
    char name[128];
    int64_t shape[2];
    int ndim = cf_weight_describe(c->cfg, wt, layer, name, sizeof name, shape);
    size_t n;
    cf_weight_numel(c->cfg, wt, &n); /* fits: cf_model_config_check */
    if (c->opt->progress && wt->role == WR_ATTN_NORM)
        fprintf(stderr, "convert: layer %ld/%lld\n", layer + 1, (long long)c->cfg->num_layers);
    cf_dtype want = c->opt->dtype;
    const void *stored = ndim == 2 && cf_dtype_is_blocks(want) && c->q8 ? c->q8(c->fill_ctx, wt, layer, want) : NULL;
    if (stored) return cf_ckpt_write_tensor(c->w, name, want, ndim, shape, stored, c->err);
    if (c->fill(c->fill_ctx, wt, layer, c->f32, n, c->err) != 0) return -1;
    /* norms stay f32: they are tiny and numerically sensitive */
    cf_dtype dt = ndim == 1 ? CF_F32 : c->opt->dtype;
    const void *data = c->f32;
    if (dt == CF_BF16) cf_convert_f32_to_bf16(c->f32, c->narrow, n), data = c->narrow;
    if (dt == CF_F16) cf_convert_f32_to_f16(c->f32, c->narrow, n), data = c->narrow;
    if (!cf_dtype_is_blocks(dt)) return cf_ckpt_write_tensor(c->w, name, dt, ndim, shape, data, c->err);
    void *q = cf_xmalloc(cf_dtype_tensor_bytes(dt, ndim, shape)); /* rows padded to whole blocks */
    cf_quantize_blocks(dt, c->f32, q, shape[0], shape[1]);
    int rc = cf_ckpt_write_tensor(c->w, name, dt, ndim, shape, q, c->err);
    free(q);
    return rc;
}

/* Elements of the largest tensor; the caller's source has checked every tensor's shape
 * against its file, so buffers of this size are bounded by the file. */
static size_t largest_tensor(const cf_model_config *m) {
    const cf_family *f = cf_family_of(m->arch);
    size_t best = 0;
    for (int k = 0; k < f->n_weights; k++) {
        size_t n;
        if (cf_weight_numel(m, &f->weights[k], &n) && n > best) best = n;
    }
    return best;
}

int cf_model_import_write(const char *out_path, const cf_model_config *cfg, const cf_convert_options *opt,
                       const char *source, model_fill_fn fill, void *ctx, cf_error *err) {
    return cf_model_import_write_q8(out_path, cfg, opt, source, fill, NULL, ctx, NULL, err);
}

int cf_model_import_write_q8(const char *out_path, const cf_model_config *cfg, const cf_convert_options *opt,
                          const char *source, model_fill_fn fill, model_q8_fn q8, void *ctx,
                          const ckpt_tok_file *tok, cf_error *err) {
    if (opt->dtype != CF_F32 && opt->dtype != CF_BF16 && opt->dtype != CF_F16 && !cf_dtype_is_blocks(opt->dtype))
        return cf_fail(err, "weights can be written as f32, bf16, f16, q8_0 or q4_0, not %s", cf_dtype_name(opt->dtype));
    /* what the checkpoint reader refuses is refused before anything is written */
    if (cf_model_config_check_ranges(cfg, err) != 0) return cf_fail_prefix(err, "%s import: ", source);
    cf_ckpt_writer *w = cf_ckpt_writer_open(out_path, err);
    if (!w) return -1;
    size_t biggest = largest_tensor(cfg);
    import_ctx c = {.cfg = cfg, .opt = opt, .w = w, .fill = fill, .q8 = q8, .fill_ctx = ctx, .err = err,
                    .f32 = cf_xmalloc(biggest * sizeof(float)), .narrow = cf_xmalloc(biggest * sizeof(uint16_t))};
    char *config_text = cf_model_config_to_json(cfg);
    json_t *meta = json_pack("{s:o, s:s, s:s}", "model_config", json_loads(config_text, 0, NULL), "source", source,
                             "format", "cformers model weights");
    free(config_text);
    int rc = cf_weights_foreach(cfg, import_one, &c);
    if (rc == 0 && opt->tokenizer_path) rc = cf_ckpt_embed_tokenizer(w, opt->tokenizer_path, meta, err);
    else if (rc == 0 && tok) rc = cf_ckpt_embed_tok_file(w, tok, meta, err);
    free(c.f32);
    free(c.narrow);
    if (rc != 0) {
        json_decref(meta);
        cf_ckpt_writer_abort(w);
        return -1;
    }
    char *meta_text = json_dumps(meta, JSON_INDENT(1));
    json_decref(meta);
    rc = cf_ckpt_writer_finish(w, meta_text, err);
    free(meta_text);
    return rc;
}
