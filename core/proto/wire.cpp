#include "core/proto/wire.h"

#include "core/proto/ring.h"

#include <algorithm>
#include <cstring>

namespace ferry::wire {
namespace {

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}
uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = v << 8 | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

// magic(4) version(1) reserved(3)
void put_header(uint8_t* p) {
  put32(p, kMagic);
  p[4] = kVersion;
  p[5] = p[6] = p[7] = 0;
}
Error check_header(const uint8_t* p) {
  if (get32(p) != kMagic) return Error::bad_magic;
  if (p[4] != kVersion) return Error::bad_version;
  return Error::ok;
}

// addr(8) rkey(4) size(8)
void put_ring(uint8_t* p, const RingRef& r) {
  put64(p, r.addr);
  put32(p + 8, r.rkey);
  put64(p + 12, r.size);
}
Error get_ring(const uint8_t* p, RingRef& r) {
  r.addr = get64(p);
  r.rkey = get32(p + 8);
  r.size = get64(p + 12);
  return ring::valid_capacity(r.size) && r.addr != 0 ? Error::ok : Error::bad_ring;
}

}  // namespace

const char* to_string(Error e) {
  switch (e) {
    case Error::ok: return "ok";
    case Error::too_short: return "private data too short";
    case Error::bad_magic: return "not a ferry request (magic)";
    case Error::bad_version: return "unsupported protocol version";
    case Error::bad_ring: return "ring size or address out of range";
    case Error::bad_port: return "port 0";
    case Error::bad_nonce: return "not the nonce this side sent";
  }
  return "?";
}

// Hello: header(8) client_port(2) server_port(2) ring(20) = 32
void encode(const Hello& h, uint8_t out[kHelloSize]) {
  put_header(out);
  put16(out + 8, h.client_port);
  put16(out + 10, h.server_port);
  put_ring(out + 12, h.ring);
}

Error decode(const void* data, size_t len, Hello& out) {
  if (!data || len < kHelloSize) return Error::too_short;
  const auto* p = static_cast<const uint8_t*>(data);
  if (Error e = check_header(p); e != Error::ok) return e;
  Hello h;
  h.client_port = get16(p + 8);
  h.server_port = get16(p + 10);
  if (h.client_port == 0 || h.server_port == 0) return Error::bad_port;
  if (Error e = get_ring(p + 12, h.ring); e != Error::ok) return e;
  out = h;
  return Error::ok;
}

// Welcome: header(8) ring(20) nonce(16) = 44
void encode(const Welcome& w, uint8_t out[kWelcomeSize]) {
  put_header(out);
  put_ring(out + 8, w.ring);
  memcpy(out + 28, w.nonce.data(), kNonceSize);
}

Error decode(const void* data, size_t len, Welcome& out) {
  if (!data || len < kWelcomeSize) return Error::too_short;
  const auto* p = static_cast<const uint8_t*>(data);
  if (Error e = check_header(p); e != Error::ok) return e;
  Welcome w;
  if (Error e = get_ring(p + 8, w.ring); e != Error::ok) return e;
  memcpy(w.nonce.data(), p + 28, kNonceSize);
  out = w;
  return Error::ok;
}

// Redirect: header(8) port(2) reserved(2) tag(4) = 16
void encode(const Redirect& r, uint8_t out[kRedirectSize]) {
  memset(out, 0, kRedirectSize);
  put_header(out);
  put16(out + 8, r.port);
  put32(out + 12, kRedirectTag);
}

Error decode(const void* data, size_t len, Redirect& out) {
  if (!data || len < kRedirectSize) return Error::too_short;
  const auto* p = static_cast<const uint8_t*>(data);
  if (Error e = check_header(p); e != Error::ok) return e;
  if (get32(p + 12) != kRedirectTag) return Error::bad_magic;
  Redirect r;
  r.port = get16(p + 8);
  if (r.port == 0) return Error::bad_port;
  out = r;
  return Error::ok;
}

// Proof: header(8) nonce(16) secret(8) = 32, the magic "FRYB" rather than "FRRY"
constexpr uint32_t kProofMagic = 0x46525942;

void encode(const Proof& p, uint8_t out[kProofSize]) {
  put32(out, kProofMagic);
  out[4] = kVersion;
  out[5] = out[6] = out[7] = 0;
  memcpy(out + 8, p.nonce.data(), kNonceSize);
  put64(out + 24, p.secret);
}

Error decode(const void* data, size_t len, const Nonce& nonce, Proof& out) {
  if (!data) return Error::too_short;
  uint8_t expect[kProofSize];
  encode(Proof{nonce, 0}, expect);
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < std::min(len, kProofKnown); ++i) {
    if (p[i] == expect[i]) continue;
    return i < 4 ? Error::bad_magic : i < 8 ? Error::bad_version : Error::bad_nonce;
  }
  if (len < kProofSize) return Error::too_short;
  out.nonce = nonce;
  out.secret = get64(p + 24);
  return Error::ok;
}

size_t proof_start(const void* data, size_t len, const Nonce& nonce) {
  if (!data) return 0;
  uint8_t expect[kProofSize];
  encode(Proof{nonce, 0}, expect);
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < len; ++i) {
    const auto* hit = static_cast<const uint8_t*>(memchr(p + i, expect[0], len - i));
    if (!hit) return len;
    i = static_cast<size_t>(hit - p);
    if (memcmp(p + i, expect, std::min(len - i, kProofKnown)) == 0) return i;
  }
  return len;
}

// Control: op(1) reserved(3) count(4) value(8) = 16
void encode(const Control& c, uint8_t out[kControlSize]) {
  memset(out, 0, kControlSize);
  out[0] = static_cast<uint8_t>(c.op);
  put32(out + 4, c.count);
  put64(out + 8, c.value);
}

bool decode(const void* data, size_t len, Control& out) {
  if (!data || len != kControlSize) return false;
  const auto* p = static_cast<const uint8_t*>(data);
  if (p[0] < static_cast<uint8_t>(Op::cutover) || p[0] > static_cast<uint8_t>(Op::bound)) return false;
  out.op = static_cast<Op>(p[0]);
  out.count = get32(p + 4);
  out.value = get64(p + 8);
  return true;
}

}  // namespace ferry::wire
