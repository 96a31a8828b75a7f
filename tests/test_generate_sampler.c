/* The sampler: greedy, temperature sampling frequencies, top-k and top-p truncation,
 * and reproducibility from the seed. */
#include <math.h>

#include "cformers/infer.h"
#include "test_util.h"

enum { V = 4, DRAWS = 20000 };
static const float probs[V] = {0.5f, 0.3f, 0.15f, 0.05f};

static void frequencies(const cf_sampler_params *p, double *freq) {
    cf_sampler *s = cf_sampler_new(p, V);
    for (int i = 0; i < V; i++) freq[i] = 0.0;
    for (int d = 0; d < DRAWS; d++) {
        float logits[V];
        for (int i = 0; i < V; i++) logits[i] = logf(probs[i]);
        freq[cf_sampler_sample(s, logits)] += 1.0 / DRAWS;
    }
    cf_sampler_free(s);
}

int main(void) {
    double f[V];
    frequencies(&(cf_sampler_params){.temperature = 0.0f}, f);
    CHECK_NEAR(f[0], 1.0, 1e-9);
    frequencies(&(cf_sampler_params){.temperature = 1.0f, .top_k = 1, .seed = 1}, f);
    CHECK_NEAR(f[0], 1.0, 1e-9);
    frequencies(&(cf_sampler_params){.temperature = 1.0f, .top_p = 1e-6f, .seed = 1}, f);
    CHECK_NEAR(f[0], 1.0, 1e-9);

    frequencies(&(cf_sampler_params){.temperature = 1.0f, .seed = 2}, f);
    for (int i = 0; i < V; i++) CHECK_NEAR(f[i], probs[i], 0.015);
    frequencies(&(cf_sampler_params){.temperature = 1.0f, .top_k = 2, .seed = 3}, f);
    CHECK_NEAR(f[0], 0.625, 0.015);
    CHECK_NEAR(f[1], 0.375, 0.015);
    CHECK(f[2] == 0.0 && f[3] == 0.0);
    frequencies(&(cf_sampler_params){.temperature = 1.0f, .top_p = 0.9f, .seed = 4}, f); /* 0.5+0.3+0.15 >= 0.9 */
    CHECK_NEAR(f[2], 0.15 / 0.95, 0.015);
    CHECK(f[3] == 0.0);
    /* a low temperature sharpens towards the mode */
    frequencies(&(cf_sampler_params){.temperature = 0.25f, .seed = 5}, f);
    CHECK(f[0] > 0.85);

    cf_sampler_params p = {.temperature = 1.0f, .seed = 42};
    cf_sampler *a = cf_sampler_new(&p, V), *b = cf_sampler_new(&p, V);
    int same = 1;
    for (int d = 0; d < 100; d++) {
        float la[V], lb[V];
        for (int i = 0; i < V; i++) la[i] = lb[i] = logf(probs[i]);
        same &= cf_sampler_sample(a, la) == cf_sampler_sample(b, lb);
    }
    CHECK(same);
    cf_sampler_free(a), cf_sampler_free(b);
    return test_finish();
}
