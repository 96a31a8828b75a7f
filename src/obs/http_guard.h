/* A libmicrohttpd daemon that slow or hostile clients cannot lock out (`cformers serve`):
 * connections are accepted here and held (one epoll set, no thread) while their request head
 * arrives; it is peeked at, not read, and once whole and checked (request line, header
 * syntax, Content-Length, Host, version: what libmicrohttpd would otherwise answer with an
 * HTML page of its own, or drop) the connection is handed to libmicrohttpd (a thread each),
 * which so never meets a request it would refuse. So:
 *   - past max_connections a new connection is answered 503 (JSON) and closed;
 *   - a connection that sends nothing for idle_timeout_s is closed; one whose head is not
 *     whole within header_timeout_s of its first byte, or whose body stalls for
 *     idle_timeout_s, is answered 408 (JSON);
 *   - a head over max_header_bytes is answered 431 (414 for the request line), a
 *     Content-Length over max_body_bytes 413, a malformed head 400/411/505, all JSON;
 *   - a body shorter than its Content-Length followed by a half-close is answered 400 (JSON);
 *   - every status answered is told to `count`;
 *   - a connection serves one request (the next would reach libmicrohttpd unchecked): the
 *     handler's responses must say "Connection: close";
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
