#include "data/pretokenize.h"

#include <stdbool.h>
#include <string.h>

#include "data/unicode_class.h"
#include "data/utf8.h"

static cf_char_class class_at(const char *text, size_t len, size_t i, size_t *clen) {
    const unsigned char *s = (const unsigned char *)text + i;
    int n = cf_utf8_valid_len(s, len - i);
    if (n == 0) {
        *clen = 1;
        return CF_CHAR_OTHER;
    }
    int dlen;
    uint32_t cp = cf_utf8_decode(s, len - i, &dlen);
    *clen = (size_t)n;
    return cf_char_class_of(cp);
}

/* End of the run of characters of class c (c != OTHER) or of "other" characters. */
static size_t run_end(const char *text, size_t len, size_t i, cf_char_class c) {
    while (i < len) {
        size_t clen;
        if (class_at(text, len, i, &clen) != c) break;
        i += clen;
    }
    return i;
}

static size_t contraction(const char *text, size_t len, size_t i) {
    if (text[i] != '\'' || i + 1 >= len) return 0;
    char a = text[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 < len) {
        char b = text[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    return 0;
}

size_t cf_gpt2_pretoken(const char *text, size_t len, size_t i) {
    size_t c = contraction(text, len, i);
    if (c) return c;
    size_t clen;
    cf_char_class cls = class_at(text, len, i, &clen);
    size_t start = i;
    /* " ?X+" for letters, numbers and others: an optional single space first. */
    if (text[i] == ' ' && i + 1 < len) {
        size_t next_len;
        cf_char_class next = class_at(text, len, i + 1, &next_len);
        if (next != CF_CHAR_SPACE) return run_end(text, len, i + 1, next) - start;
    }
    if (cls != CF_CHAR_SPACE) return run_end(text, len, i, cls) - start;
    /* \s+(?!\S) leaves the last space of a run for the word after it; \s+ takes a single
     * space (or the whole run at the end of the text). */
    size_t end = i, last = i;
    while (end < len) {
        size_t l;
        if (class_at(text, len, end, &l) != CF_CHAR_SPACE) break;
        last = end;
        end += l;
    }
    if (end == len || last == start) return end - start;
    return last - start;
}
