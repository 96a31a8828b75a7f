#include "train/checkpoint_files.h"

#include "cformers/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cf_checkpoint_prefix(const cf_config *cfg) {
    const char *p = cfg->callbacks.checkpoint_monitor.prefix;
    return *p ? p : "checkpoint";
}

void cf_checkpoint_file_name(char *buf, size_t size, const char *dir, const char *prefix, int64_t step) {
    snprintf(buf, size, "%s/%s_step%" PRId64 ".ckpt", dir, prefix, step);
}

void cf_checkpoint_peft_dir(char *buf, size_t size, const char *checkpoint_path) {
    snprintf(buf, size, "%s", checkpoint_path);
    size_t n = strlen(buf);
    if (n > 5 && strcmp(buf + n - 5, ".ckpt") == 0) buf[n - 5] = 0;
    n = strlen(buf);
    snprintf(buf + n, size - n, ".peft");
}

/* Removes a checkpoint's PEFT directory (its two files), when there is one. */
static void remove_peft_dir(const char *checkpoint_path) {
    char dir[4096], file[4200];
    cf_checkpoint_peft_dir(dir, sizeof dir, checkpoint_path);
    const char *files[] = {"adapter_config.json", "adapter_model.safetensors"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(file, sizeof file, "%s/%s", dir, files[i]);
        unlink(file);
    }
    rmdir(dir);
}

/* The step of a file named PREFIX_stepN.ckpt, or -1. */
static int64_t step_of(const char *file, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(file, prefix, n) != 0 || strncmp(file + n, "_step", 5) != 0) return -1;
    char *end;
    long long step = strtoll(file + n + 5, &end, 10);
    return end != file + n + 5 && strcmp(end, ".ckpt") == 0 ? step : -1;
}

/* Steps of the run's checkpoints, ascending; returns the count (*steps malloc'd). */
static size_t list_steps(const char *dir, const char *prefix, int64_t **steps) {
    size_t n = 0, cap = 16;
    *steps = cf_xmalloc(cap * sizeof **steps);
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t s = step_of(e->d_name, prefix);
        if (s < 0) continue;
        if (n == cap) *steps = cf_xrealloc(*steps, (cap *= 2) * sizeof **steps);
        size_t i = n++;
        for (; i > 0 && (*steps)[i - 1] > s; i--) (*steps)[i] = (*steps)[i - 1];
        (*steps)[i] = s;
    }
    closedir(d);
    return n;
}

int cf_checkpoint_newest_valid(const char *dir, const char *prefix, char *buf, size_t size, FILE *warnings,
                               cf_error *err) {
    int64_t *steps;
    size_t n = list_steps(dir, prefix, &steps), skipped = 0;
    for (; skipped < n; skipped++) {
        cf_checkpoint_file_name(buf, size, dir, prefix, steps[n - 1 - skipped]);
        cf_error why = {{0}};
        cf_ckpt *c = cf_ckpt_open(buf, true, &why);
        if (c) {
            cf_ckpt_close(c);
            break;
        }
        if (warnings) fprintf(warnings, "cformers: warning: passing over a checkpoint that does not load: %s\n", why.msg);
    }
    free(steps);
    if (skipped < n) return 0;
    if (n) return cf_fail(err, "%s: none of its %zu %s_step*.ckpt checkpoints is valid: nothing to resume from", dir, n, prefix);
    return cf_fail(err, "%s: no %s_step*.ckpt checkpoint to resume from", dir, prefix);
}

size_t cf_checkpoint_count(const char *dir, const char *prefix) {
    int64_t *steps;
    size_t n = list_steps(dir, prefix, &steps);
    free(steps);
    return n;
}

/* Deletes the checkpoints of dir but the newest `keep`, those whose step is a multiple
 * of `every` (0: none is) and the bases that kept differential checkpoints need. */
static void remove_older(const char *dir, const char *prefix, size_t keep, int64_t every) {
    int64_t *steps;
    size_t n = list_steps(dir, prefix, &steps);
    bool *kept = cf_xcalloc(n + 1, sizeof *kept);
    char path[4096], base[4096], name[4096];
    for (size_t i = 0; i < n; i++) kept[i] = i + keep >= n || (every > 0 && steps[i] % every == 0);
    for (size_t i = n; keep > 0 && i-- > 0;) { /* newest first: a kept delta keeps its (older) base */
        if (!kept[i]) continue;
        cf_checkpoint_file_name(path, sizeof path, dir, prefix, steps[i]);
        cf_error ignored = {{0}};
        if (cf_ckpt_base_name(path, base, sizeof base, &ignored) != 0 || !*base) continue;
        for (size_t j = 0; j < i; j++) {
            cf_checkpoint_file_name(name, sizeof name, dir, prefix, steps[j]);
            if (strcmp(strrchr(name, '/') + 1, base) == 0) kept[j] = true;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (kept[i]) continue;
        cf_checkpoint_file_name(path, sizeof path, dir, prefix, steps[i]);
        unlink(path);
        remove_peft_dir(path);
    }
    free(kept);
    free(steps);
}

void cf_checkpoint_prune(const char *dir, const char *prefix, int64_t keep, int64_t every) {
    if (keep > 0) remove_older(dir, prefix, (size_t)keep, every);
}

void cf_checkpoint_remove_all(const char *dir, const char *prefix) { remove_older(dir, prefix, 0, 0); }

