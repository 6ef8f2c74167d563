#include "core/proto/tcp_resume.h"

#include <endian.h>

#include <cstring>

namespace ferry::tcp_resume {

// Layout: magic (4 bytes), version (1), three zero bytes, offset (8); network order.
void encode(const Header& h, uint8_t out[kHeaderSize]) {
  memset(out, 0, kHeaderSize);
  const uint32_t magic = htobe32(kMagic);
  memcpy(out, &magic, sizeof magic);
  out[4] = kVersion;
  const uint64_t offset = htobe64(h.offset);
  memcpy(out + 8, &offset, sizeof offset);
}

bool decode(const uint8_t in[kHeaderSize], Header& out) {
  uint32_t magic;
  memcpy(&magic, in, sizeof magic);
  if (be32toh(magic) != kMagic || in[4] != kVersion || in[5] || in[6] || in[7]) return false;
  uint64_t offset;
  memcpy(&offset, in + 8, sizeof offset);
  out.offset = be64toh(offset);
  return true;
}

}  // namespace ferry::tcp_resume
