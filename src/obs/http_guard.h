/* A libmicrohttpd daemon that slow or hostile clients cannot lock out (`cformers serve`):
 * connections are accepted here and handed to libmicrohttpd (one thread each), so that
 *   - past max_connections a new connection is answered 503 (JSON) and closed;
 *   - a connection with no request under way is closed after idle_timeout_s (keep-alive,
 *     or a request line that never ends), a request whose headers are not all in within
 *     header_timeout_s of its request line, or whose body stalls for idle_timeout_s, is
 *     answered 408 (JSON) and closed;
 *   - the request line and headers are bounded by max_header_bytes (libmicrohttpd's
 *     per-connection memory);
 *   - a body shorter than its Content-Length followed by a half-close is answered 400 (JSON);
 *   - every status the layer answers itself, and those libmicrohttpd answers on its own
 *     (malformed requests: see docs/serving.md), is told to `count`;
 *   - stopping is graceful: no new connection, idle ones closed, requests under way given
 *     a deadline (cf_http_guard_drain).
 * The handler and completed callbacks are libmicrohttpd's, called as it calls them. */
#ifndef CFORMERS_OBS_HTTP_GUARD_H
#define CFORMERS_OBS_HTTP_GUARD_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "cformers/error.h"

typedef struct cf_http_limits {
    unsigned max_connections;  /* open connections at most (default 1024) */
    size_t max_header_bytes;   /* request line and headers at most (default 16 KiB) */
    unsigned header_timeout_s; /* request line to the end of the headers (default 10) */
    unsigned idle_timeout_s;   /* no request under way, or a body stalled (default 30) */
    size_t max_body_bytes;     /* a Content-Length past this is answered 413 before the body is read (0: none) */
} cf_http_limits;

typedef struct cf_http_guard cf_http_guard;

/* Listens on host:port (host NULL = 127.0.0.1, port 0 = any free one, told in *bound_port);
 * `count(cls, status)` is told every status answered (may be NULL). NULL with err naming the
 * address when it cannot listen there. */
cf_http_guard *cf_http_guard_start(const char *host, int port, const cf_http_limits *lim,
                                   MHD_AccessHandlerCallback handler, MHD_RequestCompletedCallback completed,
                                   void (*count)(void *cls, unsigned status), void *cls, int *bound_port,
                                   cf_error *err);
/* Stops accepting and closes the connections with no request under way; new requests on
 * open connections are answered 503. Returns the requests under way. */
long cf_http_guard_quiesce(cf_http_guard *g);
/* Waits up to timeout_ms for the requests under way to end: true when none is left. */
bool cf_http_guard_drain(cf_http_guard *g, int timeout_ms);
/* True once cf_http_guard_quiesce was called (a handler may then end what it is doing). */
bool cf_http_guard_stopping(const cf_http_guard *g);
/* Closes every connection and frees the daemon. */
void cf_http_guard_stop(cf_http_guard *g);

/* OpenAI's error shape for a status the HTTP layer answers: {"error": {"message", "type",
 * "param": null, "code"}} into buf (message: plain text without quotes or backslashes). */
int cf_http_error_json(char *buf, size_t cap, unsigned status, const char *message);

#endif
