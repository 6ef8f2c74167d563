// The rdma_cm private data a peer sends (Hello in the connect request, Welcome in the
// accept, Redirect in a reject), and the bytes a server finds on TCP where a client's
// Proof belongs, fed to the decoders as they come, any length.
//
// Invariants: a decoder reads nothing past the length it is given (the bytes sit in a
// buffer of exactly that length); its verdict is the one an independent reading of the
// layout gives, checked in the order the header documents; a rejected input leaves the
// output alone; an accepted one encodes back to the same bytes (reserved bytes aside)
// and bytes past the layout never change the verdict. Then the other way round: fields
// taken from the input encode into bytes that decode to the same fields exactly when
// the fields are valid.
#include "core/proto/ring.h"
#include "core/proto/wire.h"
#include "tests/fuzz/fuzz.h"

#include <cstring>
#include <memory>

namespace ferry::fuzz {
namespace {

using namespace ferry::wire;

// The verdict the layout gives: header(8: magic, version, reserved), then `ports` (4
// bytes of two ports, Hello only), then the ring (addr 8, rkey 4, size 8).
Error expected(const uint8_t* p, size_t len, size_t need, bool ports) {
  if (len < need) return Error::too_short;
  if (be(p, 4) != kMagic) return Error::bad_magic;
  if (p[4] != kVersion) return Error::bad_version;
  size_t at = 8;
  if (ports) {
    if (be(p + 8, 2) == 0 || be(p + 10, 2) == 0) return Error::bad_port;
    at = 12;
  }
  const uint64_t addr = be(p + at, 8), size = be(p + at + 12, 8);
  if (addr == 0 || !ring::valid_capacity(size)) return Error::bad_ring;
  return Error::ok;
}

// A Redirect's verdict: header(8), port(2), reserved(2), tag(4).
Error expected_redirect(const uint8_t* p, size_t len) {
  if (len < kRedirectSize) return Error::too_short;
  if (be(p, 4) != kMagic) return Error::bad_magic;
  if (p[4] != kVersion) return Error::bad_version;
  if (be(p + 12, 4) != kRedirectTag) return Error::bad_magic;
  if (be(p + 8, 2) == 0) return Error::bad_port;
  return Error::ok;
}

bool same(const RingRef& a, const RingRef& b) { return a.addr == b.addr && a.rkey == b.rkey && a.size == b.size; }
bool same(const Hello& a, const Hello& b) {
  return a.client_port == b.client_port && a.server_port == b.server_port && same(a.ring, b.ring);
}
bool same(const Welcome& a, const Welcome& b) { return same(a.ring, b.ring) && a.nonce == b.nonce; }

// A Proof's verdict against the nonce `n`: the known bytes (magic "FRYB", version,
// reserved zeros, nonce) first, each judged as soon as it is there, then the length.
Error expected_proof(const uint8_t* p, size_t len, const Nonce& n) {
  uint8_t known[kProofKnown] = {'F', 'R', 'Y', 'B', kVersion, 0, 0, 0};
  memcpy(known + 8, n.data(), kNonceSize);
  for (size_t i = 0; i < len && i < kProofKnown; ++i) {
    if (p[i] != known[i]) return i < 4 ? Error::bad_magic : i < 8 ? Error::bad_version : Error::bad_nonce;
  }
  return len < kProofSize ? Error::too_short : Error::ok;
}

// Equal apart from the header's 3 reserved bytes (encode writes zeros, decode ignores them).
bool same_bytes(const uint8_t* a, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if ((i < 5 || i > 7) && a[i] != b[i]) return false;
  }
  return true;
}

Hello sentinel_hello() {
  Hello h;
  h.client_port = 0xabcd;
  h.server_port = 0x1234;
  h.ring = {0x5555, 0x6666, 0x7777};
  return h;
}

void decode_as_received(const uint8_t* data, size_t size) {
  // A buffer of exactly `size` bytes: any read past it is an ASan report.
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size ? size : 1]);
  if (size) memcpy(buf.get(), data, size);

  Hello h = sentinel_hello();
  const Error eh = decode(buf.get(), size, h);
  FUZZ_CHECK(eh == expected(buf.get(), size, kHelloSize, true));
  FUZZ_CHECK(to_string(eh) != nullptr);
  if (eh != Error::ok) {
    FUZZ_CHECK(same(h, sentinel_hello()));
  } else {
    uint8_t again[kHelloSize];
    encode(h, again);
    FUZZ_CHECK(same_bytes(again, buf.get(), kHelloSize));
    Hello first = h;  // only the layout's bytes count: the same verdict at exactly its length
    FUZZ_CHECK(decode(buf.get(), kHelloSize, h) == Error::ok && same(h, first));
  }

  Welcome w;
  w.ring = sentinel_hello().ring;
  const Error ew = decode(buf.get(), size, w);
  FUZZ_CHECK(ew == expected(buf.get(), size, kWelcomeSize, false));
  if (ew != Error::ok) {
    FUZZ_CHECK(same(w.ring, sentinel_hello().ring));
  } else {
    uint8_t again[kWelcomeSize];
    encode(w, again);
    FUZZ_CHECK(same_bytes(again, buf.get(), kWelcomeSize));
  }

  // The proof is judged against a nonce taken from the input itself (so that the fuzzer
  // reaches the secret) and against a fixed one.
  Nonce n{};
  for (size_t i = 0; i < kNonceSize && 8 + i < size; ++i) n[i] = buf[8 + i];
  for (const Nonce& nonce : {n, Nonce{}}) {
    Proof pr{Nonce{}, 0x5a5a};
    const Error ep = decode(buf.get(), size, nonce, pr);
    FUZZ_CHECK(ep == expected_proof(buf.get(), size, nonce));
    if (ep != Error::ok) {
      FUZZ_CHECK(pr.secret == 0x5a5a);
    } else {
      uint8_t again[kProofSize];
      encode(pr, again);
      FUZZ_CHECK(memcmp(again, buf.get(), kProofSize) == 0);
    }
  }

  Redirect r{0x4321};
  const Error er = decode(buf.get(), size, r);
  FUZZ_CHECK(er == expected_redirect(buf.get(), size));
  if (er != Error::ok) {
    FUZZ_CHECK(r.port == 0x4321);
  } else {
    FUZZ_CHECK(r.port == be(buf.get() + 8, 2));
    uint8_t again[kRedirectSize];
    encode(r, again);
    FUZZ_CHECK(same_bytes(again, buf.get(), 8) && memcmp(again + 8, buf.get() + 8, 2) == 0 &&
               memcmp(again + 12, buf.get() + 12, 4) == 0);
  }
}

void encode_fields(Input in) {
  Hello h;
  h.client_port = in.u16();
  h.server_port = in.u16();
  h.ring.addr = in.u64();
  h.ring.rkey = in.u32();
  const uint8_t shape = in.u8();
  // Mostly sizes near the valid ones, else any 64-bit value.
  h.ring.size = shape & 1 ? in.u64() : uint64_t{1} << (shape >> 1) % 64;
  uint8_t buf[56];
  memset(buf, 0xa5, sizeof buf);  // transports pad the private data
  encode(h, buf);
  FUZZ_CHECK(buf[kHelloSize] == 0xa5);  // encode writes its layout and nothing more
  const bool valid = h.client_port && h.server_port && h.ring.addr && ring::valid_capacity(h.ring.size);
  Hello got = sentinel_hello();
  FUZZ_CHECK((decode(buf, sizeof buf, got) == Error::ok) == valid);
  FUZZ_CHECK(same(got, valid ? h : sentinel_hello()));

  Welcome w;
  w.ring = h.ring;
  for (size_t i = 0; i < kNonceSize; ++i) w.nonce[i] = in.u8();
  memset(buf, 0xa5, sizeof buf);
  encode(w, buf);
  FUZZ_CHECK(buf[kWelcomeSize] == 0xa5);
  Welcome wgot;
  const bool wvalid = h.ring.addr && ring::valid_capacity(h.ring.size);
  FUZZ_CHECK((decode(buf, kWelcomeSize, wgot) == Error::ok) == wvalid);
  if (wvalid) FUZZ_CHECK(same(wgot, w));

  Redirect r{h.client_port};
  uint8_t rbuf[148];  // a reject's private data, padded
  memset(rbuf, 0xa5, sizeof rbuf);
  encode(r, rbuf);
  FUZZ_CHECK(rbuf[kRedirectSize] == 0xa5);
  Redirect rgot{7};
  FUZZ_CHECK((decode(rbuf, sizeof rbuf, rgot) == Error::ok) == (r.port != 0));
  FUZZ_CHECK(rgot.port == (r.port ? r.port : 7));
}

}  // namespace
}  // namespace ferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ferry::fuzz::decode_as_received(data, size);
  ferry::fuzz::encode_fields(ferry::fuzz::Input(data, size));
  return 0;
}
