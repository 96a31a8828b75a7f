/* A Jinja interpreter for chat templates (see jinja.h for what it covers).
 *
 * The template is lexed into tokens with jinja2's whitespace rules applied to the text
 * between tags (trim_blocks, lstrip_blocks, "-" and "+"), parsed into a tree of nodes,
 * and each rendering walks that tree. Everything a parse or a rendering makes lives in one
 * arena that is freed at the end, and errors leave through a longjmp to the entry point,
 * so no path leaks and no value needs a reference count. */
#include "data/jinja.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena and errors */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} chunk;

typedef struct arena {
    chunk *head;
    size_t total, limit;
} arena;

/* Where an error goes: the message is written to err, then longjmp(jmp, 1). */
typedef struct fail_ctx {
    jmp_buf jmp;
    cf_error *err;
} fail_ctx;

_Noreturn static void failf(fail_ctx *f, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
_Noreturn static void failf(fail_ctx *f, int line, int col, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++) /* one line */
        if ((unsigned char)*p < 0x20) *p = ' ';
    cf_fail(f->err, "template:%d:%d: %s", line, col, msg);
    longjmp(f->jmp, 1);
}

static void *arena_alloc(arena *a, fail_ctx *f, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->total + cap > a->limit) failf(f, 0, 0, "the template needs more than %zu bytes of memory", a->limit);
        chunk *c = cf_xmalloc(sizeof *c + cap);
        c->next = a->head, c->used = 0, c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

static void arena_free(arena *a) {
    for (chunk *c = a->head, *n; c; c = n) n = c->next, free(c);
    a->head = NULL;
}

/* ---------------------------------------------------------------- values */

typedef enum vkind { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_FUNC, V_METHOD, V_MACRO, V_LOOP } vkind;

struct jlist;
struct jdict;
struct node;
struct method;
struct macro;
struct loopst;

typedef struct jv {
    vkind k;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        struct jlist *l;
        struct jdict *d; /* V_DICT, V_NS */
        int fn;          /* V_FUNC: index into FUNCS */
        struct method *m;
        struct macro *mac;
        struct loopst *loop;
        const char *name; /* V_UNDEF: the name that was looked up, or NULL */
    };
} jv;

typedef struct jlist {
    size_t n;
    bool tuple;
    jv *v;
} jlist;

typedef struct jdict {
    size_t n, cap;
    jv *keys, *vals;
} jdict;

typedef struct method {
    jv self;
    const char *name;
} method;

typedef struct loopst {
    jlist *items;
    size_t i;
} loopst;

static const jv UNDEF = {.k = V_UNDEF};
static const jv NONE = {.k = V_NONE};

static jv vbool(bool b) { return (jv){.k = V_BOOL, .b = b}; }
static jv vint(int64_t i) { return (jv){.k = V_INT, .i = i}; }
static jv vfloat(double f) { return (jv){.k = V_FLOAT, .f = f}; }
static jv vstr(const char *p, size_t n) { return (jv){.k = V_STR, .s = {p, n}}; }
static jv vcstr(const char *p) { return vstr(p, strlen(p)); }

/* ---------------------------------------------------------------- tokens */

typedef enum tkind { TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP, TK_EOF } tkind;

typedef struct token {
    tkind k;
    int line, col;
    const char *s; /* TEXT, NAME, STR (decoded), OP */
    size_t n;
    int64_t i;
    double f;
} token;

/* ---------------------------------------------------------------- nodes */

typedef enum nkind {
    /* statements */
    N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_BREAK, N_CONTINUE,
    /* expressions */
    E_LIT, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NOT, E_NEG, E_POS,
    E_BIN, E_CMP, E_AND, E_OR, E_COND, E_CONCAT
} nkind;

typedef struct node {
    nkind k;
    int line, col;
    int op;              /* E_BIN / E_CMP: the operator token; E_TEST: negated */
    jv lit;              /* E_LIT; N_TEXT */
    const char *name;    /* E_NAME, E_ATTR, E_FILTER, E_TEST, N_SET target, N_MACRO, N_FOR first target */
    const char *name2;   /* N_SET: the attribute of ns.attr; N_FOR: the second target */
    int ntargets;        /* N_FOR: 1 or 2 */
    struct node *a, *b, *c, *d;
    struct node **kids; /* list items, dict k/v pairs, call/filter/test arguments, macro defaults */
    const char **knames; /* keyword names of arguments (NULL: positional), macro parameters */
    int nkids;
    struct node *next; /* the next statement */
} node;

/* ---------------------------------------------------------------- the template */

struct cf_jinja {
    arena ar;
    node *body;
};

/* ---------------------------------------------------------------- lexer */

typedef struct lexer {
    arena *ar;
    fail_ctx *f;
    const char *src; /* newlines normalised, one trailing newline dropped */
    size_t len, pos;
    token *toks;
    size_t n, cap;
} lexer;

static void pos_of(const char *src, size_t at, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < at; i++)
        if (src[i] == '\n') l++, c = 1;
        else c++;
    *line = l, *col = c;
}

static token *push(lexer *L, tkind k, size_t at) {
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        token *t = arena_alloc(L->ar, L->f, cap * sizeof *t);
        if (L->n) memcpy(t, L->toks, L->n * sizeof *t);
        L->toks = t, L->cap = cap;
    }
    token *t = &L->toks[L->n++];
    memset(t, 0, sizeof *t);
    t->k = k;
    pos_of(L->src, at, &t->line, &t->col);
    return t;
}

_Noreturn static void lex_fail(lexer *L, size_t at, const char *what) {
    int line, col;
    pos_of(L->src, at, &line, &col);
    failf(L->f, line, col, "%s", what);
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool is_ident0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Appends code point u to b as UTF-8 (what Python's unicode-escape makes of \x, \u, \U). */
static size_t put_utf8(char *b, uint32_t u) {
    if (u < 0x80) return b[0] = (char)u, 1;
    if (u < 0x800) return b[0] = (char)(0xc0 | u >> 6), b[1] = (char)(0x80 | (u & 0x3f)), 2;
    if (u < 0x10000)
        return b[0] = (char)(0xe0 | u >> 12), b[1] = (char)(0x80 | ((u >> 6) & 0x3f)), b[2] = (char)(0x80 | (u & 0x3f)), 3;
    b[0] = (char)(0xf0 | u >> 18), b[1] = (char)(0x80 | ((u >> 12) & 0x3f)), b[2] = (char)(0x80 | ((u >> 6) & 0x3f));
    b[3] = (char)(0x80 | (u & 0x3f));
    return 4;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string literal at L->pos (quote included), decoded as Python's unicode-escape does. */
static void lex_string(lexer *L) {
    size_t start = L->pos;
    char q = L->src[L->pos++];
    size_t raw = L->pos;
    while (raw < L->len && L->src[raw] != q) raw += L->src[raw] == '\\' ? 2 : 1;
    /* no escape is longer decoded than written (\U00010000, 10 bytes, is 4) */
    char *out = arena_alloc(L->ar, L->f, (raw < L->len ? raw : L->len) - L->pos + 2);
    size_t n = 0;
    for (;;) {
        if (L->pos >= L->len) lex_fail(L, start, "unterminated string");
        char c = L->src[L->pos++];
        if (c == q) break;
        if (c != '\\') {
            out[n++] = c;
            continue;
        }
        if (L->pos >= L->len) lex_fail(L, start, "unterminated string");
        char e = L->src[L->pos++];
        int digits = 0;
        switch (e) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'a': out[n++] = '\a'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'v': out[n++] = '\v'; break;
        case '\\': out[n++] = '\\'; break;
        case '\'': out[n++] = '\''; break;
        case '"': out[n++] = '"'; break;
        case '\n': break; /* a backslash-newline continues the line */
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') { /* up to three octal digits */
                uint32_t u = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && L->pos < L->len && L->src[L->pos] >= '0' && L->src[L->pos] <= '7'; k++)
                    u = u * 8 + (uint32_t)(L->src[L->pos++] - '0');
                n += put_utf8(out + n, u);
            } else {
                out[n++] = '\\', out[n++] = e;
            }
        }
        if (digits) {
            uint32_t u = 0;
            for (int k = 0; k < digits; k++) {
                int h = L->pos < L->len ? hexval(L->src[L->pos]) : -1;
                if (h < 0) lex_fail(L, start, "truncated \\x, \\u or \\U escape in a string");
                u = u * 16 + (uint32_t)h, L->pos++;
            }
            if (u > 0x10ffff) lex_fail(L, start, "illegal Unicode character in a string escape");
            n += put_utf8(out + n, u);
        }
    }
    token *t = push(L, TK_STR, start);
    t->s = out, t->n = n;
}

static void lex_number(lexer *L) {
    size_t start = L->pos;
    char buf[128];
    size_t n = 0;
    bool fl = false;
    while (L->pos < L->len) {
        char c = L->src[L->pos];
        if (is_digit(c)) buf[n++] = c;
        else if (c == '_' && L->pos + 1 < L->len && is_digit(L->src[L->pos + 1])) {
        } else if (c == '.' && !fl && L->pos + 1 < L->len && is_digit(L->src[L->pos + 1])) buf[n++] = c, fl = true;
        else if ((c == 'e' || c == 'E') && L->pos + 1 < L->len &&
                 (is_digit(L->src[L->pos + 1]) ||
                  ((L->src[L->pos + 1] == '+' || L->src[L->pos + 1] == '-') && L->pos + 2 < L->len &&
                   is_digit(L->src[L->pos + 2])))) {
            buf[n++] = c, buf[n++] = L->src[++L->pos], fl = true;
        } else break;
        L->pos++;
        if (n >= sizeof buf - 3) lex_fail(L, start, "number literal too long");
    }
    buf[n] = 0;
    token *t = push(L, fl ? TK_FLOAT : TK_INT, start);
    if (fl) {
        t->f = strtod(buf, NULL);
    } else {
        int64_t v = 0;
        for (size_t k = 0; k < n; k++)
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, buf[k] - '0', &v))
                lex_fail(L, start, "integer literal out of the 64-bit range");
        t->i = v;
    }
}

static const char *const OPS[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%", "~",
                                  "|",  ".",  ",",  ":",  "(",  ")",  "[", "]", "{", "}", "=", NULL};

/* Tokens inside a tag, up to its end (}} or %}); returns the position after the end and
 * whether it had "-" (strip what follows) or "+" (keep it). */
static size_t lex_tag(lexer *L, bool block, int *end_sign) {
    int depth = 0; /* brackets: }} inside { } is not the end */
    for (;;) {
        while (L->pos < L->len && is_space(L->src[L->pos])) L->pos++;
        if (L->pos >= L->len) lex_fail(L, L->pos, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
        const char *p = L->src + L->pos;
        size_t left = L->len - L->pos;
        const char *end = block ? "%}" : "}}";
        int sign = 0;
        size_t skip = 0;
        if (left >= 3 && (p[0] == '-' || p[0] == '+') && memcmp(p + 1, end, 2) == 0) sign = p[0], skip = 3;
        else if (left >= 2 && memcmp(p, end, 2) == 0 && (block || depth == 0)) skip = 2;
        if (skip && (block || depth == 0 || sign)) {
            if (sign == '+' && !block) lex_fail(L, L->pos, "'+}}' is not valid");
            push(L, block ? TK_BLOCK_END : TK_VAR_END, L->pos);
            *end_sign = sign;
            return L->pos + skip;
        }
        char c = *p;
        if (c == '"' || c == '\'') {
            lex_string(L);
        } else if (is_digit(c)) {
            lex_number(L);
        } else if (is_ident0(c)) {
            size_t s = L->pos;
            while (L->pos < L->len && (is_ident0(L->src[L->pos]) || is_digit(L->src[L->pos]))) L->pos++;
            token *t = push(L, TK_NAME, s);
            t->s = L->src + s, t->n = L->pos - s;
        } else {
            int k = 0;
            for (; OPS[k]; k++)
                if (strlen(OPS[k]) <= left && memcmp(p, OPS[k], strlen(OPS[k])) == 0) break;
            if (!OPS[k]) lex_fail(L, L->pos, "unexpected character in a tag");
            token *t = push(L, TK_OP, L->pos);
            t->s = OPS[k], t->n = strlen(OPS[k]);
            if (c == '(' || c == '[' || c == '{') depth++;
            if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
            L->pos += t->n;
        }
    }
}

/* Text from a to b as a token, then the tag at b: jinja2's whitespace rules. `strip_next`
 * is what the previous tag's end asks of this text (1: one newline, trim_blocks; 2: all
 * leading whitespace, "-"). */
static void lex(lexer *L) {
    size_t a = 0;
    int strip_next = 0;
    for (;;) {
        size_t b = a;
        int kind = 0; /* '{' var, '%' block, '#' comment */
        while (b + 1 < L->len) {
            if (L->src[b] == '{' && (L->src[b + 1] == '{' || L->src[b + 1] == '%' || L->src[b + 1] == '#')) {
                kind = L->src[b + 1];
                break;
            }
            b++;
        }
        if (!kind) b = L->len;
        size_t ts = a, te = b;
        bool line_start = ts == 0 || L->src[ts - 1] == '\n';
        if (strip_next == 2) while (ts < te && is_space(L->src[ts])) ts++;
        else if (strip_next == 1 && ts < te && L->src[ts] == '\n') ts++;
        if (strip_next) line_start = ts == 0 || L->src[ts - 1] == '\n';
        char sign = kind && b + 2 < L->len ? L->src[b + 2] : 0;
        if (kind && sign == '-') {
            while (te > ts && is_space(L->src[te - 1])) te--;
        } else if (kind && kind != '{' && sign != '+') { /* lstrip_blocks */
            size_t l = te;
            while (l > ts && L->src[l - 1] != '\n') l--;
            bool ws = l < te;
            for (size_t k = l; k < te; k++) ws = ws && is_space(L->src[k]);
            if (ws && (l > ts || line_start)) te = l;
        }
        if (te > ts) {
            token *t = push(L, TK_TEXT, ts);
            t->s = L->src + ts, t->n = te - ts;
        }
        if (!kind) break;
        size_t p = b + 2 + (sign == '-' || sign == '+');
        int end_sign = 0;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t k = p; k + 1 < L->len; k++)
                if (L->src[k] == '#' && L->src[k + 1] == '}') {
                    e = L->src + k;
                    break;
                }
            if (!e) lex_fail(L, b, "unterminated comment");
            size_t epos = (size_t)(e - L->src);
            if (epos > p && L->src[epos - 1] == '-') end_sign = '-';
            a = epos + 2;
        } else {
            push(L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, b);
            L->pos = p;
            a = lex_tag(L, kind == '%', &end_sign);
        }
        strip_next = end_sign == '-' ? 2 : end_sign == '+' || kind == '{' ? 0 : 1;
    }
    push(L, TK_EOF, L->len);
}

/* ---------------------------------------------------------------- parser */

#define MAX_DEPTH 200

typedef struct parser {
    arena *ar;
    fail_ctx *f;
    token *t;
    size_t i, n;
    int depth;
    int loops; /* for bodies around the statement being parsed (break/continue need one) */
} parser;

static token *peek(parser *P) { return &P->t[P->i]; }
static token *next_tok(parser *P) {
    token *t = &P->t[P->i];
    if (P->i + 1 < P->n) P->i++;
    return t;
}

static bool tok_is(const token *t, tkind k, const char *s) {
    return t->k == k && (!s || (t->n == strlen(s) && memcmp(t->s, s, t->n) == 0));
}
static bool is_op(parser *P, const char *s) { return tok_is(peek(P), TK_OP, s); }
static bool is_name(parser *P, const char *s) { return tok_is(peek(P), TK_NAME, s); }

_Noreturn static void perr(parser *P, const token *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
_Noreturn static void perr(parser *P, const token *t, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    failf(P->f, t->line, t->col, "%s", msg);
}

static const char *tok_desc(const token *t, char *buf, size_t cap) {
    switch (t->k) {
    case TK_EOF: return "end of template";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_END: return "'%}'";
    case TK_TEXT: return "text";
    case TK_STR: return "a string";
    case TK_INT:
    case TK_FLOAT: return "a number";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    }
}

static void expect_op(parser *P, const char *s) {
    if (!is_op(P, s)) {
        char b[64];
        perr(P, peek(P), "expected '%s', found %s", s, tok_desc(peek(P), b, sizeof b));
    }
    next_tok(P);
}

static const char *dup_name(parser *P, const token *t) {
    char *s = arena_alloc(P->ar, P->f, t->n + 1);
    memcpy(s, t->s, t->n);
    s[t->n] = 0;
    return s;
}

static const char *expect_name(parser *P) {
    if (peek(P)->k != TK_NAME) {
        char b[64];
        perr(P, peek(P), "expected a name, found %s", tok_desc(peek(P), b, sizeof b));
    }
    return dup_name(P, next_tok(P));
}

static node *mk(parser *P, nkind k, const token *at) {
    node *n = arena_alloc(P->ar, P->f, sizeof *n);
    memset(n, 0, sizeof *n);
    n->k = k, n->line = at->line, n->col = at->col;
    return n;
}

static void enter(parser *P) {
    if (++P->depth > MAX_DEPTH) perr(P, peek(P), "the template nests deeper than %d", MAX_DEPTH);
}

static node *parse_expr(parser *P);
static node *parse_or(parser *P);
static node *parse_unary(parser *P, bool with_filter);

/* Growable node list while parsing. */
typedef struct nvec {
    node **v;
    const char **names;
    int n, cap;
} nvec;

static void nvec_push(parser *P, nvec *v, node *x, const char *name) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        node **nv = arena_alloc(P->ar, P->f, (size_t)cap * sizeof *nv);
        const char **nn = arena_alloc(P->ar, P->f, (size_t)cap * sizeof *nn);
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv), memcpy(nn, v->names, (size_t)v->n * sizeof *nn);
        v->v = nv, v->names = nn, v->cap = cap;
    }
    v->v[v->n] = x, v->names[v->n] = name, v->n++;
}

/* (args, name=value, ...) after the "(" has been read. */
static void parse_args(parser *P, node *n) {
    nvec v = {0};
    while (!is_op(P, ")")) {
        const char *kw = NULL;
        if (peek(P)->k == TK_NAME && P->i + 1 < P->n && tok_is(&P->t[P->i + 1], TK_OP, "=")) {
            kw = expect_name(P);
            next_tok(P);
        } else if (v.n && v.names[v.n - 1]) {
            perr(P, peek(P), "a positional argument follows a keyword argument");
        }
        nvec_push(P, &v, parse_expr(P), kw);
        if (!is_op(P, ",")) break;
        next_tok(P);
    }
    expect_op(P, ")");
    n->kids = v.v, n->knames = v.names, n->nkids = v.n;
}

static node *parse_primary(parser *P) {
    token *t = peek(P);
    enter(P);
    node *n;
    if (t->k == TK_NAME) {
        next_tok(P);
        n = mk(P, E_LIT, t);
        if (tok_is(t, TK_NAME, "true") || tok_is(t, TK_NAME, "True")) n->lit = vbool(true);
        else if (tok_is(t, TK_NAME, "false") || tok_is(t, TK_NAME, "False")) n->lit = vbool(false);
        else if (tok_is(t, TK_NAME, "none") || tok_is(t, TK_NAME, "None")) n->lit = NONE;
        else n->k = E_NAME, n->name = dup_name(P, t);
    } else if (t->k == TK_STR) {
        n = mk(P, E_LIT, t);
        size_t len = 0, i0 = P->i;
        while (peek(P)->k == TK_STR) len += next_tok(P)->n; /* adjacent literals join (EOF ends the tokens) */
        char *s = arena_alloc(P->ar, P->f, len + 1);
        size_t o = 0;
        for (size_t k = i0; k < P->i; k++) memcpy(s + o, P->t[k].s, P->t[k].n), o += P->t[k].n;
        s[o] = 0;
        n->lit = vstr(s, o);
    } else if (t->k == TK_INT) {
        next_tok(P);
        n = mk(P, E_LIT, t);
        n->lit = vint(t->i);
    } else if (t->k == TK_FLOAT) {
        next_tok(P);
        n = mk(P, E_LIT, t);
        n->lit = vfloat(t->f);
    } else if (tok_is(t, TK_OP, "(")) {
        next_tok(P);
        if (is_op(P, ")")) { /* () is the empty tuple */
            next_tok(P);
            n = mk(P, E_TUPLE, t);
        } else {
            n = parse_expr(P);
            if (is_op(P, ",")) {
                nvec v = {0};
                nvec_push(P, &v, n, NULL);
                while (is_op(P, ",")) {
                    next_tok(P);
                    if (is_op(P, ")")) break;
                    nvec_push(P, &v, parse_expr(P), NULL);
                }
                n = mk(P, E_TUPLE, t);
                n->kids = v.v, n->nkids = v.n;
            }
            expect_op(P, ")");
        }
    } else if (tok_is(t, TK_OP, "[")) {
        next_tok(P);
        n = mk(P, E_LIST, t);
        nvec v = {0};
        while (!is_op(P, "]")) {
            nvec_push(P, &v, parse_expr(P), NULL);
            if (!is_op(P, ",")) break;
            next_tok(P);
        }
        expect_op(P, "]");
        n->kids = v.v, n->nkids = v.n;
    } else if (tok_is(t, TK_OP, "{")) {
        next_tok(P);
        n = mk(P, E_DICT, t);
        nvec v = {0};
        while (!is_op(P, "}")) {
            nvec_push(P, &v, parse_expr(P), NULL);
            expect_op(P, ":");
            nvec_push(P, &v, parse_expr(P), NULL);
            if (!is_op(P, ",")) break;
            next_tok(P);
        }
        expect_op(P, "}");
        n->kids = v.v, n->nkids = v.n;
    } else {
        char b[64];
        perr(P, t, "unexpected %s", tok_desc(t, b, sizeof b));
    }
    P->depth--;
    return n;
}

static node *parse_postfix(parser *P, node *n) {
    for (;;) {
        token *t = peek(P);
        if (tok_is(t, TK_OP, ".")) {
            next_tok(P);
            node *x = mk(P, E_ATTR, t);
            x->a = n;
            if (peek(P)->k == TK_INT) { /* x.0 is x[0] */
                x->k = E_ITEM;
                x->b = mk(P, E_LIT, peek(P));
                x->b->lit = vint(next_tok(P)->i);
            } else {
                x->name = expect_name(P);
            }
            n = x;
        } else if (tok_is(t, TK_OP, "[")) {
            next_tok(P);
            node *parts[3] = {NULL, NULL, NULL};
            int np = 0;
            bool slice = false;
            for (;;) {
                if (!is_op(P, ":") && !is_op(P, "]")) parts[np] = parse_expr(P);
                if (is_op(P, ":") && np < 2) {
                    next_tok(P);
                    slice = true, np++;
                    continue;
                }
                break;
            }
            expect_op(P, "]");
            node *x = mk(P, slice ? E_SLICE : E_ITEM, t);
            x->a = n;
            if (!slice && !parts[0]) perr(P, t, "empty subscript");
            x->b = parts[0], x->c = parts[1], x->d = parts[2];
            n = x;
        } else if (tok_is(t, TK_OP, "(")) {
            next_tok(P);
            node *x = mk(P, E_CALL, t);
            x->a = n;
            parse_args(P, x);
            n = x;
        } else {
            return n;
        }
    }
}

/* |filter and `is` tests after a primary. */
static node *parse_filters(parser *P, node *n) {
    for (;;) {
        token *t = peek(P);
        if (tok_is(t, TK_OP, "|")) {
            next_tok(P);
            node *x = mk(P, E_FILTER, t);
            x->a = n;
            x->name = expect_name(P);
            if (is_op(P, "(")) next_tok(P), parse_args(P, x);
            n = x;
        } else if (tok_is(t, TK_NAME, "is")) {
            next_tok(P);
            node *x = mk(P, E_TEST, t);
            x->a = n;
            if (is_name(P, "not")) next_tok(P), x->op = 1;
            x->name = expect_name(P);
            token *u = peek(P);
            if (is_op(P, "(")) {
                next_tok(P);
                parse_args(P, x);
            } else if (u->k == TK_STR || u->k == TK_INT || u->k == TK_FLOAT || tok_is(u, TK_OP, "[") || tok_is(u, TK_OP, "{") ||
                       (u->k == TK_NAME && !tok_is(u, TK_NAME, "and") && !tok_is(u, TK_NAME, "or") &&
                        !tok_is(u, TK_NAME, "else") && !tok_is(u, TK_NAME, "if") && !tok_is(u, TK_NAME, "is") &&
                        !tok_is(u, TK_NAME, "in") && !tok_is(u, TK_NAME, "not"))) {
                /* `is sameas false`, `is equalto 'x'`: one argument without parentheses */
                node **k = arena_alloc(P->ar, P->f, sizeof *k);
                const char **kn = arena_alloc(P->ar, P->f, sizeof *kn);
                k[0] = parse_postfix(P, parse_primary(P)), kn[0] = NULL;
                x->kids = k, x->knames = kn, x->nkids = 1;
            }
            n = x;
        } else {
            return n;
        }
    }
}

static node *parse_unary(parser *P, bool with_filter) {
    token *t = peek(P);
    enter(P);
    node *n;
    if (tok_is(t, TK_OP, "-") || tok_is(t, TK_OP, "+")) {
        next_tok(P);
        n = mk(P, t->s[0] == '-' ? E_NEG : E_POS, t);
        n->a = parse_unary(P, false);
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    if (with_filter) n = parse_filters(P, n);
    P->depth--;
    return n;
}

static node *bin(parser *P, nkind k, const token *t, node *a, node *b) {
    node *x = mk(P, k, t);
    x->a = a, x->b = b;
    x->op = (int)(t->s[0] | (t->n > 1 ? t->s[1] << 8 : 0));
    return x;
}

static node *parse_pow(parser *P) {
    node *n = parse_unary(P, true);
    while (is_op(P, "**")) {
        token *t = next_tok(P);
        n = bin(P, E_BIN, t, n, parse_unary(P, true));
    }
    return n;
}


/* The left-associative binary levels, loosest first (Jinja's precedence): each level's
 * operands are the next level's; `not` and the comparisons sit between `and` and `+`, and
 * `**` (right-associative) below `*`. */
enum { LEVEL_OR, LEVEL_AND, LEVEL_ADD, LEVEL_CONCAT, LEVEL_MUL, LEVELS };
static const struct {
    nkind kind;
    tkind tok; /* TK_NAME for the word operators */
    const char *ops[4];
} levels[LEVELS] = {
    [LEVEL_OR] = {E_OR, TK_NAME, {"or"}},
    [LEVEL_AND] = {E_AND, TK_NAME, {"and"}},
    [LEVEL_ADD] = {E_BIN, TK_OP, {"+", "-"}},
    [LEVEL_CONCAT] = {E_CONCAT, TK_OP, {"~"}},
    [LEVEL_MUL] = {E_BIN, TK_OP, {"*", "/", "//", "%"}},
};

static node *parse_not(parser *P);

static node *parse_level(parser *P, int level);

static node *level_operand(parser *P, int level) {
    return level == LEVEL_AND ? parse_not(P) : level == LEVEL_MUL ? parse_pow(P) : parse_level(P, level + 1);
}

static bool level_op(parser *P, int level) {
    for (int i = 0; i < 4 && levels[level].ops[i]; i++)
        if (tok_is(peek(P), levels[level].tok, levels[level].ops[i])) return true;
    return false;
}

static node *parse_level(parser *P, int level) {
    node *n = level_operand(P, level);
    while (level_op(P, level)) {
        token *t = next_tok(P);
        n = bin(P, levels[level].kind, t, n, level_operand(P, level));
    }
    return n;
}

static node *parse_or(parser *P) { return parse_level(P, LEVEL_OR); }

enum { CMP_EQ = 1, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

/* a < b < c is (a < b) and (b < c) (b evaluated twice: it has no side effects). */
static node *parse_compare(parser *P) {
    node *left = parse_level(P, LEVEL_ADD), *result = NULL;
    for (;;) {
        token *t = peek(P);
        int op = 0;
        if (tok_is(t, TK_OP, "==")) op = CMP_EQ;
        else if (tok_is(t, TK_OP, "!=")) op = CMP_NE;
        else if (tok_is(t, TK_OP, "<")) op = CMP_LT;
        else if (tok_is(t, TK_OP, "<=")) op = CMP_LE;
        else if (tok_is(t, TK_OP, ">")) op = CMP_GT;
        else if (tok_is(t, TK_OP, ">=")) op = CMP_GE;
        else if (tok_is(t, TK_NAME, "in")) op = CMP_IN;
        else if (tok_is(t, TK_NAME, "not") && P->i + 1 < P->n && tok_is(&P->t[P->i + 1], TK_NAME, "in")) op = CMP_NOTIN, next_tok(P);
        if (!op) return result ? result : left;
        next_tok(P);
        node *x = mk(P, E_CMP, t);
        x->op = op, x->a = left, x->b = parse_level(P, LEVEL_ADD);
        if (result) {
            node *y = mk(P, E_AND, t);
            y->a = result, y->b = x;
            x = y;
        }
        result = x;
        left = x->k == E_AND ? x->b->b : x->b;
    }
}

static node *parse_not(parser *P) {
    if (is_name(P, "not")) {
        token *t = next_tok(P);
        enter(P);
        node *x = mk(P, E_NOT, t);
        x->a = parse_not(P);
        P->depth--;
        return x;
    }
    return parse_compare(P);
}


/* The conditional expression: a if cond else b (b optional: undefined). */
static node *parse_expr(parser *P) {
    enter(P);
    node *n = parse_or(P);
    while (is_name(P, "if")) {
        token *t = next_tok(P);
        node *x = mk(P, E_COND, t);
        x->a = n;
        x->b = parse_or(P);
        if (is_name(P, "else")) next_tok(P), x->c = parse_expr(P);
        n = x;
    }
    P->depth--;
    return n;
}

static void expect_block_end(parser *P) {
    if (peek(P)->k != TK_BLOCK_END) {
        char b[64];
        perr(P, peek(P), "expected '%%}', found %s", tok_desc(peek(P), b, sizeof b));
    }
    next_tok(P);
}

/* Statements up to one of the names in `stops` ({% name ... ), which is left unread after
 * its {%; returns the list and in *stop the index of the name that ended it. */
static node *parse_body(parser *P, const char *const *stops, int *stop);

static node *parse_stmt(parser *P, token *begin) {
    token *t = peek(P);
    if (t->k != TK_NAME) perr(P, t, "expected a tag name after '{%%'");
    char b[64];
    if (is_name(P, "if")) {
        next_tok(P);
        node *n = mk(P, N_IF, t), *cur = n;
        cur->a = parse_expr(P);
        expect_block_end(P);
        for (;;) {
            static const char *const stops[] = {"elif", "else", "endif", NULL};
            int s;
            cur->b = parse_body(P, stops, &s);
            token *kw = next_tok(P);
            if (s == 0) {
                node *e = mk(P, N_IF, kw);
                e->a = parse_expr(P);
                expect_block_end(P);
                cur->c = e, cur = e;
                continue;
            }
            expect_block_end(P);
            if (s == 1) {
                static const char *const end[] = {"endif", NULL};
                cur->d = parse_body(P, end, &s); /* d: the else body */
                next_tok(P);
                expect_block_end(P);
            }
            return n;
        }
    }
    if (is_name(P, "for")) {
        next_tok(P);
        node *n = mk(P, N_FOR, t);
        n->name = expect_name(P), n->ntargets = 1;
        if (is_op(P, ",")) next_tok(P), n->name2 = expect_name(P), n->ntargets = 2;
        if (!is_name(P, "in")) perr(P, peek(P), "expected 'in' in a for tag, found %s", tok_desc(peek(P), b, sizeof b));
        next_tok(P);
        n->a = parse_or(P); /* no conditional expression: `if` filters the loop */
        if (is_name(P, "if")) next_tok(P), n->c = parse_expr(P);
        if (is_name(P, "recursive")) perr(P, peek(P), "recursive loops are not supported");
        expect_block_end(P);
        static const char *const stops[] = {"else", "endfor", NULL};
        int s;
        P->loops++;
        n->b = parse_body(P, stops, &s);
        P->loops--;
        next_tok(P);
        expect_block_end(P);
        if (s == 0) {
            static const char *const end[] = {"endfor", NULL};
            n->d = parse_body(P, end, &s);
            next_tok(P);
            expect_block_end(P);
        }
        return n;
    }
    if (is_name(P, "set")) {
        next_tok(P);
        node *n = mk(P, N_SET, t);
        n->name = expect_name(P);
        if (is_op(P, ".")) next_tok(P), n->name2 = expect_name(P);
        if (peek(P)->k == TK_BLOCK_END) {
            if (n->name2) perr(P, peek(P), "a block set cannot set an attribute");
            next_tok(P);
            n->k = N_SETBLOCK;
            static const char *const end[] = {"endset", NULL};
            int s;
            n->b = parse_body(P, end, &s);
            next_tok(P);
            expect_block_end(P);
            return n;
        }
        if (is_op(P, ",")) perr(P, peek(P), "setting several names at once is not supported");
        expect_op(P, "=");
        n->a = parse_expr(P);
        expect_block_end(P);
        return n;
    }
    if (is_name(P, "macro")) {
        next_tok(P);
        node *n = mk(P, N_MACRO, t);
        n->name = expect_name(P);
        expect_op(P, "(");
        nvec v = {0};
        while (!is_op(P, ")")) {
            const char *param = expect_name(P);
            node *def = NULL;
            if (is_op(P, "=")) next_tok(P), def = parse_expr(P);
            nvec_push(P, &v, def, param);
            if (!is_op(P, ",")) break;
            next_tok(P);
        }
        expect_op(P, ")");
        expect_block_end(P);
        n->kids = v.v, n->knames = v.names, n->nkids = v.n;
        static const char *const end[] = {"endmacro", NULL};
        int s, loops = P->loops;
        P->loops = 0;
        n->b = parse_body(P, end, &s);
        P->loops = loops;
        next_tok(P);
        if (peek(P)->k == TK_NAME) next_tok(P); /* {% endmacro name %} */
        expect_block_end(P);
        return n;
    }
    if (is_name(P, "break") || is_name(P, "continue")) {
        node *n = mk(P, is_name(P, "break") ? N_BREAK : N_CONTINUE, t);
        if (!P->loops) perr(P, t, "'%.*s' outside a for loop", (int)t->n, t->s);
        next_tok(P);
        expect_block_end(P);
        return n;
    }
    if (is_name(P, "generation")) { /* transformers' AssistantTracker: renders its body */
        next_tok(P);
        expect_block_end(P);
        static const char *const end[] = {"endgeneration", NULL};
        int s;
        node *body = parse_body(P, end, &s);
        next_tok(P);
        expect_block_end(P);
        node *n = mk(P, N_IF, t); /* if true: body */
        n->a = mk(P, E_LIT, t);
        n->a->lit = vbool(true);
        n->b = body;
        return n;
    }
    (void)begin;
    perr(P, t, "the tag '%s' is not supported", tok_desc(t, b, sizeof b));
}

static node *parse_body(parser *P, const char *const *stops, int *stop) {
    node *head = NULL, **tail = &head;
    enter(P);
    for (;;) {
        token *t = peek(P);
        node *n = NULL;
        if (t->k == TK_EOF) {
            if (stops) {
                int last = 0;
                while (stops[last + 1]) last++;
                perr(P, t, "unexpected end of template, expected '{%% %s %%}'", stops[last]);
            }
            break;
        }
        if (t->k == TK_TEXT) {
            next_tok(P);
            n = mk(P, N_TEXT, t);
            n->lit = vstr(t->s, t->n);
        } else if (t->k == TK_VAR_BEGIN) {
            next_tok(P);
            n = mk(P, N_OUT, t);
            n->a = parse_expr(P);
            if (peek(P)->k != TK_VAR_END) {
                char b[64];
                perr(P, peek(P), "expected '}}', found %s", tok_desc(peek(P), b, sizeof b));
            }
            next_tok(P);
        } else if (t->k == TK_BLOCK_BEGIN) {
            token *nt = &P->t[P->i + 1 < P->n ? P->i + 1 : P->i];
            for (int s = 0; stops && stops[s]; s++)
                if (tok_is(nt, TK_NAME, stops[s])) {
                    next_tok(P); /* the {% */
                    *stop = s;
                    P->depth--;
                    return head;
                }
            next_tok(P);
            static const char *const ends[] = {"endif", "endfor", "elif", "else", "endset", "endmacro", "endgeneration", NULL};
            for (int s = 0; ends[s]; s++)
                if (tok_is(nt, TK_NAME, ends[s])) perr(P, nt, "unexpected '{%% %s %%}'", ends[s]);
            n = parse_stmt(P, t);
        } else {
            char b[64];
            perr(P, t, "unexpected %s", tok_desc(t, b, sizeof b));
        }
        *tail = n, tail = &n->next;
    }
    P->depth--;
    return head;
}

cf_jinja *cf_jinja_parse(const char *src, size_t len, cf_error *err) {
    cf_jinja *t = cf_xcalloc(1, sizeof *t);
    t->ar.limit = (size_t)1 << 30;
    fail_ctx f = {.err = err};
    if (setjmp(f.jmp)) {
        arena_free(&t->ar);
        free(t);
        return NULL;
    }
    /* jinja2 first turns \r\n and \r into \n and drops one trailing newline */
    char *s = arena_alloc(&t->ar, &f, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    lexer L = {.ar = &t->ar, .f = &f, .src = s, .len = n};
    lex(&L);
    parser P = {.ar = &t->ar, .f = &f, .t = L.toks, .n = L.n};
    t->body = parse_body(&P, NULL, NULL);
    return t;
}

void cf_jinja_free(cf_jinja *t) {
    if (!t) return;
    arena_free(&t->ar);
    free(t);
}

/* True when a name expression `name` occurs in the statements from n on (their
 * expressions and nested bodies included). */
static bool uses_name(const node *n, const char *name) {
    for (; n; n = n->next) {
        if (n->k == E_NAME && strcmp(n->name, name) == 0) return true;
        const node *sub[4] = {n->a, n->b, n->c, n->d};
        for (int i = 0; i < 4; i++)
            if (uses_name(sub[i], name)) return true;
        for (int i = 0; i < n->nkids; i++)
            if (uses_name(n->kids[i], name)) return true;
    }
    return false;
}

bool cf_jinja_uses(const cf_jinja *t, const char *name) { return t && uses_name(t->body, name); }

/* ---------------------------------------------------------------- rendering */

typedef struct frame {
    struct frame *parent;
    jdict vars;
} frame;

typedef struct macro {
    const node *def;
    frame *scope;
} macro;

typedef struct outbuf {
    char *s;
    size_t n, cap;
} outbuf;

typedef struct render {
    arena ar;
    fail_ctx f;
    cf_jinja_options o;
    outbuf bufs[MAX_DEPTH + 2];
    int nbuf, maxbuf;
    long steps;
    int depth;
    int brk; /* 1: break, 2: continue, pending */
    frame *globals;
    const node *at; /* the node being evaluated, for messages */
} render;

_Noreturn static void rfail(render *r, const node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
_Noreturn static void rfail(render *r, const node *n, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!n) n = r->at;
    failf(&r->f, n ? n->line : 0, n ? n->col : 0, "%s", msg);
}

static void *ralloc(render *r, size_t n) { return arena_alloc(&r->ar, &r->f, n); }

static void step(render *r, long k) {
    r->steps += k;
    if (r->steps > r->o.max_steps) rfail(r, NULL, "the template takes more than %ld steps", r->o.max_steps);
}

static void out_put(render *r, const char *s, size_t n) {
    outbuf *b = &r->bufs[r->nbuf - 1];
    if (b->n + n > r->o.max_output) rfail(r, NULL, "the output is longer than %zu bytes", r->o.max_output);
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = cf_xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

/* A string made of the parts, in the arena, checked against the output limit. */
static jv str_cat(render *r, const char *a, size_t an, const char *b, size_t bn) {
    if (an + bn > r->o.max_output) rfail(r, NULL, "a string longer than %zu bytes", r->o.max_output);
    char *s = ralloc(r, an + bn + 1);
    if (an) memcpy(s, a, an);
    if (bn) memcpy(s + an, b, bn);
    s[an + bn] = 0;
    return vstr(s, an + bn);
}

/* A string builder in the arena: grows by doubling (the old block stays in the arena). */
typedef struct sb {
    char *s;
    size_t n, cap;
} sb;

static void sb_put(render *r, sb *b, const char *s, size_t n) {
    if (b->n + n > r->o.max_output) rfail(r, NULL, "a string longer than %zu bytes", r->o.max_output);
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *ns = ralloc(r, cap);
        if (b->n) memcpy(ns, b->s, b->n);
        b->s = ns, b->cap = cap;
    }
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void sb_puts(render *r, sb *b, const char *s) { sb_put(r, b, s, strlen(s)); }
static jv sb_value(sb *b) { return b->s ? vstr(b->s, b->n) : vstr("", 0); }

static jlist *list_new(render *r, size_t n) {
    step(r, (long)(n / 16));
    jlist *l = ralloc(r, sizeof *l);
    l->n = n, l->tuple = false;
    l->v = n ? ralloc(r, n * sizeof(jv)) : NULL;
    return l;
}

static jv vlist(jlist *l) { return (jv){.k = V_LIST, .l = l}; }

static jdict *dict_new(render *r) {
    jdict *d = ralloc(r, sizeof *d);
    memset(d, 0, sizeof *d);
    return d;
}

static bool equal_at(render *r, const jv *a, const jv *b, int depth);
#define equal(a, b) equal_at(r, (a), (b), 0)

/* Linear: dicts are a template's few keys; a large one (a hostile request) costs steps. */
static jv *dict_find(render *r, const jdict *d, const jv *key) {
    step(r, (long)(d->n / 32));
    for (size_t i = 0; i < d->n; i++)
        if (equal(&d->keys[i], key)) return &d->vals[i];
    return NULL;
}

static jv *dict_find_str(render *r, const jdict *d, const char *k, size_t n) {
    step(r, (long)(d->n / 32));
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].k == V_STR && d->keys[i].s.n == n && memcmp(d->keys[i].s.p, k, n) == 0) return &d->vals[i];
    return NULL;
}

static void dict_append(render *r, jdict *d, jv key, jv val);

static void dict_set(render *r, jdict *d, jv key, jv val) {
    jv *v = dict_find(r, d, &key);
    if (v) {
        *v = val;
        return;
    }
    dict_append(r, d, key, val);
}

/* Adds a key known to be new (a JSON object's keys are unique). */
static void dict_append(render *r, jdict *d, jv key, jv val) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv *k = ralloc(r, cap * sizeof *k), *vv = ralloc(r, cap * sizeof *vv);
        if (d->n) memcpy(k, d->keys, d->n * sizeof *k), memcpy(vv, d->vals, d->n * sizeof *vv);
        d->keys = k, d->vals = vv, d->cap = cap;
    }
    step(r, 1);
    d->keys[d->n] = key, d->vals[d->n] = val, d->n++;
}

/* A JSON value as a template value; strings point into the JSON (it outlives the render). */
static jv from_json(render *r, json_t *j, int depth) {
    if (depth > MAX_DEPTH) rfail(r, NULL, "the variables nest deeper than %d", MAX_DEPTH);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = dict_new(r);
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) dict_append(r, d, vcstr(k), from_json(r, v, depth + 1));
        return (jv){.k = V_DICT, .d = d};
    }
    case JSON_ARRAY: {
        jlist *l = list_new(r, json_array_size(j));
        for (size_t i = 0; i < l->n; i++) l->v[i] = from_json(r, json_array_get(j, i), depth + 1);
        return vlist(l);
    }
    case JSON_STRING: return vstr(json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return vint(json_integer_value(j));
    case JSON_REAL: return vfloat(json_real_value(j));
    case JSON_TRUE: return vbool(true);
    case JSON_FALSE: return vbool(false);
    default: return NONE;
    }
}

/* ---- UTF-8 (Python counts and slices strings in code points) */

static size_t u8len(unsigned char c) { return c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1; }

/* The code point at s[i] (n bytes in all) and its byte length; a broken sequence is one byte. */
static uint32_t u8dec(const char *s, size_t n, size_t i, size_t *len) {
    unsigned char c = (unsigned char)s[i];
    size_t l = u8len(c);
    if (l == 1 || i + l > n) return *len = 1, c;
    uint32_t u = c & (0xff >> (l + 1));
    for (size_t k = 1; k < l; k++) {
        unsigned char d = (unsigned char)s[i + k];
        if ((d & 0xc0) != 0x80) return *len = 1, c;
        u = u << 6 | (d & 0x3f);
    }
    return *len = l, u;
}

static size_t u8count(const char *s, size_t n) {
    size_t c = 0, l;
    for (size_t i = 0; i < n; i += l) u8dec(s, n, i, &l), c++;
    return c;
}

/* Byte offsets of every code point (and the end), in the arena. */
static size_t *u8offsets(render *r, const char *s, size_t n, size_t *count) {
    size_t c = u8count(s, n), l, k = 0;
    size_t *o = ralloc(r, (c + 1) * sizeof *o);
    for (size_t i = 0; i < n; i += l) o[k++] = i, u8dec(s, n, i, &l);
    o[c] = n;
    *count = c;
    return o;
}

static bool py_space(uint32_t u) {
    return (u >= 9 && u <= 13) || (u >= 0x1c && u <= 0x20) || u == 0x85 || u == 0xa0 || u == 0x1680 ||
           (u >= 0x2000 && u <= 0x200a) || u == 0x2028 || u == 0x2029 || u == 0x202f || u == 0x205f || u == 0x3000;
}

/* ---- conversions */

static const char *kind_name(vkind k) {
    static const char *const names[] = {"undefined", "none", "bool", "int", "float", "str", "list", "dict",
                                        "namespace", "function", "method", "macro", "loop"};
    return names[k];
}

static bool truthy(const jv *v) {
    switch (v->k) {
    case V_UNDEF:
    case V_NONE: return false;
    case V_BOOL: return v->b;
    case V_INT: return v->i != 0;
    case V_FLOAT: return v->f != 0;
    case V_STR: return v->s.n != 0;
    case V_LIST: return v->l->n != 0;
    case V_DICT: return v->d->n != 0;
    default: return true;
    }
}

/* Python's repr of a float: the shortest digits that read back, 'e' notation outside
 * 1e-4 <= |x| < 1e16. */
static void float_repr(double x, char *buf, size_t cap) {
    if (isnan(x)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, cap, x < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, x);
    /* e is [-]d[.ddd]e[+-]XX: split digits and exponent */
    char digits[40];
    size_t nd = 0;
    const char *q = e;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    digits[nd] = 0;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = 0;
    size_t o = 0;
    if (neg) buf[o++] = '-';
    if (exp < -4 || exp >= 16) {
        buf[o++] = digits[0];
        if (nd > 1) {
            buf[o++] = '.';
            for (size_t k = 1; k < nd; k++) buf[o++] = digits[k];
        }
        snprintf(buf + o, cap - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        buf[o++] = '0', buf[o++] = '.';
        for (int k = 0; k < -exp - 1; k++) buf[o++] = '0';
        for (size_t k = 0; k < nd; k++) buf[o++] = digits[k];
        buf[o] = 0;
    } else {
        for (int k = 0; k <= exp; k++) buf[o++] = (size_t)k < nd ? digits[k] : '0';
        buf[o++] = '.';
        if ((size_t)exp + 1 < nd)
            for (size_t k = (size_t)exp + 1; k < nd; k++) buf[o++] = digits[k];
        else buf[o++] = '0';
        buf[o] = 0;
    }
}

static void to_str(render *r, sb *b, const jv *v, bool repr, int depth);

static void repr_str(render *r, sb *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sb_put(r, b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == (unsigned char)q || c == '\\') e[0] = '\\', e[1] = (char)c, sb_put(r, b, e, 2);
        else if (c == '\n') sb_puts(r, b, "\\n");
        else if (c == '\r') sb_puts(r, b, "\\r");
        else if (c == '\t') sb_puts(r, b, "\\t");
        else if (c < 0x20 || c == 0x7f) snprintf(e, sizeof e, "\\x%02x", c), sb_puts(r, b, e);
        else sb_put(r, b, (const char *)&c, 1);
    }
    sb_put(r, b, &q, 1);
}

/* str(v) (repr false) or repr(v), as Python writes them. */
static void to_str(render *r, sb *b, const jv *v, bool repr, int depth) {
    char num[64];
    if (depth > MAX_DEPTH) rfail(r, NULL, "a value nests deeper than %d", MAX_DEPTH);
    switch (v->k) {
    case V_UNDEF: break;
    case V_NONE: sb_puts(r, b, "None"); break;
    case V_BOOL: sb_puts(r, b, v->b ? "True" : "False"); break;
    case V_INT: snprintf(num, sizeof num, "%lld", (long long)v->i), sb_puts(r, b, num); break;
    case V_FLOAT: float_repr(v->f, num, sizeof num), sb_puts(r, b, num); break;
    case V_STR:
        if (repr) repr_str(r, b, v->s.p, v->s.n);
        else sb_put(r, b, v->s.p, v->s.n);
        break;
    case V_LIST:
        sb_puts(r, b, v->l->tuple ? "(" : "[");
        for (size_t i = 0; i < v->l->n; i++) {
            if (i) sb_puts(r, b, ", ");
            to_str(r, b, &v->l->v[i], true, depth + 1);
        }
        sb_puts(r, b, v->l->tuple ? (v->l->n == 1 ? ",)" : ")") : "]");
        break;
    case V_DICT:
        sb_puts(r, b, "{");
        for (size_t i = 0; i < v->d->n; i++) {
            if (i) sb_puts(r, b, ", ");
            to_str(r, b, &v->d->keys[i], true, depth + 1);
            sb_puts(r, b, ": ");
            to_str(r, b, &v->d->vals[i], true, depth + 1);
        }
        sb_puts(r, b, "}");
        break;
    case V_NS: sb_puts(r, b, "<Namespace>"); break;
    default: sb_puts(r, b, "<"), sb_puts(r, b, kind_name(v->k)), sb_puts(r, b, ">"); break;
    }
}

static jv stringify(render *r, const jv *v) {
    if (v->k == V_STR) return *v;
    sb b = {0};
    to_str(r, &b, v, false, 0);
    return sb_value(&b);
}

/* json.dumps(v, ensure_ascii=False, indent=indent (<0: none), sort_keys=sort). */
static void to_json(render *r, sb *b, const jv *v, int indent, bool sort, int level) {
    char num[64];
    if (level > MAX_DEPTH) rfail(r, NULL, "a value nests deeper than %d", MAX_DEPTH);
    switch (v->k) {
    case V_NONE: sb_puts(r, b, "null"); break;
    case V_BOOL: sb_puts(r, b, v->b ? "true" : "false"); break;
    case V_INT: snprintf(num, sizeof num, "%lld", (long long)v->i), sb_puts(r, b, num); break;
    case V_FLOAT:
        if (isnan(v->f)) sb_puts(r, b, "NaN");
        else if (isinf(v->f)) sb_puts(r, b, v->f < 0 ? "-Infinity" : "Infinity");
        else float_repr(v->f, num, sizeof num), sb_puts(r, b, num);
        break;
    case V_STR:
        sb_puts(r, b, "\"");
        for (size_t i = 0; i < v->s.n; i++) {
            unsigned char c = (unsigned char)v->s.p[i];
            if (c == '"') sb_puts(r, b, "\\\"");
            else if (c == '\\') sb_puts(r, b, "\\\\");
            else if (c == '\n') sb_puts(r, b, "\\n");
            else if (c == '\r') sb_puts(r, b, "\\r");
            else if (c == '\t') sb_puts(r, b, "\\t");
            else if (c == '\b') sb_puts(r, b, "\\b");
            else if (c == '\f') sb_puts(r, b, "\\f");
            else if (c < 0x20) snprintf(num, sizeof num, "\\u%04x", c), sb_puts(r, b, num);
            else sb_put(r, b, (const char *)&c, 1);
        }
        sb_puts(r, b, "\"");
        break;
    case V_LIST:
    case V_DICT: {
        bool list = v->k == V_LIST;
        size_t n = list ? v->l->n : v->d->n;
        sb_puts(r, b, list ? "[" : "{");
        if (n == 0) {
            sb_puts(r, b, list ? "]" : "}");
            break;
        }
        size_t *order = NULL;
        if (!list) {
            order = ralloc(r, n * sizeof *order);
            for (size_t i = 0; i < n; i++) {
                if (v->d->keys[i].k != V_STR) rfail(r, NULL, "tojson: a dict key is not a string");
                order[i] = i;
            }
            for (size_t i = 1; sort && i < n; i++) /* insertion sort: stable, keys are few */
                for (size_t j = i; j > 0; j--) {
                    const jv *x = &v->d->keys[order[j - 1]], *y = &v->d->keys[order[j]];
                    size_t m = x->s.n < y->s.n ? x->s.n : y->s.n;
                    int c = memcmp(x->s.p, y->s.p, m);
                    if (c < 0 || (c == 0 && x->s.n <= y->s.n)) break;
                    size_t t = order[j - 1];
                    order[j - 1] = order[j], order[j] = t;
                }
        }
        for (size_t i = 0; i < n; i++) {
            if (i) sb_puts(r, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) {
                sb_puts(r, b, "\n");
                for (int k = 0; k < indent * (level + 1); k++) sb_puts(r, b, " ");
            }
            if (list) {
                to_json(r, b, &v->l->v[i], indent, sort, level + 1);
            } else {
                to_json(r, b, &v->d->keys[order[i]], indent, sort, level + 1);
                sb_puts(r, b, ": ");
                to_json(r, b, &v->d->vals[order[i]], indent, sort, level + 1);
            }
        }
        if (indent >= 0) {
            sb_puts(r, b, "\n");
            for (int k = 0; k < indent * level; k++) sb_puts(r, b, " ");
        }
        sb_puts(r, b, list ? "]" : "}");
        break;
    }
    case V_NS: rfail(r, NULL, "tojson: a namespace is not JSON");
    default: rfail(r, NULL, "tojson: %s is not JSON", v->k == V_UNDEF && v->name ? v->name : kind_name(v->k));
    }
}

/* ---- comparisons and arithmetic */

static bool is_num(const jv *v) { return v->k == V_INT || v->k == V_FLOAT || v->k == V_BOOL; }
static double num_of(const jv *v) { return v->k == V_FLOAT ? v->f : v->k == V_INT ? (double)v->i : (double)v->b; }

static bool equal_at(render *r, const jv *a, const jv *b, int depth) {
    if (depth > MAX_DEPTH) rfail(r, NULL, "a value nests deeper than %d", MAX_DEPTH);
    if (is_num(a) && is_num(b)) {
        if (a->k != V_FLOAT && b->k != V_FLOAT) return (a->k == V_INT ? a->i : a->b) == (b->k == V_INT ? b->i : b->b);
        return num_of(a) == num_of(b);
    }
    if (a->k != b->k) return false;
    switch (a->k) {
    case V_UNDEF:
    case V_NONE: return true;
    case V_STR: return a->s.n == b->s.n && memcmp(a->s.p, b->s.p, a->s.n) == 0;
    case V_LIST:
        if (a->l->n != b->l->n) return false;
        for (size_t i = 0; i < a->l->n; i++)
            if (!equal_at(r, &a->l->v[i], &b->l->v[i], depth + 1)) return false;
        step(r, (long)(a->l->n / 16));
        return true;
    case V_DICT:
        if (a->d->n != b->d->n) return false;
        for (size_t i = 0; i < a->d->n; i++) {
            jv *o = dict_find(r, b->d, &a->d->keys[i]);
            if (!o || !equal_at(r, &a->d->vals[i], o, depth + 1)) return false;
        }
        return true;
    case V_NS: return a->d == b->d;
    case V_FUNC: return a->fn == b->fn;
    case V_MACRO: return a->mac == b->mac;
    default: return false;
    }
}

/* <0, 0, >0 for the orderable pairs (numbers, strings, lists); an error otherwise. */
static int order(render *r, const jv *a, const jv *b) {
    if (is_num(a) && is_num(b)) {
        if (a->k == V_INT && b->k == V_INT) return (a->i > b->i) - (a->i < b->i);
        double x = num_of(a), y = num_of(b);
        return (x > y) - (x < y);
    }
    if (a->k == V_STR && b->k == V_STR) {
        size_t m = a->s.n < b->s.n ? a->s.n : b->s.n;
        int c = memcmp(a->s.p, b->s.p, m);
        return c ? c : (a->s.n > b->s.n) - (a->s.n < b->s.n);
    }
    if (a->k == V_LIST && b->k == V_LIST) {
        for (size_t i = 0; i < a->l->n && i < b->l->n; i++)
            if (!equal(&a->l->v[i], &b->l->v[i])) return order(r, &a->l->v[i], &b->l->v[i]); /* equal checked the depth */
        return (a->l->n > b->l->n) - (a->l->n < b->l->n);
    }
    rfail(r, NULL, "'<' and '>' do not compare %s with %s", kind_name(a->k), kind_name(b->k));
}

static bool contains(render *r, const jv *hay, const jv *needle) {
    switch (hay->k) {
    case V_STR:
        if (needle->k != V_STR) rfail(r, NULL, "'in <string>' needs a string on the left, not %s", kind_name(needle->k));
        if (needle->s.n == 0) return true;
        for (size_t i = 0; i + needle->s.n <= hay->s.n; i++)
            if (memcmp(hay->s.p + i, needle->s.p, needle->s.n) == 0) return true;
        return false;
    case V_LIST:
        for (size_t i = 0; i < hay->l->n; i++)
            if (equal(&hay->l->v[i], needle)) return true;
        return false;
    case V_DICT:
    case V_NS: return dict_find(r, hay->d, needle) != NULL;
    case V_UNDEF: return false;
    default: rfail(r, NULL, "'in' needs a string, list or dict on the right, not %s", kind_name(hay->k));
    }
}

static jv arith(render *r, const node *n, int op, jv a, jv b) {
    char o0 = (char)(op & 0xff), o1 = (char)(op >> 8);
    if (o0 == '+' && !o1) {
        if (a.k == V_STR && b.k == V_STR) return str_cat(r, a.s.p, a.s.n, b.s.p, b.s.n);
        if (a.k == V_LIST && b.k == V_LIST) {
            jlist *l = list_new(r, a.l->n + b.l->n);
            if (a.l->n) memcpy(l->v, a.l->v, a.l->n * sizeof(jv));
            if (b.l->n) memcpy(l->v + a.l->n, b.l->v, b.l->n * sizeof(jv));
            return vlist(l);
        }
    }
    if (o0 == '*' && !o1 && ((a.k == V_STR && b.k == V_INT) || (a.k == V_INT && b.k == V_STR))) {
        jv s = a.k == V_STR ? a : b;
        int64_t k = a.k == V_INT ? a.i : b.i;
        sb out = {0};
        for (int64_t i = 0; i < k; i++) sb_put(r, &out, s.s.p, s.s.n), step(r, 1);
        return sb_value(&out);
    }
    if (!is_num(&a) || !is_num(&b)) {
        char opname[3] = {o0, o1, 0};
        rfail(r, n, "'%s' does not apply to %s and %s", opname, a.k == V_UNDEF && a.name ? a.name : kind_name(a.k),
              b.k == V_UNDEF && b.name ? b.name : kind_name(b.k));
    }
    bool ints = a.k != V_FLOAT && b.k != V_FLOAT;
    int64_t x = a.k == V_INT ? a.i : a.k == V_BOOL ? a.b : 0, y = b.k == V_INT ? b.i : b.k == V_BOOL ? b.b : 0, z;
    double fx = num_of(&a), fy = num_of(&b);
    switch (o0) {
    case '+':
        if (!ints) return vfloat(fx + fy);
        if (__builtin_add_overflow(x, y, &z)) rfail(r, n, "integer overflow");
        return vint(z);
    case '-':
        if (!ints) return vfloat(fx - fy);
        if (__builtin_sub_overflow(x, y, &z)) rfail(r, n, "integer overflow");
        return vint(z);
    case '*':
        if (o1 == '*') {
            if (ints && y >= 0) {
                if (x == 0 || x == 1) return vint(y == 0 ? 1 : x);
                if (x == -1) return vint(y % 2 ? -1 : 1);
                int64_t p = 1; /* |x| >= 2: overflows within 63 steps */
                for (int64_t k = 0; k < y; k++)
                    if (__builtin_mul_overflow(p, x, &p)) rfail(r, n, "integer overflow");
                return vint(p);
            }
            return vfloat(pow(fx, fy));
        }
        if (!ints) return vfloat(fx * fy);
        if (__builtin_mul_overflow(x, y, &z)) rfail(r, n, "integer overflow");
        return vint(z);
    case '/':
        if (o1 == '/') {
            if (ints) {
                if (y == 0) rfail(r, n, "integer division by zero");
                if (x == INT64_MIN && y == -1) rfail(r, n, "integer overflow");
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
                return vint(q);
            }
            if (fy == 0) rfail(r, n, "float floor division by zero");
            return vfloat(floor(fx / fy));
        }
        if (fy == 0) rfail(r, n, "division by zero");
        return vfloat(fx / fy);
    case '%':
        if (ints) {
            if (y == 0) rfail(r, n, "integer modulo by zero");
            if (y == -1) return vint(0);
            int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return vint(m);
        }
        if (fy == 0) rfail(r, n, "float modulo");
        {
            double m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
            return vfloat(m);
        }
    default: rfail(r, n, "unknown operator");
    }
}

/* ---- scopes */

static jv *lookup(render *r, frame *fr, const char *name) {
    size_t n = strlen(name);
    for (; fr; fr = fr->parent) {
        jv *v = dict_find_str(r, &fr->vars, name, n);
        if (v) return v;
    }
    (void)r;
    return NULL;
}

static void assign(render *r, frame *fr, const char *name, jv v) { dict_set(r, &fr->vars, vcstr(name), v); }

/* ---- builtins: functions, filters, tests, methods */

typedef struct args {
    const jv *v;
    const char *const *names; /* NULL entries: positional */
    int n;
} args;

/* Argument `pos` or keyword `name`; NULL when not given. */
static const jv *arg(const args *a, int pos, const char *name) {
    int p = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->names && a->names[i]) {
            if (name && strcmp(a->names[i], name) == 0) return &a->v[i];
        } else if (p++ == pos) {
            return &a->v[i];
        }
    }
    return NULL;
}

static int64_t arg_int(render *r, const args *a, int pos, const char *name, int64_t def) {
    const jv *v = arg(a, pos, name);
    if (!v || v->k == V_NONE) return def;
    if (v->k == V_INT) return v->i;
    if (v->k == V_BOOL) return v->b;
    rfail(r, NULL, "argument '%s' must be an integer, not %s", name, kind_name(v->k));
}

static jv arg_str(render *r, const args *a, int pos, const char *name, const char *def) {
    const jv *v = arg(a, pos, name);
    if (!v || (def && v->k == V_NONE)) return def ? vcstr(def) : (jv){.k = V_NONE};
    if (v->k != V_STR) rfail(r, NULL, "argument '%s' must be a string, not %s", name, kind_name(v->k));
    return *v;
}

static jlist *iter_list(render *r, const jv *v);
static jv call_value(render *r, const node *n, jv f, const args *a);

enum { FN_RANGE, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_DICT, FN_COUNT };
static const char *const FUNCS[FN_COUNT] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};

static jv call_func(render *r, const node *n, int fn, const args *a) {
    switch (fn) {
    case FN_RANGE: {
        int64_t start = 0, stop, stepv = 1;
        int np = 0;
        for (int i = 0; i < a->n; i++) np += !(a->names && a->names[i]);
        if (np == 1) stop = arg_int(r, a, 0, "stop", 0);
        else start = arg_int(r, a, 0, "start", 0), stop = arg_int(r, a, 1, "stop", 0), stepv = arg_int(r, a, 2, "step", 1);
        if (np < 1 || np > 3) rfail(r, n, "range takes 1 to 3 arguments");
        if (stepv == 0) rfail(r, n, "range() arg 3 must not be zero");
        /* exact in unsigned 64-bit arithmetic: the span and |step| fit, and every value
         * lies between start and stop */
        uint64_t span = stepv > 0 ? (stop > start ? (uint64_t)stop - (uint64_t)start : 0)
                                  : (start > stop ? (uint64_t)start - (uint64_t)stop : 0);
        uint64_t st = stepv > 0 ? (uint64_t)stepv : 0 - (uint64_t)stepv;
        uint64_t cnt = span ? (span - 1) / st + 1 : 0;
        if (cnt > (uint64_t)r->o.max_steps) rfail(r, n, "range of %llu numbers is too long", (unsigned long long)cnt);
        jlist *l = list_new(r, (size_t)cnt);
        step(r, (long)cnt);
        for (size_t i = 0; i < l->n; i++) l->v[i] = vint((int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)stepv));
        return vlist(l);
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        jdict *d = dict_new(r);
        for (int i = 0; i < a->n; i++) {
            if (a->names && a->names[i]) {
                dict_set(r, d, vcstr(a->names[i]), a->v[i]);
            } else if (a->v[i].k == V_DICT) { /* namespace({...}) / dict({...}) */
                for (size_t k = 0; k < a->v[i].d->n; k++) dict_set(r, d, a->v[i].d->keys[k], a->v[i].d->vals[k]);
            } else {
                rfail(r, n, "%s() takes keyword arguments or a dict", FUNCS[fn]);
            }
        }
        return (jv){.k = fn == FN_NAMESPACE ? V_NS : V_DICT, .d = d};
    }
    case FN_RAISE: {
        const jv *m = arg(a, 0, "message");
        jv s = m ? stringify(r, m) : vcstr("");
        rfail(r, n, "raise_exception: %.*s", (int)(s.s.n > 600 ? 600 : s.s.n), s.s.p);
    }
    case FN_STRFTIME: {
        jv f = arg_str(r, a, 0, "format", NULL);
        if (f.k != V_STR) rfail(r, n, "strftime_now needs a format string");
        if (f.s.n > 256) rfail(r, n, "strftime_now: the format is too long");
        char fmt[260], out[1024];
        memcpy(fmt, f.s.p, f.s.n);
        fmt[f.s.n] = 0;
        time_t now = r->o.now ? r->o.now : time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t k = fmt[0] ? strftime(out, sizeof out, fmt, &tm) : 0;
        return str_cat(r, out, k, "", 0);
    }
    default: rfail(r, n, "unknown function");
    }
}

/* str.strip/lstrip/rstrip: which = 1 left, 2 right, 3 both; chars NULL: whitespace. */
static jv strip(render *r, jv s, const jv *chars, int which) {
    if (s.k != V_STR) return s;
    size_t a = 0, b = s.s.n, l;
    size_t nc = 0;
    uint32_t set[64];
    if (chars && chars->k == V_STR) {
        for (size_t i = 0; i < chars->s.n && nc < 64; i += l) set[nc++] = u8dec(chars->s.p, chars->s.n, i, &l);
        if (nc == 64) rfail(r, NULL, "strip: more than 64 characters to strip");
    }
    bool ws = !chars || chars->k == V_NONE;
    while ((which & 1) && a < b) {
        uint32_t u = u8dec(s.s.p, b, a, &l);
        bool in = ws ? py_space(u) : false;
        for (size_t k = 0; !ws && k < nc; k++) in = in || set[k] == u;
        if (!in) break;
        a += l;
    }
    while ((which & 2) && b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)s.s.p[st] & 0xc0) == 0x80 && b - st < 4) st--;
        uint32_t u = u8dec(s.s.p, b, st, &l);
        if (st + l != b) st = b - 1, u = (unsigned char)s.s.p[st];
        bool in = ws ? py_space(u) : false;
        for (size_t k = 0; !ws && k < nc; k++) in = in || set[k] == u;
        if (!in) break;
        b = st;
    }
    return vstr(s.s.p + a, b - a);
}

static jv split(render *r, jv s, const jv *sep, int64_t maxsplit) {
    jlist *l = ralloc(r, sizeof *l);
    size_t cap = 8, n = 0;
    jv *v = ralloc(r, cap * sizeof *v);
#define ADD(p, len)                                                                                                    \
    do {                                                                                                               \
        if (n == cap) {                                                                                                \
            jv *nv = ralloc(r, cap * 2 * sizeof *nv);                                                                  \
            memcpy(nv, v, n * sizeof *nv);                                                                             \
            v = nv, cap *= 2;                                                                                          \
        }                                                                                                              \
        step(r, 1);                                                                                                    \
        v[n++] = vstr((p), (len));                                                                                     \
    } while (0)
    const char *p = s.s.p;
    size_t len = s.s.n, i = 0, ln;
    if (!sep || sep->k == V_NONE) { /* runs of whitespace, no empty parts */
        int64_t splits = 0;
        for (;;) {
            while (i < len && py_space(u8dec(p, len, i, &ln))) i += ln;
            if (i >= len) break;
            size_t st = i;
            if (maxsplit >= 0 && splits >= maxsplit) {
                size_t e = len;
                while (e > st && py_space((unsigned char)p[e - 1])) e--;
                ADD(p + st, e - st);
                break;
            }
            while (i < len && !py_space(u8dec(p, len, i, &ln))) i += ln;
            ADD(p + st, i - st);
            splits++;
        }
    } else {
        if (sep->k != V_STR) rfail(r, NULL, "split: the separator must be a string");
        if (sep->s.n == 0) rfail(r, NULL, "split: empty separator");
        size_t st = 0;
        int64_t splits = 0;
        while (i + sep->s.n <= len && (maxsplit < 0 || splits < maxsplit)) {
            if (memcmp(p + i, sep->s.p, sep->s.n) == 0) {
                ADD(p + st, i - st);
                i += sep->s.n, st = i, splits++;
            } else {
                i++;
            }
        }
        ADD(p + st, len - st);
    }
#undef ADD
    l->n = n, l->v = v, l->tuple = false;
    return vlist(l);
}

static jv replace(render *r, jv s, jv old, jv new_, int64_t count) {
    if (s.k != V_STR || old.k != V_STR || new_.k != V_STR) rfail(r, NULL, "replace needs strings");
    sb b = {0};
    sb_put(r, &b, "", 0);
    size_t i = 0;
    int64_t done = 0;
    if (old.s.n == 0) { /* Python inserts the replacement between every character */
        size_t l;
        for (; i <= s.s.n; i += l) {
            if (count < 0 || done < count) sb_put(r, &b, new_.s.p, new_.s.n), done++;
            if (i == s.s.n) break;
            u8dec(s.s.p, s.s.n, i, &l);
            sb_put(r, &b, s.s.p + i, l);
        }
        return sb_value(&b);
    }
    while (i < s.s.n) {
        if ((count < 0 || done < count) && i + old.s.n <= s.s.n && memcmp(s.s.p + i, old.s.p, old.s.n) == 0) {
            sb_put(r, &b, new_.s.p, new_.s.n);
            i += old.s.n, done++;
        } else {
            sb_put(r, &b, s.s.p + i, 1), i++;
        }
    }
    return sb_value(&b);
}

/* upper (1), lower (2), capitalize (3), title (4); ASCII letters only. */
static jv recase(render *r, jv s, int how) {
    if (s.k != V_STR) rfail(r, NULL, "upper/lower/capitalize/title need a string, not %s", kind_name(s.k));
    char *o = ralloc(r, s.s.n + 1);
    bool word_start = true;
    for (size_t i = 0; i < s.s.n; i++) {
        char c = s.s.p[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        bool up = how == 1 || (how == 3 && i == 0) || (how == 4 && word_start);
        if (up && c >= 'a' && c <= 'z') c = (char)(c - 32);
        else if (!up && how != 1 && c >= 'A' && c <= 'Z') c = (char)(c + 32);
        word_start = !alpha && !((unsigned char)c >= 0x80);
        o[i] = c;
    }
    o[s.s.n] = 0;
    return vstr(o, s.s.n);
}

static bool has_affix(const jv *s, const jv *x, bool suffix) {
    if (x->k != V_STR || x->s.n > s->s.n) return false;
    return memcmp(s->s.p + (suffix ? s->s.n - x->s.n : 0), x->s.p, x->s.n) == 0;
}

static jv affix(render *r, jv s, const jv *x, bool suffix) {
    if (!x) rfail(r, NULL, "%s needs an argument", suffix ? "endswith" : "startswith");
    if (x->k == V_LIST) {
        for (size_t i = 0; i < x->l->n; i++)
            if (has_affix(&s, &x->l->v[i], suffix)) return vbool(true);
        return vbool(false);
    }
    if (x->k != V_STR) rfail(r, NULL, "%s needs a string or a tuple of strings", suffix ? "endswith" : "startswith");
    return vbool(has_affix(&s, x, suffix));
}

static jv join(render *r, const jv *seq, jv sep, const jv *attr);
static jv getattr_(render *r, const node *n, jv obj, const char *name, size_t len);
static jv getitem(render *r, const node *n, jv obj, jv key);

static jv call_method(render *r, const node *n, const method *m, const args *a) {
    jv s = m->self;
    const char *nm = m->name;
    if (s.k == V_STR) {
        if (!strcmp(nm, "strip")) return strip(r, s, arg(a, 0, "chars"), 3);
        if (!strcmp(nm, "lstrip")) return strip(r, s, arg(a, 0, "chars"), 1);
        if (!strcmp(nm, "rstrip")) return strip(r, s, arg(a, 0, "chars"), 2);
        if (!strcmp(nm, "split")) return split(r, s, arg(a, 0, "sep"), arg_int(r, a, 1, "maxsplit", -1));
        if (!strcmp(nm, "startswith")) return affix(r, s, arg(a, 0, "prefix"), false);
        if (!strcmp(nm, "endswith")) return affix(r, s, arg(a, 0, "suffix"), true);
        if (!strcmp(nm, "replace"))
            return replace(r, s, arg_str(r, a, 0, "old", NULL), arg_str(r, a, 1, "new", NULL), arg_int(r, a, 2, "count", -1));
        if (!strcmp(nm, "upper")) return recase(r, s, 1);
        if (!strcmp(nm, "lower")) return recase(r, s, 2);
        if (!strcmp(nm, "capitalize")) return recase(r, s, 3);
        if (!strcmp(nm, "title")) return recase(r, s, 4);
        if (!strcmp(nm, "join")) {
            const jv *seq = arg(a, 0, "iterable");
            if (!seq) rfail(r, n, "join needs an argument");
            return join(r, seq, s, NULL);
        }
        if (!strcmp(nm, "find") || !strcmp(nm, "count")) {
            jv x = arg_str(r, a, 0, "sub", NULL);
            if (x.k != V_STR) rfail(r, n, "%s needs a string", nm);
            int64_t cnt = 0;
            for (size_t i = 0; i + x.s.n <= s.s.n; i++)
                if (memcmp(s.s.p + i, x.s.p, x.s.n) == 0) {
                    if (!strcmp(nm, "find")) return vint((int64_t)u8count(s.s.p, i));
                    cnt++;
                    if (x.s.n) i += x.s.n - 1;
                }
            if (x.s.n == 0 && !strcmp(nm, "count")) cnt = (int64_t)u8count(s.s.p, s.s.n) + 1;
            return vint(!strcmp(nm, "find") ? -1 : cnt);
        }
    }
    if (s.k == V_DICT) {
        if (!strcmp(nm, "items") || !strcmp(nm, "keys") || !strcmp(nm, "values")) {
            jlist *l = list_new(r, s.d->n);
            for (size_t i = 0; i < s.d->n; i++) {
                if (nm[0] == 'k') l->v[i] = s.d->keys[i];
                else if (nm[0] == 'v') l->v[i] = s.d->vals[i];
                else {
                    jlist *p = list_new(r, 2);
                    p->tuple = true, p->v[0] = s.d->keys[i], p->v[1] = s.d->vals[i];
                    l->v[i] = vlist(p);
                }
            }
            return vlist(l);
        }
        if (!strcmp(nm, "get")) {
            const jv *k = arg(a, 0, "key"), *d = arg(a, 1, "default");
            if (!k) rfail(r, n, "get needs a key");
            jv *v = dict_find(r, s.d, k);
            return v ? *v : d ? *d : NONE;
        }
    }
    rfail(r, n, "%s has no method '%s'", kind_name(s.k), nm);
}

static bool method_exists(vkind k, const char *name) {
    static const char *const str_m[] = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith", "replace", "upper",
                                        "lower", "capitalize", "title", "join", "find", "count", NULL};
    static const char *const dict_m[] = {"items", "keys", "values", "get", NULL};
    const char *const *m = k == V_STR ? str_m : k == V_DICT ? dict_m : NULL;
    for (; m && *m; m++)
        if (!strcmp(*m, name)) return true;
    return false;
}

/* Iterating: lists as they are, dicts by key, strings by character, undefined as empty. */
static jlist *iter_list(render *r, const jv *v) {
    switch (v->k) {
    case V_LIST: return v->l;
    case V_DICT: {
        jlist *l = list_new(r, v->d->n);
        for (size_t i = 0; i < l->n; i++) l->v[i] = v->d->keys[i];
        return l;
    }
    case V_STR: {
        size_t c;
        size_t *o = u8offsets(r, v->s.p, v->s.n, &c);
        jlist *l = list_new(r, c);
        for (size_t i = 0; i < c; i++) l->v[i] = vstr(v->s.p + o[i], o[i + 1] - o[i]);
        return l;
    }
    case V_UNDEF: return list_new(r, 0);
    default: rfail(r, NULL, "%s is not iterable", kind_name(v->k));
    }
}

static bool run_test(render *r, const node *n, const char *name, const jv *v, const args *a);

static jv join(render *r, const jv *seq, jv sep, const jv *attr) {
    jlist *l = iter_list(r, seq);
    sb b = {0};
    sb_put(r, &b, "", 0);
    for (size_t i = 0; i < l->n; i++) {
        if (i) sb_put(r, &b, sep.s.p, sep.s.n);
        jv x = l->v[i];
        if (attr) x = getattr_(r, NULL, x, attr->s.p, attr->s.n);
        to_str(r, &b, &x, false, 0);
    }
    return sb_value(&b);
}

/* select/reject (attr NULL) and selectattr/rejectattr: the test is a[first] with the rest
 * of a as its arguments; no test: truthiness. */
static jv select_(render *r, const node *n, const jv *v, const args *a, bool by_attr, bool keep) {
    jlist *in = iter_list(r, v), *out = list_new(r, in->n);
    out->n = 0;
    int first = 0;
    const jv *attr = NULL;
    if (by_attr) {
        attr = arg(a, 0, NULL);
        if (!attr || attr->k != V_STR) rfail(r, n, "selectattr/rejectattr need an attribute name");
        first = 1;
    }
    const jv *test = arg(a, first, NULL);
    if (test && test->k != V_STR) rfail(r, n, "the test must be named by a string");
    char tname[64];
    if (test) snprintf(tname, sizeof tname, "%.*s", (int)test->s.n, test->s.p);
    args rest = {NULL, NULL, 0};
    if (a->n > first + 1) rest = (args){a->v + first + 1, a->names ? a->names + first + 1 : NULL, a->n - first - 1};
    for (size_t i = 0; i < in->n; i++) {
        jv x = attr ? getattr_(r, n, in->v[i], attr->s.p, attr->s.n) : in->v[i];
        bool ok = test ? run_test(r, n, tname, &x, &rest) : truthy(&x);
        if (ok == keep) out->v[out->n++] = in->v[i];
        step(r, 1);
    }
    return vlist(out);
}

static jv apply_filter(render *r, const node *n, const char *name, jv v, const args *a);

static jv filter_map(render *r, const node *n, const jv *v, const args *a) {
    jlist *in = iter_list(r, v), *out = list_new(r, in->n);
    const jv *attr = arg(a, -1, "attribute");
    const jv *def = arg(a, -1, "default");
    if (attr && attr->k != V_STR) rfail(r, n, "map(attribute=...) needs a string");
    const jv *fname = attr ? NULL : arg(a, 0, NULL);
    if (!attr && (!fname || fname->k != V_STR)) rfail(r, n, "map needs a filter name or attribute=");
    char f[64];
    if (fname) snprintf(f, sizeof f, "%.*s", (int)fname->s.n, fname->s.p);
    args rest = {NULL, NULL, 0};
    if (a->n > 1) rest = (args){a->v + 1, a->names ? a->names + 1 : NULL, a->n - 1};
    for (size_t i = 0; i < in->n; i++) {
        if (attr) {
            jv x = getattr_(r, n, in->v[i], attr->s.p, attr->s.n);
            out->v[i] = x.k == V_UNDEF && def ? *def : x;
        } else {
            out->v[i] = apply_filter(r, n, f, in->v[i], &rest);
        }
    }
    return vlist(out);
}

static jv apply_filter(render *r, const node *n, const char *name, jv v, const args *a) {
    step(r, 1);
    if (!strcmp(name, "trim")) return v.k == V_STR ? strip(r, v, arg(a, 0, "chars"), 3) : strip(r, stringify(r, &v), NULL, 3);
    if (!strcmp(name, "tojson")) {
        const jv *ind = arg(a, 0, "indent"), *sk = arg(a, -1, "sort_keys");
        int indent = -1;
        if (ind && ind->k == V_INT) {
            if (ind->i < 0 || ind->i > 64) rfail(r, n, "tojson: indent %lld is out of range", (long long)ind->i);
            indent = (int)ind->i;
        }
        sb b = {0};
        sb_put(r, &b, "", 0);
        to_json(r, &b, &v, indent, sk && truthy(sk), 0);
        return sb_value(&b);
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        if (v.k == V_STR) return vint((int64_t)u8count(v.s.p, v.s.n));
        if (v.k == V_LIST) return vint((int64_t)v.l->n);
        if (v.k == V_DICT || v.k == V_NS) return vint((int64_t)v.d->n);
        if (v.k == V_UNDEF) return vint(0);
        rfail(r, n, "%s has no length", kind_name(v.k));
    }
    if (!strcmp(name, "upper")) return recase(r, stringify(r, &v), 1);
    if (!strcmp(name, "lower")) return recase(r, stringify(r, &v), 2);
    if (!strcmp(name, "capitalize")) return recase(r, stringify(r, &v), 3);
    if (!strcmp(name, "title")) return recase(r, stringify(r, &v), 4);
    if (!strcmp(name, "string")) return stringify(r, &v);
    if (!strcmp(name, "safe") || !strcmp(name, "e") || !strcmp(name, "escape")) {
        if (name[0] == 'e') rfail(r, n, "the escape filter is not supported (chat templates do not autoescape)");
        return v;
    }
    if (!strcmp(name, "join")) {
        jv sep = arg_str(r, a, 0, "d", "");
        const jv *attr = arg(a, 1, "attribute");
        if (attr && attr->k != V_STR) rfail(r, n, "join: attribute must be a string");
        return join(r, &v, sep, attr);
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        jlist *l = iter_list(r, &v);
        if (!l->n) return UNDEF;
        return name[0] == 'f' ? l->v[0] : l->v[l->n - 1];
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        const jv *def = arg(a, 0, "default_value"), *boolean = arg(a, 1, "boolean");
        bool use = v.k == V_UNDEF || (boolean && truthy(boolean) && !truthy(&v));
        return use ? (def ? *def : vstr("", 0)) : v;
    }
    if (!strcmp(name, "items")) {
        if (v.k == V_UNDEF) return vlist(list_new(r, 0));
        if (v.k != V_DICT) rfail(r, n, "items needs a dict, not %s", kind_name(v.k));
        method m = {v, "items"};
        return call_method(r, n, &m, a);
    }
    if (!strcmp(name, "list")) {
        jlist *l = iter_list(r, &v), *c = list_new(r, l->n);
        if (l->n) memcpy(c->v, l->v, l->n * sizeof(jv));
        return vlist(c);
    }
    if (!strcmp(name, "reverse")) {
        if (v.k == V_STR) {
            size_t c;
            size_t *o = u8offsets(r, v.s.p, v.s.n, &c);
            char *s = ralloc(r, v.s.n + 1);
            size_t k = 0;
            for (size_t i = c; i-- > 0;) memcpy(s + k, v.s.p + o[i], o[i + 1] - o[i]), k += o[i + 1] - o[i];
            s[k] = 0;
            return vstr(s, k);
        }
        jlist *l = iter_list(r, &v), *c = list_new(r, l->n);
        for (size_t i = 0; i < l->n; i++) c->v[i] = l->v[l->n - 1 - i];
        return vlist(c);
    }
    if (!strcmp(name, "select")) return select_(r, n, &v, a, false, true);
    if (!strcmp(name, "reject")) return select_(r, n, &v, a, false, false);
    if (!strcmp(name, "selectattr")) return select_(r, n, &v, a, true, true);
    if (!strcmp(name, "rejectattr")) return select_(r, n, &v, a, true, false);
    if (!strcmp(name, "map")) return filter_map(r, n, &v, a);
    if (!strcmp(name, "replace")) {
        jv s = stringify(r, &v);
        return replace(r, s, arg_str(r, a, 0, "old", NULL), arg_str(r, a, 1, "new", NULL), arg_int(r, a, 2, "count", -1));
    }
    if (!strcmp(name, "int")) {
        if (v.k == V_INT) return v;
        if (v.k == V_BOOL) return vint(v.b);
        if (v.k == V_FLOAT && isfinite(v.f) && fabs(v.f) < 9e18) return vint((int64_t)v.f);
        if (v.k == V_STR) {
            char buf[64];
            snprintf(buf, sizeof buf, "%.*s", (int)(v.s.n > 60 ? 60 : v.s.n), v.s.p);
            char *e;
            long long x = strtoll(buf, &e, 10);
            if (e != buf && *e == 0) return vint(x);
        }
        return vint(arg_int(r, a, 0, "default", 0));
    }
    if (!strcmp(name, "float")) {
        if (is_num(&v)) return vfloat(num_of(&v));
        if (v.k == V_STR) {
            char buf[64];
            snprintf(buf, sizeof buf, "%.*s", (int)(v.s.n > 60 ? 60 : v.s.n), v.s.p);
            char *e;
            double x = strtod(buf, &e);
            if (e != buf && *e == 0) return vfloat(x);
        }
        const jv *d = arg(a, 0, "default");
        return d ? *d : vfloat(0);
    }
    if (!strcmp(name, "abs")) {
        if (v.k == V_INT) {
            if (v.i == INT64_MIN) rfail(r, n, "integer overflow");
            return vint(v.i < 0 ? -v.i : v.i);
        }
        if (v.k == V_FLOAT) return vfloat(fabs(v.f));
        rfail(r, n, "abs needs a number");
    }
    if (!strcmp(name, "indent")) {
        jv s = stringify(r, &v);
        const jv *w = arg(a, 0, "width"), *fst = arg(a, 1, "first"), *blank = arg(a, 2, "blank");
        jv pad = vstr("    ", 4);
        if (w && w->k == V_INT) {
            if (w->i < 0 || w->i > 256) rfail(r, n, "indent: width out of range");
            char *p = ralloc(r, (size_t)w->i + 1);
            memset(p, ' ', (size_t)w->i);
            pad = vstr(p, (size_t)w->i);
        } else if (w && w->k == V_STR) {
            pad = *w;
        }
        sb b = {0};
        sb_put(r, &b, "", 0);
        bool at_start = true, first_line = true;
        for (size_t i = 0; i < s.s.n; i++) {
            if (at_start) {
                bool empty_line = s.s.p[i] == '\n';
                if ((!first_line || (fst && truthy(fst))) && (!empty_line || (blank && truthy(blank))))
                    sb_put(r, &b, pad.s.p, pad.s.n);
                at_start = false;
            }
            sb_put(r, &b, s.s.p + i, 1);
            if (s.s.p[i] == '\n') at_start = true, first_line = false;
        }
        return sb_value(&b);
    }
    rfail(r, n, "unknown filter '%s'", name);
}

static bool is_test(const char *name, const char *a, const char *b) { return !strcmp(name, a) || (b && !strcmp(name, b)); }

static bool run_test(render *r, const node *n, const char *name, const jv *v, const args *a) {
    const jv *x = arg(a, 0, NULL);
    if (is_test(name, "defined", NULL)) return v->k != V_UNDEF;
    if (is_test(name, "undefined", NULL)) return v->k == V_UNDEF;
    if (is_test(name, "none", NULL)) return v->k == V_NONE;
    if (is_test(name, "boolean", NULL)) return v->k == V_BOOL;
    if (is_test(name, "true", NULL)) return v->k == V_BOOL && v->b;
    if (is_test(name, "false", NULL)) return v->k == V_BOOL && !v->b;
    if (is_test(name, "integer", NULL)) return v->k == V_INT;
    if (is_test(name, "float", NULL)) return v->k == V_FLOAT;
    if (is_test(name, "number", NULL)) return is_num(v);
    if (is_test(name, "string", NULL)) return v->k == V_STR;
    if (is_test(name, "mapping", NULL)) return v->k == V_DICT;
    if (is_test(name, "iterable", NULL)) return v->k == V_STR || v->k == V_LIST || v->k == V_DICT;
    if (is_test(name, "sequence", NULL)) return v->k == V_STR || v->k == V_LIST || v->k == V_DICT;
    if (is_test(name, "callable", NULL)) return v->k == V_FUNC || v->k == V_METHOD || v->k == V_MACRO;
    if (is_test(name, "lower", NULL) || is_test(name, "upper", NULL)) {
        if (v->k != V_STR) return false;
        jv c = recase(r, *v, name[0] == 'l' ? 2 : 1);
        return equal(&c, v);
    }
    if (is_test(name, "odd", NULL) || is_test(name, "even", NULL)) {
        if (v->k != V_INT) rfail(r, n, "the %s test needs an integer", name);
        return (v->i % 2 != 0) == (name[0] == 'o');
    }
    if (!x) rfail(r, n, "unknown test '%s' (or it needs an argument)", name);
    if (is_test(name, "equalto", "eq") || !strcmp(name, "==")) return equal(v, x);
    if (is_test(name, "ne", "!=")) return !equal(v, x);
    if (is_test(name, "sameas", NULL)) return v->k == x->k && (v->k == V_NONE || v->k == V_UNDEF || equal(v, x));
    if (is_test(name, "lt", "lessthan")) return order(r, v, x) < 0;
    if (is_test(name, "le", NULL)) return order(r, v, x) <= 0;
    if (is_test(name, "gt", "greaterthan")) return order(r, v, x) > 0;
    if (is_test(name, "ge", NULL)) return order(r, v, x) >= 0;
    if (is_test(name, "in", NULL)) return contains(r, x, v);
    if (is_test(name, "divisibleby", NULL)) {
        if (v->k != V_INT || x->k != V_INT || x->i == 0) rfail(r, n, "divisibleby needs non-zero integers");
        return x->i == -1 || v->i % x->i == 0;
    }
    rfail(r, n, "unknown test '%s'", name);
}

/* ---- expressions */

static jv eval(render *r, const node *e, frame *fr);

/* obj.name: a dict's key (its methods items/keys/values/get first, as Python's getattr
 * finds them), a namespace's attribute, loop's fields, a string's methods; undefined
 * when absent. */
static jv getattr_(render *r, const node *n, jv obj, const char *name, size_t len) {
    char nm[64]; /* long names are no method, loop field or test: cut for those */
    size_t nl = len < sizeof nm ? len : sizeof nm - 1;
    memcpy(nm, name, nl);
    nm[nl] = 0;
    switch (obj.k) {
    case V_DICT:
        if (method_exists(V_DICT, nm)) break;
        /* fallthrough */
    case V_NS: {
        jv *v = dict_find_str(r, obj.d, name, len);
        return v ? *v : UNDEF;
    }
    case V_LOOP: {
        loopst *L = obj.loop;
        size_t i = L->i, cnt = L->items->n;
        if (!strcmp(nm, "index")) return vint((int64_t)i + 1);
        if (!strcmp(nm, "index0")) return vint((int64_t)i);
        if (!strcmp(nm, "revindex")) return vint((int64_t)(cnt - i));
        if (!strcmp(nm, "revindex0")) return vint((int64_t)(cnt - i - 1));
        if (!strcmp(nm, "first")) return vbool(i == 0);
        if (!strcmp(nm, "last")) return vbool(i + 1 == cnt);
        if (!strcmp(nm, "length")) return vint((int64_t)cnt);
        if (!strcmp(nm, "previtem")) return i > 0 ? L->items->v[i - 1] : UNDEF;
        if (!strcmp(nm, "nextitem")) return i + 1 < cnt ? L->items->v[i + 1] : UNDEF;
        if (!strcmp(nm, "depth")) return vint(1);
        if (!strcmp(nm, "depth0")) return vint(0);
        return UNDEF;
    }
    case V_UNDEF: rfail(r, n, "'%s' is undefined (reading its attribute '%s')", obj.name ? obj.name : "a value", nm);
    case V_NONE: rfail(r, n, "'None' has no attribute '%s'", nm);
    default: break;
    }
    if (method_exists(obj.k, nm)) {
        method *m = ralloc(r, sizeof *m);
        m->self = obj;
        char *s = ralloc(r, nl + 1);
        memcpy(s, nm, nl + 1);
        m->name = s;
        return (jv){.k = V_METHOD, .m = m};
    }
    return UNDEF;
}

/* A Python index into n items: negative counts from the end; -1 when outside. */
static int64_t py_index(int64_t i, size_t n) {
    if (i < 0) i += (int64_t)n;
    return i < 0 || (uint64_t)i >= n ? -1 : i;
}

static jv getitem(render *r, const node *n, jv obj, jv key) {
    switch (obj.k) {
    case V_DICT:
    case V_NS: {
        jv *v = dict_find(r, obj.d, &key);
        if (v) return *v;
        if (key.k == V_STR && obj.k == V_DICT) return getattr_(r, n, obj, key.s.p, key.s.n);
        return UNDEF;
    }
    case V_LIST:
        if (key.k == V_INT || key.k == V_BOOL) {
            int64_t i = py_index(key.k == V_INT ? key.i : key.b, obj.l->n);
            return i < 0 ? UNDEF : obj.l->v[i];
        }
        return UNDEF;
    case V_STR:
        if (key.k == V_INT) {
            size_t c;
            size_t *o = u8offsets(r, obj.s.p, obj.s.n, &c);
            int64_t i = py_index(key.i, c);
            return i < 0 ? UNDEF : vstr(obj.s.p + o[i], o[i + 1] - o[i]);
        }
        return UNDEF;
    case V_LOOP:
        if (key.k == V_STR) return getattr_(r, n, obj, key.s.p, key.s.n);
        return UNDEF;
    case V_UNDEF: rfail(r, n, "'%s' is undefined (reading an item of it)", obj.name ? obj.name : "a value");
    case V_NONE: rfail(r, n, "'None' has no items");
    default: return UNDEF;
    }
}

/* Python's slice indices for a sequence of n: start, stop, step -> the indices. */
static jv slice(render *r, const node *n, jv obj, const jv *st, const jv *sp, const jv *stp) {
    int64_t step_ = 1;
    if (stp && stp->k != V_NONE) {
        if (stp->k != V_INT) rfail(r, n, "slice step must be an integer");
        step_ = stp->i;
        if (step_ == 0) rfail(r, n, "slice step cannot be zero");
        if (step_ == INT64_MIN) step_ = -INT64_MAX;
    }
    size_t len, *off = NULL;
    if (obj.k == V_LIST) len = obj.l->n;
    else if (obj.k == V_STR) off = u8offsets(r, obj.s.p, obj.s.n, &len);
    else if (obj.k == V_UNDEF) rfail(r, n, "'%s' is undefined (slicing it)", obj.name ? obj.name : "a value");
    else rfail(r, n, "%s cannot be sliced", kind_name(obj.k));
    int64_t L = (int64_t)len, lo, hi;
    for (int w = 0; w < 2; w++) {
        const jv *x = w ? sp : st;
        int64_t def = step_ > 0 ? (w ? L : 0) : (w ? -1 : L - 1), v;
        if (!x || x->k == V_NONE) {
            v = def;
        } else {
            if (x->k != V_INT) rfail(r, n, "slice indices must be integers or none");
            v = x->i;
            if (v < 0) v = v < -L ? (step_ > 0 ? 0 : -1) : v + L;
            else if (v >= L) v = step_ > 0 ? L : L - 1;
        }
        if (w) hi = v;
        else lo = v;
    }
    size_t count = 0;
    if (step_ > 0 && hi > lo) count = (size_t)((hi - lo - 1) / step_ + 1);
    if (step_ < 0 && lo > hi) count = (size_t)((lo - hi - 1) / -step_ + 1);
    if (obj.k == V_LIST) {
        jlist *l = list_new(r, count);
        for (size_t i = 0; i < count; i++) l->v[i] = obj.l->v[lo + (int64_t)i * step_];
        return vlist(l);
    }
    sb b = {0};
    sb_put(r, &b, "", 0);
    for (size_t i = 0; i < count; i++) {
        int64_t k = lo + (int64_t)i * step_;
        sb_put(r, &b, obj.s.p + off[k], off[k + 1] - off[k]);
    }
    return sb_value(&b);
}

static args eval_args(render *r, const node *e, frame *fr) {
    jv *v = e->nkids ? ralloc(r, (size_t)e->nkids * sizeof *v) : NULL;
    for (int i = 0; i < e->nkids; i++) v[i] = eval(r, e->kids[i], fr);
    return (args){v, e->knames, e->nkids};
}

static void exec(render *r, const node *s, frame *fr);

static void push_buf(render *r) {
    if (r->nbuf >= MAX_DEPTH + 2) rfail(r, NULL, "macros nest deeper than %d", MAX_DEPTH);
    r->bufs[r->nbuf].n = 0;
    if (r->bufs[r->nbuf].s) r->bufs[r->nbuf].s[0] = 0;
    r->nbuf++;
    if (r->nbuf > r->maxbuf) r->maxbuf = r->nbuf;
}

static jv pop_buf(render *r) {
    outbuf *b = &r->bufs[--r->nbuf];
    return str_cat(r, b->s ? b->s : "", b->n, "", 0);
}

static jv call_value(render *r, const node *n, jv f, const args *a) {
    switch (f.k) {
    case V_FUNC: return call_func(r, n, f.fn, a);
    case V_METHOD: return call_method(r, n, f.m, a);
    case V_MACRO: {
        const node *def = f.mac->def;
        if (++r->depth > MAX_DEPTH) rfail(r, n, "macro calls nest deeper than %d", MAX_DEPTH);
        frame *mf = ralloc(r, sizeof *mf);
        memset(mf, 0, sizeof *mf);
        mf->parent = f.mac->scope;
        int np = 0;
        for (int i = 0; i < a->n; i++)
            if (!(a->names && a->names[i])) np++;
        if (np > def->nkids) rfail(r, n, "macro '%s' takes %d arguments, %d given", def->name, def->nkids, np);
        for (int k = 0; k < def->nkids; k++) {
            const jv *v = arg(a, k, def->knames[k]);
            assign(r, mf, def->knames[k], v ? *v : def->kids[k] ? eval(r, def->kids[k], mf) : UNDEF);
        }
        push_buf(r);
        exec(r, def->b, mf);
        r->brk = 0;
        r->depth--;
        return pop_buf(r);
    }
    case V_UNDEF: rfail(r, n, "'%s' is undefined (calling it)", f.name ? f.name : "a value");
    default: rfail(r, n, "%s is not callable", kind_name(f.k));
    }
}

static jv eval(render *r, const node *e, frame *fr) {
    const node *saved = r->at;
    r->at = e;
    if (++r->depth > MAX_DEPTH * 2) rfail(r, e, "expressions nest deeper than %d", MAX_DEPTH * 2);
    jv v;
    switch (e->k) {
    case E_LIT: v = e->lit; break;
    case E_NAME: {
        jv *x = lookup(r, fr, e->name);
        if (x) v = *x;
        else {
            v = UNDEF;
            v.name = e->name;
            for (int k = 0; k < FN_COUNT; k++)
                if (!strcmp(e->name, FUNCS[k])) v = (jv){.k = V_FUNC, .fn = k};
        }
        break;
    }
    case E_LIST:
    case E_TUPLE: {
        jlist *l = list_new(r, (size_t)e->nkids);
        l->tuple = e->k == E_TUPLE;
        for (int i = 0; i < e->nkids; i++) l->v[i] = eval(r, e->kids[i], fr);
        v = vlist(l);
        break;
    }
    case E_DICT: {
        jdict *d = dict_new(r);
        for (int i = 0; i + 1 < e->nkids; i += 2) {
            jv k = eval(r, e->kids[i], fr);
            dict_set(r, d, k, eval(r, e->kids[i + 1], fr));
        }
        v = (jv){.k = V_DICT, .d = d};
        break;
    }
    case E_ATTR: v = getattr_(r, e, eval(r, e->a, fr), e->name, strlen(e->name)); break;
    case E_ITEM: {
        jv o = eval(r, e->a, fr);
        v = getitem(r, e, o, eval(r, e->b, fr));
        break;
    }
    case E_SLICE: {
        jv o = eval(r, e->a, fr), x[3];
        const node *p[3] = {e->b, e->c, e->d};
        for (int k = 0; k < 3; k++) x[k] = p[k] ? eval(r, p[k], fr) : NONE;
        v = slice(r, e, o, &x[0], &x[1], &x[2]);
        break;
    }
    case E_CALL: {
        jv f = eval(r, e->a, fr);
        args a = eval_args(r, e, fr);
        v = call_value(r, e, f, &a);
        break;
    }
    case E_FILTER: {
        jv x = eval(r, e->a, fr);
        args a = eval_args(r, e, fr);
        v = apply_filter(r, e, e->name, x, &a);
        break;
    }
    case E_TEST: {
        jv x = eval(r, e->a, fr);
        args a = eval_args(r, e, fr);
        v = vbool(run_test(r, e, e->name, &x, &a) != (e->op != 0));
        break;
    }
    case E_NOT: {
        jv x = eval(r, e->a, fr);
        v = vbool(!truthy(&x));
        break;
    }
    case E_NEG:
    case E_POS: {
        jv x = eval(r, e->a, fr);
        if (!is_num(&x)) rfail(r, e, "unary %c does not apply to %s", e->k == E_NEG ? '-' : '+', kind_name(x.k));
        if (e->k == E_POS) v = x.k == V_BOOL ? vint(x.b) : x;
        else if (x.k == V_FLOAT) v = vfloat(-x.f);
        else if (x.k == V_INT && x.i == INT64_MIN) rfail(r, e, "integer overflow");
        else v = vint(x.k == V_INT ? -x.i : -(int64_t)x.b);
        break;
    }
    case E_BIN: {
        jv a = eval(r, e->a, fr);
        jv b = eval(r, e->b, fr);
        v = arith(r, e, e->op, a, b);
        break;
    }
    case E_CONCAT: {
        jv a = eval(r, e->a, fr);
        jv b = eval(r, e->b, fr);
        jv sa = stringify(r, &a), sb_ = stringify(r, &b);
        v = str_cat(r, sa.s.p, sa.s.n, sb_.s.p, sb_.s.n);
        break;
    }
    case E_CMP: {
        jv a = eval(r, e->a, fr);
        jv b = eval(r, e->b, fr);
        bool res;
        switch (e->op) {
        case CMP_EQ: res = equal(&a, &b); break;
        case CMP_NE: res = !equal(&a, &b); break;
        case CMP_LT: res = order(r, &a, &b) < 0; break;
        case CMP_LE: res = order(r, &a, &b) <= 0; break;
        case CMP_GT: res = order(r, &a, &b) > 0; break;
        case CMP_GE: res = order(r, &a, &b) >= 0; break;
        case CMP_IN: res = contains(r, &b, &a); break;
        default: res = !contains(r, &b, &a); break;
        }
        v = vbool(res);
        break;
    }
    case E_AND: {
        jv a = eval(r, e->a, fr);
        v = truthy(&a) ? eval(r, e->b, fr) : a;
        break;
    }
    case E_OR: {
        jv a = eval(r, e->a, fr);
        v = truthy(&a) ? a : eval(r, e->b, fr);
        break;
    }
    case E_COND: {
        jv c = eval(r, e->b, fr);
        v = truthy(&c) ? eval(r, e->a, fr) : e->c ? eval(r, e->c, fr) : UNDEF;
        break;
    }
    default: rfail(r, e, "not an expression");
    }
    r->depth--;
    r->at = saved;
    return v;
}

/* ---- statements */

static void output(render *r, const jv *v) {
    if (v->k == V_STR) {
        out_put(r, v->s.p, v->s.n);
        return;
    }
    sb b = {0};
    to_str(r, &b, v, false, 0);
    if (b.n) out_put(r, b.s, b.n);
}

static void exec_for(render *r, const node *s, frame *fr) {
    jv it = eval(r, s->a, fr);
    jlist *items = iter_list(r, &it);
    if (s->c) { /* {% for x in xs if cond %}: loop.* counts the kept items */
        jlist *kept = list_new(r, items->n);
        kept->n = 0;
        for (size_t i = 0; i < items->n; i++) {
            frame tf = {.parent = fr};
            jv x = items->v[i];
            if (s->ntargets == 2) {
                if (x.k != V_LIST || x.l->n != 2) rfail(r, s, "cannot unpack %s into 2 names", kind_name(x.k));
                assign(r, &tf, s->name, x.l->v[0]), assign(r, &tf, s->name2, x.l->v[1]);
            } else {
                assign(r, &tf, s->name, x);
            }
            jv c = eval(r, s->c, &tf);
            if (truthy(&c)) kept->v[kept->n++] = x;
            step(r, 1);
        }
        items = kept;
    }
    loopst *L = ralloc(r, sizeof *L);
    L->items = items;
    /* one frame for the loop, emptied each iteration: what the body sets is the
     * iteration's own, and a long loop costs no memory per iteration */
    frame *lf = ralloc(r, sizeof *lf);
    memset(lf, 0, sizeof *lf);
    lf->parent = fr;
    for (size_t i = 0; i < items->n; i++) {
        step(r, 1);
        L->i = i;
        lf->vars.n = 0;
        jv x = items->v[i];
        if (s->ntargets == 2) {
            if (x.k != V_LIST || x.l->n != 2) rfail(r, s, "cannot unpack %s into 2 names", kind_name(x.k));
            assign(r, lf, s->name, x.l->v[0]), assign(r, lf, s->name2, x.l->v[1]);
        } else {
            assign(r, lf, s->name, x);
        }
        assign(r, lf, "loop", (jv){.k = V_LOOP, .loop = L});
        exec(r, s->b, lf);
        if (r->brk == 1) {
            r->brk = 0;
            break;
        }
        r->brk = 0;
    }
    if (items->n == 0 && s->d) exec(r, s->d, fr);
}

static void exec(render *r, const node *s, frame *fr) {
    if (++r->depth > MAX_DEPTH * 2) rfail(r, s, "statements nest deeper than %d", MAX_DEPTH * 2);
    for (; s && !r->brk; s = s->next) {
        step(r, 1);
        r->at = s;
        switch (s->k) {
        case N_TEXT: out_put(r, s->lit.s.p, s->lit.s.n); break;
        case N_OUT: {
            jv v = eval(r, s->a, fr);
            output(r, &v);
            break;
        }
        case N_IF: {
            const node *c = s;
            while (c) {
                jv v = eval(r, c->a, fr);
                if (truthy(&v)) {
                    exec(r, c->b, fr);
                    break;
                }
                if (!c->c) {
                    if (c->d) exec(r, c->d, fr);
                    break;
                }
                c = c->c;
            }
            break;
        }
        case N_FOR: exec_for(r, s, fr); break;
        case N_SET: {
            jv v = eval(r, s->a, fr);
            if (s->name2) {
                jv *ns = lookup(r, fr, s->name);
                if (!ns || ns->k != V_NS) rfail(r, s, "'%s' is not a namespace: cannot set its attribute '%s'", s->name, s->name2);
                dict_set(r, ns->d, vcstr(s->name2), v);
            } else {
                assign(r, fr, s->name, v);
            }
            break;
        }
        case N_SETBLOCK:
            push_buf(r);
            exec(r, s->b, fr);
            assign(r, fr, s->name, pop_buf(r));
            break;
        case N_MACRO: {
            macro *m = ralloc(r, sizeof *m);
            m->def = s, m->scope = fr;
            assign(r, fr, s->name, (jv){.k = V_MACRO, .mac = m});
            break;
        }
        case N_BREAK: r->brk = 1; break;
        case N_CONTINUE: r->brk = 2; break;
        default: rfail(r, s, "not a statement");
        }
    }
    r->depth--;
}

char *cf_jinja_render(const cf_jinja *t, json_t *vars, const cf_jinja_options *opt, size_t *len, cf_error *err) {
    render *r = cf_xcalloc(1, sizeof *r);
    if (opt) r->o = *opt;
    if (!r->o.max_output) r->o.max_output = (size_t)16 << 20;
    if (!r->o.max_memory) r->o.max_memory = (size_t)256 << 20;
    if (!r->o.max_steps) r->o.max_steps = 10 * 1000 * 1000;
    r->ar.limit = r->o.max_memory;
    r->f.err = err;
    char *result = NULL;
    if (setjmp(r->f.jmp) == 0) {
        if (vars && !json_is_object(vars)) rfail(r, NULL, "the variables must be a JSON object");
        frame *g = ralloc(r, sizeof *g);
        memset(g, 0, sizeof *g);
        const char *k;
        json_t *v;
        if (vars) json_object_foreach(vars, k, v) assign(r, g, k, from_json(r, v, 0));
        r->globals = g;
        frame *top = ralloc(r, sizeof *top); /* the template's own sets shadow the variables */
        memset(top, 0, sizeof *top);
        top->parent = g;
        push_buf(r);
        exec(r, t->body, top);
        outbuf *b = &r->bufs[0];
        result = cf_xmalloc(b->n + 1);
        if (b->n) memcpy(result, b->s, b->n);
        result[b->n] = 0;
        if (len) *len = b->n;
    }
    for (int i = 0; i < r->maxbuf; i++) free(r->bufs[i].s);
    arena_free(&r->ar);
    free(r);
    return result;
}
