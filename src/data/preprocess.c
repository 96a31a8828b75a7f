#include "data/preprocess.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cformers/records.h"
#include "core/file_util.h"
#include "cformers/threads.h"
#include "cformers/tokenizer.h"
#include "core/file_util.h"

enum { BATCH_BYTES = 4 << 20 }; /* text tokenized per parallel round */

typedef struct doc {
    const char *text;
    size_t len;
    int32_t *ids;
    long n_ids;
} doc;

typedef struct run {
    const cf_preprocess_options *opt;
    cf_tokenizer *tok;
    cf_record_writer *train, *valid;
    cf_preprocess_result *res;
    doc *docs;
    size_t n_docs, cap_docs, batch_bytes;
    uint64_t total_bytes;
    double start, last_report;
} run;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool goes_to_valid(const cf_preprocess_options *opt, uint64_t index) {
    uint64_t z = opt->split_seed + (index + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53 < opt->valid_fraction;
}

static void tokenize_task(void *ctx, int task, int thread) {
    (void)thread;
    run *r = ctx;
    doc *d = &r->docs[task];
    d->n_ids = cf_tokenizer_encode(r->tok, d->text, d->len, r->opt->add_bos, &d->ids, NULL);
}

static void report(run *r) {
    double t = now();
    if (!r->opt->progress || t - r->last_report < 1.0) return;
    r->last_report = t;
    double mb = (double)r->res->bytes / 1e6;
    fprintf(stderr, "preprocess: %5.1f%%  %.1f of %.1f MB, %llu documents, %llu tokens, %.1f MB/s\n",
            r->total_bytes ? 100.0 * (double)r->res->bytes / (double)r->total_bytes : 100.0, mb,
            (double)r->total_bytes / 1e6, (unsigned long long)r->res->documents,
            (unsigned long long)(r->res->train_tokens + r->res->valid_tokens), mb / (t - r->start + 1e-9));
}

/* Tokenizes the queued documents in parallel, then writes them in order. */
static int flush_batch(run *r, cf_error *err) {
    cf_parallel_for((int)r->n_docs, tokenize_task, r);
    int rc = 0;
    for (size_t i = 0; i < r->n_docs; i++) {
        doc *d = &r->docs[i];
        uint64_t index = r->res->documents++;
        r->res->bytes += d->len;
        bool has_text = d->n_ids > (r->opt->add_bos && cf_tokenizer_bos(r->tok) >= 0 ? 1 : 0);
        if (rc == 0 && has_text) {
            bool valid = goes_to_valid(r->opt, index);
            rc = cf_record_writer_add(valid ? r->valid : r->train, d->ids, (size_t)d->n_ids, err);
            *(valid ? &r->res->valid_tokens : &r->res->train_tokens) += (uint64_t)d->n_ids;
            *(valid ? &r->res->valid_docs : &r->res->train_docs) += 1;
        }
        free(d->ids);
    }
    r->n_docs = 0;
    r->batch_bytes = 0;
    report(r);
    return rc;
}

static int add_doc(run *r, const char *text, size_t len, cf_error *err) {
    if (r->n_docs == r->cap_docs) {
        r->cap_docs = r->cap_docs * 2 + 256;
        r->docs = cf_xrealloc(r->docs, r->cap_docs * sizeof *r->docs);
    }
    r->docs[r->n_docs++] = (doc){.text = text, .len = len};
    r->batch_bytes += len;
    return r->batch_bytes >= BATCH_BYTES ? flush_batch(r, err) : 0;
}

static bool blank_line(const char *p, const char *end) {
    for (; p < end && *p != '\n'; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r') return false;
    return true;
}

/* Blocks of lines separated by blank lines; a document keeps its inner newlines. */
static int split_text(run *r, const char *text, size_t size, cf_error *err) {
    const char *p = text, *end = text + size, *doc_start = NULL, *doc_end = NULL;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl : end;
        if (blank_line(p, line_end)) {
            if (doc_start && add_doc(r, doc_start, (size_t)(doc_end - doc_start), err) != 0) return -1;
            doc_start = NULL;
        } else {
            if (!doc_start) doc_start = p;
            doc_end = line_end;
        }
        p = nl ? nl + 1 : end;
    }
    return doc_start ? add_doc(r, doc_start, (size_t)(doc_end - doc_start), err) : 0;
}

/* One JSON object per line; the text field is unescaped in place (never longer than its
 * escaped form), so documents point into the file buffer like plain text ones. */
static int split_jsonl(run *r, const char *path, char *text, size_t size, cf_error *err) {
    const char *key = r->opt->text_key ? r->opt->text_key : "text";
    char *p = text, *end = text + size;
    for (long line = 1; p < end; line++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *line_end = nl ? nl : end;
        if (!blank_line(p, line_end)) {
            json_error_t jerr;
            json_t *obj = json_loadb(p, (size_t)(line_end - p), 0, &jerr);
            json_t *field = json_object_get(obj, key);
            if (!json_is_string(field)) {
                json_decref(obj);
                return cf_fail(err, "%s: line %ld: %s", path, line,
                               obj ? "no string field named by --text-key" : jerr.text);
            }
            size_t len = json_string_length(field);
            memcpy(p, json_string_value(field), len);
            json_decref(obj);
            if (add_doc(r, p, len, err) != 0) return -1;
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

static bool is_jsonl(const char *path) {
    size_t n = strlen(path);
    return n >= 6 && strcmp(path + n - 6, ".jsonl") == 0;
}

static int prepare_output(const char *dir, cf_error *err) {
    if (cf_make_dirs(dir, err) != 0) return -1;
    static const char *const splits[] = {"train", "valid"};
    for (int s = 0; s < 2; s++) {
        char **paths;
        int n;
        if (cf_record_list(dir, splits[s], &paths, &n, err) != 0) return -1;
        for (int i = 0; i < n; i++) free(paths[i]);
        free(paths);
        if (n) return cf_fail(err, "%s: already holds %s records; choose an empty or new directory", dir, splits[s]);
    }
    return 0;
}

int cf_preprocess(const cf_preprocess_options *opt, cf_preprocess_result *res, cf_error *err) {
    memset(res, 0, sizeof *res);
    if (opt->valid_fraction < 0 || opt->valid_fraction >= 1)
        return cf_fail(err, "valid fraction %g is outside [0, 1)", opt->valid_fraction);
    run r = {.opt = opt, .res = res, .start = now()};
    for (int i = 0; i < opt->n_inputs; i++) {
        struct stat st;
        if (stat(opt->inputs[i], &st) != 0) return cf_fail(err, "%s: %s", opt->inputs[i], strerror(errno));
        r.total_bytes += (uint64_t)st.st_size;
    }
    if (prepare_output(opt->output_dir, err) != 0) return -1;
    r.tok = cf_tokenizer_load(opt->tokenizer, err);
    if (!r.tok) return -1;
    int eos = cf_tokenizer_eos(r.tok);
    if (eos < 0) {
        cf_tokenizer_free(r.tok);
        return cf_fail(err, "%s: the tokenizer has no end-of-text token to put between documents", opt->tokenizer);
    }
    cf_record_options ro = {.vocab_size = cf_tokenizer_vocab_size(r.tok), .eos_id = eos,
                            .tokenizer_hash = cf_tokenizer_fingerprint(r.tok), .zstd = opt->zstd,
                            .shard_tokens = opt->shard_tokens};
    r.train = cf_record_writer_open(opt->output_dir, "train", &ro, err);
    r.valid = r.train ? cf_record_writer_open(opt->output_dir, "valid", &ro, err) : NULL;
    int saved_threads = cf_num_threads();
    int rc = r.valid ? 0 : -1;
    if (rc == 0 && opt->workers > 0) rc = cf_set_num_threads(opt->workers, err);
    for (int i = 0; rc == 0 && i < opt->n_inputs; i++) {
        size_t size;
        char *text = cf_map_file(opt->inputs[i], &size, err);
        if (!text) {
            rc = -1;
            break;
        }
        rc = is_jsonl(opt->inputs[i]) ? split_jsonl(&r, opt->inputs[i], text, size, err) : split_text(&r, text, size, err);
        if (rc == 0) rc = flush_batch(&r, err); /* documents point into `text` */
        cf_unmap_file(text, size);
    }
    cf_set_num_threads(saved_threads, NULL); /* as many as ran before */
    if (rc == 0 && res->train_tokens + res->valid_tokens == 0)
        rc = cf_fail(err, "%s: no documents with any text in the input", opt->n_inputs ? opt->inputs[0] : "(no input)");
    if (rc == 0 && cf_record_writer_close(r.train, &res->train_shards, err) != 0) rc = -1;
    else if (r.train && rc != 0) cf_record_writer_discard(r.train);
    if (rc == 0 && cf_record_writer_close(r.valid, &res->valid_shards, err) != 0) rc = -1;
    else if (r.valid && rc != 0) cf_record_writer_discard(r.valid);
    for (size_t i = 0; i < r.n_docs; i++) free(r.docs[i].ids);
    free(r.docs);
    cf_tokenizer_free(r.tok);
    res->seconds = now() - r.start;
    return rc;
}
