#include "core/json_text.h"

#include <stdlib.h>
#include <string.h>

#include "cformers/error.h"
#include "data/utf8.h"

bool cf_utf8_is_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int len = cf_utf8_valid_len((const unsigned char *)s + i, n - i);
        if (!len) return false;
        i += (size_t)len;
    }
    return true;
}

json_t *cf_json_text(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    char *clean = cf_xmalloc(3 * n + 1);
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        int len = cf_utf8_valid_len((const unsigned char *)s + i, n - i);
        if (len) memcpy(clean + out, s + i, (size_t)len), out += (size_t)len, i += (size_t)len;
        else memcpy(clean + out, "\xef\xbf\xbd", 3), out += 3, i++;
    }
    j = json_stringn_nocheck(clean, out);
    free(clean);
    return j;
}

json_t *cf_json_text0(const char *s) {
    return s ? cf_json_text(s, strlen(s)) : json_null();
}
