/* What the engine's HTTP servers (`cformers dashboard`, `cformers serve`) share on top of
 * libmicrohttpd: listening on an IPv4 address and queueing whole responses. */
#ifndef CFORMERS_OBS_HTTP_H
#define CFORMERS_OBS_HTTP_H

#include <microhttpd.h>
#include <stddef.h>

#include "cformers/error.h"

/* Starts a daemon on host:port (host NULL = 127.0.0.1, port 0 = any free one, told in
 * *bound_port) with `flags` (MHD_USE_*) and handler; `completed` (may be NULL) is told when
 * each request ends (to free what the handler kept in *con_cls). NULL with err naming the address
 * when it is not an IPv4 address of this machine or is in use. */
struct MHD_Daemon *cf_http_listen(const char *host, int port, unsigned flags, MHD_AccessHandlerCallback handler,
                                  void *cls, MHD_RequestCompletedCallback completed, int *bound_port, cf_error *err);

/* Queues body[n] with the status and Content-Type (Cache-Control: no-store). */
enum MHD_Result cf_http_reply(struct MHD_Connection *c, unsigned status, const char *type, void *body, size_t n,
                              enum MHD_ResponseMemoryMode mode);
enum MHD_Result cf_http_reply_text(struct MHD_Connection *c, unsigned status, const char *text);

#endif
