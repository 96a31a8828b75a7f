/* Low-rank adapters: which linears carry one (target_modules, exclude_layers) and their
 * tensor names. The graph of y = x W^T + s (x A^T) B^T is transformer.c's linear variant;
 * the freezing of the base is cf_model_graph_build's. */
#include "models/lora.h"

#include <fnmatch.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MindFormers' LLaMA cell names of the linears (model.layers.N.<cell>). */
static const struct {
    cf_weight_role role;
    const char *cell;
} mf_cells[] = {{WR_WQ, "attention.wq"},     {WR_WK, "attention.wk"},     {WR_WV, "attention.wv"},
                {WR_WO, "attention.wo"},     {WR_GATE, "feed_forward.w1"}, {WR_DOWN, "feed_forward.w2"},
                {WR_UP, "feed_forward.w3"}};

double cf_lora_scale(const cf_lora_config *l) { return l->alpha / (double)l->rank; }

static bool is_regex(const char *s) { return strpbrk(s, "*|()[]^$\\+?{}") != NULL; }

/* Compiles target_modules as re.match does: anchored at the start only. */
static int compile(const char *pattern, regex_t *re) {
    size_t n = strlen(pattern) + 8;
    char *anchored = malloc(n);
    if (!anchored) return -1;
    snprintf(anchored, n, "^(%s)", pattern);
    int rc = regcomp(re, anchored, REG_EXTENDED | REG_NOSUB);
    free(anchored);
    return rc;
}

/* Calls fn on each trimmed item of a comma-separated list; stops at a nonzero result. */
static int each_item(const char *list, int (*fn)(const char *item, size_t n, const void *ctx), const void *ctx) {
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        while (n && p[n - 1] == ' ') n--;
        int rc = fn(p, n, ctx);
        if (rc) return rc;
        p += n;
    }
    return 0;
}

static int bad_layer(const char *item, size_t n, const void *ctx) {
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        if (item[i] < '0' || item[i] > '9') return 1;
    return n == 0 || n > 9;
}

int cf_lora_check(const cf_lora_config *l, cf_error *err) {
    if (!cf_lora_on(l)) return 0;
    if (l->dropout != 0.0) return cf_fail(err, "lora.dropout: %g: dropout on the adapter input is not implemented (only 0)", l->dropout);
    if (!l->target_modules[0]) return cf_fail(err, "lora.target_modules: empty (name the adapted linears: q_proj,v_proj)");
    if (is_regex(l->target_modules)) {
        regex_t re;
        if (compile(l->target_modules, &re) != 0)
            return cf_fail(err, "lora.target_modules: '%s' is not a regular expression", l->target_modules);
        regfree(&re);
    }
    if (each_item(l->exclude_layers, bad_layer, NULL))
        return cf_fail(err, "lora.exclude_layers: '%s' is not a list of layer indices (0,1)", l->exclude_layers);
    return 0;
}

typedef struct name_pair {
    const char *hf, *mf; /* mf may be NULL */
} name_pair;

static bool ends_with_item(const char *name, const char *item, size_t n) {
    size_t len = strlen(name);
    if (len < n || strncmp(name + len - n, item, n) != 0) return false;
    return len == n || name[len - n - 1] == '.';
}

static int item_matches(const char *item, size_t n, const void *ctx) {
    const name_pair *names = ctx;
    return ends_with_item(names->hf, item, n) || (names->mf && ends_with_item(names->mf, item, n));
}

static int same_layer(const char *item, size_t n, const void *ctx) {
    return strtol(item, NULL, 10) == *(const long *)ctx && n > 0;
}

bool cf_lora_targets(const cf_lora_config *l, const cf_family *f, cf_weight_role role, long layer) {
    if (!cf_lora_on(l) || role == CF_NO_WEIGHT) return false;
    const cf_family_weight *w = cf_family_weight_of(f, role);
    if (!w || w->ndim != 2 || w->place != WP_LAYER) return false;
    if (each_item(l->exclude_layers, same_layer, &layer)) return false;
    char hf[CF_NAME_MAX], mf[CF_NAME_MAX] = "";
    cf_weight_name(w, layer, hf, sizeof hf);
    size_t n = strlen(hf);
    if (n > 7 && strcmp(hf + n - 7, ".weight") == 0) hf[n - 7] = 0;
    for (size_t i = 0; i < sizeof mf_cells / sizeof mf_cells[0]; i++)
        if (mf_cells[i].role == role && f->arch == CF_ARCH_LLAMA)
            snprintf(mf, sizeof mf, "model.layers.%ld.%s", layer, mf_cells[i].cell);
    name_pair names = {hf, mf[0] ? mf : NULL};
    if (!is_regex(l->target_modules)) return each_item(l->target_modules, item_matches, &names) != 0;
    regex_t re;
    if (compile(l->target_modules, &re) != 0) return false; /* cf_lora_check refused it */
    bool hit = regexec(&re, hf, 0, NULL, 0) == 0 || (names.mf && regexec(&re, mf, 0, NULL, 0) == 0);
    regfree(&re);
    return hit;
}

void cf_lora_tensor_name(const cf_family_weight *w, long layer, char ab, char *buf, size_t size) {
    char base[CF_NAME_MAX];
    cf_weight_name(w, layer, base, sizeof base);
    size_t n = strlen(base);
    if (n > 7 && strcmp(base + n - 7, ".weight") == 0) base[n - 7] = 0;
    snprintf(buf, size, "%s.lora_%c.weight", base, ab);
}

bool cf_lora_is_adapter(const char *name) { return strstr(name, ".lora_A.") || strstr(name, ".lora_B."); }

static int pattern_matches(const char *item, size_t n, const void *ctx) {
    char pattern[CF_NAME_MAX];
    if (n >= sizeof pattern) return 0;
    memcpy(pattern, item, n);
    pattern[n] = 0;
    return fnmatch(pattern, (const char *)ctx, 0) == 0;
}

bool cf_lora_patterns_match(const char *patterns, const char *name) {
    return each_item(patterns, pattern_matches, name) != 0;
}
