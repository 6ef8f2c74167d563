// What the fuzz targets share: a reader over the fuzzer's bytes (missing bytes read as
// zero, so every input is a valid program) and a check that stops the run with a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ferry::fuzz {

// Fails the input: prints what was violated and aborts, which libFuzzer reports as a
// crash and saves the input.
#define FUZZ_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                        \
    }                                                                                 \
  } while (0)

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  bool empty() const { return left_ == 0; }
  size_t left() const { return left_; }
  uint8_t u8() {
    if (left_ == 0) return 0;
    --left_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | u8() << 8); }
  uint32_t u32() { return u16() | static_cast<uint32_t>(u16()) << 16; }
  uint64_t u64() { return u32() | static_cast<uint64_t>(u32()) << 32; }
  // Up to n bytes into out (the rest zero); returns how many came from the input.
  size_t bytes(uint8_t* out, size_t n) {
    size_t k = n < left_ ? n : left_;
    memcpy(out, p_, k);
    memset(out + k, 0, n - k);
    p_ += k;
    left_ -= k;
    return k;
  }

 private:
  const uint8_t* p_;
  size_t left_;
};

// The n-byte big-endian number at p, read independently of the decoders under test.
inline uint64_t be(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = v << 8 | p[i];
  return v;
}

}  // namespace ferry::fuzz
