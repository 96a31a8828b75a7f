#include "cli_parse.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/config.h"
#include "cli.h"

int cli_flag_value(const char *cmd, int argc, char **argv, int *i, const char **value) {
    if (*i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", argv[*i]);
    *value = argv[++*i];
    return 0;
}

int cli_parse_long(const char *cmd, const char *flag, const char *text, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max)
        return cli_usage_error(cmd, "%s: '%s' is not an integer in %ld..%ld", flag, text, min, max);
    *out = v;
    return 0;
}

int cli_parse_double(const char *cmd, const char *flag, const char *text, double min, double max, double *out) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= min && v <= max))
        return cli_usage_error(cmd, "%s: '%s' is not a number in %g..%g", flag, text, min, max);
    *out = v;
    return 0;
}

cf_model_source *cli_open_model(const char *cmd, const char *path, cf_dtype dtype) {
    cf_error err = {{0}};
    cf_model_source *s = cf_model_source_open(path, dtype, &err);
    if (!s) fprintf(stderr, "cformers %s: %s\n", cmd, err.msg);
    else if (*cf_model_source_status(s)) fprintf(stderr, "%s\n", cf_model_source_status(s));
    return s;
}

int cli_parse_dtype(const char *cmd, const char *flag, const char *text, cf_dtype *out) {
    if (cf_dtype_parse(text, out) != 0) return cli_usage_error(cmd, "%s: unknown dtype '%s'", flag, text);
    return 0;
}

int cli_check_weight_dtype(const char *cmd, cf_dtype dtype) {
    if (dtype == CF_DTYPE_COUNT || dtype == CF_F32 || dtype == CF_BF16 || dtype == CF_Q8_0 || dtype == CF_Q4_0) return 0;
    return cli_usage_error(cmd, "--dtype must be f32, bf16, q8_0 or q4_0, not %s", cf_dtype_name(dtype));
}

int cli_parse_kv_cache(const char *cmd, const char *text, cf_kv_cache_dtype *out) {
    if (strcmp(text, "f32") == 0) *out = CF_KV_F32;
    else if (strcmp(text, "bf16") == 0) *out = CF_KV_BF16;
    else if (strcmp(text, "q8_0") == 0) *out = CF_KV_Q8_0;
    else return cli_usage_error(cmd, "--kv-cache must be f32, bf16 or q8_0, not '%s'", text);
    return 0;
}

/* Config warnings while a command loads its config (cli_config_warnings_begin/_end). */
static struct {
    const char *cmd;
    bool verbose;
    int inert;             /* "has no effect here" lines held back */
    char source[512];      /* the file of the first of them */
} config_warnings;

static void config_warning(const char *line, void *ctx) {
    (void)ctx;
    const char *inert = strstr(line, ": has no effect here");
    if (inert && !config_warnings.verbose) {
        if (config_warnings.inert++ == 0) {
            size_t n = strcspn(line, ":");
            snprintf(config_warnings.source, sizeof config_warnings.source, "%.*s", (int)n, line);
        }
        return;
    }
    fprintf(stderr, "cformers %s: warning: %s\n", config_warnings.cmd, line);
}

void cli_config_warnings_begin(const char *cmd, bool verbose) {
    config_warnings.cmd = cmd;
    config_warnings.verbose = verbose;
    config_warnings.inert = 0;
    cf_config_set_warning_handler(config_warning, NULL);
}

void cli_config_warnings_end(void) {
    cf_config_set_warning_handler(NULL, NULL);
    if (config_warnings.inert)
        fprintf(stderr,
                "cformers %s: warning: %s: %d key%s ha%s no effect here (Ascend / MindSpore settings and the like); "
                "--verbose lists them\n",
                config_warnings.cmd, config_warnings.source, config_warnings.inert, config_warnings.inert == 1 ? "" : "s",
                config_warnings.inert == 1 ? "s" : "ve");
    config_warnings.inert = 0;
}
