/* fuzz-http.c - the metrics endpoint's request handling: the input is
 * sent as raw bytes (a request line, headers, maybe a body) to a live
 * endpoint on 127.0.0.1 (prm_metrics_serve, an ephemeral port) and the
 * reply read until the server closes or half a second passes. The server
 * must answer or drop every request, never crash. */
#include "fuzz.h"

#include "primus/prm_metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

static prm_metrics_t *reg;
static prm_metrics_server_t *srv;

static void stop(void) {
  prm_metrics_server_stop(srv);
  prm_metrics_free(reg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!srv) {
    fz_dir();
    reg = prm_metrics_new();
    prm_metrics_counter(reg, "primus_fuzz_total", "requests", NULL);
    prm_err_t err = {0};
    if (prm_metrics_serve(reg, "127.0.0.1", 0, &srv, &err)) {
      fprintf(stderr, "fuzz-http: %s\n", err.msg);
      abort();
    }
    atexit(stop);
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)prm_metrics_server_port(srv))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  /* Closed with a reset (linger 0), so 10^5 connections do not leave the
   * ephemeral ports in TIME_WAIT. A refused connection means the endpoint
   * is gone: a finding. Running out of local ports is the harness' own
   * problem: wait and retry. */
  int fd = -1;
  for (int tries = 0; fd < 0; tries++) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) abort();
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) break;
    int e = errno;
    close(fd);
    fd = -1;
    if (e == ECONNREFUSED || tries > 200) {
      fprintf(stderr, "fuzz-http: connect: %s\n", strerror(e));
      abort();
    }
    usleep(10000);
  }
  for (size_t off = 0; off < size;) {
    ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += (size_t)w;
  }
  shutdown(fd, SHUT_WR);
  char buf[4096];
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  while (poll(&pfd, 1, 500) > 0 && recv(fd, buf, sizeof buf, 0) > 0) {
  }
  close(fd);
  return 0;
}
