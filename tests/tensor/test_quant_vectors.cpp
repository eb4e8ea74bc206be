// Bit-for-bit comparison with an independent oracle: tests/tensor/vectors/*.bin were written
// by make_vectors.py (in that folder) from gguf-py's numpy port of ggml's reference
// quantizers. Quantized bytes must match exactly (except Q6_K, whose quantizer is our own and
// is checked only for decoding), and decoded floats must match bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tensor/quant.h"

namespace pi {
namespace {

struct Vectors {
  DType type = DType::F32;
  int64_t n = 0;
  bool has_input = false;
  std::vector<float> x;       // inputs (has_input only)
  std::vector<uint8_t> q;     // oracle quantized bytes
  std::vector<float> y;       // oracle dequantized values
};

// Reads one little-endian vectors file (format in make_vectors.py). Fails the test on any
// malformed or truncated content.
Vectors load(const std::string& name) {
  const std::string path = std::string(PI_SOURCE_DIR) + "/tests/tensor/vectors/" + name + ".bin";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  Vectors v;
  if (f == nullptr) {
    ADD_FAILURE() << "cannot open " << path;
    return v;
  }
  std::vector<uint8_t> data;
  uint8_t buf[4096];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + got);
  std::fclose(f);

  size_t pos = 0;
  auto take = [&](void* dst, size_t nbytes) {
    if (pos + nbytes > data.size()) {
      ADD_FAILURE() << path << ": truncated at " << pos;
      return false;
    }
    std::memcpy(dst, data.data() + pos, nbytes);
    pos += nbytes;
    return true;
  };
  char magic[4];
  uint32_t header[4];  // version, type, n, flags
  if (!take(magic, 4) || std::memcmp(magic, "PIQV", 4) != 0 || !take(header, sizeof header) ||
      header[0] != 1) {
    ADD_FAILURE() << path << ": bad header";
    return v;
  }
  v.type = static_cast<DType>(header[1]);
  v.n = header[2];
  v.has_input = (header[3] & 1u) != 0;
  if (v.has_input) {
    v.x.resize(v.n);
    if (!take(v.x.data(), v.x.size() * sizeof(float))) return v;
  }
  uint32_t nbytes = 0;
  if (!take(&nbytes, sizeof nbytes)) return v;
  v.q.resize(nbytes);
  v.y.resize(v.n);
  if (!take(v.q.data(), nbytes) || !take(v.y.data(), v.y.size() * sizeof(float))) return v;
  EXPECT_EQ(pos, data.size()) << path << ": trailing bytes";
  EXPECT_EQ(nbytes, row_bytes(v.type, v.n)) << path;
  return v;
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

class OracleVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(OracleVectors, MatchBitForBit) {
  // "type" or "type:variant" (file type_variant.bin).
  const std::string param = GetParam();
  std::string file = param;
  for (char& c : file) c = c == ':' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const Vectors v = load(file);
  ASSERT_GT(v.n, 0);
  ASSERT_EQ(dtype_name(v.type), param.substr(0, param.find(':')));

  if (v.has_input) {
    std::vector<uint8_t> q(v.q.size());
    ASSERT_TRUE(quantize_row(v.type, v.x.data(), q.data(), v.n).ok());
    size_t mismatches = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      if (q[i] != v.q[i] && ++mismatches <= 5) {
        ADD_FAILURE() << GetParam() << ": byte " << i << " is " << int{q[i]} << ", oracle "
                      << int{v.q[i]};
      }
    }
    EXPECT_EQ(mismatches, 0u);
  }

  std::vector<float> y(static_cast<size_t>(v.n));
  ASSERT_TRUE(dequantize_row(v.type, v.q.data(), y.data(), v.n).ok());
  size_t mismatches = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!same_float(y[i], v.y[i]) && ++mismatches <= 5) {
      ADD_FAILURE() << GetParam() << ": value " << i << " is " << y[i] << ", oracle " << v.y[i];
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

INSTANTIATE_TEST_SUITE_P(Gguf, OracleVectors,
                         ::testing::Values("f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1",
                                           "q8_0", "q6_K", "q2_K", "q3_K", "q4_K", "q5_K", "mxfp4",
                                           "mxfp4:all"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == ':' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace pi
