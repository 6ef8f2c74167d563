#include "core/rdma/rdma.h"

#include "core/base/fork_path.h"
#include "core/base/fork_spare.h"
#include "core/base/log.h"

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ferry::rdma {

void CmIdDeleter::operator()(rdma_cm_id* id) const noexcept {
  if (!id) return;
  if (id->qp) rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

void UnmapDeleter::operator()(uint8_t* p) const noexcept { munmap(p, bytes); }

Buffer allocate(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t whole = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, whole, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Buffer(nullptr, UnmapDeleter{0});
  // Fresh anonymous pages are zero. Without DONTFORK a child would copy them; nothing
  // breaks, it only costs.
  (void)madvise(p, whole, MADV_DONTFORK);
  return Buffer(static_cast<uint8_t*>(p), UnmapDeleter{whole});
}

namespace {
struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<Device>> all;
};
FERRY_FORK_DATA Registry* g_registry = new Registry;  // process lifetime; a forked child gets its own
FERRY_FORK_DATA forking::Spare<Registry> g_spare;
std::vector<std::unique_ptr<Device>>& registry() { return g_registry->all; }

std::atomic<void (*)(int&) noexcept> g_keeper{nullptr};
void keep(int& field) {
  if (void (*k)(int&) noexcept = g_keeper.load(std::memory_order_acquire)) k(field);
}
}  // namespace

void set_fd_keeper(void (*keep)(int& field) noexcept) noexcept { g_keeper.store(keep, std::memory_order_release); }

void before_fork() noexcept { g_spare.make(); }
void after_fork_child() noexcept { g_registry = g_spare.take(); }

Device* device_for(ibv_context* cm_context, std::string& why) {
  std::lock_guard<std::mutex> lock(g_registry->mu);
  for (auto& d : registry())
    if (d->device == cm_context->device) return d.get();
  // librdmacm's own context for the device, opened for this process's ids: its
  // descriptors become ferry's (core/base/own_fd.h) too.
  keep(cm_context->cmd_fd);
  keep(cm_context->async_fd);
  auto d = std::make_unique<Device>();
  d->device = cm_context->device;
  d->name = ibv_get_device_name(d->device);
  d->context.reset(ibv_open_device(d->device));
  if (!d->context) {
    why = "ibv_open_device " + d->name + ": " + strerror(errno);
    return nullptr;
  }
  keep(d->context->cmd_fd);
  keep(d->context->async_fd);
  d->events.reset(ibv_create_comp_channel(d->context.get()));
  if (!d->events) {
    why = "ibv_create_comp_channel on " + d->name + ": " + strerror(errno);
    return nullptr;
  }
  keep(d->events->fd);  // before any CQ names it
  registry().push_back(std::move(d));
  return registry().back().get();
}

std::vector<Device*> devices() {
  std::lock_guard<std::mutex> lock(g_registry->mu);
  std::vector<Device*> out;
  for (auto& d : registry()) out.push_back(d.get());
  return out;
}

bool parse_devices(const std::string& text, std::vector<DeviceChoice>& out, std::string& why) {
  std::vector<DeviceChoice> list;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (item.empty()) continue;
    DeviceChoice c;
    size_t colon = item.find(':');
    c.name = item.substr(0, colon);
    if (colon != std::string::npos) {
      char* end = nullptr;
      long port = strtol(item.c_str() + colon + 1, &end, 10);
      if (!*(item.c_str() + colon + 1) || *end || port < 1 || port > 255) {
        why = "bad port in \"" + item + "\"";
        return false;
      }
      c.port = static_cast<int>(port);
    }
    if (c.name.empty()) {
      why = "empty device name in \"" + item + "\"";
      return false;
    }
    list.push_back(c);
  }
  out = std::move(list);
  return true;
}

bool device_allowed(const std::vector<DeviceChoice>& choice, const std::string& name, int port) {
  if (choice.empty()) return true;
  for (const auto& c : choice)
    if (c.name == name && (c.port == 0 || c.port == port)) return true;
  return false;
}

bool id_allowed(rdma_cm_id* id, const std::string& devices) {
  std::vector<DeviceChoice> choice;
  std::string why;
  if (!parse_devices(devices, choice, why)) return false;
  return device_allowed(choice, ibv_get_device_name(id->verbs->device), id->port_num);
}

bool some_device_allowed(const std::string& devices) {
  static const bool allowed = [&devices] {
    std::vector<DeviceChoice> choice;
    std::string why;
    if (!parse_devices(devices, choice, why)) {
      FERRY_LOG(warn, "config", "FERRY_DEVICES: %s; no device will be used", why.c_str());
      return false;
    }
    if (choice.empty()) return true;
    std::string present;
    if (DIR* d = opendir("/sys/class/infiniband")) {
      while (dirent* e = readdir(d))
        if (e->d_name[0] != '.') present += std::string(present.empty() ? "" : ", ") + e->d_name;
      closedir(d);
    }
    bool found = false;
    for (const auto& c : choice) {
      const bool here = (", " + present + ", ").find(", " + c.name + ", ") != std::string::npos;
      found = found || here;
      if (!here)
        FERRY_LOG(warn, "config", "FERRY_DEVICES names %s, which does not exist (devices here: %s)", c.name.c_str(),
                  present.empty() ? "none" : present.c_str());
    }
    return found;
  }();
  return allowed;
}

rdma_conn_param conn_param(uint32_t qp_num, const void* data, uint8_t len) {
  rdma_conn_param p{};
  p.qp_num = qp_num;
  p.private_data = data;
  p.private_data_len = len;
  // What the peer's queue pair is to use towards ours (ours are bounded whatever the
  // peer asks: core/conn/channel.cpp, move_qp). 6, not 7: rxe takes 7 as "retry
  // forever", and a queue pair whose path died must fail (about 2 s with our ack
  // timeout) for the connection to go back to TCP; a receiver short of receive requests
  // (ferry's never is: its flow control bounds what the peer sends) fails it in about 4 s.
  p.retry_count = 6;
  p.rnr_retry_count = 6;
  return p;
}

}  // namespace ferry::rdma
