/* A test double for libibverbs, loaded by Braid through BRAID_IBVERBS_LIBRARY (detection and
 * the verbs transport alike).
 *
 * It answers the calls Braid makes for a fixed machine:
 *   mlx5_0: InfiniBand, 1 port, active, HDR (50 Gb/s per lane) x4 = 200 Gb/s, LID 1
 *   mlx5_1: RoCE (Ethernet link layer), 2 ports: port 1 active NDR x4 = 400 Gb/s, port 2 down
 * Their sysfs paths do not exist, so Braid places the NICs under CPU 0.
 *
 * And it carries RDMA between processes of this machine (or threads of one), for the verbs
 * transport's tests: protection domains, memory regions (rkeys checked against the region's
 * bounds and access flags; dma-buf regions reached through the double's own mapping of the file,
 * as GPU memory would be), completion queues and RC queue pairs with the RESET -> INIT -> RTR
 * -> RTS state machine. Each QP owns an inbound ring in a POSIX shared-memory segment named by
 * its QP number (numbers are unique on the machine: the segment is created exclusively). A
 * peer's QP opens that ring when it moves to RTR with dest_qp_num, and ibv_post_send copies
 * each RDMA write (IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM) into it, in chunks; the
 * owner's process applies the writes to its registered memory, and consumes a posted receive
 * for each write-with-immediate, whenever it polls any completion queue. A send completes once
 * its last chunk is in the peer's ring.
 *
 * Failures, as real hardware reports them: a write outside a region or with an unknown rkey
 * completes with IBV_WC_REM_ACCESS_ERR; a peer QP that was destroyed or whose process is gone
 * gives IBV_WC_RETRY_EXC_ERR; after an error the QP is in the error state and later work
 * requests are flushed (IBV_WC_WR_FLUSH_ERR). BRAID_FAKE_VERBS_FAIL_AFTER=N, when a QP is
 * created, makes the send after its first N successful ones complete with
 * IBV_WC_REM_ACCESS_ERR (tests of error reporting). Modify-QP checks what real RoCE needs: a global route (GRH) at RTR on an
 * Ethernet port, a valid GID index; INIT needs an active port.
 *
 * Completion channels, as real verbs have them: a CQ created with a channel and armed with
 * ibv_req_notify_cq raises one event when its next completion lands (one-shot: arm again for
 * the next); the channel's descriptor is then readable and ibv_get_cq_event returns the CQ
 * (blocking, or -1 with EAGAIN when the descriptor was made non-blocking); every event must be
 * acknowledged (ibv_ack_cq_events) before the CQ is destroyed, and a channel with CQs cannot be
 * destroyed (both fail with EBUSY here, and say so, where real verbs would wait or fail). A
 * channel is a FIFO, /dev/shm/fake-verbs-bell-*, because the double has no NIC: a peer that
 * writes into a QP's ring while the receive CQ of that QP is armed also writes a byte to that
 * CQ's channel, so that the owner wakes and applies the write (the ring says whether the CQ is
 * armed; arming orders itself before the caller's next poll, which finds any write the peer
 * made without ringing); an owner that frees room in a ring its writer found full wakes the
 * writer's channel the same way (ibv_get_cq_event then returns -1/EAGAIN when no armed CQ got
 * a completion: a spurious wake, which real verbs would not have).
 * BRAID_FAKE_VERBS_NO_CHANNEL=1 makes ibv_create_comp_channel fail (ENOSYS).
 *
 * All of it is serialised by one lock per process. A QP's segment is unlinked as soon as its
 * peer has opened it, or when the QP is destroyed; a process killed before either leaves it
 * behind (/dev/shm/fake-verbs-*) until the first QP a later process makes removes it. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr

#define N_DEVICES 2
#define RING_BYTES (4u << 20)
#define CHUNK_BYTES (256u << 10)
#define RING_MAGIC 0x47524246u /* "FBRG" */
#define N_GIDS 4

static struct ibv_device devices[N_DEVICES];
static struct ibv_context contexts[N_DEVICES];
static struct ibv_device* list[N_DEVICES + 1];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int device_index(struct ibv_context* c) { return (int)(c - contexts); }
static int port_active(int dev, int port) { (void)dev; return port == 1; }
static int port_count(int dev) { return dev == 0 ? 1 : 2; }
static int port_is_roce(int dev) { return dev == 1; }

/* ---- devices and ports ---- */

static void make_devices(void) {
  for (int i = 0; i < N_DEVICES; ++i) {
    snprintf(devices[i].name, sizeof devices[i].name, "mlx5_%d", i);
    snprintf(devices[i].ibdev_path, sizeof devices[i].ibdev_path, "/nonexistent/infiniband/mlx5_%d", i);
    list[i] = &devices[i];
  }
  list[N_DEVICES] = NULL;
}

/* One list for the process, made once: threads may ask at the same time. */
struct ibv_device** ibv_get_device_list(int* n) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, make_devices);
  if (n) *n = N_DEVICES;
  return list;
}

void ibv_free_device_list(struct ibv_device** l) { (void)l; }

const char* ibv_get_device_name(struct ibv_device* d) { return d->name; }

static int fake_poll_cq(struct ibv_cq* cq, int n, struct ibv_wc* wc);
static int fake_req_notify_cq(struct ibv_cq* cq, int solicited_only);
static int fake_post_send(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad);
static int fake_post_recv(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad);

struct ibv_context* ibv_open_device(struct ibv_device* d) {
  int i = (int)(d - devices);
  if (i < 0 || i >= N_DEVICES) return NULL;
  pthread_mutex_lock(&lock);
  contexts[i].device = d;
  contexts[i].ops.poll_cq = fake_poll_cq;
  contexts[i].ops.req_notify_cq = fake_req_notify_cq;
  contexts[i].ops.post_send = fake_post_send;
  contexts[i].ops.post_recv = fake_post_recv;
  pthread_mutex_unlock(&lock);
  return &contexts[i];
}

int ibv_close_device(struct ibv_context* c) { (void)c; return 0; }

int ibv_query_device(struct ibv_context* c, struct ibv_device_attr* attr) {
  int i = device_index(c);
  memset(attr, 0, sizeof *attr);
  attr->phys_port_cnt = (uint8_t)port_count(i);
  attr->node_guid = 0x1000 + (uint64_t)i;
  attr->max_qp = 131072;
  attr->max_qp_wr = 32768;
  attr->max_cqe = 4194303;
  attr->max_mr_size = ~0ull;
  return 0;
}

/* The exported symbol takes the older, shorter attribute struct (a prefix of ibv_port_attr). */
int ibv_query_port(struct ibv_context* c, uint8_t port, struct _compat_ibv_port_attr* compat) {
  int i = device_index(c);
  struct ibv_port_attr* attr = (struct ibv_port_attr*)(void*)compat; /* only the shared prefix is written */
  if (port < 1 || port > port_count(i)) return EINVAL;
  memset(attr, 0, offsetof(struct ibv_port_attr, link_layer) + 1);
  attr->state = port_active(i, port) ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = port_is_roce(i) ? IBV_MTU_1024 : IBV_MTU_4096;
  attr->gid_tbl_len = N_GIDS;
  attr->lid = port_is_roce(i) ? 0 : (uint16_t)(1 + port);
  attr->active_width = 2;                 /* 4x */
  attr->active_speed = i == 0 ? 64 : 128; /* HDR, NDR */
  attr->link_layer = port_is_roce(i) ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  return 0;
}

int ibv_query_gid(struct ibv_context* c, uint8_t port, int index, union ibv_gid* gid) {
  if (port < 1 || port > port_count(device_index(c)) || index < 0 || index >= N_GIDS) return EINVAL;
  memset(gid, 0, sizeof *gid);
  gid->raw[0] = 0xfe;
  gid->raw[1] = 0x80;
  gid->raw[14] = (uint8_t)index;
  gid->raw[15] = 1;
  return 0;
}

const char* ibv_wc_status_str(enum ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    default: return "unknown";
  }
}

/* ---- protection domains and memory regions ---- */

struct ibv_pd* ibv_alloc_pd(struct ibv_context* c) {
  struct ibv_pd* pd = calloc(1, sizeof *pd);
  if (pd) pd->context = c;
  return pd;
}

int ibv_dealloc_pd(struct ibv_pd* pd) {
  free(pd);
  return 0;
}

struct fake_mr {
  struct ibv_mr mr;
  int access;
  char* view;        /* where this process reaches the region's bytes: addr, or a dma-buf's own mapping */
  size_t view_bytes; /* a dma-buf mapping's length (unmapped at deregistration), else 0 */
  struct fake_mr* next;
};
static struct fake_mr* mrs;
static uint32_t next_key = 0x1200;
static int dmabuf_regions;

struct ibv_mr* ibv_reg_mr(struct ibv_pd* pd, void* addr, size_t length, int access) {
  if (!pd || (!addr && length)) {
    errno = EINVAL;
    return NULL;
  }
  struct fake_mr* m = calloc(1, sizeof *m);
  if (!m) return NULL;
  pthread_mutex_lock(&lock);
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.lkey = m->mr.rkey = next_key++;
  m->access = access;
  m->view = addr;
  m->next = mrs;
  mrs = m;
  pthread_mutex_unlock(&lock);
  return &m->mr;
}

/* A region of dma-buf `fd` from `offset`, addressed by work requests (and the peer's writes) as
 * `iova`: the double maps the file itself and moves the region's bytes through that mapping
 * only, as a NIC reaches GPU memory through the dma-buf and never through the process's
 * address of it. */
struct ibv_mr* ibv_reg_dmabuf_mr(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
  const long page = sysconf(_SC_PAGESIZE);
  if (!pd || fd < 0 || length == 0 || offset % (uint64_t)page != 0) {
    errno = EINVAL;
    return NULL;
  }
  void* view = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
  if (view == MAP_FAILED) return NULL;
  struct fake_mr* m = calloc(1, sizeof *m);
  if (!m) {
    munmap(view, length);
    return NULL;
  }
  pthread_mutex_lock(&lock);
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = (void*)(uintptr_t)iova;
  m->mr.length = length;
  m->mr.lkey = m->mr.rkey = next_key++;
  m->access = access;
  m->view = view;
  m->view_bytes = length;
  m->next = mrs;
  mrs = m;
  ++dmabuf_regions;
  pthread_mutex_unlock(&lock);
  return &m->mr;
}

/* Dma-buf regions registered and not yet deregistered in this process (tests). */
int fake_verbs_dmabuf_regions(void) {
  pthread_mutex_lock(&lock);
  const int n = dmabuf_regions;
  pthread_mutex_unlock(&lock);
  return n;
}

int ibv_dereg_mr(struct ibv_mr* mr) {
  pthread_mutex_lock(&lock);
  for (struct fake_mr** p = &mrs; *p; p = &(*p)->next) {
    if (&(*p)->mr == mr) {
      struct fake_mr* m = *p;
      *p = m->next;
      if (m->view_bytes > 0) {
        munmap(m->view, m->view_bytes);
        --dmabuf_regions;
      }
      free(m);
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

/* Where this process reaches the bytes of region m at address addr (inside it). */
static char* through(const struct fake_mr* m, uint64_t addr) {
  return m->view + (addr - (uint64_t)(uintptr_t)m->mr.addr);
}

/* The region `key` names, when [addr, addr + len) lies inside it and it allows `access`. */
static struct fake_mr* find_mr(uint32_t key, uint64_t addr, uint64_t len, int access) {
  for (struct fake_mr* m = mrs; m; m = m->next) {
    if (m->mr.rkey != key) continue;
    uint64_t base = (uint64_t)(uintptr_t)m->mr.addr;
    if (addr < base || addr + len > base + m->mr.length || addr + len < addr) return NULL;
    if (access && !(m->access & access)) return NULL;
    return m;
  }
  return NULL;
}

/* ---- completion queues ---- */

/* A completion channel: the FIFO `bell`, read through ch.fd; `self` is this process's own
 * writer (local events, and no end-of-file while no peer holds the FIFO open). */
struct fake_channel {
  struct ibv_comp_channel ch;
  char bell[64];
  int self;
  int cqs; /* CQs made with it */
  pid_t creator;
  struct fake_channel* next;
};
static struct fake_channel* channels;

/* A process that exits without destroying its channels (a test that abandons a communicator)
 * takes their FIFOs with it (not those a forked child inherited); a killed one leaves them
 * behind until the next channel of this machine sweeps the FIFOs of processes that are gone. */
__attribute__((destructor)) static void unlink_bells(void) {
  for (struct fake_channel* f = channels; f; f = f->next)
    if (f->creator == getpid()) unlink(f->bell);
}

/* Removes the files of /dev/shm whose owner process is gone: owner(name, path) says which
 * process a name belongs to (0: not one of ours). */
static void sweep_dead(int (*owner)(const char* name, const char* path)) {
  DIR* d = opendir("/dev/shm");
  for (struct dirent* e; d && (e = readdir(d));) {
    char path[300];
    snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
    const int pid = owner(e->d_name, path);
    if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) continue;
    unlink(path);
  }
  if (d) closedir(d);
}

/* A channel's FIFO names its creator. */
static int bell_owner(const char* name, const char* path) {
  int pid = 0;
  (void)path;
  return sscanf(name, "fake-verbs-bell-%d-", &pid) == 1 ? pid : 0;
}

struct fake_cq {
  struct ibv_cq cq;
  struct ibv_wc* entries;
  int capacity, head, count;
  struct fake_channel* channel;
  int armed, event_pending;
  unsigned events, acked;
  struct fake_cq* next;
};
static struct fake_cq* cqs;

static void set_armed(struct ibv_cq* cq, uint32_t armed);

static void ring_bell(int fd) {
  const char one = 1;
  if (fd >= 0 && write(fd, &one, 1) < 0) { /* full: it is readable already */
  }
}

struct ibv_comp_channel* ibv_create_comp_channel(struct ibv_context* c) {
  static unsigned count;
  const char* none = getenv("BRAID_FAKE_VERBS_NO_CHANNEL");
  if (none && *none == '1') { /* (a provider without completion channels: the carrier polls) */
    errno = ENOSYS;
    return NULL;
  }
  struct fake_channel* f = calloc(1, sizeof *f);
  if (!f) return NULL;
  sweep_dead(bell_owner);
  pthread_mutex_lock(&lock);
  f->creator = getpid();
  snprintf(f->bell, sizeof f->bell, "/dev/shm/fake-verbs-bell-%d-%u", (int)f->creator, ++count);
  pthread_mutex_unlock(&lock);
  unlink(f->bell); /* (a killed process of the same pid left it) */
  f->ch.fd = f->self = -1;
  if (mkfifo(f->bell, 0600) != 0 || (f->ch.fd = open(f->bell, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0 ||
      (f->self = open(f->bell, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
    int e = errno;
    if (f->ch.fd >= 0) close(f->ch.fd);
    unlink(f->bell);
    free(f);
    errno = e;
    return NULL;
  }
  fcntl(f->ch.fd, F_SETFL, 0); /* blocking, as a real channel starts */
  f->ch.context = c;
  f->ch.refcnt = 0;
  pthread_mutex_lock(&lock);
  f->next = channels;
  channels = f;
  pthread_mutex_unlock(&lock);
  return &f->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel* ch) {
  struct fake_channel* f = (struct fake_channel*)ch;
  pthread_mutex_lock(&lock);
  int busy = f->cqs;
  for (struct fake_channel** p = &channels; !busy && *p; p = &(*p)->next) {
    if (*p == f) {
      *p = f->next;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  if (busy) {
    fprintf(stderr, "fake verbs: ibv_destroy_comp_channel with %d CQs still using it\n", busy);
    return EBUSY;
  }
  close(f->ch.fd);
  close(f->self);
  unlink(f->bell);
  free(f);
  return 0;
}

struct ibv_cq* ibv_create_cq(struct ibv_context* c, int cqe, void* cq_context, struct ibv_comp_channel* channel,
                             int comp_vector) {
  (void)comp_vector;
  if (cqe < 1) {
    errno = EINVAL;
    return NULL;
  }
  struct fake_cq* q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->capacity = cqe;
  q->entries = calloc((size_t)cqe, sizeof(struct ibv_wc));
  q->cq.context = c;
  q->cq.cq_context = cq_context;
  q->cq.channel = channel;
  q->cq.cqe = cqe;
  q->channel = (struct fake_channel*)channel;
  pthread_mutex_lock(&lock);
  if (q->channel) ++q->channel->cqs;
  q->next = cqs;
  cqs = q;
  pthread_mutex_unlock(&lock);
  return &q->cq;
}

int ibv_destroy_cq(struct ibv_cq* cq) {
  struct fake_cq* q = (struct fake_cq*)cq;
  pthread_mutex_lock(&lock);
  if (q->events != q->acked) {
    unsigned owed = q->events - q->acked;
    pthread_mutex_unlock(&lock);
    fprintf(stderr, "fake verbs: ibv_destroy_cq with %u events not acknowledged (real verbs waits for them)\n", owed);
    return EBUSY;
  }
  for (struct fake_cq** p = &cqs; *p; p = &(*p)->next) {
    if (*p == q) {
      *p = q->next;
      break;
    }
  }
  if (q->channel) --q->channel->cqs;
  pthread_mutex_unlock(&lock);
  free(q->entries);
  free(q);
  return 0;
}

/* Caller holds the lock. A full queue drops the entry, as an overrun CQ would lose it. An armed
 * CQ raises its one event. */
static void push_wc(struct ibv_cq* cq, const struct ibv_wc* wc) {
  struct fake_cq* q = (struct fake_cq*)cq;
  if (q->count == q->capacity) {
    fprintf(stderr, "fake verbs: completion queue overrun (%d entries)\n", q->capacity);
    return;
  }
  q->entries[(q->head + q->count) % q->capacity] = *wc;
  ++q->count;
  if (q->armed) {
    q->armed = 0;
    q->event_pending = 1;
    set_armed(cq, 0);
    ring_bell(q->channel->self);
  }
}

static int fake_req_notify_cq(struct ibv_cq* cq, int solicited_only) {
  struct fake_cq* q = (struct fake_cq*)cq;
  (void)solicited_only; /* (every completion here is one a solicited request would see) */
  if (!q->channel) return EINVAL;
  pthread_mutex_lock(&lock);
  q->armed = 1;
  set_armed(cq, 1);
  __atomic_thread_fence(__ATOMIC_SEQ_CST); /* (before the caller's next poll reads the rings) */
  pthread_mutex_unlock(&lock);
  return 0;
}

static void progress(void);

int ibv_get_cq_event(struct ibv_comp_channel* ch, struct ibv_cq** cq, void** cq_context) {
  struct fake_channel* f = (struct fake_channel*)ch;
  for (;;) {
    char bytes[256];
    if (read(f->ch.fd, bytes, sizeof bytes) < 0) { /* (empty) */
    }
    pthread_mutex_lock(&lock);
    progress(); /* (what peers wrote into this process's rings lands now) */
    struct fake_cq* found = NULL;
    int more = 0;
    for (struct fake_cq* q = cqs; q; q = q->next) {
      if (q->channel != f || !q->event_pending) continue;
      if (found) {
        more = 1;
        break;
      }
      found = q;
    }
    if (found) {
      found->event_pending = 0;
      ++found->events;
      *cq = &found->cq;
      *cq_context = found->cq.cq_context;
      if (more) ring_bell(f->self); /* (the descriptor stays readable for the next one) */
    }
    pthread_mutex_unlock(&lock);
    if (found) return 0;
    if (fcntl(f->ch.fd, F_GETFL) & O_NONBLOCK) {
      errno = EAGAIN;
      return -1;
    }
    struct pollfd p = {f->ch.fd, POLLIN, 0};
    poll(&p, 1, -1);
  }
}

void ibv_ack_cq_events(struct ibv_cq* cq, unsigned int n) {
  pthread_mutex_lock(&lock);
  ((struct fake_cq*)cq)->acked += n;
  pthread_mutex_unlock(&lock);
}

/* ---- the shared rings between QPs ---- */

struct ring {
  uint32_t magic;
  int32_t owner_pid;
  uint32_t destroyed; /* the owner destroyed its QP */
  uint32_t attached;  /* the peer opened the ring: the owner may unlink its name */
  uint32_t access_error; /* the owner found a write it could not apply */
  uint32_t pad;
  uint64_t head; /* consumer offset (owner) */
  uint64_t tail; /* producer offset (peer) */
  uint32_t writer_waiting; /* the peer found the ring full: wake it when room frees */
  uint32_t owner_armed;    /* the owner's receive CQ waits for an event: wake its channel */
  char pad2[16];
  char owner_bell[64];  /* the channel of the owner's receive CQ ("": none) */
  char writer_bell[64]; /* the channel of the peer's receive CQ ("": none) */
  char data[RING_BYTES];
};

struct message { /* followed by len bytes, padded to 8 */
  uint32_t opcode;
  uint32_t len;
  uint64_t raddr;
  uint32_t rkey;
  uint32_t imm; /* network order, as in the work request */
  uint32_t last; /* the last chunk of a work request */
  uint32_t total;
};

/* A work request waiting to reach the peer's ring (its data copied at post time). */
struct pending {
  struct ibv_send_wr wr;
  char* data;
  uint32_t len, done;
  struct pending* next;
};

struct fake_qp {
  struct ibv_qp qp;
  int port;
  struct ring* in;   /* ours: the peer writes, we apply */
  struct ring* out;  /* the peer's */
  char name[64];
  int name_linked;
  uint64_t* recvs; /* posted receive wr_ids */
  int recv_capacity, recv_head, recv_count;
  struct pending *first, *last;
  int owner_fd, writer_fd; /* the peer's channel, this QP's writer's channel (opened on use), or -1 */
  long fail_after; /* BRAID_FAKE_VERBS_FAIL_AFTER when the QP was created, or -1 */
  long sends_ok;
  struct fake_qp* next;
};
static struct fake_qp* qps;

static struct ring* map_ring(const char* name, int create) {
  int fd = shm_open(name, O_RDWR | (create ? O_CREAT | O_EXCL : 0), 0600);
  if (fd < 0) return NULL;
  if (create && ftruncate(fd, sizeof(struct ring)) != 0) {
    close(fd);
    shm_unlink(name);
    return NULL;
  }
  void* p = mmap(NULL, sizeof(struct ring), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? NULL : p;
}

static void ring_copy_in(struct ring* r, uint64_t at, const void* from, uint32_t n) {
  uint32_t off = (uint32_t)(at % RING_BYTES), first = n < RING_BYTES - off ? n : RING_BYTES - off;
  memcpy(r->data + off, from, first);
  memcpy(r->data, (const char*)from + first, n - first);
}

static void ring_copy_out(const struct ring* r, uint64_t at, void* to, uint32_t n) {
  uint32_t off = (uint32_t)(at % RING_BYTES), first = n < RING_BYTES - off ? n : RING_BYTES - off;
  memcpy(to, r->data + off, first);
  memcpy((char*)to + first, r->data, n - first);
}

static uint32_t padded(uint32_t n) { return (n + 7u) & ~7u; }

/* A QP's ring says its owner in its first words (struct ring); bells have a suffix. */
static int ring_owner(const char* name, const char* path) {
  unsigned num = 0;
  char rest = 0;
  if (sscanf(name, "fake-verbs-%u%c", &num, &rest) != 1) return 0;
  const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  uint32_t words[2] = {0, 0}; /* magic, owner_pid */
  const ssize_t got = pread(fd, words, sizeof words, 0);
  close(fd);
  return got == (ssize_t)sizeof words && words[0] == RING_MAGIC ? (int)(int32_t)words[1] : 0;
}

struct ibv_qp* ibv_create_qp(struct ibv_pd* pd, struct ibv_qp_init_attr* attr) {
  if (!pd || !attr || attr->qp_type != IBV_QPT_RC || !attr->send_cq || !attr->recv_cq) {
    errno = EINVAL;
    return NULL;
  }
  static int swept;
  if (!__atomic_exchange_n(&swept, 1, __ATOMIC_ACQ_REL)) sweep_dead(ring_owner); /* (killed processes' rings) */
  struct fake_qp* q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->recv_capacity = (int)attr->cap.max_recv_wr + 1;
  q->recvs = calloc((size_t)q->recv_capacity, sizeof(uint64_t));
  static unsigned seed;
  if (!seed) seed = (unsigned)getpid() ^ (unsigned)time(NULL);
  for (int tries = 0; tries < 100 && !q->in; ++tries) {
    q->qp.qp_num = 1 + (uint32_t)(rand_r(&seed) % 0xfffffe);
    snprintf(q->name, sizeof q->name, "/fake-verbs-%u", q->qp.qp_num);
    q->in = map_ring(q->name, 1);
  }
  if (!q->in) {
    free(q->recvs);
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->name_linked = 1;
  const char* fail_after = getenv("BRAID_FAKE_VERBS_FAIL_AFTER");
  q->fail_after = fail_after && *fail_after ? atol(fail_after) : -1;
  q->in->magic = RING_MAGIC;
  q->in->owner_pid = getpid();
  q->owner_fd = q->writer_fd = -1;
  const struct fake_channel* bell = ((struct fake_cq*)attr->recv_cq)->channel;
  if (bell) snprintf(q->in->owner_bell, sizeof q->in->owner_bell, "%s", bell->bell);
  q->qp.context = pd->context;
  q->qp.pd = pd;
  q->qp.send_cq = attr->send_cq;
  q->qp.recv_cq = attr->recv_cq;
  q->qp.qp_context = attr->qp_context;
  q->qp.qp_type = IBV_QPT_RC;
  q->qp.state = IBV_QPS_RESET;
  pthread_mutex_lock(&lock);
  q->next = qps;
  qps = q;
  pthread_mutex_unlock(&lock);
  return &q->qp;
}

int ibv_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask) {
  struct fake_qp* q = (struct fake_qp*)qp;
  int dev = device_index(qp->context), rc = 0;
  pthread_mutex_lock(&lock);
  if (!(mask & IBV_QP_STATE)) {
    rc = EINVAL;
  } else if (attr->qp_state == IBV_QPS_INIT) {
    if (qp->state != IBV_QPS_RESET || !(mask & IBV_QP_PORT) || attr->port_num < 1 ||
        attr->port_num > port_count(dev) || !port_active(dev, attr->port_num)) {
      rc = EINVAL;
    } else {
      q->port = attr->port_num;
    }
  } else if (attr->qp_state == IBV_QPS_RTR) {
    const int need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (qp->state != IBV_QPS_INIT || (mask & need) != need) {
      rc = EINVAL;
    } else if (port_is_roce(dev) && (!attr->ah_attr.is_global || attr->ah_attr.grh.sgid_index >= N_GIDS)) {
      rc = EINVAL; /* RoCE routes by GID: a global route is required */
    } else {
      char name[64];
      snprintf(name, sizeof name, "/fake-verbs-%u", attr->dest_qp_num);
      q->out = map_ring(name, 0);
      if (!q->out || q->out->magic != RING_MAGIC) {
        rc = EINVAL; /* no such QP on this "fabric" */
      } else {
        const struct fake_channel* bell = ((struct fake_cq*)qp->recv_cq)->channel;
        if (bell) snprintf(q->out->writer_bell, sizeof q->out->writer_bell, "%s", bell->bell);
        if (q->out->owner_bell[0]) q->owner_fd = open(q->out->owner_bell, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        __atomic_store_n(&q->out->attached, 1, __ATOMIC_RELEASE);
      }
    }
  } else if (attr->qp_state == IBV_QPS_RTS) {
    const int need = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
    if (qp->state != IBV_QPS_RTR || (mask & need) != need) rc = EINVAL;
  } else if (attr->qp_state != IBV_QPS_ERR && attr->qp_state != IBV_QPS_RESET) {
    rc = EINVAL;
  }
  if (rc == 0) qp->state = attr->qp_state;
  pthread_mutex_unlock(&lock);
  return rc;
}

int ibv_destroy_qp(struct ibv_qp* qp) {
  struct fake_qp* q = (struct fake_qp*)qp;
  pthread_mutex_lock(&lock);
  for (struct fake_qp** p = &qps; *p; p = &(*p)->next) {
    if (*p == q) {
      *p = q->next;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  __atomic_store_n(&q->in->destroyed, 1, __ATOMIC_RELEASE);
  if (q->name_linked) shm_unlink(q->name);
  munmap(q->in, sizeof(struct ring));
  if (q->out) munmap(q->out, sizeof(struct ring));
  if (q->owner_fd >= 0) close(q->owner_fd);
  if (q->writer_fd >= 0) close(q->writer_fd);
  while (q->first) {
    struct pending* next = q->first->next;
    free(q->first->data);
    free(q->first);
    q->first = next;
  }
  free(q->recvs);
  free(q);
  return 0;
}

/* Tells the peers writing into the rings of the QPs that receive on `cq` whether to wake its
 * channel. Lock held. */
static void set_armed(struct ibv_cq* cq, uint32_t armed) {
  for (struct fake_qp* q = qps; q; q = q->next)
    if (q->qp.recv_cq == cq) __atomic_store_n(&q->in->owner_armed, armed, __ATOMIC_SEQ_CST);
}

/* ---- posting ---- */

static void complete_send(struct fake_qp* q, const struct ibv_send_wr* wr, enum ibv_wc_status status) {
  if (status == IBV_WC_SUCCESS && !(wr->send_flags & IBV_SEND_SIGNALED)) return;
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.wr_id = wr->wr_id;
  wc.status = status;
  wc.opcode = IBV_WC_RDMA_WRITE;
  wc.qp_num = q->qp.qp_num;
  wc.vendor_err = status == IBV_WC_SUCCESS ? 0 : 0x88;
  push_wc(q->qp.send_cq, &wc);
}

/* The QP breaks: the pending work requests are flushed. Caller holds the lock. */
static void fail_qp(struct fake_qp* q, enum ibv_wc_status status) {
  q->qp.state = IBV_QPS_ERR;
  for (int first = 1; q->first; first = 0) {
    struct pending* p = q->first;
    q->first = p->next;
    complete_send(q, &p->wr, first ? status : IBV_WC_WR_FLUSH_ERR);
    free(p->data);
    free(p);
  }
  q->last = NULL;
}

static int peer_gone(const struct ring* r) {
  if (__atomic_load_n(&r->destroyed, __ATOMIC_ACQUIRE)) return 1;
  return kill(r->owner_pid, 0) != 0 && errno == ESRCH;
}

/* Moves pending work requests into the peer's ring, as far as it has room, and wakes the peer's
 * channel. Lock held. */
static void push_pending(struct fake_qp* q) {
  struct ring* r = q->out;
  uint64_t pushed_from = r ? r->tail : 0;
  while (q->first && q->qp.state == IBV_QPS_RTS) {
    if (peer_gone(r)) return fail_qp(q, IBV_WC_RETRY_EXC_ERR);
    if (__atomic_load_n(&r->access_error, __ATOMIC_ACQUIRE)) return fail_qp(q, IBV_WC_REM_ACCESS_ERR);
    struct pending* p = q->first;
    uint32_t n = p->len - p->done < CHUNK_BYTES ? p->len - p->done : CHUNK_BYTES;
    uint64_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE), tail = r->tail;
    if (tail + sizeof(struct message) + padded(n) - head > RING_BYTES) {
      /* Full: the owner wakes this process's channel once it frees room (asked before looking
       * again, so that a drain in between is not missed). */
      __atomic_store_n(&r->writer_waiting, 1, __ATOMIC_SEQ_CST);
      if (tail + sizeof(struct message) + padded(n) - __atomic_load_n(&r->head, __ATOMIC_SEQ_CST) > RING_BYTES) break;
      continue;
    }
    struct message m = {p->wr.opcode, n, p->wr.wr.rdma.remote_addr + p->done, p->wr.wr.rdma.rkey,
                        p->wr.imm_data, p->done + n == p->len, p->len};
    ring_copy_in(r, tail, &m, sizeof m);
    ring_copy_in(r, tail + sizeof m, p->data + p->done, n);
    __atomic_store_n(&r->tail, tail + sizeof m + padded(n), __ATOMIC_RELEASE);
    p->done += n;
    if (p->done < p->len || (p->len == 0 && !m.last)) continue;
    q->first = p->next;
    if (!q->first) q->last = NULL;
    complete_send(q, &p->wr, IBV_WC_SUCCESS);
    free(p->data);
    free(p);
  }
  if (!r || r->tail == pushed_from) return;
  __atomic_thread_fence(__ATOMIC_SEQ_CST); /* (the tail before the look at the owner's arming) */
  if (__atomic_load_n(&r->owner_armed, __ATOMIC_SEQ_CST)) ring_bell(q->owner_fd);
}

/* Applies what the peer wrote into our ring. Lock held. */
static void apply_ring(struct fake_qp* q) {
  struct ring* r = q->in;
  if (q->name_linked && __atomic_load_n(&r->attached, __ATOMIC_ACQUIRE)) {
    shm_unlink(q->name);
    q->name_linked = 0;
  }
  for (;;) {
    uint64_t head = r->head, tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
    if (head == tail) return;
    struct message m;
    ring_copy_out(r, head, &m, sizeof m);
    const int imm = m.opcode == IBV_WR_RDMA_WRITE_WITH_IMM && m.last;
    if (imm && q->recv_count == 0) return; /* no receive posted yet: the peer retries */
    struct fake_mr* mr = find_mr(m.rkey, m.raddr, m.len, IBV_ACCESS_REMOTE_WRITE);
    if (!mr && m.len > 0) {
      __atomic_store_n(&r->access_error, 1, __ATOMIC_RELEASE);
      __atomic_store_n(&r->head, tail, __ATOMIC_RELEASE); /* the rest is dropped */
      return;
    }
    if (m.len > 0) ring_copy_out(r, head + sizeof m, through(mr, m.raddr), m.len);
    __atomic_store_n(&r->head, head + sizeof m + padded(m.len), __ATOMIC_RELEASE);
    if (imm) {
      struct ibv_wc wc;
      memset(&wc, 0, sizeof wc);
      wc.wr_id = q->recvs[q->recv_head];
      q->recv_head = (q->recv_head + 1) % q->recv_capacity;
      --q->recv_count;
      wc.status = IBV_WC_SUCCESS;
      wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
      wc.wc_flags = IBV_WC_WITH_IMM;
      wc.imm_data = m.imm;
      wc.byte_len = m.total;
      wc.qp_num = q->qp.qp_num;
      push_wc(q->qp.recv_cq, &wc);
    }
  }
}

/* apply_ring, then wakes the writer's channel where it found the ring full and room was freed.
 * Lock held. */
static void drain_ring(struct fake_qp* q) {
  struct ring* r = q->in;
  const uint64_t from = r->head;
  apply_ring(q);
  if (r->head == from || !__atomic_exchange_n(&r->writer_waiting, 0, __ATOMIC_SEQ_CST)) return;
  if (q->writer_fd < 0 && r->writer_bell[0]) q->writer_fd = open(r->writer_bell, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  ring_bell(q->writer_fd);
}

static void progress(void) {
  for (struct fake_qp* q = qps; q; q = q->next) {
    if (q->out) push_pending(q);
    if (q->qp.state == IBV_QPS_RTR || q->qp.state == IBV_QPS_RTS) drain_ring(q);
  }
}

static int fake_post_send(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad) {
  struct fake_qp* q = (struct fake_qp*)qp;
  pthread_mutex_lock(&lock);
  int rc = 0;
  for (; wr; wr = wr->next) {
    if (qp->state == IBV_QPS_ERR) {
      complete_send(q, wr, IBV_WC_WR_FLUSH_ERR);
      continue;
    }
    if (qp->state != IBV_QPS_RTS ||
        (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)) {
      rc = EINVAL;
      break;
    }
    uint32_t len = 0;
    for (int i = 0; i < wr->num_sge; ++i) len += wr->sg_list[i].length;
    struct pending* p = calloc(1, sizeof *p);
    p->data = malloc(len ? len : 1);
    p->len = len;
    p->wr = *wr;
    p->wr.next = NULL;
    p->wr.sg_list = NULL;
    uint32_t at = 0;
    int ok = 1;
    for (int i = 0; i < wr->num_sge; ++i) {
      const struct ibv_sge* s = &wr->sg_list[i];
      const struct fake_mr* from = (wr->send_flags & IBV_SEND_INLINE) ? NULL : find_mr(s->lkey, s->addr, s->length, 0);
      if (!(wr->send_flags & IBV_SEND_INLINE) && !from) ok = 0;
      if (from || (wr->send_flags & IBV_SEND_INLINE))
        memcpy(p->data + at, from ? through(from, s->addr) : (const void*)(uintptr_t)s->addr, s->length);
      at += s->length;
    }
    if (!ok) {
      complete_send(q, wr, IBV_WC_LOC_PROT_ERR);
      free(p->data);
      free(p);
      fail_qp(q, IBV_WC_WR_FLUSH_ERR);
      continue;
    }
    if (q->fail_after >= 0 && q->sends_ok >= q->fail_after) {
      q->last ? (q->last->next = p) : (q->first = p);
      q->last = p;
      fail_qp(q, IBV_WC_REM_ACCESS_ERR);
      continue;
    }
    ++q->sends_ok;
    q->last ? (q->last->next = p) : (q->first = p);
    q->last = p;
  }
  if (rc && bad) *bad = wr;
  push_pending(q);
  pthread_mutex_unlock(&lock);
  return rc;
}

static int fake_post_recv(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad) {
  struct fake_qp* q = (struct fake_qp*)qp;
  int rc = 0;
  pthread_mutex_lock(&lock);
  for (; wr; wr = wr->next) {
    if (q->recv_count == q->recv_capacity || qp->state == IBV_QPS_RESET) {
      rc = ENOMEM;
      if (bad) *bad = wr;
      break;
    }
    q->recvs[(q->recv_head + q->recv_count) % q->recv_capacity] = wr->wr_id;
    ++q->recv_count;
  }
  /* A write with immediate that waited for a receive (the peer's RNR retry) lands now. */
  if (qp->state == IBV_QPS_RTR || qp->state == IBV_QPS_RTS) drain_ring(q);
  pthread_mutex_unlock(&lock);
  return rc;
}

static int fake_poll_cq(struct ibv_cq* cq, int n, struct ibv_wc* wc) {
  struct fake_cq* q = (struct fake_cq*)cq;
  pthread_mutex_lock(&lock);
  progress();
  int got = 0;
  while (got < n && q->count > 0) {
    wc[got++] = q->entries[q->head];
    q->head = (q->head + 1) % q->capacity;
    --q->count;
  }
  pthread_mutex_unlock(&lock);
  return got;
}
