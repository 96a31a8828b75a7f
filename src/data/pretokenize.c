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

const char CF_GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char CF_LLAMA3_PATTERN[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                 "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static char fold(char c, bool ignore_case) { return ignore_case && c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }

/* 's 't 're 've 'm 'll 'd: length of the one at text[i], or 0. */
static size_t contraction(const char *text, size_t len, size_t i, bool ignore_case) {
    if (text[i] != '\'' || i + 1 >= len) return 0;
    char a = fold(text[i + 1], ignore_case);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 < len) {
        char b = fold(text[i + 2], ignore_case);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    return 0;
}

static bool is_newline(char c) { return c == '\r' || c == '\n'; }

/* \s+(?!\S) leaves the last space of a run for the word after it; \s+ takes a single
 * space (or the whole run at the end of the text). */
static size_t space_run(const char *text, size_t len, size_t start) {
    size_t end = start, last = start;
    while (end < len) {
        size_t l;
        if (class_at(text, len, end, &l) != CF_CHAR_SPACE) break;
        last = end;
        end += l;
    }
    if (end == len || last == start) return end - start;
    return last - start;
}

size_t cf_gpt2_pretoken(const char *text, size_t len, size_t i) {
    size_t c = contraction(text, len, i, false);
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
    return space_run(text, len, i);
}

static size_t newlines_end(const char *text, size_t len, size_t i) {
    while (i < len && is_newline(text[i])) i++;
    return i;
}

size_t cf_llama3_pretoken(const char *text, size_t len, size_t i) {
    size_t c = contraction(text, len, i, true);
    if (c) return c;
    size_t clen, next_len = 0;
    cf_char_class cls = class_at(text, len, i, &clen);
    cf_char_class next = i + clen < len ? class_at(text, len, i + clen, &next_len) : CF_CHAR_OTHER;
    bool has_next = i + clen < len;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (cls == CF_CHAR_LETTER) return run_end(text, len, i, CF_CHAR_LETTER) - i;
    if (cls != CF_CHAR_NUMBER && !is_newline(text[i]) && has_next && next == CF_CHAR_LETTER)
        return run_end(text, len, i + clen, CF_CHAR_LETTER) - i;
    /* \p{N}{1,3} */
    if (cls == CF_CHAR_NUMBER) {
        size_t end = i + clen;
        for (int k = 1; k < 3 && end < len; k++) {
            size_t l;
            if (class_at(text, len, end, &l) != CF_CHAR_NUMBER) break;
            end += l;
        }
        return end - i;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    if (cls == CF_CHAR_OTHER) return newlines_end(text, len, run_end(text, len, i, CF_CHAR_OTHER)) - i;
    if (text[i] == ' ' && has_next && next == CF_CHAR_OTHER)
        return newlines_end(text, len, run_end(text, len, i + 1, CF_CHAR_OTHER)) - i;
    /* \s*[\r\n]+ : the space run up to and including its last newline, if it has one */
    size_t end = i, after_newline = i;
    while (end < len) {
        size_t l;
        if (class_at(text, len, end, &l) != CF_CHAR_SPACE) break;
        if (is_newline(text[end])) after_newline = end + 1;
        end += l;
    }
    if (after_newline > i) return after_newline - i;
    return space_run(text, len, i);
}
