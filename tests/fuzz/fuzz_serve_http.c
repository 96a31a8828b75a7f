/* `cformers serve`'s HTTP layer (src/serve/server.c over libmicrohttpd, src/obs/http.c):
 * raw bytes from a client over a loopback TCP connection to a server in front of the tiny
 * engine (fuzz_serve_engine, fuzz_util.h). Byte 0 bit 0 picks the server: one open, one
 * with an API key ("Authorization: Bearer k") and a 512-byte body limit; the rest, split at
 * FUZZ_SEPARATOR, is sent in up to 4 writes on one connection (pipelined requests,
 * connection reuse, bodies cut between writes, chunked transfer encoding as the client
 * spells it), then the client half-closes and reads the answers to the end.
 *
 * Checked: the server never answers 500 (what a client sends is a 4xx or a result: its own
 * count in /metrics, asked after each input, stays 0), and it closes or answers within the
 * read timeout (a request that hangs the server is a finding: libFuzzer's -timeout catches it). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "cformers/serve.h"
#include "fuzz_util.h"

static int ports[2];

static void start(int i, const cf_server_options *o) {
    cf_error err = {{0}};
    cf_server *s = cf_server_start(fuzz_serve_engine(), o, &err);
    if (!s) {
        fprintf(stderr, "fuzz_serve_http: cannot start the server: %s\n", err.msg);
        abort();
    }
    ports[i] = cf_server_port(s); /* kept running: the harness's process ends with it */
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    start(0, &(cf_server_options){.model_name = "model"});
    start(1, &(cf_server_options){.model_name = "model", .api_key = "k", .max_body = 512});
    return 0;
}

/* A connection to server i, with timeouts so a stuck server fails the read, not the run. */
static int dial(int i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) perror("socket"), abort();
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ports[i])};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 5};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* libFuzzer's timer signal interrupts system calls: an interrupted connect goes on in
     * the background (EALREADY until done, then EISCONN) */
    while (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EISCONN) {
        if (errno != EINTR && errno != EALREADY) perror("connect"), abort();
        usleep(100);
    }
    return fd;
}

/* Sends the parts, half-closes, and reads the answers to the end into buf (at most cap - 1
 * bytes kept, NUL-terminated). */
static void exchange(int fd, const fuzz_part *parts, int n, char *buf, size_t cap) {
    bool sent = true;
    for (int i = 0; i < n && sent; i++)
        for (size_t at = 0; at < parts[i].size && sent;) {
            ssize_t k = send(fd, parts[i].data + at, parts[i].size - at, MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR) continue;
            sent = k > 0, at += k > 0 ? (size_t)k : 0; /* the server may close first: not a finding */
        }
    shutdown(fd, SHUT_WR);
    size_t len = 0;
    char sink[4096];
    for (;;) { /* to the end: closed, reset or the 5 s timeout (libFuzzer's -timeout judges hangs) */
        ssize_t k = recv(fd, len + 1 < cap ? buf + len : sink, len + 1 < cap ? cap - 1 - len : sizeof sink, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        if (len + 1 < cap) len += (size_t)k;
    }
    buf[len] = '\0';
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > 8192) return 0;
    fuzz_part parts[4];
    int n = fuzz_split(data + 1, size - 1, parts, 4);
    static char buf[1 << 16];
    int server = data[0] & 1;
    exchange(dial(server), parts, n, buf, sizeof buf);
    /* The server's own count of 500s (its /metrics), not the answer's text: a URL the client
     * sent may be quoted in a 404's message. */
    static const char metrics[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nConnection: close\r\n\r\n";
    fuzz_part get = {(const uint8_t *)metrics, sizeof metrics - 1};
    exchange(dial(server), &get, 1, buf, sizeof buf);
    const char *line = strstr(buf, "cformers_http_responses_total{code=\"500\"} ");
    if (!line) {
        fprintf(stderr, "fuzz_serve_http: /metrics has no count of 500s\n");
        abort();
    }
    if (strtoul(line + strlen("cformers_http_responses_total{code=\"500\"} "), NULL, 10) != 0) {
        fprintf(stderr, "fuzz_serve_http: the server answered 500\n");
        abort();
    }
    return 0;
}
