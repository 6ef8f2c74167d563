// What ferry puts on the fabric besides payload bytes: the private data of the rdma_cm
// handshake and the small control messages of an upgraded connection. Fixed layouts in
// network byte order, decoded with full validation: everything here may come from a
// forged or broken peer.
#pragma once

#include <cstddef>
#include <array>
#include <cstdint>

namespace ferry::wire {

constexpr uint32_t kMagic = 0x46525259;  // "FRRY"
constexpr uint8_t kVersion = 8;  // 2: records found in memory (core/proto/records.h); 3: whole records;
                                  // 4: failover to TCP (core/conn/downgrade.h); 5: redirects; 6: hand-offs;
                                  // 7: the RDMA side bound to the TCP connection (Proof, bound);
                                  // 8: both rings the Welcome's size (the server's staging
                                  // no larger than its own ring, whatever the Hello says)

// A receive ring as the peer must know it to write into it.
struct RingRef {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t size = 0;
};

// Client -> server, in the CM connect request: which TCP connection this upgrades
// (seen from the client: its source port and the server port it connected to) and
// the client's ring.
struct Hello {
  uint16_t client_port = 0;
  uint16_t server_port = 0;
  RingRef ring;
};
constexpr size_t kHelloSize = 32;  // within the 56 bytes a CM REQ carries for rdma_cm

constexpr size_t kNonceSize = 16;
using Nonce = std::array<uint8_t, kNonceSize>;

// Server -> client, in the CM accept: the server's ring (no larger than the client's:
// the server writes into only that many bytes of the client's ring), and a nonce that only whoever
// received this Welcome knows; the client proves with it, through the TCP connection,
// that it holds that connection (Proof).
struct Welcome {
  RingRef ring;
  Nonce nonce{};
};
constexpr size_t kWelcomeSize = 44;

// Client -> server, through the TCP connection itself, right at the client's cutover
// point: the Welcome's nonce (the requester is the TCP client: nobody else can write
// into that stream) and a secret of the client's, which the server sends back over
// RDMA (Op::bound: the acceptor is the TCP server, as nobody else can read that
// stream). Until then neither side trusts, reads or writes the other's ring.
struct Proof {
  Nonce nonce{};
  uint64_t secret = 0;
};
constexpr size_t kProofSize = 32;
// The bytes of a Proof before its secret: what the server knows to expect.
constexpr size_t kProofKnown = 24;

// Server -> client, in the CM reject: the connection is served by another process of
// the server's tree, whose rdma_cm listener is on `port` of the same address (see
// core/conn/claims.h). The client asks once more there.
struct Redirect {
  uint16_t port = 0;
};
constexpr size_t kRedirectSize = 16;
constexpr uint32_t kRedirectTag = 0x52444952;  // "RDIR"

enum class Error { ok, too_short, bad_magic, bad_version, bad_ring, bad_port, bad_nonce };
const char* to_string(Error e);

void encode(const Hello& h, uint8_t out[kHelloSize]);
void encode(const Welcome& w, uint8_t out[kWelcomeSize]);
void encode(const Redirect& r, uint8_t out[kRedirectSize]);
// `len` may exceed the layout (transports pad private data); it may not fall short.
Error decode(const void* data, size_t len, Hello& out);
Error decode(const void* data, size_t len, Welcome& out);
Error decode(const void* data, size_t len, Redirect& out);
void encode(const Proof& p, uint8_t out[kProofSize]);
// How the first `len` bytes at a cutover point compare with a proof of `nonce`: ok once
// all kProofSize are there and match (`out` set), too_short while those present match,
// bad_magic / bad_version / bad_nonce at the first that does not.
Error decode(const void* data, size_t len, const Nonce& nonce, Proof& out);
// Where in `len` bytes of a stream a proof of `nonce` starts, or may start (its known
// bytes match up to the end of what is there); len when nowhere: every byte before the
// result is the stream's.
size_t proof_start(const void* data, size_t len, const Nonce& nonce);
// Control messages travel as 16-byte SENDs, in order with the data writes.
enum class Op : uint8_t {
  cutover = 1,  // value: bytes the sender sent on TCP before switching to RDMA
  credit = 2,   // value: receiver's consumer cursor
  blocked = 3,  // value: sender's write cursor; the sender waits for credit
  fin = 4,      // value: sender's final write cursor; no more data (shutdown(SHUT_WR) / close)
  sleep = 5,    // value: receiver's produced cursor; count: writes to carry an immediate
  wake = 6,     // value: sender's write cursor; it wrote past where the sleeper had looked
  handoff = 7,  // value: payload bytes the sender read from its ring, where it stopped for good;
                // the receiver resends the rest over TCP with no header (core/conn/downgrade.h)
  bound = 8,    // server -> client, before anything else of the server's: value: the secret
                // of the client's Proof, read from TCP
};
struct Control {
  Op op = Op::credit;
  uint64_t value = 0;
  uint32_t count = 0;
};
constexpr size_t kControlSize = 16;

void encode(const Control& c, uint8_t out[kControlSize]);
bool decode(const void* data, size_t len, Control& out);

}  // namespace ferry::wire
