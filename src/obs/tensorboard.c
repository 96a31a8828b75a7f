/* TensorBoard event files: TFRecord framing around hand-encoded Event protobufs. */
#include "obs/tensorboard.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "cformers/checkpoint.h"
#include "core/checked.h"
#include "core/file_util.h"

struct cf_tb_writer {
    FILE *f;
    char path[4096];
    bool failed;
};

/* TFRecord's CRC mask, so a CRC of data that holds CRCs is not trivially zero. */
static uint32_t masked_crc(const void *data, size_t n) {
    uint32_t crc = cf_crc32c(0, data, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding: just the fields an Event with scalars needs ---- */

typedef struct pb {
    unsigned char buf[512];
    size_t n;
} pb;

static void put_byte(pb *b, unsigned char c) {
    if (b->n < sizeof b->buf) b->buf[b->n] = c;
    b->n++;
}

static void put_varint(pb *b, uint64_t v) {
    for (; v >= 0x80; v >>= 7) put_byte(b, (unsigned char)(v | 0x80));
    put_byte(b, (unsigned char)v);
}

static void put_fixed(pb *b, const void *v, size_t bytes) { /* little-endian hosts (x86-64) */
    for (size_t i = 0; i < bytes; i++) put_byte(b, ((const unsigned char *)v)[i]);
}

static void put_bytes(pb *b, int field, const void *data, size_t n) {
    put_varint(b, (uint64_t)field << 3 | 2);
    put_varint(b, n);
    for (size_t i = 0; i < n; i++) put_byte(b, ((const unsigned char *)data)[i]);
}

enum { WIRE_VARINT = 0, WIRE_64 = 1, WIRE_BYTES = 2, WIRE_32 = 5 };
/* Event: wall_time 1 (double), step 2 (int64), file_version 3 (string), summary 5.
 * Summary: value 1. Summary.Value: tag 1 (string), simple_value 2 (float). */
enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5 };
enum { SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE = 2 };

static void put_event_head(pb *b, double wall_time, int64_t step) {
    put_varint(b, EVENT_WALL_TIME << 3 | WIRE_64);
    put_fixed(b, &wall_time, 8);
    put_varint(b, EVENT_STEP << 3 | WIRE_VARINT);
    put_varint(b, (uint64_t)step);
}

static int write_record(cf_tb_writer *w, const pb *b, cf_error *err) {
    if (w->failed) return cf_fail(err, "%s: an earlier write failed", w->path);
    if (b->n > sizeof b->buf) return cf_fail(err, "%s: event of %zu bytes is too long", w->path, b->n);
    uint64_t len = b->n;
    uint32_t len_crc = masked_crc(&len, 8), data_crc = masked_crc(b->buf, b->n);
    if (fwrite(&len, 8, 1, w->f) != 1 || fwrite(&len_crc, 4, 1, w->f) != 1 ||
        fwrite(b->buf, 1, b->n, w->f) != b->n || fwrite(&data_crc, 4, 1, w->f) != 1 || fflush(w->f) != 0) {
        w->failed = true;
        return cf_fail(err, "%s: write failed: %s", w->path, strerror(errno));
    }
    return 0;
}

static double now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

cf_tb_writer *cf_tb_open(const char *dir, cf_error *err) {
    cf_tb_writer *w = cf_xcalloc(1, sizeof *w);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    double t = now();
    snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)t, host, (int)getpid());
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        cf_fail(err, "%s: cannot create the TensorBoard event file: %s", w->path, strerror(errno));
        free(w);
        return NULL;
    }
    pb b = {.n = 0};
    put_event_head(&b, t, 0);
    put_bytes(&b, EVENT_FILE_VERSION, "brain.Event:2", 13);
    if (write_record(w, &b, err) != 0) {
        fclose(w->f);
        free(w);
        return NULL;
    }
    return w;
}

int cf_tb_close(cf_tb_writer *w, cf_error *err) {
    if (!w) return 0;
    bool failed = w->failed || fclose(w->f) != 0;
    int rc = failed ? cf_fail(err, "%s: write failed", w->path) : 0;
    free(w);
    return rc;
}

const char *cf_tb_path(const cf_tb_writer *w) { return w->path; }

int cf_tb_scalar(cf_tb_writer *w, const char *tag, int64_t step, double wall_time, float value, cf_error *err) {
    size_t tag_len = strnlen(tag, sizeof ((cf_tb_scalar_event *)0)->tag - 1);
    pb v = {.n = 0}, s = {.n = 0}, e = {.n = 0};
    put_bytes(&v, VALUE_TAG, tag, tag_len);
    put_varint(&v, VALUE_SIMPLE << 3 | WIRE_32);
    put_fixed(&v, &value, 4);
    put_bytes(&s, SUMMARY_VALUE, v.buf, v.n);
    put_event_head(&e, wall_time, step);
    put_bytes(&e, EVENT_SUMMARY, s.buf, s.n);
    return write_record(w, &e, err);
}

/* ---- reading ---- */

typedef struct reader {
    const unsigned char *p, *end;
} reader;

static bool get_varint(reader *r, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64 && r->p < r->end; shift += 7) {
        unsigned char c = *r->p++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return true;
    }
    return false;
}

/* The next field: its number, wire type, and for WIRE_BYTES the bytes, for the fixed
 * types the value's bytes, for a varint the value. False when the message is malformed. */
static bool next_field(reader *r, int *field, int *wire, reader *bytes, uint64_t *varint) {
    uint64_t key;
    if (!get_varint(r, &key) || key >> 3 == 0 || key >> 3 > 1u << 29) return false;
    *field = (int)(key >> 3);
    *wire = (int)(key & 7);
    size_t len;
    switch (*wire) {
    case WIRE_VARINT: return get_varint(r, varint);
    case WIRE_64: len = 8; break;
    case WIRE_32: len = 4; break;
    case WIRE_BYTES: {
        uint64_t n;
        if (!get_varint(r, &n)) return false;
        len = (size_t)n;
        if (n > (uint64_t)(r->end - r->p)) return false;
        break;
    }
    default: return false;
    }
    if (len > (size_t)(r->end - r->p)) return false;
    *bytes = (reader){r->p, r->p + len};
    r->p += len;
    return true;
}

/* Adds the scalars of one Event (or notes its file_version) to the list. */
static bool parse_event(reader r, cf_tb_scalar_event **events, size_t *n, size_t *cap, bool *version) {
    double wall_time = 0.0;
    int64_t step = 0;
    int field, wire;
    reader bytes;
    uint64_t varint = 0;
    size_t first = *n;
    while (r.p < r.end) {
        if (!next_field(&r, &field, &wire, &bytes, &varint)) return false;
        if (field == EVENT_WALL_TIME && wire == WIRE_64) memcpy(&wall_time, bytes.p, 8);
        if (field == EVENT_STEP && wire == WIRE_VARINT) step = (int64_t)varint;
        if (field == EVENT_FILE_VERSION && wire == WIRE_BYTES) *version = true;
        if (field != EVENT_SUMMARY || wire != WIRE_BYTES) continue;
        reader summary = bytes;
        while (summary.p < summary.end) {
            reader value;
            if (!next_field(&summary, &field, &wire, &value, &varint)) return false;
            if (field != SUMMARY_VALUE || wire != WIRE_BYTES) continue;
            cf_tb_scalar_event ev = {0};
            bool simple = false;
            while (value.p < value.end) {
                if (!next_field(&value, &field, &wire, &bytes, &varint)) return false;
                if (field == VALUE_TAG && wire == WIRE_BYTES) {
                    size_t len = (size_t)(bytes.end - bytes.p);
                    if (len >= sizeof ev.tag) len = sizeof ev.tag - 1;
                    memcpy(ev.tag, bytes.p, len);
                } else if (field == VALUE_SIMPLE && wire == WIRE_32) {
                    memcpy(&ev.value, bytes.p, 4);
                    simple = true;
                }
            }
            if (!simple) continue;
            if (*n == *cap) {
                *cap = *cap ? 2 * *cap : 64;
                *events = cf_xrealloc(*events, sizeof **events * *cap);
            }
            (*events)[(*n)++] = ev;
        }
    }
    for (size_t i = first; i < *n; i++) { /* wall_time and step may follow the summary */
        (*events)[i].wall_time = wall_time;
        (*events)[i].step = step;
    }
    return true;
}

int cf_tb_read(const char *path, cf_tb_scalar_event **events, size_t *n, cf_error *err) {
    size_t size;
    unsigned char *data = cf_read_file(path, &size, err);
    if (!data) return -1;
    *events = NULL;
    *n = 0;
    size_t cap = 0, off = 0;
    bool version = false;
    int rc = 0;
    for (int record = 0; off < size && rc == 0; record++) {
        uint64_t len;
        uint32_t len_crc, data_crc;
        if (!cf_fits(off, 12, size)) {
            rc = cf_fail(err, "%s: offset %zu: record %d is cut short in its header", path, off, record);
            break;
        }
        memcpy(&len, data + off, 8);
        memcpy(&len_crc, data + off + 8, 4);
        if (len_crc != masked_crc(&len, 8)) {
            rc = cf_fail(err, "%s: offset %zu: record %d's length CRC does not match", path, off, record);
        } else if (!cf_fits(off + 12, len, size) || !cf_fits(off + 12 + len, 4, size)) {
            rc = cf_fail(err, "%s: offset %zu: record %d of %llu bytes runs past the end of the file", path, off,
                         record, (unsigned long long)len);
        } else {
            memcpy(&data_crc, data + off + 12 + len, 4);
            reader r = {data + off + 12, data + off + 12 + len};
            if (data_crc != masked_crc(r.p, (size_t)len))
                rc = cf_fail(err, "%s: offset %zu: record %d's data CRC does not match", path, off, record);
            else if (!parse_event(r, events, n, &cap, &version))
                rc = cf_fail(err, "%s: offset %zu: record %d is not a well-formed Event", path, off, record);
            else if (record == 0 && !version)
                rc = cf_fail(err, "%s: the first record is not the file_version event", path);
            off += 12 + (size_t)len + 4;
        }
    }
    free(data);
    if (rc == 0 && !version) rc = cf_fail(err, "%s: empty event file", path);
    if (rc != 0) {
        free(*events);
        *events = NULL;
        *n = 0;
    }
    return rc;
}
