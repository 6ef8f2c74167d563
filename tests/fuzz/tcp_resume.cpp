// What a peer controls in a downgrade: the 16-byte header that starts its resumed TCP
// stream and the bytes after it (fed to tcp_resume::Resume in pieces, as TCP delivers
// them), and, on our own side, the staging area a resend reads its records back from,
// which the fuzzer fills with anything (records.h's checks must hold it within bounds).
//
// Program: bytes 0-7: the receiver's consumed offset; bytes 8-9: the most it accepts to
// drop; byte 10: 0-127 the stream case, otherwise the staging case. Stream case: then
// pieces, each one byte of length and that many bytes. Staging case: from and to
// cursors (2 bytes each, in units), then the 4 KiB staging area.
//
// Invariants: Resume never claims more bytes than it was given, ends at once when the
// header is bad or names an offset past the consumed one or further back than `most`,
// and otherwise takes exactly the header and consumed - offset bytes before `done`;
// resend() passes only spans inside the staging area, in total no more than the range,
// or refuses with -1.
#include "core/proto/tcp_resume.h"
#include "tests/fuzz/fuzz.h"

#include <vector>

namespace ferry::fuzz {
namespace {

using namespace ferry::tcp_resume;

void stream_case(uint64_t consumed, uint64_t most, Input& in) {
  Resume r(consumed, most);
  std::vector<uint8_t> taken;  // header and dropped bytes, as Resume took them
  Resume::Step step = Resume::Step::more;
  while (!in.empty() && step == Resume::Step::more) {
    const size_t n = in.u8();
    std::vector<uint8_t> piece(n ? n : 1);
    if (n) in.bytes(piece.data(), n);
    size_t used = 99999;
    step = r.take(piece.data(), n, used);
    FUZZ_CHECK(used <= n);
    taken.insert(taken.end(), piece.begin(), piece.begin() + static_cast<long>(used));
    if (step == Resume::Step::more) FUZZ_CHECK(used == n);
    if (step == Resume::Step::broken) break;
  }
  if (taken.size() < kHeaderSize) {
    FUZZ_CHECK(step == Resume::Step::more && !r.header_read());
    return;
  }
  Header h;
  const bool good = decode(taken.data(), h) && h.offset <= consumed && consumed - h.offset <= most;
  if (!good) {
    FUZZ_CHECK(step == Resume::Step::broken);
    return;
  }
  FUZZ_CHECK(step != Resume::Step::broken && r.header_read());
  const uint64_t dropped = taken.size() - kHeaderSize;
  FUZZ_CHECK(dropped + r.still_to_drop() == consumed - h.offset);
  FUZZ_CHECK((step == Resume::Step::done) == (r.still_to_drop() == 0));
}

void staging_case(Input& in) {
  constexpr uint64_t kCap = 4096;
  const uint64_t from = static_cast<uint64_t>(in.u16()) * ring::kUnit;
  const uint64_t to = from + static_cast<uint64_t>(in.u16() % 128) * ring::kUnit;
  std::vector<uint8_t> staging(kCap);
  in.bytes(staging.data(), kCap);
  uint64_t passed = 0;
  const int64_t total = resend(staging.data(), kCap, from, to, [&](const uint8_t* p, uint64_t n) {
    FUZZ_CHECK(p >= staging.data() && n <= kCap && p + n <= staging.data() + kCap);
    passed += n;
  });
  FUZZ_CHECK(total == -1 || (static_cast<uint64_t>(total) == passed && passed <= to - from));
}

}  // namespace
}  // namespace ferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ferry::fuzz::Input in(data, size);
  const uint64_t consumed = in.u64();
  const uint64_t most = in.u16();
  if (in.u8() < 128) {
    ferry::fuzz::stream_case(consumed, most, in);
  } else {
    ferry::fuzz::staging_case(in);
  }
  return 0;
}
