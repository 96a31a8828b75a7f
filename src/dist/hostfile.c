#include "dist/hostfile.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cf_hostfile_free(cf_host_entry *hosts, int n) {
    for (int i = 0; i < n; i++) {
        free(hosts[i].name);
        free(hosts[i].line);
    }
}

/* slots=TEXT: a decimal in 1..max. */
static bool parse_slots(const char *text, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < 1 || v > max) return false;
    *out = v;
    return true;
}

int cf_hostfile_parse(const char *text, size_t size, const char *path, long cores, long max_slots, cf_host_entry *hosts,
                      cf_error *err) {
    int n = 0, bad = 0;
    for (size_t at = 0; !bad && at < size;) {
        const char *nl = memchr(text + at, '\n', size - at);
        size_t len = nl ? (size_t)(nl - (text + at)) : size - at;
        char *line = cf_xmalloc(len + 1);
        memcpy(line, text + at, len);
        line[len] = '\0';
        at += len + (nl != NULL);
        line[strcspn(line, "#\r")] = '\0';
        char *copy = cf_xstrdup(line), *save, *host = strtok_r(line, " \t", &save);
        if (!host || n == CF_HOSTFILE_MAX_HOSTS) {
            if (host) bad = cf_fail(err, "more than %d hosts in '%s'", CF_HOSTFILE_MAX_HOSTS, path);
            free(copy);
            free(line);
            continue;
        }
        hosts[n] = (cf_host_entry){.name = cf_xstrdup(host), .line = copy, .slots = cores};
        for (char *word; !bad && (word = strtok_r(NULL, " \t", &save));)
            if (strncmp(word, "slots=", 6) == 0 && !parse_slots(word + 6, max_slots, &hosts[n].slots))
                bad = cf_fail(err, "slots=: '%s' is not an integer in 1..%ld (host %s in '%s')", word + 6, max_slots,
                              hosts[n].name, path);
        n++;
        free(line);
    }
    if (!bad && n == 0) bad = cf_fail(err, "no hosts in '%s'", path);
    if (bad) cf_hostfile_free(hosts, n);
    return bad ? -1 : n;
}

int cf_hostfile_read(const char *path, long cores, long max_slots, cf_host_entry *hosts, cf_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return cf_fail(err, "cannot read '%s': %s", path, strerror(errno));
    char *text = NULL;
    size_t size = 0, cap = 0;
    for (;;) {
        if (size == cap) text = cf_xrealloc(text, cap = cap ? 2 * cap : 4096);
        size_t got = fread(text + size, 1, cap - size, f);
        size += got;
        if (got == 0) break;
    }
    bool failed = ferror(f) != 0;
    fclose(f);
    int n = failed ? cf_fail(err, "cannot read '%s': read error", path)
                   : cf_hostfile_parse(text, size, path, cores, max_slots, hosts, err);
    free(text);
    return n;
}
