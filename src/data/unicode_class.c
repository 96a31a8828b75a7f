#include "data/unicode_class.h"

#include <stdbool.h>

static bool in_ranges(const cf_unicode_range *r, int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].first)
            hi = mid - 1;
        else if (cp > r[mid].last)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

static bool is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

cf_char_class cf_char_class_of(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return CF_CHAR_LETTER;
        if (cp >= '0' && cp <= '9') return CF_CHAR_NUMBER;
        return is_white_space(cp) ? CF_CHAR_SPACE : CF_CHAR_OTHER;
    }
    if (is_white_space(cp)) return CF_CHAR_SPACE;
    if (in_ranges(cf_unicode_letters, cf_unicode_letters_count, cp)) return CF_CHAR_LETTER;
    if (in_ranges(cf_unicode_numbers, cf_unicode_numbers_count, cp)) return CF_CHAR_NUMBER;
    return CF_CHAR_OTHER;
}
