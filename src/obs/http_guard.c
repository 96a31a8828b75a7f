/* The guarded libmicrohttpd daemon: see http_guard.h. One acceptor thread takes connections
 * off the listening socket, refuses those past the cap, hands the others to libmicrohttpd
 * (MHD_add_connection, a thread each) and, every tick, closes the connections whose phase
 * has lasted too long (libmicrohttpd's own timeout counts any byte as activity, so a client
 * trickling a header would hold its connection forever). */
#include "obs/http_guard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cformers/error.h"

/* Where a connection stands; the acceptor's tick acts on the first three. */
typedef enum conn_phase {
    PHASE_IDLE,    /* no request under way (since it opened or its last request ended) */
    PHASE_HEADERS, /* the request line is in, the headers are not */
    PHASE_BODY,    /* the handler waits for more of the body */
    PHASE_BUSY,    /* in the handler, or a response is queued */
    PHASE_KILLED,  /* closed by the tick (answered 408 or not at all) */
} conn_phase;

typedef struct conn {
    struct conn *prev, *next;
    int fd;
    conn_phase phase;
    double since; /* when the phase began (seconds, monotonic) */
} conn;

/* A request, as libmicrohttpd's con_cls: the user handler's own state is `user`. */
typedef struct request {
    void *user;
    conn *conn;
    bool handled; /* the handler was called: what follows is its business */
} request;

/* A connection accepted, its request head not yet all in (only peeked at: libmicrohttpd
 * reads it once it is whole and checked). */
typedef struct pending {
    int fd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    double accepted, first_byte; /* first_byte 0: none yet */
} pending;

enum { LINGER_MAX = 64 };

struct cf_http_guard {
    struct MHD_Daemon *d;
    int listen_fd, wake[2];
    pthread_t acceptor;
    bool acceptor_running;
    cf_http_limits lim;
    MHD_AccessHandlerCallback handler;
    MHD_RequestCompletedCallback completed;
    void (*count)(void *cls, unsigned status);
    void *cls;
    pthread_mutex_t mu; /* conns, open, phases */
    conn *conns;
    unsigned open;
    atomic_bool stopping;
    size_t max_body;
    int ep;           /* epoll over the listening socket, the wake pipe and the pending connections */
    pending *pend;    /* connections whose request head is not all in (acceptor only) */
    int n_pend, cap_pend;
    char *peek;       /* [max_header_bytes + 1] */
    int linger_fd[LINGER_MAX]; /* refused connections, read until EOF or their deadline (acceptor only) */
    double linger_until[LINGER_MAX];
    int n_linger;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cf_http_error_json(char *buf, size_t cap, unsigned status, const char *message) {
    const char *type = status >= 500 ? "server_error" : "invalid_request_error";
    const char *code = status == 503 ? "\"server_busy\"" : status == 408 ? "\"request_timeout\"" : "null";
    return snprintf(buf, cap, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":%s}}", message,
                    type, code);
}

static const char *reason(unsigned status) {
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

/* Writes a whole error response straight to the socket (what libmicrohttpd is not, or no
 * longer, sending on it) without blocking; true when it all went. */
static bool send_error(cf_http_guard *g, int fd, unsigned status, const char *message) {
    char body[512], out[768];
    int bn = cf_http_error_json(body, sizeof body, status, message);
    int n = snprintf(out, sizeof out,
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                     "Cache-Control: no-store\r\nConnection: close\r\n\r\n%s",
                     status, reason(status), bn, body);
    bool sent = send(fd, out, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n;
    if (sent && g->count) g->count(g->cls, status);
    return sent;
}

/* ---- libmicrohttpd's callbacks ---- */

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode what) {
    cf_http_guard *g = cls;
    pthread_mutex_lock(&g->mu);
    if (what == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn *k = cf_xcalloc(1, sizeof *k);
        *k = (conn){.next = g->conns, .fd = fd ? fd->connect_fd : -1, .phase = PHASE_IDLE, .since = now_s()};
        if (g->conns) g->conns->prev = k;
        g->conns = k, g->open++;
        *socket_context = k;
    } else if (*socket_context) {
        conn *k = *socket_context;
        if (k->prev) k->prev->next = k->next;
        else g->conns = k->next;
        if (k->next) k->next->prev = k->prev;
        g->open--;
        free(k);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&g->mu);
}

static conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

static void set_phase(cf_http_guard *g, conn *k, conn_phase p) {
    if (!k) return;
    pthread_mutex_lock(&g->mu);
    if (k->phase != PHASE_KILLED) k->phase = p, k->since = now_s();
    pthread_mutex_unlock(&g->mu);
}

/* The request line is in: a request object begins, and the header clock. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)uri;
    cf_http_guard *g = cls;
    request *r = cf_xcalloc(1, sizeof *r);
    r->conn = conn_of(c);
    set_phase(g, r->conn, PHASE_HEADERS);
    return r;
}

static bool response_queued(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
    return i && i->http_status != 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    cf_http_guard *g = cls;
    request *r = *con_cls;
    if (!r) *con_cls = r = cf_xcalloc(1, sizeof *r), r->conn = conn_of(c);
    bool first = !r->handled;
    r->handled = true;
    if (r->conn) {
        pthread_mutex_lock(&g->mu);
        bool killed = r->conn->phase == PHASE_KILLED;
        if (!killed) r->conn->phase = PHASE_BUSY;
        pthread_mutex_unlock(&g->mu);
        if (killed) return MHD_NO;
    }
    if (first && atomic_load(&g->stopping)) {
        char body[256];
        int n = cf_http_error_json(body, sizeof body, 503, "the server is shutting down");
        struct MHD_Response *resp = MHD_create_response_from_buffer((size_t)n, body, MHD_RESPMEM_MUST_COPY);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", "application/json");
        MHD_add_response_header(resp, "Connection", "close");
        enum MHD_Result rc = MHD_queue_response(c, 503, resp);
        MHD_destroy_response(resp);
        if (g->count) g->count(g->cls, 503);
        return rc;
    }
    enum MHD_Result rc = g->handler(g->cls, c, url, method, version, data, data_size, &r->user);
    if (rc == MHD_YES && !response_queued(c)) set_phase(g, r->conn, PHASE_BODY);
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    cf_http_guard *g = cls;
    request *r = *con_cls;
    if (!r) return;
    bool killed = false;
    if (r->conn) {
        pthread_mutex_lock(&g->mu);
        killed = r->conn->phase == PHASE_KILLED;
        pthread_mutex_unlock(&g->mu);
    }
    const union MHD_ConnectionInfo *st = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
    unsigned status = st ? st->http_status : 0;
    if (!killed && !r->handled && status && g->count) {
        g->count(g->cls, status); /* libmicrohttpd answered a malformed request itself */
    } else if (!killed && r->handled && !status && why != MHD_REQUEST_TERMINATED_COMPLETED_OK && r->conn &&
               r->conn->fd >= 0) {
        /* the body ended before its Content-Length (a half-close): answer, if the client still reads */
        send_error(g, r->conn->fd, 400, "the connection ended before the request body did (see its Content-Length)");
    }
    if (g->completed) g->completed(g->cls, c, &r->user, why);
    if (r->conn) { /* one request a connection: the next one would reach libmicrohttpd unchecked */
        pthread_mutex_lock(&g->mu);
        if (r->conn->phase != PHASE_KILLED && r->conn->fd >= 0) shutdown(r->conn->fd, SHUT_RD);
        r->conn->phase = PHASE_KILLED;
        pthread_mutex_unlock(&g->mu);
    }
    free(r);
    *con_cls = NULL;
}

/* ---- the acceptor ---- */

/* What a connection's first bytes must be before libmicrohttpd reads them: one request
 * head (request line and headers) that it will parse without an error page of its own.
 * 0 when it is, else the status to answer with *why set. `n` bytes end with the blank line. */
static unsigned check_head(const cf_http_guard *g, const char *h, size_t n, const char **why) {
    const char *end = h + n, *eol = memchr(h, '\r', n);
    const char *sp1 = memchr(h, ' ', (size_t)(eol - h)), *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || sp1 == h || eol[1] != '\n')
        return *why = "the request line is not 'METHOD /path HTTP/1.1'", 400;
    for (const char *p = h; p < sp1; p++)
        if (!strchr("!#$%&'*+-.^_`|~", *p) && !((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')))
            return *why = "the request line's method is not a token", 400;
    for (const char *p = sp1 + 1; p < sp2; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f) return *why = "the request target holds a control byte", 400;
    if (sp1[1] != '/' && sp1[1] != '*') return *why = "the request target does not start with '/'", 400;
    size_t vl = (size_t)(eol - sp2 - 1);
    bool v10 = vl == 8 && memcmp(sp2 + 1, "HTTP/1.0", 8) == 0, v11 = vl == 8 && memcmp(sp2 + 1, "HTTP/1.1", 8) == 0;
    if (!v10 && !v11) {
        if (vl == 8 && memcmp(sp2 + 1, "HTTP/", 5) == 0) return *why = "only HTTP/1.0 and HTTP/1.1 are served", 505;
        return *why = "the request line does not end with HTTP/1.1", 400;
    }
    bool host = false, length = false;
    unsigned long long content_length = 0;
    for (const char *line = eol + 2; line < end - 2;) {
        const char *le = memchr(line, '\r', (size_t)(end - line));
        if (!le || le[1] != '\n') return *why = "a header line does not end with CRLF", 400;
        const char *colon = memchr(line, ':', (size_t)(le - line));
        if (!colon || colon == line) return *why = "a header line is not 'Name: value'", 400;
        for (const char *p = line; p < colon; p++)
            if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || strchr("()<>@,;\\\"/[]?={}", *p))
                return *why = "a header name is not a token (or a header is folded)", 400;
        for (const char *p = colon + 1; p < le; p++)
            if (((unsigned char)*p < ' ' && *p != '\t') || *p == 0x7f) return *why = "a header value holds a control byte", 400;
        size_t nl = (size_t)(colon - line);
        const char *v = colon + 1, *ve = le;
        while (v < ve && (*v == ' ' || *v == '\t')) v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        if (nl == 4 && strncasecmp(line, "host", 4) == 0) host = true;
        if (nl == 17 && strncasecmp(line, "transfer-encoding", 17) == 0)
            return *why = "request bodies must come with a Content-Length (Transfer-Encoding is not taken)", 411;
        if (nl == 14 && strncasecmp(line, "content-length", 14) == 0) {
            unsigned long long x = 0;
            if (v == ve || ve - v > 18) return *why = "Content-Length is not a number of bytes", 400;
            for (const char *p = v; p < ve; p++) {
                if (*p < '0' || *p > '9') return *why = "Content-Length is not a number of bytes", 400;
                x = x * 10 + (unsigned long long)(*p - '0');
            }
            if (length && x != content_length) return *why = "two Content-Length headers disagree", 400;
            length = true, content_length = x;
        }
        line = le + 2;
    }
    if (v11 && !host) return *why = "an HTTP/1.1 request needs a Host header", 400;
    if (g->max_body && content_length > g->max_body) return *why = "the request body is larger than the server's limit", 413;
    return 0;
}

/* Answers status and lingers (closes) the connection, or closes it silently when status is 0. */
static void reject(cf_http_guard *g, int fd, unsigned status, const char *why) {
    if (status) send_error(g, fd, status, why);
    shutdown(fd, SHUT_WR);
    if (!status || g->n_linger == LINGER_MAX) {
        close(fd);
        return;
    }
    /* read what the client sent until it closes (closing at once with unread bytes would
     * reset the connection before the client reads the answer) */
    g->linger_fd[g->n_linger] = fd, g->linger_until[g->n_linger++] = now_s() + 1.0;
}

/* Peeks at a pending connection: hands it to libmicrohttpd once its head is in and checked,
 * answers an error and drops it, or leaves it pending. True when it is no longer pending. */
static bool examine(cf_http_guard *g, pending *p, bool hangup) {
    ssize_t n = recv(p->fd, g->peek, g->lim.max_header_bytes + 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n <= 0) return reject(g, p->fd, 0, NULL), true;
    if (!p->first_byte) p->first_byte = now_s();
    const char *h = g->peek;
    void *blank = memmem(h, (size_t)n, "\r\n\r\n", 4);
    const char *why = NULL;
    unsigned status = 0;
    if (!blank) {
        const char *cr = memchr(h, '\n', (size_t)n);
        if ((size_t)n > g->lim.max_header_bytes)
            status = cr ? 431 : 414, why = cr ? "the request headers are larger than the server's limit"
                                              : "the request line is longer than the server's header limit";
        else if (hangup) status = 400, why = "the connection ended before the request headers did";
        else return false;
    } else {
        status = check_head(g, h, (size_t)((const char *)blank - h) + 4, &why);
    }
    if (status) {
        reject(g, p->fd, status, why);
        return true;
    }
    if (MHD_add_connection(g->d, p->fd, (struct sockaddr *)&p->addr, p->addr_len) != MHD_YES) { /* it closed fd */
        struct timespec pause = {0, 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return true;
}

static void drop_pending(cf_http_guard *g, int i) {
    epoll_ctl(g->ep, EPOLL_CTL_DEL, g->pend[i].fd, NULL);
    g->pend[i] = g->pend[--g->n_pend];
}

static int pending_index(cf_http_guard *g, int fd) {
    for (int i = 0; i < g->n_pend; i++)
        if (g->pend[i].fd == fd) return i;
    return -1;
}

/* A connection's limits, pending ones (head not all in) and those libmicrohttpd holds;
 * with `all`, every one not busy with a request is closed. */
static void tick(cf_http_guard *g, bool all) {
    double t = now_s();
    for (int i = 0; i < g->n_pend; i++) {
        pending *p = &g->pend[i];
        bool idle = !p->first_byte && t - p->accepted >= g->lim.idle_timeout_s;
        bool slow = p->first_byte && t - p->first_byte >= g->lim.header_timeout_s;
        if (!all && !idle && !slow) continue;
        int fd = p->fd;
        drop_pending(g, i--);
        if (all) reject(g, fd, p->first_byte ? 503 : 0, "the server is shutting down");
        else reject(g, fd, slow ? 408 : 0, "the request headers took too long to arrive");
    }
    pthread_mutex_lock(&g->mu);
    for (conn *k = g->conns; k; k = k->next) {
        if (k->phase >= PHASE_BUSY || k->fd < 0) continue;
        double limit = k->phase == PHASE_HEADERS ? g->lim.header_timeout_s : g->lim.idle_timeout_s;
        if (!all && t - k->since < limit) continue;
        if (k->phase == PHASE_HEADERS || k->phase == PHASE_BODY)
            send_error(g, k->fd, all ? 503 : 408, all ? "the server is shutting down" : "the request body stalled");
        k->phase = PHASE_KILLED;
        shutdown(k->fd, SHUT_RDWR); /* libmicrohttpd's thread reads the end and closes it */
    }
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->n_linger; i++) {
        char scratch[512];
        ssize_t n = recv(g->linger_fd[i], scratch, sizeof scratch, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || t > g->linger_until[i]) {
            close(g->linger_fd[i]);
            g->linger_fd[i] = g->linger_fd[--g->n_linger], g->linger_until[i] = g->linger_until[g->n_linger];
            i--;
        }
    }
}

static void accept_one(cf_http_guard *g) {
    pending p = {.addr_len = sizeof p.addr};
    p.fd = accept4(g->listen_fd, (struct sockaddr *)&p.addr, &p.addr_len, SOCK_CLOEXEC);
    if (p.fd < 0) {
        if (errno == EMFILE || errno == ENFILE) { /* out of descriptors: let some close */
            struct timespec pause = {0, 10 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        return;
    }
    pthread_mutex_lock(&g->mu);
    bool full = g->open + (unsigned)g->n_pend >= g->lim.max_connections;
    pthread_mutex_unlock(&g->mu);
    if (full) return reject(g, p.fd, 503, "the server has too many open connections; retry later");
    p.accepted = now_s();
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.fd = p.fd};
    if (g->n_pend == g->cap_pend) g->cap_pend = g->cap_pend * 2 + 64, g->pend = cf_xrealloc(g->pend, sizeof *g->pend * (size_t)g->cap_pend);
    g->pend[g->n_pend++] = p;
    if (epoll_ctl(g->ep, EPOLL_CTL_ADD, p.fd, &ev) != 0) g->n_pend--, close(p.fd);
}

static void *acceptor(void *arg) {
    cf_http_guard *g = arg;
    double last_tick = 0;
    while (!atomic_load(&g->stopping)) {
        struct epoll_event ev[64];
        int n = epoll_wait(g->ep, ev, 64, 100);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.fd == g->listen_fd) {
                for (int k = 0; k < 64 && !atomic_load(&g->stopping); k++) {
                    int before = g->n_pend;
                    accept_one(g);
                    if (errno == EAGAIN && g->n_pend == before) break;
                }
                continue;
            }
            int at = pending_index(g, ev[i].data.fd);
            if (at >= 0 && examine(g, &g->pend[at], (ev[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0)) {
                epoll_ctl(g->ep, EPOLL_CTL_DEL, ev[i].data.fd, NULL);
                g->pend[at] = g->pend[--g->n_pend];
            }
        }
        if (now_s() - last_tick >= 0.1) tick(g, false), last_tick = now_s();
    }
    return NULL;
}

static int listen_on(const char *host, int port, int *bound_port, cf_error *err) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!host) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) return cf_fail(err, "--host %s: not an IPv4 address", host);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
    if (fd < 0) return cf_fail(err, "cannot open a socket: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t len = sizeof addr;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
        close(fd);
        return cf_fail(err, "cannot listen on %s:%d (in use, or not an address of this machine)", host, port);
    }
    *bound_port = ntohs(addr.sin_port);
    return fd;
}

cf_http_guard *cf_http_guard_start(const char *host, int port, const cf_http_limits *lim,
                                   MHD_AccessHandlerCallback handler, MHD_RequestCompletedCallback completed,
                                   void (*count)(void *cls, unsigned status), void *cls, int *bound_port,
                                   cf_error *err) {
    cf_http_guard *g = cf_xcalloc(1, sizeof *g);
    *g = (cf_http_guard){.lim = *lim, .handler = handler, .completed = completed, .count = count, .cls = cls,
                         .wake = {-1, -1}};
    if (!g->lim.max_connections) g->lim.max_connections = 1024;
    if (!g->lim.max_header_bytes) g->lim.max_header_bytes = 16 << 10;
    if (!g->lim.header_timeout_s) g->lim.header_timeout_s = 10;
    if (!g->lim.idle_timeout_s) g->lim.idle_timeout_s = 30;
    g->max_body = g->lim.max_body_bytes;
    g->peek = cf_xmalloc(g->lim.max_header_bytes + 1);
    pthread_mutex_init(&g->mu, NULL);
    g->listen_fd = listen_on(host, port, bound_port, err);
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.fd = g->listen_fd};
    if (g->listen_fd < 0 || pipe2(g->wake, O_CLOEXEC) != 0 || g->ep < 0 ||
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->listen_fd, &lev) != 0) {
        if (g->listen_fd >= 0) close(g->listen_fd), cf_fail(err, "cannot poll the listening socket: %s", strerror(errno));
        if (g->ep >= 0) close(g->ep);
        pthread_mutex_destroy(&g->mu);
        free(g->peek);
        free(g);
        return NULL;
    }
    struct epoll_event wev = {.events = EPOLLIN, .data.fd = g->wake[0]};
    epoll_ctl(g->ep, EPOLL_CTL_ADD, g->wake[0], &wev);
    /* the request line and headers live in the connection's memory, with room for the
     * response's headers and the body's read buffer */
    size_t memory = g->lim.max_header_bytes + (16 << 10);
    g->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_NO_LISTEN_SOCKET |
                                MHD_USE_ITC,
                            0, NULL, NULL, on_request, g, MHD_OPTION_CONNECTION_LIMIT, g->lim.max_connections + 16,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory, MHD_OPTION_NOTIFY_CONNECTION, on_connection, g,
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, g, MHD_OPTION_NOTIFY_COMPLETED, on_completed, g,
                            MHD_OPTION_END);
    if (!g->d || pthread_create(&g->acceptor, NULL, acceptor, g) != 0) {
        cf_fail(err, "cannot start the HTTP daemon on %s:%d", host ? host : "127.0.0.1", *bound_port);
        if (g->d) MHD_stop_daemon(g->d);
        close(g->listen_fd), close(g->wake[0]), close(g->wake[1]), close(g->ep);
        pthread_mutex_destroy(&g->mu);
        free(g->peek);
        free(g);
        return NULL;
    }
    g->acceptor_running = true;
    return g;
}

static void stop_acceptor(cf_http_guard *g) {
    atomic_store(&g->stopping, true);
    if (!g->acceptor_running) return;
    (void)!write(g->wake[1], "x", 1);
    pthread_join(g->acceptor, NULL);
    g->acceptor_running = false;
    close(g->listen_fd);
    g->listen_fd = -1;
}

/* Closes what the acceptor held: pending connections, refused ones lingering. */
static void close_held(cf_http_guard *g) {
    for (int i = 0; i < g->n_pend; i++) close(g->pend[i].fd);
    for (int i = 0; i < g->n_linger; i++) close(g->linger_fd[i]);
    g->n_pend = g->n_linger = 0;
}

static long busy_requests(cf_http_guard *g) {
    long n = 0;
    pthread_mutex_lock(&g->mu);
    for (conn *k = g->conns; k; k = k->next) n += k->phase == PHASE_BUSY;
    pthread_mutex_unlock(&g->mu);
    return n;
}

long cf_http_guard_quiesce(cf_http_guard *g) {
    stop_acceptor(g);
    tick(g, true);
    return busy_requests(g);
}

bool cf_http_guard_drain(cf_http_guard *g, int timeout_ms) {
    for (int waited = 0;; waited += 20) {
        tick(g, true); /* a keep-alive connection whose request just ended */
        if (busy_requests(g) == 0) return true;
        if (waited >= timeout_ms) return false;
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

bool cf_http_guard_stopping(const cf_http_guard *g) { return atomic_load(&g->stopping); }

void cf_http_guard_stop(cf_http_guard *g) {
    if (!g) return;
    stop_acceptor(g);
    close_held(g);
    MHD_stop_daemon(g->d);
    close(g->wake[0]), close(g->wake[1]), close(g->ep);
    pthread_mutex_destroy(&g->mu);
    free(g->pend), free(g->peek);
    free(g);
}
