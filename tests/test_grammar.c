/* The grammar engine and the JSON Schema compiler (src/serve/grammar.h): for each schema of
 * tests/schema_cases.h, documents drawn token by token among the tokens the mask allows
 * always parse (jansson) and validate (tests/schema_check.h); the mask is exactly the set
 * of tokens whose bytes the grammar can take (checked against every token one by one), an
 * end token is allowed exactly when the document is complete; over a small hand-made
 * vocabulary, stories260K's SentencePiece vocabulary (byte fallback) and GPT-2's byte-level
 * one. Malformed schemas and unsupported keywords are refused naming the part. */
#include <jansson.h>
#include <stdlib.h>

#include "schema_cases.h"
#include "schema_check.h"
#include "serve/grammar.h"
#include "test_util.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static bool allowed(const uint64_t *mask, int32_t t) { return mask[t >> 6] >> (t & 63) & 1; }

/* Token t's bytes as the vocabulary holds them (through advance from a fresh state is not
 * possible in general, so the test keeps its own copy). */
typedef struct vocab_copy {
    char **bytes;
    size_t *len;
    int n;
    int32_t end;
} vocab_copy;

/* One document drawn in `v` against grammar g (brute-force checking the mask at each step
 * when `full_check`); the text (malloc'd) or NULL when it did not end within max_steps. */
static char *draw(cf_grammar *g, const cf_grammar_vocab *v, const vocab_copy *vc, bool full_check, int max_steps,
                  const char *what) {
    cf_grammar_run *r = cf_grammar_run_new(g, v);
    int st = cf_grammar_run_start(r);
    CHECK(st >= 0);
    size_t len = 0, cap = 256;
    char *text = malloc(cap);
    int32_t *ok = malloc(sizeof *ok * (size_t)vc->n);
    bool done = false;
    for (int step = 0; step < max_steps && st >= 0 && !done; step++) {
        const uint64_t *mask = cf_grammar_run_mask(r, st);
        bool only_end, complete = cf_grammar_run_complete(r, st, &only_end);
        CHECK_MSG(allowed(mask, vc->end) == complete, "%s: end token allowed %d, document complete %d", what,
                  allowed(mask, vc->end), complete);
        int n_ok = 0;
        for (int32_t t = 0; t < vc->n; t++) {
            if (t == vc->end) continue;
            if (allowed(mask, t)) ok[n_ok++] = t;
            if (full_check || (next_rand() & 255) == 0) {
                int after = vc->bytes[t] && vc->len[t] ? cf_grammar_run_feed(r, st, vc->bytes[t], vc->len[t]) : -1;
                CHECK_MSG((after >= 0) == allowed(mask, t), "%s: token %d ('%.*s') allowed %d, its bytes %s", what, t,
                          (int)vc->len[t], vc->bytes[t] ? vc->bytes[t] : "", allowed(mask, t),
                          after >= 0 ? "fit" : "do not fit");
            }
        }
        CHECK_MSG(n_ok > 0 || complete, "%s: a dead end after '%.*s'", what, (int)len, text);
        /* end when allowed, else mostly a closing token, so that documents stay short */
        static const char CLOSERS[] = "\"}]n0f";
        int32_t pick = -1;
        if (complete && (n_ok == 0 || next_rand() % 4 != 0)) {
            done = true;
            break;
        }
        if (next_rand() % 10 < 6)
            for (const char *c = CLOSERS; *c && pick < 0; c++)
                for (int i = 0; i < n_ok && pick < 0; i++)
                    if (vc->len[ok[i]] == 1 && vc->bytes[ok[i]][0] == *c) pick = ok[i];
        if (pick < 0) pick = ok[next_rand() % (uint64_t)n_ok];
        st = cf_grammar_run_advance(r, st, pick);
        CHECK(st >= 0);
        while (len + vc->len[pick] + 1 > cap) cap *= 2, text = realloc(text, cap);
        memcpy(text + len, vc->bytes[pick], vc->len[pick]);
        len += vc->len[pick];
    }
    text[len] = 0;
    if (!done) fprintf(stderr, "%s: unfinished: '%.300s'\n", what, text);
    free(ok);
    cf_grammar_run_free(r);
    if (!done) free(text);
    return done ? text : NULL;
}

static void check_schemas(const cf_grammar_vocab *v, const vocab_copy *vc, bool full_check, int docs, const char *name) {
    for (int i = 0; i < N_SCHEMA_CASES; i++) {
        json_t *schema = json_loads(SCHEMA_CASES[i], 0, NULL);
        CHECK_MSG(schema != NULL, "schema %d does not parse", i);
        cf_error err;
        cf_grammar *g = cf_grammar_json_schema(schema, "schema", &err);
        CHECK_MSG(g != NULL, "schema %d: %s", i, err.msg);
        for (int d = 0; g && d < docs; d++) {
            char what[64];
            snprintf(what, sizeof what, "%s, schema %d, document %d", name, i, d);
            char *text = draw(g, v, vc, full_check, 4000, what);
            CHECK_MSG(text != NULL, "%s: no end within 4000 tokens", what);
            if (!text) continue;
            json_error_t jerr;
            json_t *doc = json_loads(text, JSON_DECODE_ANY, &jerr);
            CHECK_MSG(doc != NULL, "%s: '%s' does not parse: %s", what, text, jerr.text);
            CHECK_MSG(!doc || schema_valid(schema, schema, doc), "%s: '%s' is not valid against %s", what, text,
                      SCHEMA_CASES[i]);
            json_decref(doc);
            free(text);
        }
        cf_grammar_free(g);
        json_decref(schema);
    }
    /* the generic JSON object grammar */
    cf_grammar *g = cf_grammar_json_object();
    for (int d = 0; d < docs; d++) {
        char *text = draw(g, v, vc, full_check, 4000, name);
        CHECK(text != NULL);
        json_t *doc = text ? json_loads(text, 0, NULL) : NULL;
        CHECK_MSG(doc && json_is_object(doc), "%s: json_object gave '%s'", name, text ? text : "(nothing)");
        json_decref(doc);
        free(text);
    }
    cf_grammar_free(g);
}

static void refuses(const char *schema_text, const char *want) {
    json_t *schema = json_loads(schema_text, JSON_DECODE_ANY, NULL);
    cf_error err;
    cf_grammar *g = cf_grammar_json_schema(schema, "response_format.json_schema.schema", &err);
    CHECK_MSG(g == NULL, "%s was taken", schema_text);
    if (!g) CHECK_CONTAINS(err.msg, want);
    cf_grammar_free(g);
    json_decref(schema);
}

/* A vocabulary of every byte, some multi-byte JSON pieces, and an end token. */
static void small_vocab(vocab_copy *vc) {
    static const char *const MULTI[] = {"{\"", "\":", "\": ", "\",", "\"}", "true", "false", "null", "12", "-3.", "e+",
                                        "},", "]}", "[{", " \"", "red", "ab\"", "\\u00", "\\n", "\xc3\xa9", "\xe2\x82"};
    int n_multi = (int)(sizeof MULTI / sizeof MULTI[0]);
    vc->n = 256 + n_multi + 1;
    vc->bytes = calloc((size_t)vc->n, sizeof *vc->bytes);
    vc->len = calloc((size_t)vc->n, sizeof *vc->len);
    for (int b = 0; b < 256; b++) vc->bytes[b] = malloc(1), vc->bytes[b][0] = (char)b, vc->len[b] = 1;
    for (int i = 0; i < n_multi; i++) vc->bytes[256 + i] = strdup(MULTI[i]), vc->len[256 + i] = strlen(MULTI[i]);
    vc->end = vc->n - 1;
}

/* The bytes a tokenizer's tokens write (as the engine's vocabulary takes them). */
static void tokenizer_vocab(const cf_tokenizer *tok, vocab_copy *vc) {
    vc->n = cf_tokenizer_vocab_size(tok);
    vc->bytes = calloc((size_t)vc->n, sizeof *vc->bytes);
    vc->len = calloc((size_t)vc->n, sizeof *vc->len);
    vc->end = cf_tokenizer_eos(tok);
    for (int32_t t = 0; t < vc->n; t++) {
        char scratch[16];
        size_t n;
        const char *p = cf_tokenizer_piece(tok, vc->n > 3 ? 3 : 0, t, scratch, &n);
        size_t tl;
        const char *name = cf_tokenizer_token(tok, t, &tl);
        bool marker = strcmp(cf_tokenizer_type(tok), "sentencepiece-bpe") == 0 && tl >= 3 && name[0] == '<' &&
                      name[tl - 1] == '>' && !(tl == 6 && name[1] == '0' && name[2] == 'x');
        if (t == cf_tokenizer_bos(tok) || marker) continue;
        vc->bytes[t] = malloc(n + 1);
        memcpy(vc->bytes[t], p, n);
        vc->len[t] = n;
    }
}

static void vocab_copy_free(vocab_copy *vc) {
    for (int t = 0; t < vc->n; t++) free(vc->bytes[t]);
    free(vc->bytes), free(vc->len);
}

static void on_tokenizer(const char *rel, bool full_check, int docs) {
    const char *path = test_data_path(rel);
    if (!path) { /* the shared assets are optional: the small vocabulary above still ran */
        printf("skipping %s: not found under CFORMERS_DATA_DIR\n", rel);
        return;
    }
    cf_error err;
    cf_tokenizer *tok = cf_tokenizer_load(path, &err);
    if (!tok) {
        fprintf(stderr, "skipping %s: %s\n", rel, err.msg);
        return;
    }
    vocab_copy vc;
    tokenizer_vocab(tok, &vc);
    int32_t end = cf_tokenizer_eos(tok);
    cf_grammar_vocab *v = cf_grammar_vocab_new(tok, &end, 1);
    check_schemas(v, &vc, full_check, docs, rel);
    cf_grammar_vocab_free(v);
    vocab_copy_free(&vc);
    cf_tokenizer_free(tok);
}

int main(void) {
    vocab_copy vc;
    small_vocab(&vc);
    cf_grammar_vocab *v = cf_grammar_vocab_from_bytes((const char *const *)vc.bytes, vc.len, vc.n, &vc.end, 1);
    check_schemas(v, &vc, true, 6, "small vocabulary");

    /* a hand-built grammar: greeting ::= "hi" ("!" | "?")* ; the mask follows it */
    cf_grammar_builder *b = cf_grammar_builder_new();
    int punct = cf_grammar_rule(b), root = cf_grammar_rule(b);
    cf_grammar_seq s = {0};
    cf_grammar_seq_lit(b, &s, "!", 1), cf_grammar_alt(b, punct, &s);
    cf_grammar_seq_lit(b, &s, "?", 1), cf_grammar_alt(b, punct, &s);
    cf_grammar_seq_lit(b, &s, "hi", 2), cf_grammar_seq_ref(&s, cf_grammar_repeat(b, punct, 0, -1));
    cf_grammar_alt(b, root, &s);
    cf_error err;
    cf_grammar *g = cf_grammar_finish(b, root, &err);
    cf_grammar_run *r = cf_grammar_run_new(g, v);
    int st = cf_grammar_run_start(r);
    CHECK(cf_grammar_run_feed(r, st, "hx", 2) < 0);
    int hi = cf_grammar_run_feed(r, st, "hi!?!", 5);
    CHECK(hi >= 0 && cf_grammar_run_complete(r, hi, NULL));
    CHECK(!cf_grammar_run_complete(r, st, NULL));
    const uint64_t *mask = cf_grammar_run_mask(r, hi);
    CHECK(allowed(mask, '!') && allowed(mask, '?') && allowed(mask, vc.end) && !allowed(mask, 'h'));
    long states = cf_grammar_run_states(r);
    CHECK(cf_grammar_run_feed(r, hi, "!", 1) == hi); /* a loop comes back to the same state */
    CHECK(cf_grammar_run_states(r) == states);
    cf_grammar_run_free(r);
    cf_grammar_free(g);
    cf_grammar_vocab_free(v);
    vocab_copy_free(&vc);

    on_tokenizer("stories260K/tok512.model", true, 3);
    on_tokenizer("gpt2-tokenizer", false, 2);

    refuses("{\"type\":\"string\",\"pattern\":\"a+\"}", "response_format.json_schema.schema: the keyword 'pattern' is not supported");
    refuses("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0}}}",
            "schema.properties.n: the keyword 'minimum' is not supported");
    refuses("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"b\"]}",
            "schema.required[0]: names no property");
    refuses("{\"type\":\"strin\"}", "unknown type 'strin'");
    refuses("{\"type\":\"array\",\"items\":[{\"type\":\"integer\"}]}", "schema.items: must be one schema");
    refuses("{\"$ref\":\"#/$defs/missing\"}", "schema.$ref: '$ref' must name");
    refuses("{\"type\":\"string\",\"maxLength\":-1}", "'maxLength' must be an integer");
    refuses("{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", "'minLength' is greater than 'maxLength'");
    refuses("{\"type\":\"string\",\"enum\":[\"a\",1]}", "schema.enum: holds a value that is not of the schema's 'type'");
    refuses("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "'additionalProperties' must be true or false");
    refuses("{\"allOf\":[{\"type\":\"integer\"}]}", "'allOf' is not supported");
    refuses("[1]", "a schema must be an object");
    refuses("{\"anyOf\":[]}", "'anyOf'/'oneOf' must be an array");
    return test_finish();
}
