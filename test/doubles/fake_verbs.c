/* A test double for libibverbs, loaded by Braid's detection through BRAID_IBVERBS_LIBRARY.
 *
 * It answers the calls Braid makes for a fixed machine:
 *   mlx5_0: InfiniBand, 1 port, active, HDR (50 Gb/s per lane) x4 = 200 Gb/s
 *   mlx5_1: RoCE (Ethernet link layer), 2 ports: port 1 active NDR x4 = 400 Gb/s, port 2 down
 * Their sysfs paths do not exist, so Braid places the NICs under CPU 0. */
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#undef ibv_get_device_list
#undef ibv_query_port

static struct ibv_device devices[2];
static struct ibv_context contexts[2];
static struct ibv_device* list[3];

struct ibv_device** ibv_get_device_list(int* n) {
  for (int i = 0; i < 2; ++i) {
    memset(&devices[i], 0, sizeof devices[i]);
    snprintf(devices[i].name, sizeof devices[i].name, "mlx5_%d", i);
    snprintf(devices[i].ibdev_path, sizeof devices[i].ibdev_path, "/nonexistent/infiniband/mlx5_%d", i);
    list[i] = &devices[i];
  }
  list[2] = NULL;
  *n = 2;
  return list;
}

void ibv_free_device_list(struct ibv_device** l) { (void)l; }

const char* ibv_get_device_name(struct ibv_device* d) { return d->name; }

struct ibv_context* ibv_open_device(struct ibv_device* d) {
  int i = (int)(d - devices);
  contexts[i].device = d;
  return &contexts[i];
}

int ibv_close_device(struct ibv_context* c) { (void)c; return 0; }

int ibv_query_device(struct ibv_context* c, struct ibv_device_attr* attr) {
  int i = (int)(c - contexts);
  memset(attr, 0, sizeof *attr);
  attr->phys_port_cnt = i == 0 ? 1 : 2;
  attr->node_guid = 0x1000 + (uint64_t)i;
  attr->max_qp = 131072;
  return 0;
}

/* The exported symbol takes the older, shorter attribute struct (a prefix of ibv_port_attr). */
int ibv_query_port(struct ibv_context* c, uint8_t port, struct _compat_ibv_port_attr* compat) {
  int i = (int)(c - contexts);
  struct ibv_port_attr* attr = (struct ibv_port_attr*)(void*)compat; /* only the shared prefix is written */
  memset(attr, 0, offsetof(struct ibv_port_attr, link_layer) + 1);
  attr->state = (i == 1 && port == 2) ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  attr->active_width = 2;               /* 4x */
  attr->active_speed = i == 0 ? 64 : 128; /* HDR, NDR */
  attr->link_layer = i == 0 ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int ibv_query_gid(struct ibv_context* c, uint8_t port, int index, union ibv_gid* gid) {
  (void)c; (void)port; (void)index;
  memset(gid, 0, sizeof *gid);
  gid->raw[0] = 0xfe;
  gid->raw[1] = 0x80;
  gid->raw[15] = 1;
  return 0;
}
