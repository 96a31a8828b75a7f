/* The grammar engine: building, the vocabulary trie and the matcher (see grammar.h). */
#include "serve/grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An element is one int32: a byte class (index << 2 | EL_CLASS), a rule reference
 * (rule << 2 | EL_RULE), or the end of an alternative (EL_END). */
enum { EL_END = 0, EL_CLASS = 1, EL_RULE = 2 };
#define EL_KIND(e) ((e) & 3)
#define EL_ARG(e) ((e) >> 2)

enum { MAX_SET = 512 };   /* live stacks at one point at most: a grammar past it is too ambiguous */
enum { MAX_EXPAND = 256 }; /* rule references expanded before a class is reached, at most */

typedef struct alt_list {
    cf_grammar_seq *alts;
    int n, cap;
} alt_list;

struct cf_grammar_builder {
    alt_list *rules;
    int n_rules, cap_rules;
    uint8_t (*cls)[32];
    int n_cls, cap_cls;
};

struct cf_grammar {
    int refs;
    int32_t *el;      /* every alternative's elements, each ended by EL_END */
    int32_t *alt;     /* [n_alt] where each alternative starts in el */
    int32_t *rule_alt; /* [n_rules + 1]: rule r's alternatives are alt[rule_alt[r] .. rule_alt[r+1]) */
    uint8_t (*cls)[32];
    int n_rules, root;
    size_t n_el, n_alt, n_cls;
    uint64_t hash; /* of all the above: grammars compiled alike are equal */
};

static void seq_push(cf_grammar_seq *s, int32_t e) {
    if (s->n == s->cap) s->cap = s->cap ? 2 * s->cap : 8, s->el = cf_xrealloc(s->el, sizeof *s->el * (size_t)s->cap);
    s->el[s->n++] = e;
}

void cf_grammar_seq_free(cf_grammar_seq *s) {
    free(s->el);
    memset(s, 0, sizeof *s);
}

cf_grammar_builder *cf_grammar_builder_new(void) { return cf_xcalloc(1, sizeof(cf_grammar_builder)); }

void cf_grammar_builder_free(cf_grammar_builder *b) {
    if (!b) return;
    for (int r = 0; r < b->n_rules; r++) {
        for (int a = 0; a < b->rules[r].n; a++) free(b->rules[r].alts[a].el);
        free(b->rules[r].alts);
    }
    free(b->rules), free(b->cls), free(b);
}

int cf_grammar_rule(cf_grammar_builder *b) {
    if (b->n_rules == b->cap_rules)
        b->cap_rules = b->cap_rules ? 2 * b->cap_rules : 32, b->rules = cf_xrealloc(b->rules, sizeof *b->rules * (size_t)b->cap_rules);
    b->rules[b->n_rules] = (alt_list){0};
    return b->n_rules++;
}

void cf_grammar_alt(cf_grammar_builder *b, int rule, cf_grammar_seq *s) {
    alt_list *l = &b->rules[rule];
    if (l->n == l->cap) l->cap = l->cap ? 2 * l->cap : 4, l->alts = cf_xrealloc(l->alts, sizeof *l->alts * (size_t)l->cap);
    l->alts[l->n++] = *s;
    memset(s, 0, sizeof *s);
}

void cf_grammar_seq_class(cf_grammar_builder *b, cf_grammar_seq *s, const uint8_t bits[32]) {
    int c = 0;
    while (c < b->n_cls && memcmp(b->cls[c], bits, 32) != 0) c++;
    if (c == b->n_cls) {
        if (b->n_cls == b->cap_cls)
            b->cap_cls = b->cap_cls ? 2 * b->cap_cls : 16, b->cls = cf_xrealloc(b->cls, 32 * (size_t)b->cap_cls);
        memcpy(b->cls[b->n_cls++], bits, 32);
    }
    seq_push(s, (int32_t)(c << 2 | EL_CLASS));
}

void cf_grammar_seq_range(cf_grammar_builder *b, cf_grammar_seq *s, unsigned lo, unsigned hi) {
    uint8_t bits[32] = {0};
    for (unsigned c = lo; c <= hi && c < 256; c++) bits[c >> 3] |= (uint8_t)(1u << (c & 7));
    cf_grammar_seq_class(b, s, bits);
}

void cf_grammar_seq_lit(cf_grammar_builder *b, cf_grammar_seq *s, const char *text, size_t len) {
    for (size_t i = 0; i < len; i++) cf_grammar_seq_range(b, s, (unsigned char)text[i], (unsigned char)text[i]);
}

void cf_grammar_seq_ref(cf_grammar_seq *s, int rule) { seq_push(s, (int32_t)(rule << 2 | EL_RULE)); }

int cf_grammar_repeat(cf_grammar_builder *b, int x, long min, long max) {
    int tail = cf_grammar_rule(b); /* what may follow the min required copies */
    cf_grammar_seq s = {0};
    if (max < 0) { /* tail ::= x tail | ε */
        cf_grammar_seq_ref(&s, x), cf_grammar_seq_ref(&s, tail), cf_grammar_alt(b, tail, &s);
        cf_grammar_alt(b, tail, &s);
    } else { /* tail_k ::= x tail_{k-1} | ε, tail_0 ::= ε */
        cf_grammar_alt(b, tail, &s);
        for (long k = 1; k <= max - min; k++) {
            int t = cf_grammar_rule(b);
            cf_grammar_seq_ref(&s, x), cf_grammar_seq_ref(&s, tail), cf_grammar_alt(b, t, &s);
            cf_grammar_alt(b, t, &s);
            tail = t;
        }
    }
    int r = cf_grammar_rule(b);
    for (long k = 0; k < min; k++) cf_grammar_seq_ref(&s, x);
    cf_grammar_seq_ref(&s, tail);
    cf_grammar_alt(b, r, &s);
    return r;
}

cf_grammar *cf_grammar_finish(cf_grammar_builder *b, int root, cf_error *err) {
    size_t n_el = 0, n_alt = 0;
    for (int r = 0; r < b->n_rules; r++) {
        if (b->rules[r].n == 0) {
            cf_fail(err, "grammar rule %d has no alternative", r);
            cf_grammar_builder_free(b);
            return NULL;
        }
        n_alt += (size_t)b->rules[r].n;
        for (int a = 0; a < b->rules[r].n; a++) n_el += (size_t)b->rules[r].alts[a].n + 1;
    }
    cf_grammar *g = cf_xcalloc(1, sizeof *g);
    g->refs = 1, g->n_rules = b->n_rules, g->root = root;
    g->el = cf_xmalloc(sizeof *g->el * n_el);
    g->alt = cf_xmalloc(sizeof *g->alt * n_alt);
    g->rule_alt = cf_xmalloc(sizeof *g->rule_alt * (size_t)(b->n_rules + 1));
    size_t e = 0, a = 0;
    for (int r = 0; r < b->n_rules; r++) {
        g->rule_alt[r] = (int32_t)a;
        for (int i = 0; i < b->rules[r].n; i++) {
            g->alt[a++] = (int32_t)e;
            if (b->rules[r].alts[i].n) /* an ε alternative has no array */
                memcpy(g->el + e, b->rules[r].alts[i].el, sizeof *g->el * (size_t)b->rules[r].alts[i].n);
            e += (size_t)b->rules[r].alts[i].n;
            g->el[e++] = EL_END;
        }
    }
    g->rule_alt[b->n_rules] = (int32_t)a;
    g->n_el = n_el, g->n_alt = n_alt, g->n_cls = (size_t)b->n_cls;
    uint64_t h = (uint64_t)root * 0x9e3779b97f4a7c15ull ^ n_el;
    for (size_t i = 0; i < n_el; i++) h = (h ^ (uint32_t)g->el[i]) * 0x100000001b3ull;
    for (size_t i = 0; i < n_alt; i++) h = (h ^ (uint32_t)g->alt[i]) * 0x100000001b3ull;
    for (size_t i = 0; i < (size_t)b->n_cls * 32; i++) h = (h ^ ((const uint8_t *)b->cls)[i]) * 0x100000001b3ull;
    g->hash = h;
    g->cls = b->cls;
    b->cls = NULL;
    cf_grammar_builder_free(b);
    return g;
}

bool cf_grammar_equal(const cf_grammar *a, const cf_grammar *b) {
    return a->hash == b->hash && a->root == b->root && a->n_rules == b->n_rules && a->n_el == b->n_el &&
           a->n_alt == b->n_alt && a->n_cls == b->n_cls && memcmp(a->el, b->el, sizeof *a->el * a->n_el) == 0 &&
           memcmp(a->alt, b->alt, sizeof *a->alt * a->n_alt) == 0 &&
           memcmp(a->rule_alt, b->rule_alt, sizeof *a->rule_alt * (size_t)(a->n_rules + 1)) == 0 &&
           memcmp(a->cls, b->cls, 32 * a->n_cls) == 0;
}

cf_grammar *cf_grammar_retain(cf_grammar *g) {
    __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void cf_grammar_free(cf_grammar *g) {
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    free(g->el), free(g->alt), free(g->rule_alt), free(g->cls), free(g);
}

/* ---- the vocabulary trie ---- */

typedef struct trie_node {
    int32_t child, sibling; /* first child, next sibling (-1: none) */
    int32_t token;          /* first token ending here (-1: none); more through tok_next */
    int32_t lo, hi;         /* the tokens of its subtree, itself included: dfs[lo .. hi) */
    uint8_t byte;
    uint8_t height;         /* the longest path below it (255: too long to matter) */
    bool plain;             /* every byte below it is in PLAIN */
} trie_node;

/* The bulk path of the mask (walk): the bytes of the body of a JSON string that need no
 * escape, printable ASCII but '"' and '\'. A subtree holding only these bytes is allowed
 * whole when each of them takes the stacks to one same set, long enough. */
static bool plain_byte(unsigned c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; }
enum { RUN_UNKNOWN = -1, RUN_FOREVER = 255 };

/* Tokens by their bytes; dfs lists the tokens in depth-first order. */
typedef struct trie {
    trie_node *nodes;
    int32_t n, cap;
    int32_t *dfs;
} trie;

struct cf_grammar_vocab {
    int n_tokens, words;
    trie all;       /* every token the grammar may allow */
    trie mixed;     /* those with a byte outside PLAIN */
    int32_t *plain; /* [n_plain] the tokens of PLAIN bytes only, shortest first */
    int32_t n_plain;
    int32_t *tok_next; /* [n_tokens] the next token ending at the same node (of either trie) */
    int32_t *tok_next_mixed;
    char **bytes; /* [n_tokens] each token's bytes */
    size_t *len;
    int32_t *end;
    int n_end, max_len;
};

/* Sets lo, hi, height and plain below node t (depth-first), appending its tokens to dfs. */
static void trie_finish(trie *tr, const int32_t *tok_next, int32_t t, int32_t *n_dfs) {
    trie_node *nd = &tr->nodes[t];
    nd->lo = *n_dfs;
    for (int32_t k = nd->token; k >= 0; k = tok_next[k]) tr->dfs[(*n_dfs)++] = k;
    int height = 0;
    bool plain = true;
    for (int32_t c = tr->nodes[t].child; c >= 0; c = tr->nodes[c].sibling) {
        trie_finish(tr, tok_next, c, n_dfs);
        int h = tr->nodes[c].height + 1;
        height = h > height ? h : height;
        plain &= tr->nodes[c].plain && plain_byte(tr->nodes[c].byte);
    }
    nd = &tr->nodes[t];
    nd->hi = *n_dfs;
    nd->height = (uint8_t)(height < RUN_FOREVER ? height : RUN_FOREVER);
    nd->plain = plain && height < RUN_FOREVER;
}

static int32_t trie_child(trie *tr, int32_t node, uint8_t byte) {
    int32_t *link = &tr->nodes[node].child;
    while (*link >= 0 && tr->nodes[*link].byte != byte) link = &tr->nodes[*link].sibling;
    if (*link >= 0) return *link;
    if (tr->n == tr->cap) tr->cap *= 2, tr->nodes = cf_xrealloc(tr->nodes, sizeof *tr->nodes * (size_t)tr->cap);
    int32_t id = tr->n++;
    tr->nodes[id] = (trie_node){.child = -1, .sibling = -1, .token = -1, .byte = byte};
    link = &tr->nodes[node].child; /* the array may have moved */
    while (*link >= 0) link = &tr->nodes[*link].sibling;
    *link = id;
    return id;
}

static void trie_init(trie *tr, int n_tokens) {
    tr->cap = 1024, tr->n = 1;
    tr->nodes = cf_xmalloc(sizeof *tr->nodes * (size_t)tr->cap);
    tr->nodes[0] = (trie_node){.child = -1, .sibling = -1, .token = -1};
    tr->dfs = cf_xmalloc(sizeof *tr->dfs * (size_t)(n_tokens ? n_tokens : 1));
}

static void trie_add(trie *tr, int32_t *tok_next, int32_t t, const char *bytes, size_t len) {
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) node = trie_child(tr, node, (uint8_t)bytes[i]);
    tok_next[t] = tr->nodes[node].token;
    tr->nodes[node].token = t;
}

static void trie_free(trie *tr) { free(tr->nodes), free(tr->dfs); }

cf_grammar_vocab *cf_grammar_vocab_from_bytes(const char *const *bytes, const size_t *len, int n_tokens,
                                              const int32_t *end, int n_end) {
    cf_grammar_vocab *v = cf_xcalloc(1, sizeof *v);
    size_t nt = (size_t)(n_tokens ? n_tokens : 1);
    v->n_tokens = n_tokens, v->words = (n_tokens + 63) / 64;
    trie_init(&v->all, n_tokens), trie_init(&v->mixed, n_tokens);
    v->tok_next = cf_xmalloc(sizeof *v->tok_next * nt);
    v->tok_next_mixed = cf_xmalloc(sizeof *v->tok_next_mixed * nt);
    v->plain = cf_xmalloc(sizeof *v->plain * nt);
    v->bytes = cf_xcalloc(nt, sizeof *v->bytes);
    v->len = cf_xcalloc(nt, sizeof *v->len);
    v->end = cf_xmalloc(sizeof *v->end * (size_t)(n_end ? n_end : 1));
    memcpy(v->end, end, sizeof *end * (size_t)n_end);
    v->n_end = n_end;
    for (int t = 0; t < n_tokens; t++) {
        v->tok_next[t] = v->tok_next_mixed[t] = -1;
        bool is_end = false;
        for (int i = 0; i < n_end; i++) is_end |= end[i] == t;
        if (!bytes[t] || len[t] == 0 || is_end) continue; /* no bytes: never allowed (it would not advance) */
        v->bytes[t] = cf_xmalloc(len[t]);
        memcpy(v->bytes[t], bytes[t], len[t]);
        v->len[t] = len[t];
        if ((int)len[t] > v->max_len) v->max_len = (int)len[t];
        trie_add(&v->all, v->tok_next, t, bytes[t], len[t]);
        bool plain = len[t] < RUN_FOREVER;
        for (size_t i = 0; i < len[t]; i++) plain &= plain_byte((unsigned char)bytes[t][i]);
        if (plain)
            v->plain[v->n_plain++] = t;
        else
            trie_add(&v->mixed, v->tok_next_mixed, t, bytes[t], len[t]);
    }
    int32_t start[RUN_FOREVER + 1] = {0}, *sorted = cf_xmalloc(sizeof *sorted * nt); /* by length: counting sort */
    for (int32_t i = 0; i < v->n_plain; i++) start[v->len[v->plain[i]]]++;
    for (int l = 0, at = 0; l <= RUN_FOREVER; l++) {
        int32_t count = start[l];
        start[l] = at, at += count;
    }
    for (int32_t i = 0; i < v->n_plain; i++) sorted[start[v->len[v->plain[i]]]++] = v->plain[i];
    free(v->plain);
    v->plain = sorted;
    int32_t n_dfs = 0;
    trie_finish(&v->all, v->tok_next, 0, &n_dfs);
    n_dfs = 0;
    trie_finish(&v->mixed, v->tok_next_mixed, 0, &n_dfs);
    return v;
}

/* A SentencePiece control or unknown token ("<unk>", "<s>"): its text is a name, not bytes
 * the model writes (byte-fallback tokens "<0x41>" are bytes). */
static bool sp_marker(const cf_tokenizer *tok, int32_t id) {
    size_t n;
    const char *t = cf_tokenizer_token(tok, id, &n);
    if (strcmp(cf_tokenizer_type(tok), "sentencepiece-bpe") != 0 || n < 3 || t[0] != '<' || t[n - 1] != '>') return false;
    if (n == 6 && t[1] == '0' && t[2] == 'x') return false;
    for (size_t i = 1; i + 1 < n; i++)
        if (t[i] == ' ') return false;
    return true;
}

cf_grammar_vocab *cf_grammar_vocab_new(const cf_tokenizer *tok, const int32_t *end, int n_end) {
    int n = cf_tokenizer_vocab_size(tok);
    const char **bytes = cf_xcalloc((size_t)(n ? n : 1), sizeof *bytes);
    size_t *len = cf_xcalloc((size_t)(n ? n : 1), sizeof *len);
    char **copies = cf_xcalloc((size_t)(n ? n : 1), sizeof *copies);
    /* a token's bytes as written after an ordinary token (SentencePiece drops a leading
     * space only after BOS, where a document cannot start with a space anyway) */
    int32_t prev = n > 3 ? 3 : 0;
    for (int32_t t = 0; t < n; t++) {
        if (t == cf_tokenizer_bos(tok) || sp_marker(tok, t)) continue;
        char scratch[16];
        const char *p = cf_tokenizer_piece(tok, prev, t, scratch, &len[t]);
        copies[t] = cf_xmalloc(len[t] + 1);
        memcpy(copies[t], p, len[t]);
        bytes[t] = copies[t];
    }
    cf_grammar_vocab *v = cf_grammar_vocab_from_bytes(bytes, len, n, end, n_end);
    for (int t = 0; t < n; t++) free(copies[t]);
    free(copies), free(bytes), free(len);
    return v;
}

void cf_grammar_vocab_free(cf_grammar_vocab *v) {
    if (!v) return;
    for (int t = 0; t < v->n_tokens; t++) free(v->bytes[t]);
    trie_free(&v->all), trie_free(&v->mixed);
    free(v->bytes), free(v->len), free(v->tok_next), free(v->tok_next_mixed), free(v->plain), free(v->end), free(v);
}

/* ---- the matcher ---- */

typedef struct stack_node {
    int32_t pos, below; /* the element to match next (an EL_CLASS), the stack under it */
} stack_node;

typedef struct state {
    int32_t off, n; /* its stacks: sets[off .. off + n), sorted */
    uint64_t hash;
    uint64_t *mask; /* computed on first use */
    int16_t run;    /* plain bytes it takes in a row, each to one same set (RUN_*) */
    int32_t run_end; /* the state after those `run` bytes (-1: RUN_FOREVER, or not known) */
} state;

struct cf_grammar_run {
    int refs;
    cf_grammar *g;
    const cf_grammar_vocab *v;
    stack_node *nodes; /* node 0: the empty stack (the document is complete) */
    int32_t n_nodes, cap_nodes;
    int32_t *node_ht; /* open addressing over nodes, -1 empty */
    int32_t ht_cap;
    int32_t *sets;
    long n_sets, cap_sets;
    state *st;
    int32_t n_st, cap_st;
    int32_t *st_ht;
    int32_t st_ht_cap;
    int32_t *scratch; /* [max_len + 2][MAX_SET] sets of the trie walk, by depth */
    bool overflow;    /* a set went past MAX_SET: the grammar is too ambiguous */
};

static uint64_t mix(uint64_t h) {
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ull, h ^= h >> 33;
    return h;
}

static void node_rehash(cf_grammar_run *r) {
    free(r->node_ht);
    r->node_ht = cf_xmalloc(sizeof *r->node_ht * (size_t)r->ht_cap);
    memset(r->node_ht, 0xff, sizeof *r->node_ht * (size_t)r->ht_cap);
    for (int32_t i = 1; i < r->n_nodes; i++) {
        uint64_t h = mix((uint64_t)(uint32_t)r->nodes[i].pos << 32 | (uint32_t)r->nodes[i].below);
        int32_t k = (int32_t)(h & (uint64_t)(r->ht_cap - 1));
        while (r->node_ht[k] >= 0) k = (k + 1) & (r->ht_cap - 1);
        r->node_ht[k] = i;
    }
}

/* The stack `pos` on `below`, one id per distinct stack. */
static int32_t cons(cf_grammar_run *r, int32_t pos, int32_t below) {
    uint64_t h = mix((uint64_t)(uint32_t)pos << 32 | (uint32_t)below);
    int32_t k = (int32_t)(h & (uint64_t)(r->ht_cap - 1));
    for (; r->node_ht[k] >= 0; k = (k + 1) & (r->ht_cap - 1)) {
        const stack_node *n = &r->nodes[r->node_ht[k]];
        if (n->pos == pos && n->below == below) return r->node_ht[k];
    }
    if (r->n_nodes == r->cap_nodes)
        r->cap_nodes *= 2, r->nodes = cf_xrealloc(r->nodes, sizeof *r->nodes * (size_t)r->cap_nodes);
    int32_t id = r->n_nodes++;
    r->nodes[id] = (stack_node){pos, below};
    r->node_ht[k] = id;
    if (2 * r->n_nodes > r->ht_cap) r->ht_cap *= 2, node_rehash(r);
    return id;
}

static void set_add(cf_grammar_run *r, int32_t *set, int *n, int32_t id) {
    for (int i = 0; i < *n; i++)
        if (set[i] == id) return;
    if (*n == MAX_SET) {
        r->overflow = true;
        return;
    }
    set[(*n)++] = id;
}

/* Adds to set the stacks that `pos` (any element but EL_END) on `below` becomes once its
 * rule references are expanded down to a byte class. */
static void expand(cf_grammar_run *r, int32_t pos, int32_t below, int32_t *set, int *n, int depth) {
    const cf_grammar *g = r->g;
    if (pos < 0) { /* the stack `below` itself, whose top is a continuation */
        if (below == 0) return set_add(r, set, n, 0);
        return expand(r, r->nodes[below].pos, r->nodes[below].below, set, n, depth);
    }
    int32_t e = g->el[pos];
    if (EL_KIND(e) == EL_CLASS) return set_add(r, set, n, cons(r, pos, below));
    if (depth > MAX_EXPAND) {
        r->overflow = true;
        return;
    }
    int32_t cont = EL_KIND(g->el[pos + 1]) == EL_END ? below : cons(r, pos + 1, below);
    int rule = EL_ARG(e);
    for (int32_t a = g->rule_alt[rule]; a < g->rule_alt[rule + 1]; a++) {
        int32_t start = g->alt[a];
        if (EL_KIND(g->el[start]) == EL_END)
            expand(r, -1, cont, set, n, depth + 1);
        else
            expand(r, start, cont, set, n, depth + 1);
    }
}

/* out = the stacks of in[0, n) after byte c; returns their number. */
static int advance_byte(cf_grammar_run *r, const int32_t *in, int n, uint8_t c, int32_t *out) {
    const cf_grammar *g = r->g;
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (in[i] == 0) continue;
        const stack_node nd = r->nodes[in[i]];
        const uint8_t *bits = g->cls[EL_ARG(g->el[nd.pos])];
        if (!(bits[c >> 3] >> (c & 7) & 1)) continue;
        if (EL_KIND(g->el[nd.pos + 1]) == EL_END)
            expand(r, -1, nd.below, out, &m, 0);
        else
            expand(r, nd.pos + 1, nd.below, out, &m, 0);
    }
    return m;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void state_rehash(cf_grammar_run *r) {
    free(r->st_ht);
    r->st_ht = cf_xmalloc(sizeof *r->st_ht * (size_t)r->st_ht_cap);
    memset(r->st_ht, 0xff, sizeof *r->st_ht * (size_t)r->st_ht_cap);
    for (int32_t i = 0; i < r->n_st; i++) {
        int32_t k = (int32_t)(r->st[i].hash & (uint64_t)(r->st_ht_cap - 1));
        while (r->st_ht[k] >= 0) k = (k + 1) & (r->st_ht_cap - 1);
        r->st_ht[k] = i;
    }
}

/* The state id of the stack set set[0, n) (sorted here); -1 for an empty set. */
static int intern(cf_grammar_run *r, int32_t *set, int n) {
    if (n == 0 || r->overflow) return -1;
    qsort(set, (size_t)n, sizeof *set, cmp_i32);
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) h = mix(h ^ (uint64_t)(uint32_t)set[i]);
    int32_t k = (int32_t)(h & (uint64_t)(r->st_ht_cap - 1));
    for (; r->st_ht[k] >= 0; k = (k + 1) & (r->st_ht_cap - 1)) {
        const state *s = &r->st[r->st_ht[k]];
        if (s->hash == h && s->n == n && memcmp(r->sets + s->off, set, sizeof *set * (size_t)n) == 0) return r->st_ht[k];
    }
    if (r->n_sets + n > r->cap_sets) {
        while (r->n_sets + n > r->cap_sets) r->cap_sets *= 2;
        r->sets = cf_xrealloc(r->sets, sizeof *r->sets * (size_t)r->cap_sets);
    }
    memcpy(r->sets + r->n_sets, set, sizeof *set * (size_t)n);
    if (r->n_st == r->cap_st) r->cap_st *= 2, r->st = cf_xrealloc(r->st, sizeof *r->st * (size_t)r->cap_st);
    int32_t id = r->n_st++;
    r->st[id] = (state){.off = (int32_t)r->n_sets, .n = n, .hash = h, .run = RUN_UNKNOWN, .run_end = -1};
    r->n_sets += n;
    r->st_ht[k] = id;
    if (2 * r->n_st > r->st_ht_cap) r->st_ht_cap *= 2, state_rehash(r);
    return id;
}

cf_grammar_run *cf_grammar_run_new(cf_grammar *g, const cf_grammar_vocab *v) {
    cf_grammar_run *r = cf_xcalloc(1, sizeof *r);
    r->refs = 1, r->g = cf_grammar_retain(g), r->v = v;
    r->cap_nodes = 256, r->n_nodes = 1, r->ht_cap = 1024;
    r->nodes = cf_xmalloc(sizeof *r->nodes * (size_t)r->cap_nodes);
    r->nodes[0] = (stack_node){-1, -1};
    node_rehash(r);
    r->cap_sets = 256, r->sets = cf_xmalloc(sizeof *r->sets * (size_t)r->cap_sets);
    r->cap_st = 64, r->st = cf_xmalloc(sizeof *r->st * (size_t)r->cap_st);
    r->st_ht_cap = 128;
    state_rehash(r);
    r->scratch = cf_xmalloc(sizeof *r->scratch * MAX_SET * (size_t)(v->max_len + 2));
    return r;
}

cf_grammar_run *cf_grammar_run_retain(cf_grammar_run *r) {
    __atomic_add_fetch(&r->refs, 1, __ATOMIC_RELAXED);
    return r;
}

const cf_grammar *cf_grammar_run_grammar(const cf_grammar_run *r) { return r->g; }

void cf_grammar_run_free(cf_grammar_run *r) {
    if (!r || __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    for (int32_t i = 0; i < r->n_st; i++) free(r->st[i].mask);
    free(r->nodes), free(r->node_ht), free(r->sets), free(r->st), free(r->st_ht), free(r->scratch);
    cf_grammar_free(r->g);
    free(r);
}

long cf_grammar_run_states(const cf_grammar_run *r) { return r->n_st; }

int cf_grammar_run_start(cf_grammar_run *r) {
    int32_t set[MAX_SET];
    int n = 0;
    const cf_grammar *g = r->g;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
        expand(r, EL_KIND(g->el[g->alt[a]]) == EL_END ? -1 : g->alt[a], 0, set, &n, 0);
    return intern(r, set, n);
}

/* How many plain bytes in a row state `id` takes, each plain byte of a step leading to the
 * same set (so that any plain string that long is taken): RUN_FOREVER when it comes back
 * to itself. Memoized per state. */
static int plain_run(cf_grammar_run *r, int id) {
    int chain[RUN_FOREVER], len = 0, tail = 0, end = -1; /* the states after 0, 1, ... plain bytes; tail: the run after the last, end where it ends */
    int32_t in[MAX_SET], out[MAX_SET];
    for (int cur = id;;) {
        if (r->st[cur].run != RUN_UNKNOWN) {
            tail = r->st[cur].run, end = r->st[cur].run_end;
            break;
        }
        if (len == RUN_FOREVER - 1) break; /* long enough for any token: counted as 0 beyond */
        chain[len++] = cur;
        int n = r->st[cur].n, next = -1;
        memcpy(in, r->sets + r->st[cur].off, sizeof *in * (size_t)n);
        for (unsigned c = 0x20; c < 0x7f; c++) {
            if (!plain_byte(c)) continue;
            int got = intern(r, out, advance_byte(r, in, n, (uint8_t)c, out));
            if (got < 0 || (next >= 0 && got != next)) {
                next = -1;
                break;
            }
            next = got;
        }
        if (next < 0) {
            r->st[cur].run = 0, r->st[cur].run_end = cur, len--, tail = 0, end = cur;
            break;
        }
        if (next == cur) {
            r->st[cur].run = RUN_FOREVER, len--, tail = RUN_FOREVER;
            break;
        }
        bool loop = false;
        for (int i = 0; i < len && !loop; i++) loop = chain[i] == next;
        if (loop) { /* a cycle of plain steps: any length */
            tail = RUN_FOREVER;
            break;
        }
        cur = next;
    }
    for (int i = len - 1; i >= 0; i--) {
        tail = tail == RUN_FOREVER ? RUN_FOREVER : tail + 1 < RUN_FOREVER ? tail + 1 : RUN_FOREVER - 1;
        r->st[chain[i]].run = (int16_t)tail;
        r->st[chain[i]].run_end = tail == RUN_FOREVER ? -1 : end;
    }
    return r->st[id].run;
}

/* Marks in mask the tokens under node `t` of trie tr (next: its token lists) that the
 * stacks set[0, n) allow. A subtree of plain bytes no deeper than the stacks' plain run is
 * allowed whole. */
static void walk(cf_grammar_run *r, const trie *tr, const int32_t *next, int32_t t, const int32_t *set, int n, int depth,
                 uint64_t *mask) {
    int32_t *out = r->scratch + (size_t)depth * MAX_SET;
    for (int32_t c = tr->nodes[t].child; c >= 0; c = tr->nodes[c].sibling) {
        int m = advance_byte(r, set, n, tr->nodes[c].byte, out);
        if (m == 0) continue;
        const trie_node *nd = &tr->nodes[c];
        if (nd->child >= 0 && nd->plain && nd->height >= 2) {
            int32_t copy[MAX_SET];
            memcpy(copy, out, sizeof *copy * (size_t)m);
            int id = intern(r, copy, m);
            if (id >= 0 && plain_run(r, id) >= nd->height) {
                for (int32_t k = nd->lo; k < nd->hi; k++) mask[tr->dfs[k] >> 6] |= 1ull << (tr->dfs[k] & 63);
                continue;
            }
        }
        for (int32_t tok = nd->token; tok >= 0; tok = next[tok]) mask[tok >> 6] |= 1ull << (tok & 63);
        if (nd->child >= 0) walk(r, tr, next, c, out, m, depth + 1, mask);
    }
}

const uint64_t *cf_grammar_run_mask(cf_grammar_run *r, int id) {
    state *s = &r->st[id];
    if (s->mask) return s->mask;
    uint64_t *mask = cf_xcalloc((size_t)(r->v->words ? r->v->words : 1), sizeof *mask);
    /* the walk may intern nothing but may grow r->sets: copy the state's stacks first */
    int32_t set[MAX_SET];
    int n = s->n;
    memcpy(set, r->sets + s->off, sizeof *set * (size_t)n);
    const cf_grammar_vocab *v = r->v;
    int run = plain_run(r, id);
    if (run > 0 && run < RUN_FOREVER) { /* a plain token longer than the run must fail past it */
        int32_t e_set[MAX_SET], out[MAX_SET];
        int e = r->st[id].run_end, n_e = e >= 0 ? r->st[e].n : 0;
        if (e >= 0) memcpy(e_set, r->sets + r->st[e].off, sizeof *e_set * (size_t)n_e);
        for (unsigned c = 0x20; c < 0x7f && run > 0; c++)
            if (e < 0 || (plain_byte(c) && advance_byte(r, e_set, n_e, (uint8_t)c, out) > 0)) run = 0;
    }
    if (run > 0) { /* the plain tokens up to the run's length at once, the trie of the others walked */
        for (int32_t i = 0; i < v->n_plain && (run == RUN_FOREVER || (int)v->len[v->plain[i]] <= run); i++)
            mask[v->plain[i] >> 6] |= 1ull << (v->plain[i] & 63);
        walk(r, &v->mixed, v->tok_next_mixed, 0, set, n, 0, mask);
    } else {
        walk(r, &v->all, v->tok_next, 0, set, n, 0, mask);
    }
    if (set[0] == 0) /* sorted: the empty stack first */
        for (int i = 0; i < r->v->n_end; i++) mask[r->v->end[i] >> 6] |= 1ull << (r->v->end[i] & 63);
    r->st[id].mask = mask;
    return mask;
}

bool cf_grammar_run_complete(cf_grammar_run *r, int id, bool *only_end) {
    const state *s = &r->st[id];
    bool complete = r->sets[s->off] == 0;
    if (only_end) *only_end = complete && s->n == 1;
    return complete;
}

int cf_grammar_run_feed(cf_grammar_run *r, int id, const char *bytes, size_t len) {
    int32_t a[MAX_SET], b[MAX_SET];
    int n = r->st[id].n;
    memcpy(a, r->sets + r->st[id].off, sizeof *a * (size_t)n);
    int32_t *cur = a, *next = b;
    for (size_t i = 0; i < len && n > 0; i++) {
        n = advance_byte(r, cur, n, (uint8_t)bytes[i], next);
        int32_t *t = cur;
        cur = next, next = t;
    }
    return intern(r, cur, n);
}

int cf_grammar_run_advance(cf_grammar_run *r, int id, int32_t tok) {
    const cf_grammar_vocab *v = r->v;
    if (tok < 0 || tok >= v->n_tokens || !v->bytes[tok]) return -1;
    return cf_grammar_run_feed(r, id, v->bytes[tok], v->len[tok]);
}

void cf_grammar_apply_mask(const uint64_t *mask, float *logits, long vocab) {
    for (long w = 0; w < (vocab + 63) / 64; w++) {
        uint64_t keep = mask[w];
        long base = w * 64, n = vocab - base < 64 ? vocab - base : 64;
        if (keep == ~0ull) continue;
        if (keep == 0) {
            for (long i = 0; i < n; i++) logits[base + i] = -INFINITY;
            continue;
        }
        for (long i = 0; i < n; i++)
            if (!(keep >> i & 1)) logits[base + i] = -INFINITY;
    }
}
