#include <gtest/gtest.h>

#include "tensor/dtype.h"

namespace pi {
namespace {

TEST(DType, BlockSizesMatchGgml) {
  EXPECT_EQ(dtype_info(DType::Q4_0).type_size, 18u);
  EXPECT_EQ(dtype_info(DType::Q8_0).type_size, 34u);
  EXPECT_EQ(dtype_info(DType::Q6_K).type_size, 210u);
  EXPECT_EQ(dtype_info(DType::Q6_K).block_size, 256);
  EXPECT_EQ(row_bytes(DType::Q4_0, 4096), 128u * 18u);
  EXPECT_EQ(row_bytes(DType::F16, 7), 14u);
  EXPECT_EQ(row_bytes(DType::BF16, 3), 6u);
}

TEST(DType, IdsAndNames) {
  EXPECT_FALSE(dtype_info(31).has_value());
  EXPECT_FALSE(dtype_info(12345).has_value());
  EXPECT_EQ(dtype_info(8)->type, DType::Q8_0);
  EXPECT_EQ(dtype_from_name("Q4_0"), DType::Q4_0);
  EXPECT_EQ(dtype_from_name("bf16"), DType::BF16);
  EXPECT_EQ(dtype_from_name("q6_k"), DType::Q6_K);
  EXPECT_FALSE(dtype_from_name("q9_9").has_value());
}

// Q4_0_SPLIT is a layout this engine makes in memory: a file can never declare it (the id is
// unknown to readers) and users cannot name it (quantize), but it sizes like Q4_0.
TEST(DType, InternalLayoutIsNoFileType) {
  EXPECT_FALSE(dtype_info(static_cast<uint32_t>(DType::Q4_0_SPLIT)).has_value());
  EXPECT_FALSE(dtype_from_name("q4_0_split").has_value());
  EXPECT_EQ(dtype_name(DType::Q4_0_SPLIT), "q4_0_split");
  EXPECT_EQ(row_bytes(DType::Q4_0_SPLIT, 4096), row_bytes(DType::Q4_0, 4096));
}

}  // namespace
}  // namespace pi
