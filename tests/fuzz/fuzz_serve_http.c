/* `cformers serve`'s HTTP layer (src/serve/server.c over libmicrohttpd, src/obs/http.c):
 * raw bytes from a client over a loopback TCP connection to a server in front of the tiny
 * engine (fuzz_serve_engine, fuzz_util.h). Byte 0 bit 0 picks the server: one open, one
 * with an API key ("Authorization: Bearer k") and a 512-byte body limit; the rest, split at
 * FUZZ_SEPARATOR, is sent in up to 4 writes on one connection (pipelined requests,
 * connection reuse, bodies cut between writes, chunked transfer encoding as the client
 * spells it), then the client half-closes and reads the answers to the end.
 *
 * Checked: the server never answers 500 (what a client sends is a 4xx or a result), and it
 * closes or answers within the read timeout (a request that hangs the server is a finding:
 * libFuzzer's -timeout catches it). */
#include <arpa/inet.h>
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > 8192) return 0;
    fuzz_part parts[4];
    int n = fuzz_split(data + 1, size - 1, parts, 4);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) perror("socket"), abort();
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ports[data[0] & 1])};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 5};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) perror("connect"), abort();
    bool sent = true;
    for (int i = 0; i < n && sent; i++)
        for (size_t at = 0; at < parts[i].size && sent;) {
            ssize_t k = send(fd, parts[i].data + at, parts[i].size - at, MSG_NOSIGNAL);
            sent = k > 0, at += k > 0 ? (size_t)k : 0; /* the server may close first: not a finding */
        }
    shutdown(fd, SHUT_WR);
    char buf[4096], carry[16] = "";
    for (;;) {
        ssize_t k = recv(fd, buf, sizeof buf - 1, 0);
        if (k <= 0) break; /* closed, reset or the 5 s timeout: libFuzzer's -timeout judges hangs */
        buf[k] = '\0';
        /* the status line, also where it straddles two reads */
        char joined[sizeof carry + 16];
        snprintf(joined, sizeof joined, "%s%.15s", carry, buf);
        if (strstr(buf, "HTTP/1.1 500 ") || strstr(buf, "HTTP/1.0 500 ") || strstr(joined, "HTTP/1.1 500 ")) {
            fprintf(stderr, "fuzz_serve_http: the server answered 500\n");
            abort();
        }
        size_t tail = (size_t)k < sizeof carry - 1 ? (size_t)k : sizeof carry - 1;
        memcpy(carry, buf + k - tail, tail), carry[tail] = '\0';
    }
    close(fd);
    return 0;
}
