// SessionOptions by name (powerinfer/session_options.h): every listed option takes a value of
// its kind and lands in its field; wrong kinds, ranges and names are refused by name.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "powerinfer/session_options.h"

namespace {

using pi::OptionValue;
using pi::SessionOptions;

OptionValue value_of_kind(const std::string& kind) {
  if (kind.rfind("int", 0) == 0 || kind.rfind("bytes", 0) == 0) return int64_t{3};
  if (kind.rfind("float", 0) == 0) return 0.25;
  if (kind == "bool") return true;
  if (kind == "text" || kind.rfind("text", 0) == 0) return std::string("f16");
  return std::monostate{};
}

TEST(SessionOptionTable, EveryOptionTakesAValueOfItsKindAndNamesAreUnique) {
  std::set<std::string> names;
  for (const pi::OptionInfo& info : pi::session_option_list()) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_FALSE(info.help.empty()) << info.name;
    SessionOptions o;
    EXPECT_TRUE(pi::set_session_option(o, info.name, value_of_kind(info.kind)).ok()) << info.name << " " << info.kind;
  }
  EXPECT_GE(names.size(), 30u);
}

TEST(SessionOptionTable, ValuesLandInTheirFields) {
  SessionOptions o;
  ASSERT_TRUE(pi::set_session_option(o, "n_ctx", int64_t{2048}).ok());
  ASSERT_TRUE(pi::set_session_option(o, "temperature", int64_t{0}).ok());  // an integer is a number
  ASSERT_TRUE(pi::set_session_option(o, "top_p", 0.5).ok());
  ASSERT_TRUE(pi::set_session_option(o, "cache_type_v", std::string("q4_0")).ok());
  ASSERT_TRUE(pi::set_session_option(o, "moe_ram", int64_t{8} << 30).ok());
  ASSERT_TRUE(pi::set_session_option(o, "n_cpu_moe", int64_t{4}).ok());
  ASSERT_TRUE(pi::set_session_option(o, "vram_budget", int64_t{1} << 20).ok());
  ASSERT_TRUE(pi::set_session_option(o, "swa_full", true).ok());
  EXPECT_EQ(o.n_ctx, 2048);
  EXPECT_EQ(o.sampling.temperature, 0.0f);
  EXPECT_EQ(o.sampling.top_p, 0.5f);
  EXPECT_EQ(o.kv_type_v, pi::KvCacheType::Q4_0);
  EXPECT_EQ(o.moe_ram, uint64_t{8} << 30);
  EXPECT_EQ(o.n_cpu_moe, 4);
  EXPECT_EQ(o.vram_budget, uint64_t{1} << 20);
  EXPECT_TRUE(o.swa_full);
  ASSERT_TRUE(pi::set_session_option(o, "vram_budget", std::monostate{}).ok());  // unset again
  EXPECT_FALSE(o.vram_budget.has_value());
  // Whatever was not named keeps SessionOptions' default.
  EXPECT_EQ(o.n_batch, SessionOptions{}.n_batch);
  EXPECT_EQ(o.sampling.top_k, SessionOptions{}.sampling.top_k);
}

TEST(SessionOptionTable, BadValuesAreRefusedByName) {
  SessionOptions o;
  const struct {
    const char* name;
    OptionValue value;
    const char* message;
  } bad[] = {
      {"n_ctx", std::string("big"), "option 'n_ctx': expected an integer, got text"},
      {"n_ctx", 1.5, "option 'n_ctx': expected an integer, got a number"},
      {"dense", int64_t{1}, "option 'dense': expected a bool, got an integer"},
      {"n_seq_max", int64_t{65}, "option 'n_seq_max': must be in [1, 64], got 65"},
      {"moe_ram", int64_t{-1}, "option 'moe_ram': must be in [0, "},
      {"cache_type_k", std::string("q5_1"), "option 'cache_type_k': 'q5_1' is not a KV cache type"},
      {"temperature", std::monostate{}, "option 'temperature': expected a number, got none"},
      {"nctx", int64_t{1}, "option 'nctx': unknown (options: n_ctx, n_batch,"},
  };
  for (const auto& b : bad) {
    const pi::Status st = pi::set_session_option(o, b.name, b.value);
    ASSERT_FALSE(st.ok()) << b.name;
    EXPECT_EQ(st.error().code, pi::ErrorCode::BadRequest);
    EXPECT_NE(st.error().message.find(b.message), std::string::npos) << st.error().message;
  }
  EXPECT_EQ(o.n_ctx, SessionOptions{}.n_ctx);  // a refused value changes nothing
}

}  // namespace
