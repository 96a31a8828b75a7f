/* A hash map from byte strings to int32 values, for vocabularies and merge tables.
 * Keys are copied into an arena owned by the map; lookups allocate nothing. */
#ifndef CFORMERS_DATA_STRMAP_H
#define CFORMERS_DATA_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct cf_strmap_slot {
    uint64_t hash;
    size_t key_off; /* offset of the key in the arena */
    uint32_t key_len;
    int32_t value;
} cf_strmap_slot;

typedef struct cf_strmap {
    cf_strmap_slot *slots; /* power-of-two table, key_len == UINT32_MAX marks empty */
    size_t capacity, count;
    char *arena;
    size_t arena_len, arena_cap;
} cf_strmap;

void cf_strmap_init(cf_strmap *m);
void cf_strmap_free(cf_strmap *m);
uint64_t cf_strmap_hash(const void *key, size_t len);
/* Inserts or overwrites. */
void cf_strmap_put(cf_strmap *m, const void *key, size_t len, int32_t value);
/* The value for key, or -1 when absent. */
int32_t cf_strmap_get(const cf_strmap *m, const void *key, size_t len);
/* Lookup of the concatenation a+b without building it. */
int32_t cf_strmap_get2(const cf_strmap *m, const void *a, size_t alen, const void *b, size_t blen);
/* The stored key of a slot found by iteration (slots with key_len != UINT32_MAX). */
static inline const char *cf_strmap_key(const cf_strmap *m, const cf_strmap_slot *s) { return m->arena + s->key_off; }

#endif
