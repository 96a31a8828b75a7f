/* Character classes for the byte-level BPE pre-tokenisers: Unicode letters (\p{L}),
 * numbers (\p{N}) and white space (\s, the White_Space property). */
#ifndef CFORMERS_DATA_UNICODE_CLASS_H
#define CFORMERS_DATA_UNICODE_CLASS_H

#include <stdint.h>

typedef struct cf_unicode_range {
    uint32_t first, last;
} cf_unicode_range;

/* Sorted, disjoint ranges (src/data/unicode_tables.c, generated). */
extern const cf_unicode_range cf_unicode_letters[];
extern const int cf_unicode_letters_count;
extern const cf_unicode_range cf_unicode_numbers[];
extern const int cf_unicode_numbers_count;

typedef enum cf_char_class { CF_CHAR_LETTER, CF_CHAR_NUMBER, CF_CHAR_SPACE, CF_CHAR_OTHER } cf_char_class;

cf_char_class cf_char_class_of(uint32_t cp);

#endif
