// The 16-byte control messages a peer sends (cutover, credit, blocked, fin, sleep,
// wake, handoff, bound), fed to the decoder as they come off the fabric, any length.
//
// Invariants: the decoder reads nothing past the length it is given; it accepts exactly
// 16 bytes whose first byte names an operation; a rejected message leaves the output
// alone; an accepted one encodes back to the same bytes (reserved bytes aside). Then
// fields taken from the input round-trip through encode and decode.
#include "core/proto/wire.h"
#include "tests/fuzz/fuzz.h"

#include <memory>

namespace ferry::fuzz {
namespace {

using namespace ferry::wire;

void decode_as_received(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size ? size : 1]);
  if (size) memcpy(buf.get(), data, size);
  Control c{Op::fin, 0x1111, 0x2222};
  const bool ok = decode(buf.get(), size, c);
  const bool valid = size == kControlSize && buf[0] >= 1 && buf[0] <= 8;
  FUZZ_CHECK(ok == valid);
  if (!ok) {
    FUZZ_CHECK(c.op == Op::fin && c.value == 0x1111 && c.count == 0x2222);
    return;
  }
  FUZZ_CHECK(static_cast<uint8_t>(c.op) == buf[0]);
  FUZZ_CHECK(c.count == be(buf.get() + 4, 4));
  FUZZ_CHECK(c.value == be(buf.get() + 8, 8));
  uint8_t again[kControlSize];
  encode(c, again);
  FUZZ_CHECK(again[0] == buf[0] && memcmp(again + 4, buf.get() + 4, 12) == 0);
  FUZZ_CHECK(again[1] == 0 && again[2] == 0 && again[3] == 0);
}

void encode_fields(Input in) {
  Control c;
  c.op = static_cast<Op>(1 + in.u8() % 8);
  c.value = in.u64();
  c.count = in.u32();
  uint8_t buf[kControlSize + 1];
  buf[kControlSize] = 0xa5;
  encode(c, buf);
  FUZZ_CHECK(buf[kControlSize] == 0xa5);
  Control got;
  FUZZ_CHECK(decode(buf, kControlSize, got));
  FUZZ_CHECK(got.op == c.op && got.value == c.value && got.count == c.count);
  FUZZ_CHECK(!decode(buf, kControlSize + 1, got) && !decode(buf, kControlSize - 1, got));
}

}  // namespace
}  // namespace ferry::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ferry::fuzz::decode_as_received(data, size);
  ferry::fuzz::encode_fields(ferry::fuzz::Input(data, size));
  return 0;
}
