// An LD_PRELOAD library that listens on rdma_cm and does nothing else: bench-passthrough's
// second floor for fork_rate, what any server that accepts RDMA connections pays per
// fork for holding rdma-core and a device (its libraries, its descriptors, the
// kernel's work for them at fork and exit). Listens on port 7999 of the IPv4 address
// in RDMA_CM_PRELOAD_IP, with a thread that waits on the event channel, as a progress
// thread would.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>

static struct rdma_event_channel* channel;

static void* wait_events(void* arg) {
  (void)arg;
  struct pollfd p = {channel->fd, POLLIN, 0};
  for (;;) poll(&p, 1, -1);
  return NULL;
}

__attribute__((constructor)) static void listen_on_rdma_cm(void) {
  const char* ip = getenv("RDMA_CM_PRELOAD_IP");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(7999)};
  struct rdma_cm_id* id = NULL;
  pthread_t t;
  if (!ip || inet_pton(AF_INET, ip, &a.sin_addr) != 1) return;
  channel = rdma_create_event_channel();
  if (!channel || rdma_create_id(channel, &id, NULL, RDMA_PS_TCP) || rdma_bind_addr(id, (struct sockaddr*)&a) ||
      rdma_listen(id, 16) || pthread_create(&t, NULL, wait_events, NULL)) {
    fprintf(stderr, "rdma_cm_preload: could not listen on %s\n", ip);
  }
}
