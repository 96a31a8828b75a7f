/* Loading SentencePiece BPE models: the `tokenizer.model` protobuf (parsed by hand) and
 * llama2.c's `tokenizer.bin`. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "data/tokenizer_internal.h"

/* --- protobuf wire format: just what ModelProto needs --- */

typedef struct pb {
    const unsigned char *p, *end, *base;
    const char *path;
    cf_error *err;
    bool failed;
} pb;

static bool pb_fail(pb *r, const char *what) {
    if (!r->failed) cf_fail(r->err, "%s: offset %ld: %s", r->path, (long)(r->p - r->base), what);
    r->failed = true;
    r->p = r->end;
    return false;
}

static uint64_t pb_varint(pb *r) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return pb_fail(r, "truncated varint"), 0;
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    return pb_fail(r, "varint longer than 10 bytes"), 0;
}

/* Reads a field key; returns false at the end of the message. */
static bool pb_key(pb *r, uint32_t *field, uint32_t *wire) {
    if (r->p >= r->end) return false;
    uint64_t k = pb_varint(r);
    *field = (uint32_t)(k >> 3);
    *wire = (uint32_t)(k & 7);
    return !r->failed;
}

/* A length-delimited field as a sub-reader. */
static pb pb_sub(pb *r) {
    uint64_t len = pb_varint(r);
    pb sub = *r;
    if (len > (uint64_t)(r->end - r->p)) {
        pb_fail(r, "length-delimited field runs past the end of the file");
        sub.p = sub.end = r->p;
        return sub;
    }
    sub.p = r->p;
    sub.end = r->p + len;
    r->p += len;
    return sub;
}

static void pb_skip(pb *r, uint32_t wire) {
    switch (wire) {
    case 0: pb_varint(r); break;
    case 1: if (r->end - r->p < 8) pb_fail(r, "truncated fixed64"); else r->p += 8; break;
    case 2: pb_sub(r); break;
    case 5: if (r->end - r->p < 4) pb_fail(r, "truncated fixed32"); else r->p += 4; break;
    default: pb_fail(r, "unsupported protobuf wire type");
    }
}

static float pb_float(pb *r) {
    if (r->end - r->p < 4) return pb_fail(r, "truncated float"), 0.0f;
    float f;
    memcpy(&f, r->p, 4);
    r->p += 4;
    return f;
}

typedef struct sp_spec {
    int model_type; /* 1 unigram, 2 bpe, 3 word, 4 char */
    bool byte_fallback;
    int64_t unk_id, bos_id, eos_id; /* varints, checked against the piece count */
    bool add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces;
    bool has_charsmap;
} sp_spec;

/* The sub-message parsers return false when it is malformed (err names the offset). */
static bool parse_trainer_spec(pb r, sp_spec *s) {
    uint32_t f, w;
    while (pb_key(&r, &f, &w)) {
        if (w != 0) {
            pb_skip(&r, w);
            continue;
        }
        int64_t v = (int64_t)pb_varint(&r);
        switch (f) {
        case 3: s->model_type = (int)v; break;
        case 35: s->byte_fallback = v != 0; break;
        case 40: s->unk_id = v; break;
        case 41: s->bos_id = v; break;
        case 42: s->eos_id = v; break;
        default: break;
        }
    }
    return !r.failed;
}

static bool parse_normalizer_spec(pb r, sp_spec *s) {
    uint32_t f, w;
    while (pb_key(&r, &f, &w)) {
        if (f == 2 && w == 2) {
            pb sub = pb_sub(&r);
            s->has_charsmap = sub.end > sub.p;
        } else if (w == 0 && f >= 3 && f <= 5) {
            bool v = pb_varint(&r) != 0;
            if (f == 3) s->add_dummy_prefix = v;
            if (f == 4) s->remove_extra_whitespaces = v;
            if (f == 5) s->escape_whitespaces = v;
        } else {
            pb_skip(&r, w);
        }
    }
    return !r.failed;
}

/* Counts the pieces first so the tokenizer is allocated once. */
static int count_pieces(pb r) {
    int n = 0;
    uint32_t f, w;
    while (pb_key(&r, &f, &w)) {
        if (f == 1 && w == 2 && ++n == INT_MAX) return pb_fail(&r, "too many pieces"), -1;
        pb_skip(&r, w);
    }
    return r.failed ? -1 : n;
}

static bool parse_piece(pb r, cf_tokenizer *t, int id) {
    uint32_t f, w;
    t->types[id] = SP_NORMAL;
    cf_tok_set_piece(t, id, "", 0);
    while (pb_key(&r, &f, &w)) {
        if (f == 1 && w == 2) {
            pb s = pb_sub(&r);
            if (s.end - s.p >= UINT32_MAX) return pb_fail(&r, "piece longer than 4 GiB");
            cf_tok_set_piece(t, id, (const char *)s.p, (size_t)(s.end - s.p));
        } else if (f == 2 && w == 5) {
            t->scores[id] = pb_float(&r);
        } else if (f == 3 && w == 0) {
            t->types[id] = (uint8_t)pb_varint(&r);
        } else {
            pb_skip(&r, w);
        }
    }
    return !r.failed;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte a piece spelled exactly "<0xHH>" (two hex digits, no sign or space) stands
 * for, or -1. */
static int byte_piece(const char *p, size_t len) {
    if (len != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int hi = hex_digit(p[3]), lo = hex_digit(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Shared tail of both loaders: piece lookup table, byte pieces, specials. A BYTE piece
 * that is not spelled "<0xHH>" is an error naming it. */
static int index_pieces(cf_tokenizer *t, const char *path, cf_error *err) {
    for (int id = 0; id < t->vocab_size; id++) {
        uint8_t type = t->types[id];
        const char *p = t->pieces[id];
        if (type == SP_BYTE) {
            int byte = byte_piece(p, t->piece_len[id]);
            char q[CF_TOK_QUOTE_SIZE];
            if (byte < 0)
                return cf_fail(err, "%s: piece %d: byte piece \"%s\" is not spelled <0xHH>", path, id,
                               cf_tok_quote(p, t->piece_len[id], q));
            t->byte_ids[byte] = id;
        }
        /* Only these may be produced by merging; control, unknown and byte pieces are
         * reached by id alone. */
        if ((type == SP_NORMAL || type == SP_USER_DEFINED || type == SP_UNUSED) &&
            cf_strmap_get(&t->piece_ids, p, t->piece_len[id]) < 0)
            cf_strmap_put(&t->piece_ids, p, t->piece_len[id], id);
    }
    cf_tok_finish(t);
    return 0;
}

cf_tokenizer *cf_sp_load_model(const char *path, const unsigned char *data, size_t size, cf_error *err) {
    pb r = {.p = data, .end = data + size, .base = data, .path = path, .err = err};
    sp_spec spec = {.model_type = 1, .unk_id = 0, .bos_id = 1, .eos_id = 2, .add_dummy_prefix = true,
                    .remove_extra_whitespaces = true, .escape_whitespaces = true};
    int n = count_pieces(r);
    if (n < 0) return NULL; /* count_pieces has set err, naming the offset */
    if (n == 0) {
        cf_fail(err, "%s: no pieces: not a SentencePiece model", path);
        return NULL;
    }
    cf_tokenizer *t = cf_tok_new(CF_TOK_SENTENCEPIECE, n);
    int id = 0;
    uint32_t f, w;
    bool ok = true;
    while (ok && pb_key(&r, &f, &w)) {
        if (f == 1 && w == 2)
            ok = parse_piece(pb_sub(&r), t, id++);
        else if (f == 2 && w == 2)
            ok = parse_trainer_spec(pb_sub(&r), &spec);
        else if (f == 3 && w == 2)
            ok = parse_normalizer_spec(pb_sub(&r), &spec);
        else
            pb_skip(&r, w);
    }
    if (!ok) {
        cf_tokenizer_free(t);
        return NULL; /* the sub-message parser has set err, naming the offset */
    }
    if (spec.model_type != 2) {
        cf_tokenizer_free(t);
        cf_fail(err, "%s: SentencePiece model type %d is not supported (only BPE, type 2)", path, spec.model_type);
        return NULL;
    }
    if (spec.has_charsmap) {
        cf_tokenizer_free(t);
        cf_fail(err, "%s: normalizer uses a precompiled character map; only identity normalisation is supported",
                path);
        return NULL;
    }
    t->add_dummy_prefix = spec.add_dummy_prefix;
    t->remove_extra_whitespaces = spec.remove_extra_whitespaces;
    t->escape_whitespaces = spec.escape_whitespaces;
    t->byte_fallback = spec.byte_fallback;
    /* The encoder emits <unk> for what it cannot spell, so it must be a piece; BOS and EOS
     * are optional (-1 disables them, as out-of-range ids do). */
    if (spec.unk_id < 0 || spec.unk_id >= n) {
        cf_tokenizer_free(t);
        cf_fail(err, "%s: trainer_spec.unk_id %lld is not one of the %d pieces", path, (long long)spec.unk_id, n);
        return NULL;
    }
    t->unk = (int)spec.unk_id;
    t->bos = spec.bos_id >= 0 && spec.bos_id < n ? (int)spec.bos_id : -1;
    t->eos = spec.eos_id >= 0 && spec.eos_id < n ? (int)spec.eos_id : -1;
    if (index_pieces(t, path, err) != 0) {
        cf_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* llama2.c format: int32 max_token_length, then per token {float score, int32 len, bytes}.
 * It has no normaliser section; llama2.c applies LLaMA 2's rules (dummy prefix, spaces
 * kept as is), ids 0/1/2 are <unk>/<s>/</s> and pieces "<0xXX>" are byte fallback. */
cf_tokenizer *cf_sp_load_llama2c(const char *path, const unsigned char *data, size_t size, cf_error *err) {
    if (size < 4) {
        cf_fail(err, "%s: offset 0: file too short for a llama2.c tokenizer", path);
        return NULL;
    }
    int n = 0;
    size_t off = 4, longest = 0, room = 0;
    while (off < size) {
        int32_t len;
        if (size - off < 8) break;
        memcpy(&len, data + off + 4, 4);
        if (len < 0 || (size_t)len > size - off - 8 || n == INT_MAX) break;
        if ((size_t)len > longest) longest = (size_t)len;
        off += 8 + (size_t)len;
        n++;
    }
    if (off != size || n < 3) {
        cf_fail(err, "%s: offset %zu: not a llama2.c tokenizer (token records do not end at the end of the file)",
                path, off);
        return NULL;
    }
    /* Each space becomes U+2581 (3 bytes) in the SentencePiece spelling. */
    if (!cf_mul_size(longest, 3, &room) || room >= UINT32_MAX || !cf_add_size(room, 1, &room)) {
        cf_fail(err, "%s: a piece of %zu bytes is too long", path, longest);
        return NULL;
    }
    cf_tokenizer *t = cf_tok_new(CF_TOK_SENTENCEPIECE, n);
    char *piece = cf_xmalloc(room);
    off = 4;
    for (int id = 0; id < n; id++) {
        int32_t len;
        memcpy(&t->scores[id], data + off, 4);
        memcpy(&len, data + off + 4, 4);
        const char *p = (const char *)data + off + 8;
        off += 8 + (size_t)len;
        /* Back to SentencePiece spelling, so both formats share one encoder. */
        size_t m = 0;
        for (int32_t i = 0; i < len; i++) {
            if (p[i] == ' ') {
                memcpy(piece + m, "\xe2\x96\x81", 3);
                m += 3;
            } else {
                piece[m++] = p[i];
            }
        }
        cf_tok_set_piece(t, id, piece, m);
        t->types[id] = id < 3 ? (id == 0 ? SP_UNKNOWN : SP_CONTROL)
                       : byte_piece(t->pieces[id], t->piece_len[id]) >= 0 ? SP_BYTE
                                                                          : SP_NORMAL;
    }
    free(piece);
    t->unk = 0;
    t->bos = 1;
    t->eos = 2;
    t->add_dummy_prefix = true;
    t->escape_whitespaces = true;
    t->byte_fallback = true;
    if (index_pieces(t, path, err) != 0) { /* cannot fail: types come from byte_piece */
        cf_tokenizer_free(t);
        return NULL;
    }
    return t;
}
