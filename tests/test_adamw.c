/* The AdamW update kernel on every ISA path the machine has, against torch.optim.AdamW's
 * formula evaluated in double: moments, parameters (with and without the decoupled
 * decay, gradients clipped), and the gradient zeroed for the next accumulation. The
 * whole optimizer inside a training step is checked against PyTorch by
 * test_train_reference; this covers the lanes and tails of each vector path. */
#include <math.h>
#include <stdint.h>

#include "cformers/cpu.h"
#include "kernels/adamw.h"
#include "test_util.h"

enum { N = 1037 }; /* not a multiple of any vector width */

static uint32_t rng_state = 12345;
static float rng_float(float lo, float hi) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng_state >> 8) / (float)(1u << 24);
}

/* One step of update t with the given span kernel, checked element by element. */
/* Error bounds in units of f32 rounding (2^-24 relative), a few per operation. */
#define ROUND (4.0 * 5.96e-8)

/* One step of update t with the given span kernel, checked element by element against
 * the same formula in double with the kernel's f32 constants. The bounds follow the
 * operations: the moments to a few roundings of their terms (m's terms can cancel), the
 * update to m's absolute error over the denominator plus a few roundings of its size. */
static void check_span(cf_adamw_span_fn span, const char *name, int t, float decay) {
    const double lr = 3e-3;
    cf_adamw_step step = {.beta1 = 0.9f, .beta2 = 0.95f, .clip = 0.5f,
                          .step_size = (float)(lr / (1 - pow(0.9, t))),
                          .inv_sqrt_bc2 = (float)(1 / sqrt(1 - pow(0.95, t))), .eps = 1e-8f};
    const double b1 = step.beta1, b2 = step.beta2, c1 = 1.0f - step.beta1, c2 = 1.0f - step.beta2;
    static float p[N], g[N], m[N], v[N];
    double want_p[N], want_m[N], want_v[N], tol_p[N], tol_m[N], tol_v[N];
    for (int i = 0; i < N; i++) {
        p[i] = rng_float(-1, 1);
        g[i] = i % 97 == 0 ? 0.0f : rng_float(-2, 2); /* exact zeros: v stays tiny, eps matters */
        m[i] = rng_float(-0.1f, 0.1f);
        v[i] = i % 89 == 0 ? 0.0f : rng_float(0, 0.01f);
        double gc = (double)g[i] * step.clip;
        want_m[i] = b1 * m[i] + c1 * gc;
        want_v[i] = b2 * v[i] + c2 * gc * gc;
        tol_m[i] = ROUND * (fabs(b1 * m[i]) + fabs(c1 * gc));
        tol_v[i] = ROUND * (b2 * v[i] + c2 * gc * gc);
        double denom = sqrt(want_v[i]) * step.inv_sqrt_bc2 + step.eps, update = step.step_size * want_m[i] / denom;
        want_p[i] = p[i] * (double)decay - update;
        tol_p[i] = step.step_size * tol_m[i] / denom + fabs(update) * ROUND + ROUND * fabs(p[i]) +
                   fabs(update) * (want_v[i] > 0 ? tol_v[i] / want_v[i] : 0);
    }
    span(&step, decay, p, g, m, v, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        bool ok = fabs(m[i] - want_m[i]) <= tol_m[i] && fabs(v[i] - want_v[i]) <= tol_v[i] &&
                  fabs(p[i] - want_p[i]) <= tol_p[i] && g[i] == 0.0f;
        if (!ok && bad++ < 3)
            fprintf(stderr, "%s step %d decay %g: element %d: p %.9g want %.9g, m %.9g want %.9g, v %.9g want %.9g\n",
                    name, t, decay, i, p[i], want_p[i], m[i], want_m[i], v[i], want_v[i]);
    }
    CHECK_MSG(bad == 0, "%s: %d of %d elements off", name, bad, N);
}

int main(void) {
    struct {
        cf_adamw_span_fn fn;
        const char *name;
        cf_isa needs;
    } paths[] = {{cf_adamw_span_generic, "generic", CF_ISA_SCALAR},
                 {cf_adamw_span_avx2, "avx2", CF_ISA_AVX2},
                 {cf_adamw_span_avx512, "avx512", CF_ISA_AVX512}};
    for (unsigned k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        if (cf_isa_supported() < paths[k].needs) {
            printf("%s: not on this CPU\n", paths[k].name);
            continue;
        }
        for (int t = 1; t <= 1000; t *= 10) {
            check_span(paths[k].fn, paths[k].name, t, 1.0f);
            check_span(paths[k].fn, paths[k].name, t, 1.0f - 3e-3f * 0.1f);
        }
    }
    return test_finish();
}
