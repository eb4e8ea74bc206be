#include <gtest/gtest.h>

#include "core/error.h"

namespace pi {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return err("value %d is not positive", v);
  return v;
}

Status twice(int v, int* out) {
  auto r = parse_positive(v);
  PI_TRY(r);
  *out = *r * 2;
  return Status::Ok();
}

TEST(Error, ResultCarriesValueOrError) {
  auto good = parse_positive(3);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 3);
  auto bad = parse_positive(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "value -1 is not positive");
}

TEST(Error, TryPropagates) {
  int out = 0;
  EXPECT_TRUE(twice(4, &out).ok());
  EXPECT_EQ(out, 8);
  Status s = twice(0, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "value 0 is not positive");
}

}  // namespace
}  // namespace pi
