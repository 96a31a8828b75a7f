/* Writing a SentencePiece BPE tokenizer as a `tokenizer.model` (ModelProto), the form
 * Hugging Face (LlamaTokenizer, LlamaTokenizerFast) and the sentencepiece library load; a
 * llama2.c tokenizer.bin becomes one on export. */
#include <stdlib.h>
#include <string.h>

#include "core/file_util.h"
#include "data/tokenizer_internal.h"

typedef struct pbuf {
    unsigned char *p;
    size_t n, cap;
} pbuf;

static void put(pbuf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = cf_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_varint(pbuf *b, uint64_t v) {
    unsigned char tmp[10];
    int n = 0;
    do {
        tmp[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) tmp[n] |= 0x80;
        n++;
    } while (v);
    put(b, tmp, (size_t)n);
}

static void put_key(pbuf *b, uint32_t field, uint32_t wire) { put_varint(b, (uint64_t)field << 3 | wire); }

static void put_int(pbuf *b, uint32_t field, int64_t v) {
    put_key(b, field, 0);
    put_varint(b, (uint64_t)v); /* negative: ten bytes, two's complement, as protobuf's int32 */
}

static void put_bytes(pbuf *b, uint32_t field, const void *data, size_t n) {
    put_key(b, field, 2);
    put_varint(b, n);
    put(b, data, n);
}

unsigned char *cf_tokenizer_to_sp_model(const cf_tokenizer *t, size_t *len) {
    if (t->kind != CF_TOK_SENTENCEPIECE) return NULL;
    pbuf out = {0}, msg = {0};
    for (int id = 0; id < t->vocab_size; id++) {
        msg.n = 0;
        size_t n;
        const char *p = cf_tokenizer_token(t, id, &n); /* SentencePiece finds "<s>" by name */
        put_bytes(&msg, 1, p, n);
        put_key(&msg, 2, 5);
        put(&msg, &t->scores[id], 4); /* little-endian float, as x86-64 stores it */
        put_int(&msg, 3, t->types[id]);
        put_bytes(&out, 1, msg.p, msg.n);
    }
    msg.n = 0; /* trainer_spec: BPE, byte fallback, special ids */
    put_int(&msg, 3, 2);
    put_int(&msg, 4, t->vocab_size);
    put_int(&msg, 35, t->byte_fallback);
    put_int(&msg, 40, t->unk);
    put_int(&msg, 41, t->bos);
    put_int(&msg, 42, t->eos);
    put_int(&msg, 43, -1);
    put_bytes(&out, 2, msg.p, msg.n);
    msg.n = 0; /* normalizer_spec: identity rules */
    put_bytes(&msg, 1, "identity", 8);
    put_int(&msg, 3, t->add_dummy_prefix);
    put_int(&msg, 4, t->remove_extra_whitespaces);
    put_int(&msg, 5, t->escape_whitespaces);
    put_bytes(&out, 3, msg.p, msg.n);
    free(msg.p);
    *len = out.n;
    return out.p;
}
