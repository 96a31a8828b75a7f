/* Writing a byte-level BPE tokenizer as a Hugging Face tokenizer.json, the one form
 * checkpoints embed byte-level vocabularies in: GPT-2's encoder.json + vocab.bpe directory
 * and GGUF's "gpt2" vocabularies become one on the way in. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/file_util.h"
#include "data/tokenizer_internal.h"

json_t *cf_bpe_json_root(json_t *vocab, json_t *added, json_t *merges, cf_pretoken_fn pre, bool ignore_merges) {
    json_t *byte_level = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets",
                                   1, "use_regex", pre != cf_llama3_pretoken);
    json_t *pre_tokenizer = byte_level;
    if (pre == cf_llama3_pretoken) /* LLaMA-3: its own Split, then ByteLevel without GPT-2's regex */
        pre_tokenizer = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, o]}", "type", "Sequence", "pretokenizers", "type",
                                  "Split", "pattern", "Regex", CF_LLAMA3_PATTERN, "behavior", "Isolated", "invert", 0,
                                  byte_level);
    return json_pack("{s:s, s:o, s:n, s:o, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:o, s:o}}", "version", "1.0",
                     "added_tokens", added, "normalizer", "pre_tokenizer", pre_tokenizer, "decoder", "type",
                     "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE",
                     "ignore_merges", ignore_merges, "vocab", vocab, "merges", merges);
}

int32_t (*cf_bpe_merge_pairs(const cf_tokenizer *t))[2] {
    int32_t(*pairs)[2] = cf_xcalloc((size_t)(t->n_merges ? t->n_merges : 1), sizeof *pairs);
    for (size_t s = 0; s < t->merges.capacity; s++) { /* (left, right) -> rank, inverted */
        const cf_strmap_slot *slot = &t->merges.slots[s];
        if (slot->key_len != sizeof pairs[0] || slot->value < 0 || slot->value >= t->n_merges) continue;
        memcpy(pairs[slot->value], cf_strmap_key(&t->merges, slot), sizeof pairs[0]);
    }
    return pairs;
}

/* A token's GPT-2 spelling as a new JSON string. */
static json_t *spelled(const cf_tokenizer *t, int32_t id) {
    char *s = cf_xmalloc(2 * (size_t)t->piece_len[id] + 1);
    size_t n = cf_bpe_spell(t->pieces[id], t->piece_len[id], s);
    json_t *j = json_stringn(s, n);
    free(s);
    return j;
}

char *cf_tokenizer_to_hf_json(const cf_tokenizer *t, size_t *len) {
    if (t->kind != CF_TOK_BYTE_LEVEL) return NULL;
    json_t *vocab = json_object(), *added = json_array(), *merges = json_array();
    for (int32_t id = 0; id < t->vocab_size; id++) {
        if (t->types[id] == SP_CONTROL) {
            json_array_append_new(added, json_pack("{s:i, s:s%, s:b, s:b, s:b, s:b, s:b}", "id", (int)id, "content",
                                                   t->pieces[id], (size_t)t->piece_len[id], "single_word",
                                                   (t->added_flags[id] & CF_ADDED_SINGLE_WORD) != 0, "lstrip",
                                                   (t->added_flags[id] & CF_ADDED_LSTRIP) != 0, "rstrip",
                                                   (t->added_flags[id] & CF_ADDED_RSTRIP) != 0, "normalized", 0, "special", 1));
            continue;
        }
        json_t *s = spelled(t, id);
        json_object_set_new(vocab, json_string_value(s), json_integer(id));
        json_decref(s);
    }
    int32_t(*pairs)[2] = cf_bpe_merge_pairs(t);
    for (int r = 0; r < t->n_merges; r++)
        json_array_append_new(merges, json_pack("[o, o]", spelled(t, pairs[r][0]), spelled(t, pairs[r][1])));
    free(pairs);
    json_t *root = cf_bpe_json_root(vocab, added, merges, t->pretoken, t->ignore_merges);
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    *len = strlen(text);
    return text;
}
