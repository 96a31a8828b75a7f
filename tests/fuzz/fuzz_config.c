/* YAML run config plus dotted overrides: part 0 is the YAML text, each line of part 1 an
 * override. A config that validates must print as YAML that parses back to the same
 * config (`config show` and the run directory's config.yaml rely on it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/config.h"
#include "fuzz_util.h"

static char *dup_part(fuzz_part p) {
    char *s = malloc(p.size + 1);
    memcpy(s, p.data, p.size);
    s[p.size] = 0;
    return s;
}

static void check_round_trip(const cf_config *cfg) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    cf_config_print_yaml(cfg, out);
    fclose(out);
    cf_config back;
    cf_error err;
    cf_config_defaults(&back);
    if (cf_config_parse_string(text, "printed", &back, &err) != 0 || cf_config_validate(&back, &err) != 0) {
        fprintf(stderr, "printed config does not load back: %s\n%s", err.msg, text);
        abort();
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part parts[2];
    int n = fuzz_split(data, size, parts, 2);
    char *yaml = dup_part(parts[0]);
    char *overrides = n > 1 ? dup_part(parts[1]) : NULL;
    cf_config cfg;
    cf_error err;
    cf_config_defaults(&cfg);
    int rc = cf_config_parse_string(yaml, "fuzz.yaml", &cfg, &err);
    for (char *line = overrides, *next; rc == 0 && line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        rc = cf_config_apply_override(&cfg, line, &err);
    }
    if (rc == 0 && cf_config_validate(&cfg, &err) == 0) {
        cf_memory_estimate est;
        cf_config_memory_estimate(&cfg, &est);
        check_round_trip(&cfg);
    }
    free(yaml);
    free(overrides);
    return 0;
}
