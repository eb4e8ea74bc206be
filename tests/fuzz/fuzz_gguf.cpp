// libFuzzer entry point for the GGUF parser: any input must parse or fail with an Error,
// never crash, hang or over-allocate. Built as a real fuzzer with -DPI_FUZZ=ON (clang), and
// always built as `fuzz_gguf_replay`, which replays the checked-in corpus in CI.
#include <cstddef>
#include <cstdint>

#include "gguf/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = pi::gguf::parse_bytes("fuzz", reinterpret_cast<const std::byte*>(data), size);
  if (f.ok()) {
    // Touch every tensor view so out-of-bounds views would trip ASan.
    volatile uint8_t sink = 0;
    for (const auto& t : f->tensors()) {
      auto v = f->view(t);
      if (v.nbytes() > 0) sink = sink ^ static_cast<uint8_t>(v.data[v.nbytes() - 1]);
    }
  }
  return 0;
}
