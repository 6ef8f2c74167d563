// fuzz_seeds DIR: writes a small starting corpus for each fuzz target into
// DIR/<target>/: well-formed messages and short programs of each peer, so the fuzzers
// start from inputs that reach past the first checks.
#include "core/proto/tcp_resume.h"
#include "core/proto/wire.h"

#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

using Bytes = std::vector<uint8_t>;

void put(const std::string& dir, const std::string& name, const Bytes& b) {
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/" + name;
  FILE* f = fopen(path.c_str(), "wb");
  if (!f || fwrite(b.data(), 1, b.size(), f) != b.size() || fclose(f) != 0) {
    perror(path.c_str());
    exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ferry::wire;
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const std::string top = argv[1];
  mkdir(top.c_str(), 0755);

  const std::string pd = top + "/wire_private_data";
  Hello h;
  h.client_port = 40000;
  h.server_port = 6379;
  h.ring = {0x7f0000001000, 0x1234, 1 << 18};
  Bytes b(56, 0);  // padded, as rdma_cm hands it over
  encode(h, b.data());
  put(pd, "hello", b);
  b.resize(kHelloSize);
  put(pd, "hello-exact", b);
  b[4] = kVersion - 1;
  put(pd, "hello-old-version", b);
  Welcome w;
  w.ring = h.ring;
  b.assign(kWelcomeSize, 0);
  encode(w, b.data());
  put(pd, "welcome", b);
  b.assign(kProofSize, 0);
  encode(Proof{w.nonce, 0x0102030405060708ULL}, b.data());
  put(pd, "proof", b);
  b.assign(148, 0);  // a reject's private data, padded
  encode(Redirect{20001}, b.data());
  put(pd, "redirect", b);

  const std::string ctl = top + "/wire_control";
  for (int op = 1; op <= 8; ++op) {
    b.assign(kControlSize, 0);
    encode(Control{static_cast<Op>(op), 0x10000 + op * 4096u, static_cast<uint32_t>(op)}, b.data());
    put(ctl, "op" + std::to_string(op), b);
  }

  // records: see the program's layout in records.cpp. Honest peer, 4 KiB ring: a send of
  // 100 bytes, land, scan, read; then two sends at the ring's end and a drain.
  const std::string rec = top + "/records";
  put(rec, "honest-small", {0, 0, 0, /*send*/ 0, 1, 100, 7, 0, 0, /*land*/ 1, 0x28, 0x23, /*scan*/ 2,
                            /*read*/ 3, 1, 0, 16});
  put(rec, "honest-wrap", {0, 60, 0, 0, 2, 0x10, 0x0c, 3, 5, 0, 0, 3, 0xff, 1, 0, 1, 0xff, 0xff, 2, 3, 2, 0xff,
                           3, 0, 0xff, 1, 0xff, 0xff, 2, 3, 1, 0, 32});
  // A ring of 8 KiB: whole records, one ending like its own footer.
  put(rec, "honest-whole", {2, 0, 0, 0, 0, 9, 0, 0, 0, 0, 9, 0, 1, 0, 1, 0xff, 0xff, 2, 3, 1, 0, 0x20});
  // Hostile peer: records, then a footer rewritten between scan and read, bytes anywhere.
  put(rec, "hostile", {1, 0, 0, /*send*/ 3, 1, 200, 1, 0, 0, /*land*/ 4, 0xff, 0x20, /*scan*/ 5,
                       /*footer*/ 1, 6, 0, 190, 0, /*read*/ 6, 1, 0, 16, /*bytes*/ 0, 0xf8, 0x0f, 7, 1, 2, 3, 4, 5,
                       6, 7, 0x80, 5, 6, 3});
  put(rec, "hostile-near-wrap", {3, 4, 0x80, 3, 0, 3, 1, 0, 4, 0xff, 0x20, 5, 6, 3, 0, 16, 6, 1, 0, 0x10, 2,
                                 1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 1, 0, 0x20});
  // tcp_resume: see the program's layout in tcp_resume.cpp. A receiver at offset 1000
  // that accepts 4096 bytes back; a header naming 900, then pieces of 7 and 200 bytes.
  const std::string dg = top + "/tcp_resume";
  b.assign(11, 0);
  b[0] = 0xe8, b[1] = 0x03;  // 1000, little-endian
  b[9] = 0x10;               // 4096
  Bytes hdr(ferry::tcp_resume::kHeaderSize);
  ferry::tcp_resume::encode(ferry::tcp_resume::Header{900}, hdr.data());
  Bytes piece = hdr;
  piece.insert(piece.end(), 100, 0x61);
  b.push_back(static_cast<uint8_t>(7));
  b.insert(b.end(), piece.begin(), piece.begin() + 7);
  b.push_back(static_cast<uint8_t>(piece.size() - 7));
  b.insert(b.end(), piece.begin() + 7, piece.end());
  put(dg, "resume", b);
  b.assign(11, 0);
  b[10] = 200;  // the staging case: an empty range of an empty area
  put(dg, "staging", b);

  return 0;
}
