/* UTF-8 helpers for the tokenizers. */
#ifndef CFORMERS_DATA_UTF8_H
#define CFORMERS_DATA_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the well-formed UTF-8 character at s (1..4), or 0 when the bytes there are
 * malformed (bad lead byte, missing continuation, overlong form, surrogate, > U+10FFFF). */
static inline int cf_utf8_valid_len(const unsigned char *s, size_t avail) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07;
    else return 0;
    if ((size_t)len > avail) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

/* Decodes the character at s (assumed well-formed, or a single byte taken as Latin-1
 * when not) and stores its byte length in *len. */
static inline uint32_t cf_utf8_decode(const unsigned char *s, size_t avail, int *len) {
    int n = cf_utf8_valid_len(s, avail);
    if (n <= 1) {
        *len = 1;
        return s[0];
    }
    uint32_t cp = s[0] & (0xff >> (n + 1));
    for (int i = 1; i < n; i++) cp = (cp << 6) | (s[i] & 0x3f);
    *len = n;
    return cp;
}

#endif
