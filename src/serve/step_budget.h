/* The serving engine's step time budget (docs/serving.md, "Step time budget").
 *
 * A step's duration is modelled as t = a + b*decode + c*prefill + d*attended/1024, where
 * decode and prefill count the step's tokens of each kind and `attended` the cached
 * positions its tokens attend to (a token at position p attends to p + 1). The coefficients
 * are an exponentially weighted least-squares fit of the measured steps (forgetting factor
 * CF_STEP_FORGET, about the last 50 steps), kept non-negative and pulled toward a prior by a
 * ridge (a twentieth of a step at first, fading), so before any measurement the prior
 * (chosen conservative: slower than the machine) decides, and a term no step exercised
 * stays at it.
 *
 * cf_step_budget_prefill picks the most prefill tokens a step may take so that its predicted
 * duration stays within the target: decoding tokens always run (they are what the target
 * protects), and waiting prompts get at least a minimum chunk every step, so a prompt of L
 * tokens at the head of the queue finishes its prefill within ceil(L / min_chunk) steps.
 *
 * Nothing here reads a clock: the caller measures (or, in tests, makes up) step durations,
 * so every decision is a deterministic function of the observations. */
#ifndef CFORMERS_SERVE_STEP_BUDGET_H
#define CFORMERS_SERVE_STEP_BUDGET_H

#include <stdbool.h>

enum { CF_STEP_TERMS = 4 }; /* a, b, c, d */
#define CF_STEP_FORGET 0.98

/* What one step runs. */
typedef struct cf_step_shape {
    long decode, prefill; /* tokens of decoding sequences (one each) and of prompt chunks */
    double attended;      /* cached positions attended, summed over the step's tokens */
} cf_step_shape;

typedef struct cf_step_budget {
    double target;                 /* seconds; <= 0: no time budget */
    long min_chunk;                /* prompt tokens every step takes at least while prompts wait */
    double prior[CF_STEP_TERMS];   /* a (s), b, c (s per token), d (s per 1024 positions) */
    double theta[CF_STEP_TERMS];   /* the fit, same units */
    double xx[CF_STEP_TERMS][CF_STEP_TERMS], xt[CF_STEP_TERMS]; /* weighted sums of x x^T and x t (scaled features) */
    double ridge;                  /* the prior's weight in steps (fades to a floor) */
    double sq_err;                 /* weighted mean squared residual of the predictions before each update */
    long n_obs;
} cf_step_budget;

/* target_s <= 0 disables the budget (every step may take `cap` prefill tokens). */
void cf_step_budget_init(cf_step_budget *b, double target_s, long min_chunk, const double prior[CF_STEP_TERMS]);

/* A conservative prior for a model whose matrices hold weight_bytes and whose layers x
 * width is layer_dim (attention's multiply-adds per cached position and token): a step
 * re-reads the weights at 10 GB/s, and every token costs 2 flops per weight byte's
 * parameter (bf16-sized) at 20 GFLOP/s, its attention 4 x layer_dim flops per position. */
void cf_step_budget_prior(double weight_bytes, double layer_dim, double prior[CF_STEP_TERMS]);

/* Predicted seconds of a step of that shape. */
double cf_step_budget_predict(const cf_step_budget *b, const cf_step_shape *s);

/* A step of that shape took `seconds`: updates the fit and the error. */
void cf_step_budget_observe(cf_step_budget *b, const cf_step_shape *s, double seconds);

/* The root mean squared error of the predictions made before each observation
 * (exponentially weighted like the fit); 0 before the first. */
double cf_step_budget_error(const cf_step_budget *b);

/* Attended positions of k tokens computed from position pos: (pos+1) + ... + (pos+k). */
double cf_step_attended(long pos, long k);

/* Prefill tokens this step may take, at most cap, with `decode` decoding tokens attending
 * `decode_attended` positions, and n waiting prompts, in the order they are served, prompt i
 * at position pos[i] with todo[i] tokens left (taken in chunks in that order: the first
 * takes min(todo, budget), the next the rest, ...): the most whose predicted step fits the
 * target, but at least min(min_chunk, cap) while any prompt waits. */
long cf_step_budget_prefill(const cf_step_budget *b, long decode, double decode_attended, const long *pos,
                            const long *todo, long n, long cap);

#endif
