#include "data/bpe_train.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cformers/threads.h"
#include "core/file_util.h"
#include "data/pretokenize.h"
#include "data/strmap.h"
#include "data/tokenizer_internal.h"

typedef struct word {
    int32_t *syms;
    int32_t len;
    int64_t count;
} word;

typedef struct pair_stats {
    int64_t count;
    int32_t *words; /* indices of words that contained the pair (may repeat or be stale) */
    int32_t n_words, cap_words;
} pair_stats;

typedef struct heap_entry {
    int64_t count;
    int32_t left, right;
} heap_entry;

typedef struct trainer {
    word *words;
    int32_t n_words;
    cf_strmap pair_index; /* (left, right) -> index into pairs */
    pair_stats *pairs;
    int32_t n_pairs, cap_pairs;
    int32_t (*pair_keys)[2];
    heap_entry *heap;
    size_t heap_n, heap_cap;
    int32_t *changed; /* pairs whose count changed during one merge */
    int32_t n_changed, cap_changed;
    int32_t *seen_in;  /* per word: last merge that rewrote it */
    char **tokens;     /* bytes of each token */
    int32_t *token_len;
} trainer;

/* ---- parallel word counting ---- */

typedef struct count_job {
    const char *text;
    size_t len;
    int parts;
    cf_strmap *maps; /* per part: word -> count (int32 saturating is not enough: counts live in vals) */
    int64_t **vals;
    int32_t *n_vals;
} count_job;

/* Chunk boundaries fall after a newline that is followed by a non-space character: the
 * GPT-2 pattern never joins text across such a point, so chunks tokenize independently. */
static size_t safe_boundary(const char *text, size_t len, size_t pos) {
    while (pos < len && !(pos > 0 && text[pos - 1] == '\n' && text[pos] != ' ' && text[pos] != '\n' &&
                          text[pos] != '\t' && text[pos] != '\r'))
        pos++;
    return pos;
}

static void count_task(void *ctx, int part, int thread) {
    (void)thread;
    count_job *j = ctx;
    long b, e;
    cf_split_range((long)j->len, j->parts, part, &b, &e);
    size_t begin = part == 0 ? 0 : safe_boundary(j->text, j->len, (size_t)b);
    size_t end = part == j->parts - 1 ? j->len : safe_boundary(j->text, j->len, (size_t)e);
    cf_strmap *m = &j->maps[part];
    cf_strmap_init(m);
    for (size_t i = begin; i < end;) {
        size_t w = cf_gpt2_pretoken(j->text, j->len, i);
        int32_t id = cf_strmap_get(m, j->text + i, w);
        if (id < 0) {
            id = j->n_vals[part]++;
            cf_strmap_put(m, j->text + i, w, id);
            j->vals[part] = cf_xrealloc(j->vals[part], (size_t)j->n_vals[part] * sizeof **j->vals);
            j->vals[part][id] = 0;
        }
        j->vals[part][id]++;
        i += w;
    }
}

/* ---- pair bookkeeping ---- */

static int32_t pair_id(trainer *t, int32_t l, int32_t r) {
    int32_t key[2] = {l, r};
    int32_t id = cf_strmap_get(&t->pair_index, key, sizeof key);
    if (id >= 0) return id;
    if (t->n_pairs == t->cap_pairs) {
        t->cap_pairs = t->cap_pairs * 2 + 1024;
        t->pairs = cf_xrealloc(t->pairs, (size_t)t->cap_pairs * sizeof *t->pairs);
        t->pair_keys = cf_xrealloc(t->pair_keys, (size_t)t->cap_pairs * sizeof *t->pair_keys);
    }
    id = t->n_pairs++;
    t->pairs[id] = (pair_stats){0};
    t->pair_keys[id][0] = l;
    t->pair_keys[id][1] = r;
    cf_strmap_put(&t->pair_index, key, sizeof key, id);
    return id;
}

static void note_changed(trainer *t, int32_t p) {
    if (t->n_changed == t->cap_changed) {
        t->cap_changed = t->cap_changed * 2 + 256;
        t->changed = cf_xrealloc(t->changed, (size_t)t->cap_changed * sizeof *t->changed);
    }
    t->changed[t->n_changed++] = p;
}

static void add_pairs(trainer *t, int32_t w, int64_t sign, int32_t only_with) {
    const word *wd = &t->words[w];
    for (int32_t i = 0; i + 1 < wd->len; i++) {
        int32_t p = pair_id(t, wd->syms[i], wd->syms[i + 1]);
        t->pairs[p].count += sign * wd->count;
        note_changed(t, p);
        bool new_member = sign > 0 && (only_with < 0 || wd->syms[i] == only_with || wd->syms[i + 1] == only_with);
        if (new_member) {
            pair_stats *ps = &t->pairs[p];
            if (ps->n_words == ps->cap_words) {
                ps->cap_words = ps->cap_words * 2 + 4;
                ps->words = cf_xrealloc(ps->words, (size_t)ps->cap_words * sizeof *ps->words);
            }
            ps->words[ps->n_words++] = w;
        }
    }
}

static bool heap_before(const heap_entry *a, const heap_entry *b) {
    if (a->count != b->count) return a->count > b->count;
    if (a->left != b->left) return a->left < b->left;
    return a->right < b->right;
}

static void heap_push(trainer *t, heap_entry e) {
    if (t->heap_n == t->heap_cap) {
        t->heap_cap = t->heap_cap * 2 + 1024;
        t->heap = cf_xrealloc(t->heap, t->heap_cap * sizeof *t->heap);
    }
    size_t i = t->heap_n++;
    while (i > 0 && heap_before(&e, &t->heap[(i - 1) / 2])) {
        t->heap[i] = t->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    t->heap[i] = e;
}

static heap_entry heap_pop(trainer *t) {
    heap_entry top = t->heap[0], last = t->heap[--t->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= t->heap_n) break;
        if (c + 1 < t->heap_n && heap_before(&t->heap[c + 1], &t->heap[c])) c++;
        if (!heap_before(&t->heap[c], &last)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (t->heap_n) t->heap[i] = last;
    return top;
}

static void push_changed(trainer *t) {
    for (int32_t k = 0; k < t->n_changed; k++) {
        int32_t p = t->changed[k];
        if (t->pairs[p].count > 0)
            heap_push(t, (heap_entry){t->pairs[p].count, t->pair_keys[p][0], t->pair_keys[p][1]});
    }
    t->n_changed = 0;
}

/* Replaces (l, r) by c in every word that holds it, updating pair counts. */
static void apply_merge(trainer *t, int32_t p, int32_t c, int32_t merge_no) {
    int32_t l = t->pair_keys[p][0], r = t->pair_keys[p][1];
    pair_stats *ps = &t->pairs[p];
    int32_t n = ps->n_words;
    for (int32_t k = 0; k < n; k++) {
        int32_t w = t->pairs[p].words[k];
        if (t->seen_in[w] == merge_no) continue;
        t->seen_in[w] = merge_no;
        word *wd = &t->words[w];
        bool has = false;
        for (int32_t i = 0; i + 1 < wd->len && !has; i++) has = wd->syms[i] == l && wd->syms[i + 1] == r;
        if (!has) continue;
        add_pairs(t, w, -1, -1);
        int32_t out = 0;
        for (int32_t i = 0; i < wd->len; i++) {
            if (i + 1 < wd->len && wd->syms[i] == l && wd->syms[i + 1] == r) {
                wd->syms[out++] = c;
                i++;
            } else {
                wd->syms[out++] = wd->syms[i];
            }
        }
        wd->len = out;
        add_pairs(t, w, +1, c);
    }
    ps = &t->pairs[p];
    free(ps->words);
    ps->words = NULL;
    ps->n_words = ps->cap_words = 0;
}

static int compare_words(const void *a, const void *b) {
    const word *x = a, *y = b;
    int32_t n = x->len < y->len ? x->len : y->len;
    for (int32_t i = 0; i < n; i++)
        if (x->syms[i] != y->syms[i]) return x->syms[i] < y->syms[i] ? -1 : 1;
    return (x->len > y->len) - (x->len < y->len);
}

/* Counts words over all inputs and fills t->words, sorted by bytes. */
static int count_words(trainer *t, const cf_bpe_train_options *opt, cf_error *err) {
    cf_strmap total;
    cf_strmap_init(&total);
    int64_t *counts = NULL;
    int32_t n = 0;
    for (int f = 0; f < opt->n_inputs; f++) {
        size_t len;
        char *text = (char *)cf_read_file(opt->inputs[f], &len, err);
        if (!text) {
            cf_strmap_free(&total);
            free(counts);
            return -1;
        }
        count_job j = {.text = text, .len = len, .parts = cf_num_threads() * 4};
        j.maps = cf_xcalloc((size_t)j.parts, sizeof *j.maps);
        j.vals = cf_xcalloc((size_t)j.parts, sizeof *j.vals);
        j.n_vals = cf_xcalloc((size_t)j.parts, sizeof *j.n_vals);
        cf_parallel_for(j.parts, count_task, &j);
        for (int part = 0; part < j.parts; part++) { /* summing is order-independent */
            for (size_t s = 0; s < j.maps[part].capacity; s++) {
                const cf_strmap_slot *slot = &j.maps[part].slots[s];
                if (slot->key_len == UINT32_MAX) continue;
                const char *key = cf_strmap_key(&j.maps[part], slot);
                int32_t id = cf_strmap_get(&total, key, slot->key_len);
                if (id < 0) {
                    id = n++;
                    cf_strmap_put(&total, key, slot->key_len, id);
                    counts = cf_xrealloc(counts, (size_t)n * sizeof *counts);
                    counts[id] = 0;
                }
                counts[id] += j.vals[part][slot->value];
            }
            cf_strmap_free(&j.maps[part]);
            free(j.vals[part]);
        }
        free(j.maps);
        free(j.vals);
        free(j.n_vals);
        free(text);
        if (opt->progress) fprintf(stderr, "tokenizer train: %s: %d distinct words so far\n", opt->inputs[f], n);
    }
    t->words = cf_xcalloc((size_t)n + 1, sizeof *t->words);
    for (size_t s = 0; s < total.capacity; s++) {
        const cf_strmap_slot *slot = &total.slots[s];
        if (slot->key_len == UINT32_MAX) continue;
        word *w = &t->words[slot->value];
        const unsigned char *key = (const unsigned char *)cf_strmap_key(&total, slot);
        w->len = (int32_t)slot->key_len;
        w->count = counts[slot->value];
        w->syms = cf_xmalloc(((size_t)w->len + 1) * sizeof *w->syms);
        for (int32_t i = 0; i < w->len; i++) w->syms[i] = key[i];
    }
    t->n_words = n;
    qsort(t->words, (size_t)n, sizeof *t->words, compare_words);
    cf_strmap_free(&total);
    free(counts);
    return n > 0 ? 0 : cf_fail(err, "%s: no text to train on", opt->n_inputs ? opt->inputs[0] : "(no input)");
}

/* Spells raw token bytes the way tokenizer.json does (GPT-2 byte -> unicode). */
static char *spell(const char *bytes, int32_t len) {
    char *out = cf_xmalloc((size_t)len * 2 + 1);
    cf_bpe_spell(bytes, (size_t)len, out);
    return out;
}

static int write_json(const trainer *t, int32_t n_tokens, const int32_t (*merges)[2], int32_t n_merges,
                      const char *path, cf_error *err) {
    json_t *vocab = json_object(), *mlist = json_array();
    for (int32_t id = 0; id < n_tokens; id++) {
        char *s = spell(t->tokens[id], t->token_len[id]);
        json_object_set_new(vocab, s, json_integer(id));
        free(s);
    }
    for (int32_t m = 0; m < n_merges; m++) {
        char *a = spell(t->tokens[merges[m][0]], t->token_len[merges[m][0]]);
        char *b = spell(t->tokens[merges[m][1]], t->token_len[merges[m][1]]);
        json_array_append_new(mlist, json_pack("[s s]", a, b));
        free(a);
        free(b);
    }
    json_t *root = json_pack(
        "{s:s, s:[{s:i, s:s, s:b}], s:{s:s, s:b, s:b, s:b}, s:{s:s}, s:{s:s, s:o, s:o}}", "version", "1.0",
        "added_tokens", "id", n_tokens, "content", "<|endoftext|>", "special", 1, "pre_tokenizer", "type", "ByteLevel",
        "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1, "decoder", "type", "ByteLevel", "model", "type",
        "BPE", "vocab", vocab, "merges", mlist);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = json_dump_file(root, tmp, JSON_INDENT(1) | JSON_COMPACT) == 0 && rename(tmp, path) == 0
                 ? 0
                 : cf_fail(err, "%s: cannot write: %s", path, strerror(errno));
    if (rc != 0) remove(tmp);
    json_decref(root);
    return rc;
}

int cf_bpe_train(const cf_bpe_train_options *opt, cf_error *err) {
    if (opt->vocab_size < 258) return cf_fail(err, "vocabulary size %d is below 258 (256 bytes, 1 merge, 1 special)", opt->vocab_size);
    int saved = cf_num_threads();
    if (opt->threads > 0 && cf_set_num_threads(opt->threads, err) != 0) {
        cf_set_num_threads(saved, NULL);
        return -1;
    }
    trainer t = {0};
    cf_strmap_init(&t.pair_index);
    int rc = count_words(&t, opt, err);
    cf_set_num_threads(saved, NULL); /* as many as ran before */
    int32_t target = opt->vocab_size - 1, n_tokens = 256, n_merges = 0, cap_merges = 0;
    int32_t (*merges)[2] = NULL;
    cf_strmap token_ids; /* two merges can spell the same bytes; they share one token */
    cf_strmap_init(&token_ids);
    t.tokens = cf_xcalloc((size_t)opt->vocab_size, sizeof *t.tokens);
    t.token_len = cf_xcalloc((size_t)opt->vocab_size, sizeof *t.token_len);
    for (int b = 0; b < 256; b++) {
        t.tokens[b] = cf_xmalloc(1);
        t.tokens[b][0] = (char)b;
        t.token_len[b] = 1;
        cf_strmap_put(&token_ids, t.tokens[b], 1, b);
    }
    if (rc == 0) {
        t.seen_in = cf_xmalloc((size_t)t.n_words * sizeof *t.seen_in);
        for (int32_t w = 0; w < t.n_words; w++) {
            t.seen_in[w] = -1;
            add_pairs(&t, w, +1, -1);
        }
        push_changed(&t);
        double last = 0;
        while (n_tokens < target && t.heap_n) {
            heap_entry e = heap_pop(&t);
            int32_t key[2] = {e.left, e.right};
            int32_t p = cf_strmap_get(&t.pair_index, key, sizeof key);
            if (t.pairs[p].count != e.count) continue; /* stale entry */
            if (e.count < 2) break;
            int32_t c = cf_strmap_get2(&token_ids, t.tokens[e.left], (size_t)t.token_len[e.left], t.tokens[e.right],
                                       (size_t)t.token_len[e.right]);
            if (c < 0) {
                c = n_tokens++;
                t.token_len[c] = t.token_len[e.left] + t.token_len[e.right];
                t.tokens[c] = cf_xmalloc((size_t)t.token_len[c]);
                memcpy(t.tokens[c], t.tokens[e.left], (size_t)t.token_len[e.left]);
                memcpy(t.tokens[c] + t.token_len[e.left], t.tokens[e.right], (size_t)t.token_len[e.right]);
                cf_strmap_put(&token_ids, t.tokens[c], (size_t)t.token_len[c], c);
            }
            if (n_merges == cap_merges) {
                cap_merges = cap_merges * 2 + 1024;
                merges = cf_xrealloc(merges, (size_t)cap_merges * sizeof *merges);
            }
            merges[n_merges][0] = e.left;
            merges[n_merges][1] = e.right;
            apply_merge(&t, p, c, n_merges);
            push_changed(&t);
            n_merges++;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
            if (opt->progress && (now - last > 1.0 || n_tokens == target)) {
                fprintf(stderr, "tokenizer train: %d of %d tokens (last merge seen %lld times)\n", n_tokens + 1,
                        opt->vocab_size, (long long)e.count);
                last = now;
            }
        }
        rc = write_json(&t, n_tokens, (const int32_t(*)[2])merges, n_merges, opt->output, err);
    }
    cf_strmap_free(&token_ids);
    for (int32_t w = 0; w < t.n_words; w++) free(t.words[w].syms);
    for (int32_t p = 0; p < t.n_pairs; p++) free(t.pairs[p].words);
    for (int i = 0; i < opt->vocab_size; i++) free(t.tokens[i]);
    free(t.tokens);
    free(t.token_len);
    free(t.words);
    free(t.pairs);
    free(t.pair_keys);
    free(t.heap);
    free(t.changed);
    free(t.seen_in);
    free(merges);
    cf_strmap_free(&t.pair_index);
    return rc == 0 ? n_tokens + 1 : -1;
}
