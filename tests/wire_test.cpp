#include "core/proto/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>
#include <random>

namespace ferry::wire {
namespace {

Hello sample_hello() {
  Hello h;
  h.client_port = 51234;
  h.server_port = 6379;
  h.ring = {0x7f00deadbeef000, 0x1234abcd, 1 << 20};
  return h;
}

TEST(Wire, RedirectRoundTripAndRejects) {
  uint8_t buf[148] = {};  // a CM reject carries up to 148 bytes
  encode(Redirect{20001}, buf);
  Redirect r;
  ASSERT_EQ(decode(buf, sizeof buf, r), Error::ok);
  EXPECT_EQ(r.port, 20001);
  EXPECT_EQ(decode(buf, kRedirectSize - 1, r), Error::too_short);
  Welcome w;  // a redirect is no welcome, and a welcome no redirect
  EXPECT_NE(decode(buf, sizeof buf, w), Error::ok);
  uint8_t welcome[kWelcomeSize + 20] = {};
  encode(Welcome{{0x1000, 1, 1 << 20}}, welcome);
  EXPECT_EQ(decode(welcome, sizeof welcome, r), Error::bad_magic);
  encode(Redirect{0}, buf);
  EXPECT_EQ(decode(buf, sizeof buf, r), Error::bad_port);
  uint8_t empty[kRedirectSize] = {};  // a kernel's own reject carries zeros
  EXPECT_EQ(decode(empty, sizeof empty, r), Error::bad_magic);
}

TEST(Wire, HelloRoundTrip) {
  uint8_t buf[56] = {};  // the transport pads private data to its maximum
  encode(sample_hello(), buf);
  Hello h;
  ASSERT_EQ(decode(buf, sizeof buf, h), Error::ok);
  EXPECT_EQ(h.client_port, 51234);
  EXPECT_EQ(h.server_port, 6379);
  EXPECT_EQ(h.ring.addr, 0x7f00deadbeef000u);
  EXPECT_EQ(h.ring.rkey, 0x1234abcdu);
  EXPECT_EQ(h.ring.size, 1u << 20);
}

TEST(Wire, WelcomeRoundTrip) {
  uint8_t buf[kWelcomeSize];
  Welcome w;
  w.ring = {4096, 7, 65536};
  for (size_t i = 0; i < kNonceSize; ++i) w.nonce[i] = static_cast<uint8_t>(0xa0 + i);
  encode(w, buf);
  Welcome got;
  ASSERT_EQ(decode(buf, sizeof buf, got), Error::ok);
  EXPECT_EQ(got.ring.addr, 4096u);
  EXPECT_EQ(got.ring.rkey, 7u);
  EXPECT_EQ(got.ring.size, 65536u);
  EXPECT_EQ(got.nonce, w.nonce);
  EXPECT_EQ(decode(buf, kWelcomeSize - 1, got), Error::too_short);  // a v6 Welcome carries no nonce
}

// The client's proof on TCP: the server knows its first 24 bytes and judges each byte
// as it arrives, so a stream that is not a proof is told apart at its first difference.
TEST(Wire, ProofIsJudgedByteByByte) {
  Nonce n;
  for (size_t i = 0; i < kNonceSize; ++i) n[i] = static_cast<uint8_t>(i * 7 + 1);
  uint8_t buf[kProofSize];
  encode(Proof{n, 0x1122334455667788ULL}, buf);
  Proof got;
  ASSERT_EQ(decode(buf, sizeof buf, n, got), Error::ok);
  EXPECT_EQ(got.secret, 0x1122334455667788ULL);
  for (size_t len = 0; len < kProofSize; ++len) EXPECT_EQ(decode(buf, len, n, got), Error::too_short) << len;
  for (size_t at = 0; at < kProofKnown; ++at) {
    uint8_t bad[kProofSize];
    memcpy(bad, buf, sizeof bad);
    bad[at] ^= 0x40;
    const Error want = at < 4 ? Error::bad_magic : at < 8 ? Error::bad_version : Error::bad_nonce;
    EXPECT_EQ(decode(bad, at + 1, n, got), want) << at;  // as soon as the byte is there
    EXPECT_EQ(decode(bad, sizeof bad, n, got), want) << at;
  }
  Nonce other = n;
  other[15] ^= 1;
  EXPECT_EQ(decode(buf, sizeof buf, other, got), Error::bad_nonce);
  // Any secret is the client's to choose.
  buf[kProofSize - 1] ^= 0xff;
  EXPECT_EQ(decode(buf, sizeof buf, n, got), Error::ok);
  const char* app = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";  // a client's own bytes are no proof
  EXPECT_EQ(decode(app, strlen(app), n, got), Error::bad_magic);
}

// A server reading TCP before it knows its client's cutover point takes the bytes
// before where a proof starts, or may start at the end of what arrived.
TEST(Wire, ProofStartSplitsTheStreamFromTheProof) {
  Nonce n;
  for (size_t i = 0; i < kNonceSize; ++i) n[i] = static_cast<uint8_t>(0xa0 + i);
  uint8_t proof[kProofSize];
  encode(Proof{n, 42}, proof);
  std::vector<uint8_t> bytes(100, 'x');
  EXPECT_EQ(proof_start(bytes.data(), bytes.size(), n), 100u);
  EXPECT_EQ(proof_start(bytes.data(), 0, n), 0u);
  bytes.insert(bytes.end(), proof, proof + kProofSize);
  EXPECT_EQ(proof_start(bytes.data(), bytes.size(), n), 100u);
  for (size_t part = 1; part < kProofSize; ++part)  // part of it there: it may start
    EXPECT_EQ(proof_start(bytes.data(), 100 + part, n), 100u) << part;
  EXPECT_EQ(proof_start(bytes.data() + 100, kProofSize, n), 0u);
  // The proof's first bytes in the stream, then a difference: the stream's.
  std::vector<uint8_t> near(proof, proof + 10);
  near.push_back(static_cast<uint8_t>(proof[10] ^ 1));
  near.insert(near.end(), 50, 'y');
  EXPECT_EQ(proof_start(near.data(), near.size(), n), near.size());
  // Another nonce's proof is the stream's too.
  Nonce other = n;
  other[3] ^= 1;
  EXPECT_EQ(proof_start(bytes.data(), bytes.size(), other), bytes.size());
  // A lone first byte of the magic at the end may start one.
  std::vector<uint8_t> tail(20, 'z');
  tail.push_back(proof[0]);
  EXPECT_EQ(proof_start(tail.data(), tail.size(), n), 20u);
}

TEST(Wire, MalformedHellosAreRejectedAndLeaveTheOutputAlone) {
  uint8_t good[kHelloSize];
  encode(sample_hello(), good);
  Hello out;
  out.client_port = 99;
  uint8_t b[kHelloSize];

  EXPECT_EQ(decode(good, kHelloSize - 1, out), Error::too_short);
  EXPECT_EQ(decode(nullptr, 100, out), Error::too_short);
  memcpy(b, good, sizeof b);
  b[0] ^= 1;
  EXPECT_EQ(decode(b, sizeof b, out), Error::bad_magic);
  memcpy(b, good, sizeof b);
  b[4] = kVersion + 1;
  EXPECT_EQ(decode(b, sizeof b, out), Error::bad_version);
  b[4] = 1;  // the layout before records
  EXPECT_EQ(decode(b, sizeof b, out), Error::bad_version);
  Hello h = sample_hello();
  for (uint64_t size : {uint64_t{0}, uint64_t{1000}, uint64_t{2048}, uint64_t{1} << 31, ~uint64_t{0}}) {
    h.ring.size = size;
    encode(h, b);
    EXPECT_EQ(decode(b, sizeof b, out), Error::bad_ring) << size;
  }
  h = sample_hello();
  h.ring.addr = 0;
  encode(h, b);
  EXPECT_EQ(decode(b, sizeof b, out), Error::bad_ring);
  h = sample_hello();
  h.client_port = 0;
  encode(h, b);
  EXPECT_EQ(decode(b, sizeof b, out), Error::bad_port);
  EXPECT_EQ(out.client_port, 99);  // untouched by every failure
}

TEST(Wire, RandomBytesNeverDecodeAsAHello) {
  std::mt19937 rng(1);
  uint8_t b[56];
  Hello out;
  for (int i = 0; i < 100000; ++i) {
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    EXPECT_NE(decode(b, sizeof b, out), Error::ok);
  }
}

TEST(Wire, ControlRoundTripAndRejects) {
  uint8_t buf[kControlSize];
  for (Op op : {Op::cutover, Op::credit, Op::blocked, Op::fin, Op::sleep, Op::wake, Op::handoff, Op::bound}) {
    encode(Control{op, 0x0123456789abcdefULL, 0x8badf00d}, buf);
    Control c;
    ASSERT_TRUE(decode(buf, sizeof buf, c));
    EXPECT_EQ(c.op, op);
    EXPECT_EQ(c.value, 0x0123456789abcdefULL);
    EXPECT_EQ(c.count, 0x8badf00du);
  }
  Control c;
  EXPECT_FALSE(decode(buf, sizeof buf - 1, c));
  buf[0] = 0;
  EXPECT_FALSE(decode(buf, sizeof buf, c));
  buf[0] = 99;
  EXPECT_FALSE(decode(buf, sizeof buf, c));
  buf[0] = static_cast<uint8_t>(Op::bound) + 1;
  EXPECT_FALSE(decode(buf, sizeof buf, c));
}

}  // namespace
}  // namespace ferry::wire
