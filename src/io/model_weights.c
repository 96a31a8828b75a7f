#include "io/model_weights.h"

#include <stdio.h>
#include <string.h>

#include "core/checked.h"

/* Interleaved row h*hd + 2i + c is HF row h*hd + c*hd/2 + i. */
static void permute_rows(const void *src, void *dst, long heads, long head_dim, size_t row_bytes, bool to_hf) {
    const char *s = src;
    char *d = dst;
    long half = head_dim / 2;
    for (long h = 0; h < heads; h++)
        for (long i = 0; i < half; i++)
            for (long c = 0; c < 2; c++) {
                long inter = h * head_dim + 2 * i + c, hf = h * head_dim + c * half + i;
                long from = to_hf ? inter : hf, to = to_hf ? hf : inter;
                memcpy(d + (size_t)to * row_bytes, s + (size_t)from * row_bytes, row_bytes);
            }
}

int cf_model_ckpt_check_count(const cf_ckpt *c, const cf_model_config *m, size_t *count, cf_error *err) {
    *count = cf_weights_count(m);
    if (*count == 0 || *count > (size_t)cf_ckpt_num_tensors(c))
        return cf_fail(err, "%s: model_config.num_layers %lld implies more tensors than the checkpoint's %ld",
                       cf_ckpt_path(c), (long long)m->num_layers, cf_ckpt_num_tensors(c));
    return 0;
}

static const cf_ckpt_tensor *weight_tensor(cf_ckpt *c, const char *name, int ndim, const int64_t *shape, bool q8,
                                           cf_error *err) {
    const cf_ckpt_tensor *t = cf_ckpt_find(c, name);
    bool q8_ok = q8 && t && cf_dtype_is_blocks(t->dtype) && t->ndim == 2;
    if (t && t->dtype != CF_F32 && t->dtype != CF_BF16 && t->dtype != CF_F16 && !q8_ok) {
        cf_fail(err, "%s: tensor %s: dtype %s is not supported for %s (f32, bf16, f16%s)", cf_ckpt_path(c), name,
                cf_dtype_name(t->dtype), q8 ? "this weight" : "weights", q8 ? ", q8_0 or q4_0 for matrices" : "");
        return NULL;
    }
    return cf_ckpt_get(c, name, t ? t->dtype : CF_F32, ndim, shape, err);
}

const cf_ckpt_tensor *cf_model_ckpt_float_tensor(cf_ckpt *c, const char *name, int ndim, const int64_t *shape,
                                              cf_error *err) {
    return weight_tensor(c, name, ndim, shape, false, err);
}

const cf_ckpt_tensor *cf_model_ckpt_weight_tensor(cf_ckpt *c, const char *name, int ndim, const int64_t *shape,
                                               cf_error *err) {
    return weight_tensor(c, name, ndim, shape, true, err);
}

int cf_model_weight_hf_shape(const cf_model_config *m, const cf_family_weight *w, int64_t shape[2]) {
    int ndim = cf_weight_shape(m, w, shape);
    if (w->hf == HF_CONV1D && ndim == 2) {
        int64_t t = shape[0];
        shape[0] = shape[1], shape[1] = t;
    }
    return ndim;
}

bool cf_model_weight_hf_differs(const cf_family_weight *w) { return w->hf != HF_AS_IS; }

/* [rows, cols] -> [cols, rows] of elem-byte elements. */
static void transpose(const void *src, void *dst, int64_t rows, int64_t cols, size_t elem) {
    const char *s = src;
    char *d = dst;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) memcpy(d + (size_t)(c * rows + r) * elem, s + (size_t)(r * cols + c) * elem, elem);
}

void cf_model_weight_convert_hf(const cf_model_config *m, const cf_family_weight *w, const int64_t shape[2], size_t elem,
                             const void *src, void *dst, bool to_hf) {
    int64_t cols = w->ndim == 2 ? shape[1] : 1;
    switch (w->hf) {
    case HF_AS_IS: memcpy(dst, src, (size_t)(shape[0] * cols) * elem); break;
    case HF_ROPE_Q:
    case HF_ROPE_K:
        permute_rows(src, dst, w->hf == HF_ROPE_Q ? (long)m->num_heads : (long)m->num_kv_heads,
                     (long)cf_model_head_dim(m), (size_t)cols * elem, to_hf);
        break;
    case HF_CONV1D: /* cformers [out, in] <-> HF [in, out] */
        if (to_hf) transpose(src, dst, shape[0], cols, elem);
        else transpose(src, dst, cols, shape[0], elem);
        break;
    }
}
