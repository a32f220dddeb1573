/*
 * The plain-TCP baseline for the socket transport's benchmark (perf/net_compare.sh):
 *   tcp_stream serve PORT                        answers one client, then exits
 *   tcp_stream stream HOST PORT BYTES ITERS      one-way: BYTES per round, a 1-byte ack back
 *   tcp_stream pingpong HOST PORT BYTES ITERS    BYTES each way per round
 *   tcp_stream exchange HOST PORT BYTES ITERS    BYTES each way per round, both directions at
 *                                                once (the server echoes as data arrives)
 * The client prints the median round: "stream BYTES bytes: median T us, G GB/s" (exchange
 * likewise, G counting one direction) or "pingpong BYTES bytes: median round trip T us, one
 * way T/2 us". TCP_NODELAY on both ends,
 * default socket buffers (autotuned), as Braid's own sockets use.
 */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct Request {
  uint64_t bytes;
  uint32_t echo; /* 0: ack only, 1: echo after the whole message, 2: echo each chunk at once */
  uint32_t more; /* 0: the client is done */
};

static void die(const char* what) {
  perror(what);
  exit(1);
}

static void sendAll(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) die("send");
    c += w;
    n -= (size_t)w;
  }
}

static void recvAll(int fd, void* p, size_t n) {
  char* c = p;
  while (n > 0) {
    ssize_t r = recv(fd, c, n, 0);
    if (r <= 0) die("recv");
    c += r;
    n -= (size_t)r;
  }
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int compare(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void noDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int serve(int port) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  if (bind(l, (struct sockaddr*)&a, sizeof a) != 0 || listen(l, 1) != 0) die("bind/listen");
  int fd = accept(l, NULL, NULL);
  if (fd < 0) die("accept");
  close(l);
  noDelay(fd);
  char* buf = NULL;
  size_t cap = 0;
  for (;;) {
    struct Request q;
    recvAll(fd, &q, sizeof q);
    if (!q.more) break;
    if (q.bytes > cap) {
      free(buf);
      cap = q.bytes;
      buf = malloc(cap);
      if (buf == NULL) die("malloc");
    }
    if (q.echo == 2) {
      for (uint64_t done = 0; done < q.bytes;) {
        const uint64_t chunk = 1 << 20;  /* echo in whole MiB pieces (the last one shorter) */
        ssize_t r = recv(fd, buf, q.bytes - done < chunk ? q.bytes - done : chunk, MSG_WAITALL);
        if (r <= 0) die("recv");
        sendAll(fd, buf, (size_t)r);
        done += (uint64_t)r;
      }
      continue;
    }
    recvAll(fd, buf, q.bytes);
    if (q.echo) {
      sendAll(fd, buf, q.bytes);
    } else {
      char ack = 1;
      sendAll(fd, &ack, 1);
    }
  }
  close(fd);
  free(buf);
  return 0;
}

struct Sender {
  int fd;
  const char* buf;
  size_t bytes;
};

static void* sendThread(void* arg) {
  struct Sender* s = arg;
  sendAll(s->fd, s->buf, s->bytes);
  return NULL;
}

static int client(const char* mode, const char* host, const char* port, size_t bytes, int iters) {
  struct addrinfo hints, *res;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, port, &hints, &res) != 0) die("getaddrinfo");
  int fd = -1;
  for (int attempt = 0; attempt < 100; ++attempt) { /* the server may not listen yet */
    fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
    close(fd);
    fd = -1;
    usleep(50000);
  }
  freeaddrinfo(res);
  if (fd < 0) die("connect");
  noDelay(fd);
  const int echo = strcmp(mode, "pingpong") == 0 ? 1 : strcmp(mode, "exchange") == 0 ? 2 : 0;
  char* buf = calloc(bytes > 0 ? bytes : 1, 1);
  double* t = calloc((size_t)iters, sizeof(double));
  for (int i = -2; i < iters; ++i) { /* two warm-up rounds */
    struct Request q = {bytes, (uint32_t)echo, 1};
    const double start = now();
    sendAll(fd, &q, sizeof q);
    if (echo == 2) {
      char* in = malloc(bytes > 0 ? bytes : 1);
      struct Sender sender = {fd, buf, bytes};
      pthread_t thread;
      pthread_create(&thread, NULL, sendThread, &sender);
      recvAll(fd, in, bytes);
      pthread_join(thread, NULL);
      free(in);
      if (i >= 0) t[i] = now() - start;
      continue;
    }
    sendAll(fd, buf, bytes);
    if (echo) {
      recvAll(fd, buf, bytes);
    } else {
      char ack;
      recvAll(fd, &ack, 1);
    }
    if (i >= 0) t[i] = now() - start;
  }
  struct Request done = {0, 0, 0};
  sendAll(fd, &done, sizeof done);
  close(fd);
  qsort(t, (size_t)iters, sizeof(double), compare);
  const double median = t[iters / 2];
  if (echo == 2) {
    printf("exchange %zu bytes: median %.2f us, %.3f GB/s each way\n", bytes, median, (double)bytes / median / 1e3);
  } else if (echo) {
    printf("pingpong %zu bytes: median round trip %.2f us, one way %.2f us\n", bytes, median, median / 2);
  } else {
    printf("stream %zu bytes: median %.2f us, %.3f GB/s\n", bytes, median, (double)bytes / median / 1e3);
  }
  free(buf);
  free(t);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "serve") == 0) return serve(atoi(argv[2]));
  if (argc == 6 && (strcmp(argv[1], "stream") == 0 || strcmp(argv[1], "pingpong") == 0 ||
                    strcmp(argv[1], "exchange") == 0)) {
    return client(argv[1], argv[2], argv[3], (size_t)strtoull(argv[4], NULL, 0), atoi(argv[5]));
  }
  fprintf(stderr, "usage: %s serve PORT | {stream|pingpong|exchange} HOST PORT BYTES ITERS\n", argv[0]);
  return 2;
}
