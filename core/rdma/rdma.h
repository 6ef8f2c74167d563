// RAII for the verbs and rdma_cm objects ferry uses, and per-device resources.
// Every object is owned by a unique_ptr whose deleter is the matching destroy call;
// factories return null (with the reason) instead of leaving half-built objects.
#pragma once

#include "core/base/fork_path.h"
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>
#include <string>
#include <vector>

namespace ferry::rdma {

template <class T, auto Destroy>
struct Deleter {
  void operator()(T* p) const noexcept {
    if (p) Destroy(p);
  }
};

using EventChannel = std::unique_ptr<rdma_event_channel, Deleter<rdma_event_channel, rdma_destroy_event_channel>>;
using CompChannel = std::unique_ptr<ibv_comp_channel, Deleter<ibv_comp_channel, ibv_destroy_comp_channel>>;
using Context = std::unique_ptr<ibv_context, Deleter<ibv_context, ibv_close_device>>;
using Pd = std::unique_ptr<ibv_pd, Deleter<ibv_pd, ibv_dealloc_pd>>;
using Cq = std::unique_ptr<ibv_cq, Deleter<ibv_cq, ibv_destroy_cq>>;
using Mr = std::unique_ptr<ibv_mr, Deleter<ibv_mr, ibv_dereg_mr>>;
using Qp = std::unique_ptr<ibv_qp, Deleter<ibv_qp, ibv_destroy_qp>>;

// An rdma_cm id together with its QP (destroyed first).
struct CmIdDeleter {
  void operator()(rdma_cm_id* id) const noexcept;
};
using CmId = std::unique_ptr<rdma_cm_id, CmIdDeleter>;

// Memory to register (rings, control slots): whole pages of a mapping of its own,
// zeroed, that a forked child does not get (MADV_DONTFORK). The kernel copies a page
// that is pinned for RDMA into the child at fork itself (no copy-on-write for it), so
// a forking server paid a copy of every registered page of every connection at each
// fork; and a child never touches its parent's RDMA objects (Link::inherited).
struct UnmapDeleter {
  size_t bytes = 0;
  void operator()(uint8_t* p) const noexcept;
};
using Buffer = std::unique_ptr<uint8_t, UnmapDeleter>;
Buffer allocate(size_t bytes);

// What ferry keeps per RDMA device: a device context of its own and one completion
// channel that every CQ on the device reports to. Created on first use, kept for the
// life of the process. Protection domains are per connection (core/conn/channel.h).
//
// The context is opened by this process, never taken from rdma_cm: librdmacm opens one
// context per device per address space and keeps it across fork, and the kernel refuses
// verbs commands (rxe's doorbell among them) written to a descriptor another process
// opened. With contexts of its own and QPs it drives itself (rdma_cm only carries the
// handshake), a forked child makes RDMA connections like any process.
struct Device {
  ibv_device* device = nullptr;
  Context context;
  CompChannel events;
  std::string name;
  uint8_t port = 1;
};
// The device of an rdma_cm id's context (`cm_context`, librdmacm's own).
Device* device_for(ibv_context* cm_context, std::string& why);
// How device_for makes the descriptors the libraries open for a device ferry's own
// (core/base/own_fd.h): set once by the poller, which watches them, before it asks for one.
void set_fd_keeper(void (*keep)(int& field) noexcept) noexcept;
// Every device opened so far (for the poller to watch their completion channels).
std::vector<Device*> devices();
// In a forked child: the parent's devices (contexts, completion channels) are left
// to it; the child opens its own when it first needs them.
void before_fork() noexcept;
FERRY_FORK_PATH void after_fork_child() noexcept;

// FERRY_DEVICES: "name[:port],...". Empty list = every ACTIVE device.
struct DeviceChoice {
  std::string name;
  int port = 0;  // 0 = any
};
bool parse_devices(const std::string& text, std::vector<DeviceChoice>& out, std::string& why);
// Whether the device/port may carry ferry traffic under the configured choice.
bool device_allowed(const std::vector<DeviceChoice>& choice, const std::string& name, int port);
// Whether `devices` (FERRY_DEVICES) lets the device and port of an rdma_cm id carry a
// connection.
bool id_allowed(rdma_cm_id* id, const std::string& devices);
// Whether `devices` lets any device of this machine carry a connection (looked up once:
// the setting does not change). When it names none that exists, no connection can
// upgrade: none starts a handshake, no listener listens on rdma_cm (a peer's request is
// refused at once rather than left to time out), and rdma-core is never loaded. The
// devices are the entries of /sys/class/infiniband; one warning names each device the
// setting names that is not there.
bool some_device_allowed(const std::string& devices);
// The parameters of an rdma_cm connect or accept for a queue pair, with private data.
rdma_conn_param conn_param(uint32_t qp_num, const void* data, uint8_t len);

}  // namespace ferry::rdma
