#include "data/strmap.h"

#include <stdlib.h>
#include <string.h>

#include "cformers/error.h"

enum { EMPTY = UINT32_MAX };

void cf_strmap_init(cf_strmap *m) {
    memset(m, 0, sizeof *m);
    m->capacity = 64;
    m->slots = cf_xmalloc(m->capacity * sizeof *m->slots);
    for (size_t i = 0; i < m->capacity; i++) m->slots[i].key_len = EMPTY;
}

void cf_strmap_free(cf_strmap *m) {
    free(m->slots);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

/* FNV-1a over the bytes, then a finaliser so low bits are well mixed. */
static uint64_t hash_update(uint64_t h, const unsigned char *p, size_t len) {
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static uint64_t hash_finish(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

uint64_t cf_strmap_hash(const void *key, size_t len) {
    return hash_finish(hash_update(0xcbf29ce484222325ULL, key, len));
}

static void grow(cf_strmap *m) {
    cf_strmap_slot *old = m->slots;
    size_t old_cap = m->capacity;
    m->capacity *= 2;
    m->slots = cf_xmalloc(m->capacity * sizeof *m->slots);
    for (size_t i = 0; i < m->capacity; i++) m->slots[i].key_len = EMPTY;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].key_len == EMPTY) continue;
        size_t j = old[i].hash & (m->capacity - 1);
        while (m->slots[j].key_len != EMPTY) j = (j + 1) & (m->capacity - 1);
        m->slots[j] = old[i];
    }
    free(old);
}

static cf_strmap_slot *find(const cf_strmap *m, uint64_t h, const void *a, size_t alen, const void *b, size_t blen) {
    size_t j = h & (m->capacity - 1);
    for (;;) {
        cf_strmap_slot *s = &m->slots[j];
        if (s->key_len == EMPTY) return s;
        /* An empty key may be stored while the arena is still NULL: no pointer into it then. */
        if (s->hash == h && s->key_len == alen + blen) {
            if (s->key_len == 0) return s;
            const char *k = m->arena + s->key_off;
            if ((alen == 0 || memcmp(k, a, alen) == 0) && (blen == 0 || memcmp(k + alen, b, blen) == 0)) return s;
        }
        j = (j + 1) & (m->capacity - 1);
    }
}

void cf_strmap_put(cf_strmap *m, const void *key, size_t len, int32_t value) {
    if ((m->count + 1) * 2 > m->capacity) grow(m);
    uint64_t h = cf_strmap_hash(key, len);
    cf_strmap_slot *s = find(m, h, key, len, NULL, 0);
    if (s->key_len != EMPTY) {
        s->value = value;
        return;
    }
    if (m->arena_len + len > m->arena_cap) {
        m->arena_cap = (m->arena_len + len) * 2 + 256;
        m->arena = cf_xrealloc(m->arena, m->arena_cap);
    }
    if (len) memcpy(m->arena + m->arena_len, key, len);
    *s = (cf_strmap_slot){.hash = h, .key_off = m->arena_len, .key_len = (uint32_t)len, .value = value};
    m->arena_len += len;
    m->count++;
}

int32_t cf_strmap_get(const cf_strmap *m, const void *key, size_t len) {
    return cf_strmap_get2(m, key, len, NULL, 0);
}

int32_t cf_strmap_get2(const cf_strmap *m, const void *a, size_t alen, const void *b, size_t blen) {
    uint64_t h = hash_update(0xcbf29ce484222325ULL, a, alen);
    if (blen) h = hash_update(h, b, blen);
    const cf_strmap_slot *s = find(m, hash_finish(h), a, alen, b, blen);
    return s->key_len == EMPTY ? -1 : s->value;
}
