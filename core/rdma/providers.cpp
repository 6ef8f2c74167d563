#include "core/rdma/providers.h"

#include "core/base/libc.h"
#include "core/base/log.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <linux/netlink.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/rdma_netlink.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace ferry::providers {

const char* provider_for(uint32_t driver_id) noexcept {
  // The kernel's enum rdma_driver_id; the newest ids are spelled as numbers, for
  // headers older than the kernel.
  switch (driver_id) {
    case RDMA_DRIVER_MLX5: return "mlx5";
    case RDMA_DRIVER_MLX4: return "mlx4";
    case RDMA_DRIVER_CXGB4: return "cxgb4";
    case RDMA_DRIVER_MTHCA: return "mthca";
    case RDMA_DRIVER_BNXT_RE: return "bnxt_re";
    case RDMA_DRIVER_OCRDMA: return "ocrdma";
    case RDMA_DRIVER_IRDMA: return "irdma";
    case RDMA_DRIVER_VMW_PVRDMA: return "vmw_pvrdma";
    case RDMA_DRIVER_QEDR: return "qedr";
    case RDMA_DRIVER_HNS: return "hns";
    case RDMA_DRIVER_RXE: return "rxe";
    case RDMA_DRIVER_HFI1: return "hfi1verbs";
    case RDMA_DRIVER_QIB: return "ipathverbs";
    case RDMA_DRIVER_EFA: return "efa";
    case RDMA_DRIVER_SIW: return "siw";
    case RDMA_DRIVER_ERDMA: return "erdma";
    case RDMA_DRIVER_ERDMA + 1: return "mana";
    case RDMA_DRIVER_ERDMA + 2: return "ionic";
    default: return nullptr;  // unknown, or a driver without a provider (usnic, cxgb3, nes)
  }
}

const uint8_t* find_attr(const uint8_t* p, size_t len, uint16_t type, size_t* size) noexcept {
  while (len >= NLA_HDRLEN) {
    nlattr a;
    memcpy(&a, p, sizeof a);
    if (a.nla_len < NLA_HDRLEN || a.nla_len > len) return nullptr;
    if ((a.nla_type & NLA_TYPE_MASK) == type) {
      *size = a.nla_len - NLA_HDRLEN;
      return p + NLA_HDRLEN;
    }
    const size_t step = NLA_ALIGN(a.nla_len);
    if (step >= len) return nullptr;
    p += step;
    len -= step;
  }
  return nullptr;
}

namespace {

bool attr_u32(const nlmsghdr* h, uint16_t type, uint32_t& out) {
  size_t n = 0;
  const uint8_t* v = find_attr(reinterpret_cast<const uint8_t*>(h) + NLMSG_HDRLEN, h->nlmsg_len - NLMSG_HDRLEN, type, &n);
  if (!v || n < sizeof out) return false;
  memcpy(&out, v, sizeof out);
  return true;
}

// One RDMA netlink socket, for one question at a time.
class Netlink {
 public:
  Netlink() : fd_(real.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA)) {
    if (fd_ < 0) return;
    timeval t{1, 0};  // the kernel answers at once; this only bounds a surprise
    real.setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  }
  ~Netlink() {
    if (fd_ >= 0) real.close(fd_);
  }
  Netlink(const Netlink&) = delete;
  Netlink& operator=(const Netlink&) = delete;
  bool ok() const { return fd_ >= 0; }

  // Sends a request of command `cmd` with the attributes in `attrs` (already encoded),
  // then hands every reply message to `each` until the answer ends. False on any error.
  template <class Each>
  bool ask(uint16_t cmd, uint16_t flags, const uint8_t* attrs, size_t attrs_len, Each each) {
    alignas(nlmsghdr) uint8_t req[NLMSG_HDRLEN + 64];
    if (attrs_len > sizeof req - NLMSG_HDRLEN) return false;
    nlmsghdr h{};
    h.nlmsg_len = static_cast<uint32_t>(NLMSG_HDRLEN + attrs_len);
    h.nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, cmd);
    h.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
    h.nlmsg_seq = ++seq_;
    memcpy(req, &h, sizeof h);
    memcpy(req + NLMSG_HDRLEN, attrs, attrs_len);
    sockaddr_nl to{};
    to.nl_family = AF_NETLINK;
    if (real.sendto(fd_, req, h.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0) return false;
    const bool dump = flags & NLM_F_DUMP;
    // A dump's messages come in pages; a page-sized buffer and then some takes each.
    alignas(nlmsghdr) uint8_t buf[8192];
    for (;;) {
      const ssize_t got = real.recv(fd_, buf, sizeof buf, 0);
      if (got <= 0) return false;
      size_t left = static_cast<size_t>(got);
      for (auto* m = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(m, left); m = NLMSG_NEXT(m, left)) {
        if (m->nlmsg_seq != seq_) continue;
        if (m->nlmsg_type == NLMSG_DONE) return true;
        if (m->nlmsg_type == NLMSG_ERROR) return false;
        each(m);
        if (!dump) return true;
      }
    }
  }

 private:
  int fd_;
  uint32_t seq_ = 0;
};

// Appends attribute `type` with `n` bytes of `v` to `out` at `*at`.
void put_attr(uint8_t* out, size_t* at, uint16_t type, const void* v, size_t n) {
  nlattr a{static_cast<uint16_t>(NLA_HDRLEN + n), type};
  memcpy(out + *at, &a, sizeof a);
  memcpy(out + *at + NLA_HDRLEN, v, n);
  *at += NLA_ALIGN(NLA_HDRLEN + n);
}

}  // namespace

bool needed(std::vector<std::string>& out, std::string& why) {
  Netlink nl;
  if (!nl.ok()) {
    why = std::string("no RDMA netlink: ") + strerror(errno);
    return false;
  }
  std::vector<uint32_t> devices;
  if (!nl.ask(RDMA_NLDEV_CMD_GET, NLM_F_DUMP, nullptr, 0, [&](const nlmsghdr* m) {
        uint32_t index = 0;
        if (attr_u32(m, RDMA_NLDEV_ATTR_DEV_INDEX, index)) devices.push_back(index);
      })) {
    why = "the RDMA netlink device list did not come";
    return false;
  }
  for (uint32_t index : devices) {
    uint8_t attrs[32];
    size_t len = 0;
    put_attr(attrs, &len, RDMA_NLDEV_ATTR_DEV_INDEX, &index, sizeof index);
    put_attr(attrs, &len, RDMA_NLDEV_ATTR_CHARDEV_TYPE, "uverbs", sizeof "uverbs");
    uint32_t id = RDMA_DRIVER_UNKNOWN;
    bool answered = false;
    nl.ask(RDMA_NLDEV_CMD_GET_CHARDEV, 0, attrs, len,
           [&](const nlmsghdr* m) { answered = attr_u32(m, RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, id); });
    const char* name = answered ? provider_for(id) : nullptr;
    if (!name) {
      why = answered ? "a device's driver id " + std::to_string(id) + " is not one ferry knows"
                     : "a device has no uverbs driver id";
      return false;
    }
    if (std::find(out.begin(), out.end(), name) == out.end()) out.emplace_back(name);
  }
  return true;
}

namespace {

// The file of provider `name` in `dir`: lib<name>-rdmav<N>.so, N being the provider ABI
// of the libibverbs installed beside it (so the one file there).
std::string provider_file(const std::string& dir, const std::string& name) {
  DIR* d = opendir(dir.c_str());
  if (!d) return {};
  const std::string prefix = "lib" + name + "-rdmav";
  std::string found;
  int count = 0;
  while (dirent* e = readdir(d)) {
    const size_t n = strlen(e->d_name);
    if (n > prefix.size() + 3 && strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0 &&
        strcmp(e->d_name + n - 3, ".so") == 0) {
      found = dir + "/" + e->d_name;
      ++count;
    }
  }
  closedir(d);
  return count == 1 ? found : std::string();
}

}  // namespace

void load(const std::string& dir) noexcept {
  std::vector<std::string> names;
  std::string why;
  if (!needed(names, why)) {
    FERRY_LOG(debug, "rdma", "libibverbs loads every provider: %s", why.c_str());
    return;
  }
  for (const std::string& name : names) {
    const std::string file = provider_file(dir, name);
    if (file.empty()) {
      FERRY_LOG(debug, "rdma", "libibverbs loads every provider: no one file of provider %s in %s", name.c_str(),
                dir.c_str());
      return;
    }
    if (!dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      FERRY_LOG(debug, "rdma", "libibverbs loads every provider: %s", dlerror());
      return;
    }
    FERRY_LOG(debug, "rdma", "loaded provider %s", file.c_str());
  }
}

}  // namespace ferry::providers
