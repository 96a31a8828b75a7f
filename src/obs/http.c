#include "obs/http.h"

#include <arpa/inet.h>
#include <string.h>

struct MHD_Daemon *cf_http_listen(const char *host, int port, unsigned flags, MHD_AccessHandlerCallback handler,
                                  void *cls, MHD_RequestCompletedCallback completed, int *bound_port, cf_error *err) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!host) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        cf_fail(err, "--host %s: not an IPv4 address", host);
        return NULL;
    }
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handler, cls, MHD_OPTION_SOCK_ADDR,
                                            (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT, 512u,
                                            MHD_OPTION_NOTIFY_COMPLETED, completed, cls, MHD_OPTION_END);
    if (!d) {
        cf_fail(err, "cannot listen on %s:%d (in use, or not an address of this machine)", host, port);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info ? info->port : port;
    return d;
}

enum MHD_Result cf_http_reply(struct MHD_Connection *c, unsigned status, const char *type, void *body, size_t n,
                              enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, body, mode);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result cf_http_reply_text(struct MHD_Connection *c, unsigned status, const char *text) {
    return cf_http_reply(c, status, "text/plain; charset=utf-8", (void *)text, strlen(text), MHD_RESPMEM_MUST_COPY);
}
