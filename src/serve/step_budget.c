/* The step time budget's cost model and prefill choice (step_budget.h). */
#include "serve/step_budget.h"

#include <math.h>
#include <string.h>

/* The fit works on scaled features phi = (1, decode/8, prefill/64, attended/4096), of order
 * 1 in a busy step, so that a ridge of r x identity weighs each term like r steps. The
 * prior's ridge starts at RIDGE and fades with the observations (CF_STEP_FORGET a step)
 * down to RIDGE_FLOOR, which keeps the terms no recent step exercised at the prior
 * without biasing the others. */
static const double SCALE[CF_STEP_TERMS] = {1.0, 8.0, 64.0, 4.0}; /* phi_i = x_i / SCALE_i, x = (1, D, P, A/1024) */
#define RIDGE 0.05
#define RIDGE_FLOOR 1e-3

static void features(const cf_step_shape *s, double phi[CF_STEP_TERMS]) {
    const double x[CF_STEP_TERMS] = {1.0, (double)s->decode, (double)s->prefill, s->attended / 1024.0};
    for (int i = 0; i < CF_STEP_TERMS; i++) phi[i] = x[i] / SCALE[i];
}

void cf_step_budget_init(cf_step_budget *b, double target_s, long min_chunk, const double prior[CF_STEP_TERMS]) {
    memset(b, 0, sizeof *b);
    b->target = target_s;
    b->min_chunk = min_chunk > 0 ? min_chunk : 1;
    for (int i = 0; i < CF_STEP_TERMS; i++) b->prior[i] = b->theta[i] = prior[i] > 0 ? prior[i] : 0.0;
    b->ridge = RIDGE;
}

void cf_step_budget_prior(double weight_bytes, double layer_dim, double prior[CF_STEP_TERMS]) {
    prior[0] = weight_bytes / 10e9;
    prior[1] = prior[2] = weight_bytes / 20e9; /* 2 flops x weight_bytes / 2 parameters, at 20 GFLOP/s */
    prior[3] = 1024.0 * 4.0 * layer_dim / 20e9;
}

double cf_step_budget_predict(const cf_step_budget *b, const cf_step_shape *s) {
    const double x[CF_STEP_TERMS] = {1.0, (double)s->decode, (double)s->prefill, s->attended / 1024.0};
    double t = 0;
    for (int i = 0; i < CF_STEP_TERMS; i++) t += b->theta[i] * x[i];
    return t;
}

/* Solves the ridge-regularized normal equations (xx + ridge I) w = xt + ridge w0 in scaled
 * coordinates for the terms not held at 0 (Gaussian elimination with partial pivoting, at
 * most 4 x 4); a term that comes out negative is held at 0 and the rest solved again
 * (non-negative least squares by an active set, at most CF_STEP_TERMS rounds). */
static void refit(cf_step_budget *b) {
    bool held[CF_STEP_TERMS] = {false};
    double w[CF_STEP_TERMS];
    for (int round = 0; round < CF_STEP_TERMS; round++) {
        int idx[CF_STEP_TERMS], n = 0;
        for (int i = 0; i < CF_STEP_TERMS; i++)
            if (!held[i]) idx[n++] = i;
        double a[CF_STEP_TERMS][CF_STEP_TERMS + 1];
        for (int r = 0; r < n; r++) {
            int i = idx[r];
            for (int c = 0; c < n; c++) a[r][c] = b->xx[i][idx[c]] + (i == idx[c] ? b->ridge : 0.0);
            a[r][n] = b->xt[i] + b->ridge * b->prior[i] * SCALE[i];
        }
        for (int col = 0; col < n; col++) {
            int piv = col;
            for (int r = col + 1; r < n; r++)
                if (fabs(a[r][col]) > fabs(a[piv][col])) piv = r;
            for (int c = 0; c <= n; c++) {
                double t = a[col][c];
                a[col][c] = a[piv][c], a[piv][c] = t;
            }
            for (int r = 0; r < n; r++) {
                if (r == col) continue;
                double f = a[r][col] / a[col][col]; /* the ridge keeps the pivots positive */
                for (int c = col; c <= n; c++) a[r][c] -= f * a[col][c];
            }
        }
        for (int i = 0; i < CF_STEP_TERMS; i++) w[i] = 0.0;
        bool negative = false;
        for (int r = 0; r < n; r++) {
            w[idx[r]] = a[r][n] / a[r][r];
            if (w[idx[r]] < 0) held[idx[r]] = negative = true;
        }
        if (!negative) break;
    }
    for (int i = 0; i < CF_STEP_TERMS; i++) b->theta[i] = (w[i] > 0 ? w[i] : 0.0) / SCALE[i];
}

void cf_step_budget_observe(cf_step_budget *b, const cf_step_shape *s, double seconds) {
    if (!(seconds >= 0) || !isfinite(seconds)) return;
    double r = seconds - cf_step_budget_predict(b, s);
    /* the weighted mean of squared residuals: weights CF_STEP_FORGET^age, normalized */
    double w_old = b->n_obs ? CF_STEP_FORGET * (1 - pow(CF_STEP_FORGET, (double)b->n_obs)) / (1 - CF_STEP_FORGET) : 0;
    b->sq_err = (b->sq_err * w_old + r * r) / (w_old + 1);
    double phi[CF_STEP_TERMS];
    features(s, phi);
    for (int i = 0; i < CF_STEP_TERMS; i++) {
        for (int j = 0; j < CF_STEP_TERMS; j++) b->xx[i][j] = CF_STEP_FORGET * b->xx[i][j] + phi[i] * phi[j];
        b->xt[i] = CF_STEP_FORGET * b->xt[i] + phi[i] * seconds;
    }
    b->n_obs++;
    b->ridge = b->ridge * CF_STEP_FORGET > RIDGE_FLOOR ? b->ridge * CF_STEP_FORGET : RIDGE_FLOOR;
    refit(b);
}

double cf_step_budget_error(const cf_step_budget *b) { return sqrt(b->sq_err); }

double cf_step_attended(long pos, long k) { return (double)k * (double)pos + 0.5 * (double)k * (double)(k + 1); }

/* The shape of a step with k prefill tokens taken by the prompts in order. */
static cf_step_shape with_prefill(long decode, double decode_attended, const long *pos, const long *todo, long n, long k) {
    cf_step_shape s = {.decode = decode, .prefill = k, .attended = decode_attended};
    for (long i = 0; i < n && k > 0; i++) {
        long take = todo[i] < k ? todo[i] : k;
        s.attended += cf_step_attended(pos[i], take);
        k -= take;
    }
    return s;
}

long cf_step_budget_prefill(const cf_step_budget *b, long decode, double decode_attended, const long *pos,
                            const long *todo, long n, long cap) {
    long waiting = 0;
    for (long i = 0; i < n; i++) waiting += todo[i];
    if (cap > waiting) cap = waiting;
    if (cap <= 0) return 0;
    if (b->target <= 0 || decode == 0) return cap; /* no budget, or no stream waits on this step */
    long lo = 0, hi = cap; /* the predicted duration grows with k (non-negative terms): bisect */
    while (lo < hi) {
        long mid = lo + (hi - lo + 1) / 2;
        cf_step_shape s = with_prefill(decode, decode_attended, pos, todo, n, mid);
        if (cf_step_budget_predict(b, &s) <= b->target) lo = mid;
        else hi = mid - 1;
    }
    long floor_chunk = b->min_chunk < cap ? b->min_chunk : cap;
    return lo > floor_chunk ? lo : floor_chunk;
}
