#include "cli_parse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
