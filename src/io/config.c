/* Resolving a config: defaults, then a file or preset, then overrides, then the derived
 * values and the consistency checks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file_util.h"
#include "io/config_internal.h"
#include "models/presets.h"

static cf_config_warning_fn warning_fn;
static void *warning_ctx;

void cf_config_set_warning_handler(cf_config_warning_fn fn, void *ctx) {
    warning_fn = fn;
    warning_ctx = ctx;
}

void cf_config_warn(const char *line) {
    if (warning_fn)
        warning_fn(line, warning_ctx);
    else
        fprintf(stderr, "cformers: warning: %s\n", line);
}

void cf_config_defaults(cf_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < cf_config_key_count; i++) cf_config_key_set_default(&cf_config_keys[i], cfg);
}

static bool is_directory(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Sets one key from "path=value" (a leading "--" is allowed). `preset` names the preset the
 * assignment belongs to, or is NULL for a command-line override; errors say which. */
static int assign(cf_config *cfg, const char *assignment, const char *preset, cf_config_origins *origins, cf_error *err) {
    char where[300];
    if (preset)
        snprintf(where, sizeof where, "%s", preset);
    else
        snprintf(where, sizeof where, "override '%s'", assignment);
    const char *text = strncmp(assignment, "--", 2) == 0 ? assignment + 2 : assignment;
    const char *eq = strchr(text, '=');
    if (!eq) return cf_fail(err, "%s: expected key.path=value", where);
    char path[256];
    size_t n = (size_t)(eq - text);
    if (n >= sizeof path) return cf_fail(err, "%s: key path too long", where);
    memcpy(path, text, n);
    path[n] = '\0';
    int index = cf_config_key_find(path);
    if (index < 0) {
        const char *hint = err ? cf_config_key_suggest(path) : NULL; /* only for a message someone reads */
        return cf_fail(err, "%s: %s: %s%s%s%s", where, path,
                       cf_config_is_section(path) ? "is a section, not a key" : "unknown key",
                       hint ? " (did you mean " : "", hint ? hint : "", hint ? "?)" : "");
    }
    if (cf_config_key_set(&cf_config_keys[index], cfg, eq + 1, false, err) < 0)
        return cf_fail_prefix(err, "%s: %s: ", where, path);
    if (origins) {
        origins->override[index] = preset ? NULL : assignment;
        origins->line[index] = preset ? -1 : 0;
    }
    return 0;
}

void cf_config_expand_data_dir(const char *assignment, char *out, size_t size) {
    const char *at = strstr(assignment, CF_PRESET_DATA), *data = getenv("CFORMERS_DATA_DIR");
    if (!at) {
        snprintf(out, size, "%s", assignment);
        return;
    }
    snprintf(out, size, "%.*s%s%s", (int)(at - assignment), assignment, data && *data ? data : "../shared/data",
             at + strlen(CF_PRESET_DATA));
}

static int apply_preset(const cf_preset *preset, const char *source, cf_config *cfg, cf_config_origins *origins,
                        cf_error *err) {
    for (int part = 0; part < CF_PRESET_MAX_PARTS && preset->parts[part]; part++)
        for (const char *const *a = preset->parts[part]; *a; a++) {
            char expanded[2 * CF_CONFIG_PATH_MAX];
            cf_config_expand_data_dir(*a, expanded, sizeof expanded);
            if (assign(cfg, expanded, source, origins, err) < 0) return -1;
        }
    return 0;
}

static const char *closest_preset(const char *name) {
    const char *best = NULL;
    int best_distance = (int)strlen(name) / 3 + 2;
    for (int i = 0; i < cf_config_preset_count(); i++) {
        int d = cf_edit_distance(name, cf_config_preset_name(i), best_distance - 1);
        if (d < best_distance) {
            best_distance = d;
            best = cf_config_preset_name(i);
        }
    }
    return best;
}

/* The file or preset named by `path_or_preset`, over what cfg holds. */
static int load_source(const char *path_or_preset, cf_config *cfg, cf_config_origins *origins, char *source_buf,
                       size_t source_cap, cf_error *err) {
    origins->source = source_buf;
    if (is_directory(path_or_preset)) {
        /* A Hugging Face model directory: its config.json, as MindFormers' pretrained_model_dir. */
        char json[CF_CONFIG_PATH_MAX + 16], text[2 * CF_CONFIG_PATH_MAX + 64];
        snprintf(json, sizeof json, "%s/config.json", path_or_preset);
        if (access(json, F_OK) != 0)
            return cf_fail(err, "%s: is a directory without a config.json, not a config file", path_or_preset);
        size_t n = 0;
        n += (size_t)snprintf(text, sizeof text, "pretrained_model_dir: '");
        for (const char *c = path_or_preset; *c && n + 3 < sizeof text; c++) {
            if (*c == '\'') text[n++] = '\'';
            text[n++] = *c;
        }
        snprintf(text + n, sizeof text - n, "'\n");
        snprintf(source_buf, source_cap, "%s", json);
        return cf_config_parse_yaml(text, strlen(text), source_buf, cfg, origins, err);
    }
    if (access(path_or_preset, F_OK) == 0) {
        size_t len;
        char *text = (char *)cf_read_file(path_or_preset, &len, err);
        if (!text) return -1;
        snprintf(source_buf, source_cap, "%s", path_or_preset);
        int rc = cf_config_parse_yaml(text, len, source_buf, cfg, origins, err);
        free(text);
        return rc;
    }
    const cf_preset *preset = cf_preset_find(path_or_preset);
    if (preset) {
        snprintf(source_buf, source_cap, "%s (preset)", path_or_preset);
        return apply_preset(preset, source_buf, cfg, origins, err);
    }
    const char *hint = err ? closest_preset(path_or_preset) : NULL;
    return cf_fail(err, "%s: no such file and no such preset%s%s%s (`cformers config list` shows the presets)",
                   path_or_preset, hint ? " (did you mean " : "", hint ? hint : "", hint ? "?)" : "");
}

int cf_config_apply_override(cf_config *cfg, const char *assignment, cf_error *err) {
    return assign(cfg, assignment, NULL, NULL, err);
}

bool cf_config_is_override_arg(const char *arg) {
    if (strncmp(arg, "--", 2) != 0) return false;
    const char *name = arg + 2, *eq = strchr(name, '=');
    if (!eq) return false;
    /* A dotted name, or a top-level key such as --seed=3 or --output_dir=out. */
    char path[256];
    size_t n = (size_t)(eq - name);
    if (memchr(name, '.', n)) return true;
    if (n >= sizeof path) return false;
    memcpy(path, name, n);
    path[n] = '\0';
    return cf_config_key_find(path) >= 0;
}

int cf_config_load_with_overrides(const char *path_or_preset, const char *const *overrides, int n_overrides,
                                  cf_config *cfg, cf_error *err) {
    cf_config_origins *origins = cf_xcalloc(1, sizeof *origins);
    char source[CF_CONFIG_PATH_MAX + 16];
    cf_config_defaults(cfg);
    int rc = load_source(path_or_preset, cfg, origins, source, sizeof source, err);
    for (int i = 0; rc == 0 && i < n_overrides; i++) rc = assign(cfg, overrides[i], NULL, origins, err);
    if (rc == 0) {
        cf_config_raise_precision(cfg, origins);
        cf_config_fill_derived(cfg);
        rc = cf_config_check(cfg, origins, err);
    }
    free(origins);
    return rc;
}

int cf_config_load_for_run(const char *path_or_preset, const char *const *overrides, int n_overrides, cf_config *cfg,
                           cf_error *err) {
    cf_config_origins *origins = cf_xcalloc(1, sizeof *origins);
    char source[CF_CONFIG_PATH_MAX + 16];
    cf_config_defaults(cfg);
    int rc = load_source(path_or_preset, cfg, origins, source, sizeof source, err);
    for (int i = 0; rc == 0 && i < n_overrides; i++) rc = assign(cfg, overrides[i], NULL, origins, err);
    if (rc == 0 && cfg->load_checkpoint[0]) rc = cf_config_adopt_checkpoint(cfg, origins, err);
    if (rc == 0) {
        cf_config_raise_precision(cfg, origins);
        cf_config_fill_derived(cfg);
        rc = cf_config_check(cfg, origins, err);
    }
    if (rc == 0) rc = cf_config_check_run(cfg, origins, err);
    free(origins);
    return rc;
}

int cf_config_load(const char *path_or_preset, cf_config *cfg, cf_error *err) {
    return cf_config_load_with_overrides(path_or_preset, NULL, 0, cfg, err);
}

int cf_config_parse_string(const char *yaml_text, const char *source_name, cf_config *cfg, cf_error *err) {
    return cf_config_parse_yaml(yaml_text, strlen(yaml_text), source_name, cfg, NULL, err);
}

int cf_config_validate(const cf_config *cfg, cf_error *err) { return cf_config_check(cfg, NULL, err); }
