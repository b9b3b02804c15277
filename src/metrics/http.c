/* http.c - the /metrics endpoint: a libmicrohttpd daemon with its own
 * polling thread, bound to one address (loopback unless told otherwise),
 * rendering the registry on every GET /metrics. */
#define _GNU_SOURCE
#include "metrics-impl.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PRM__METRICS_CTYPE "text/plain; version=0.0.4; charset=utf-8"

struct prm_metrics_server {
  struct MHD_Daemon *d;
  prm_metrics_t *reg;
  int port;
};

static enum MHD_Result prm__reply(struct MHD_Connection *conn, unsigned status, char *body,
                                  size_t len, const char *ctype) {
  struct MHD_Response *res =
      MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE); /* frees body */
  if (!res) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  enum MHD_Result ret = MHD_queue_response(conn, status, res);
  MHD_destroy_response(res);
  return ret;
}

static enum MHD_Result prm__handle(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version,
                                   const char *upload, size_t *upload_size, void **con_cls) {
  prm_metrics_server_t *s = cls;
  (void)version;
  (void)upload;
  (void)con_cls;
  if (*upload_size) { /* a request body is not expected: drop it */
    *upload_size = 0;
    return MHD_YES;
  }
  if (strcmp(url, "/metrics")) {
    char *b = prm_xstrdup("not found: the metrics are at /metrics\n");
    return prm__reply(conn, MHD_HTTP_NOT_FOUND, b, strlen(b), "text/plain; charset=utf-8");
  }
  if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
    char *b = prm_xstrdup("method not allowed: use GET\n");
    return prm__reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, b, strlen(b), "text/plain; charset=utf-8");
  }
  prm_sb_t out = {0};
  prm_metrics_render(s->reg, &out);
  size_t len = out.len;
  char *body = out.buf ? prm_sb_steal(&out) : prm_xstrdup("");
  return prm__reply(conn, MHD_HTTP_OK, body, len, PRM__METRICS_CTYPE);
}

/* Why MHD could not listen: MHD does not say, so the same bind is tried
 * once more on a plain socket. */
static const char *prm__bind_failure(const struct sockaddr *sa, socklen_t len) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return strerror(errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const char *why = "libmicrohttpd could not start";
  if (bind(fd, sa, len) < 0) why = strerror(errno);
  close(fd);
  return why;
}

int prm_metrics_serve(prm_metrics_t *r, const char *bind_addr, int port,
                      prm_metrics_server_t **out, prm_err_t *err) {
  *out = NULL;
  if (!bind_addr || !*bind_addr) bind_addr = "127.0.0.1";
  if (port < 0 || port > 65535)
    return prm_errf(err, PRM_ERANGE, "metrics port %d: expected 0 to 65535", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE}, *ai = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int g = getaddrinfo(bind_addr, ps, &hints, &ai);
  if (g || !ai)
    return prm_errf(err, PRM_EINVAL, "metrics bind address \"%s\": %s", bind_addr,
                    g ? gai_strerror(g) : "no address");
  prm_metrics_server_t *s = prm_xcalloc(1, sizeof *s);
  s->reg = r;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  s->d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, prm__handle, s,
                          MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)16, MHD_OPTION_END);
  if (!s->d) {
    int rc = prm_errf(err, PRM_ERUNTIME, "%s%s%s:%d: cannot listen: %s",
                      ai->ai_family == AF_INET6 ? "[" : "", bind_addr,
                      ai->ai_family == AF_INET6 ? "]" : "", port,
                      prm__bind_failure(ai->ai_addr, ai->ai_addrlen));
    freeaddrinfo(ai);
    free(s);
    return rc;
  }
  freeaddrinfo(ai);
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  s->port = info && info->port ? info->port : port;
  *out = s;
  return 0;
}

int prm_metrics_server_port(const prm_metrics_server_t *s) { return s ? s->port : 0; }

void prm_metrics_server_stop(prm_metrics_server_t *s) {
  if (!s) return;
  MHD_stop_daemon(s->d);
  free(s);
}
