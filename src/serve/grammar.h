/* Constrained sampling (docs/serving.md, "Structured output"): a context-free grammar over
 * bytes in the manner of llama.cpp's GBNF (rules of alternatives, each a sequence of byte
 * classes and rule references; repetition becomes right-recursive helper rules), compiled
 * from a JSON Schema or the generic JSON grammar, and matched against a tokenizer's
 * vocabulary so that the tokens which cannot continue a valid document are masked before
 * each sampling step.
 *
 * Matching is a pushdown automaton whose stacks are hash-consed (a stack is one node id)
 * and whose state at a token boundary is the sorted set of live stacks, interned: the
 * allowed-token mask of a state is computed once, by walking the vocabulary's byte trie
 * together with the state's stacks (a subtree is pruned as soon as no stack survives its
 * prefix), and cached, so a state seen again (every character inside one string, say)
 * costs only the application of the mask. */
#ifndef CFORMERS_SERVE_GRAMMAR_H
#define CFORMERS_SERVE_GRAMMAR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"
#include "cformers/tokenizer.h"

/* ---- building a grammar ---- */

typedef struct cf_grammar cf_grammar;
typedef struct cf_grammar_builder cf_grammar_builder;
/* One alternative being built: elements appended in order. */
typedef struct cf_grammar_seq {
    int32_t *el; /* encoded elements (grammar.c) */
    int n, cap;
} cf_grammar_seq;

cf_grammar_builder *cf_grammar_builder_new(void);
void cf_grammar_builder_free(cf_grammar_builder *b);
/* A new rule with no alternatives yet; its id. */
int cf_grammar_rule(cf_grammar_builder *b);
/* Adds `s` (copied, then emptied) as one more alternative of `rule`; an empty s is ε. */
void cf_grammar_alt(cf_grammar_builder *b, int rule, cf_grammar_seq *s);
void cf_grammar_seq_free(cf_grammar_seq *s);
/* Elements: one byte of the class `bits` (256 bits, bit c set for byte c), a byte range,
 * a literal string's bytes, a reference to a rule. */
void cf_grammar_seq_class(cf_grammar_builder *b, cf_grammar_seq *s, const uint8_t bits[32]);
void cf_grammar_seq_range(cf_grammar_builder *b, cf_grammar_seq *s, unsigned lo, unsigned hi);
void cf_grammar_seq_lit(cf_grammar_builder *b, cf_grammar_seq *s, const char *text, size_t len);
void cf_grammar_seq_ref(cf_grammar_seq *s, int rule);
/* A rule matching `x` min..max times (max < 0: unbounded). */
int cf_grammar_repeat(cf_grammar_builder *b, int x, long min, long max);
/* The grammar whose documents are those of `root`; consumes the builder. NULL with err
 * when a rule has no alternative. Refcounted: cf_grammar_retain, cf_grammar_free. */
cf_grammar *cf_grammar_finish(cf_grammar_builder *b, int root, cf_error *err);
cf_grammar *cf_grammar_retain(cf_grammar *g);
/* The same rules (as two compilations of one schema give). */
bool cf_grammar_equal(const cf_grammar *a, const cf_grammar *b);
void cf_grammar_free(cf_grammar *g);

/* ---- grammars from JSON ---- */

/* Any JSON object (response_format {"type": "json_object"}). */
cf_grammar *cf_grammar_json_object(void);
/* The documents valid against `schema` (the subset docs/serving.md lists: type, properties,
 * required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum,
 * const, anyOf, oneOf, $ref to #/$defs or #/definitions, and annotations). NULL with err
 * naming the offending part as `where` + its JSON path, for a schema that is malformed or
 * uses a keyword outside that subset. */
cf_grammar *cf_grammar_json_schema(json_t *schema, const char *where, cf_error *err);
/* Checks `schema` as cf_grammar_json_schema does, building nothing kept. */
int cf_grammar_json_schema_check(json_t *schema, const char *where, cf_error *err);

/* ---- matching against a vocabulary ---- */

/* A tokenizer's tokens as bytes in a trie (built once per tokenizer). `end` (n_end ids)
 * are the tokens that end a document: allowed exactly when it is complete. */
typedef struct cf_grammar_vocab cf_grammar_vocab;
cf_grammar_vocab *cf_grammar_vocab_new(const cf_tokenizer *tok, const int32_t *end, int n_end);
/* The same from explicit token bytes (tests): token i is bytes[i][0, len[i]). */
cf_grammar_vocab *cf_grammar_vocab_from_bytes(const char *const *bytes, const size_t *len, int n_tokens,
                                              const int32_t *end, int n_end);
void cf_grammar_vocab_free(cf_grammar_vocab *v);

/* The matcher of a grammar over a vocabulary: states and their cached masks, for any
 * number of documents at once (each is a state id), used by one thread at a time.
 * Refcounted (the count is atomic, so that the last reference may go on any thread). */
typedef struct cf_grammar_run cf_grammar_run;
cf_grammar_run *cf_grammar_run_new(cf_grammar *g, const cf_grammar_vocab *v); /* retains g */
cf_grammar_run *cf_grammar_run_retain(cf_grammar_run *r);
void cf_grammar_run_free(cf_grammar_run *r);
const cf_grammar *cf_grammar_run_grammar(const cf_grammar_run *r);
int cf_grammar_run_start(cf_grammar_run *r);
/* The tokens that may follow in `state`, a bitmap of (vocab + 63) / 64 words. */
const uint64_t *cf_grammar_run_mask(cf_grammar_run *r, int state);
/* logits[t] = -inf for every token t of vocab not in mask. */
void cf_grammar_apply_mask(const uint64_t *mask, float *logits, long vocab);
/* The document is complete in `state` (an end token is allowed); `only_end`: nothing can follow. */
bool cf_grammar_run_complete(cf_grammar_run *r, int state, bool *only_end);
/* The state after token `id` (its bytes), or -1 when the grammar does not allow it. */
int cf_grammar_run_advance(cf_grammar_run *r, int state, int32_t id);
/* The state after `len` raw bytes, or -1. */
int cf_grammar_run_feed(cf_grammar_run *r, int state, const char *bytes, size_t len);
/* States interned so far (each holds at most one mask). */
long cf_grammar_run_states(const cf_grammar_run *r);

#endif
