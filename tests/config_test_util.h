/* Helpers shared by the config tests. */
#ifndef CFORMERS_CONFIG_TEST_UTIL_H
#define CFORMERS_CONFIG_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "cformers/config.h"

/* cfg as `config show` and a run's config.yaml print it; free() the text. */
static inline char *config_yaml_text(const cf_config *cfg) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    cf_config_print_yaml(cfg, out);
    fclose(out);
    return text;
}

#endif
