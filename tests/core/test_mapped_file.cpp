#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/mapped_file.h"

namespace pi {
namespace {

TEST(MappedFile, MapsContents) {
  auto path = std::filesystem::temp_directory_path() / ("pi_map_" + std::to_string(::getpid()));
  { std::ofstream(path) << "hello"; }
  auto m = MappedFile::open(path.string());
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_EQ(m->size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), 5), "hello");
  MappedFile moved = std::move(*m);
  EXPECT_EQ(moved.size(), 5u);
  std::filesystem::remove(path);
}

// LoadMode::Read (--no-mmap): the same bytes, starting on a 2 MiB boundary (so that huge
// pages can back them), for sizes around page and huge-page boundaries; moving keeps them.
TEST(MappedFile, ReadModeHoldsTheSameBytes) {
  auto path = std::filesystem::temp_directory_path() / ("pi_read_" + std::to_string(::getpid()));
  for (size_t n : {size_t{0}, size_t{1}, size_t{4097}, (size_t{2} << 20) + 3}) {
    std::string bytes(n, '\0');
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>((i * 131 + 7) & 0xff);
    { std::ofstream(path, std::ios::binary) << bytes; }
    auto m = MappedFile::open(path.string(), LoadMode::Read);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->mode(), LoadMode::Read);
    ASSERT_EQ(m->size(), n);
    if (n == 0) continue;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data()) % (size_t{2} << 20), 0u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), n), bytes) << n;
    EXPECT_LE(m->huge_page_bytes(), m->size() + (size_t{2} << 20));
    MappedFile moved = std::move(*m);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(moved.data()), n), bytes) << n;
    EXPECT_EQ(m->data(), nullptr);
  }
  std::filesystem::remove(path);
  auto missing = MappedFile::open("/nonexistent/model.gguf", LoadMode::Read);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("/nonexistent/model.gguf"), std::string::npos);
}

// A file read into memory can be edited in place (a loader converting weights to another
// layout without a second copy); the file on disk is untouched. A mapped file refuses, naming
// itself: its pages are the page cache's.
TEST(MappedFile, EditChangesTheReadCopyOnly) {
  auto path = std::filesystem::temp_directory_path() / ("pi_edit_" + std::to_string(::getpid()));
  { std::ofstream(path, std::ios::binary) << "abcdefgh"; }
  auto m = MappedFile::open(path.string(), LoadMode::Read);
  ASSERT_TRUE(m.ok()) << m.error().message;
  Status st = m->edit([](std::span<std::byte> b) {
    ASSERT_EQ(b.size(), 8u);
    std::swap(b[0], b[7]);
  });
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), 8), "hbcdefga");
  auto again = MappedFile::open(path.string(), LoadMode::Map);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(again->data()), 8), "abcdefgh");
  bool called = false;
  st = again->edit([&](std::span<std::byte>) { called = true; });
  ASSERT_FALSE(st.ok());
  EXPECT_FALSE(called);
  EXPECT_NE(st.error().message.find(path.string()), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("mapped"), std::string::npos) << st.error().message;
  std::filesystem::remove(path);
}

// Auto reads a file into memory when huge pages are on and the memory available holds the
// file and 1 GiB, and maps it otherwise; open() reports the choice it made.
TEST(MappedFile, AutoReadsWhatFitsInTheAvailableMemory) {
  constexpr size_t GiB = size_t{1} << 30;
  EXPECT_EQ(choose_load_mode(8 * GiB, 9 * GiB, true), LoadMode::Read);
  EXPECT_EQ(choose_load_mode(8 * GiB + 1, 9 * GiB, true), LoadMode::Map);
  EXPECT_EQ(choose_load_mode(8 * GiB, 9 * GiB, false), LoadMode::Map);
  EXPECT_EQ(choose_load_mode(0, GiB, true), LoadMode::Read);
  EXPECT_EQ(choose_load_mode(0, GiB - 1, true), LoadMode::Map);
  EXPECT_EQ(choose_load_mode(1, 0, true), LoadMode::Map);  // MemAvailable unknown
  EXPECT_GT(mem_available_bytes(), size_t{0});

  auto path = std::filesystem::temp_directory_path() / ("pi_auto_" + std::to_string(::getpid()));
  { std::ofstream(path) << "hello"; }
  auto m = MappedFile::open(path.string(), LoadMode::Auto);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->mode(), transparent_huge_pages_on() ? LoadMode::Read : LoadMode::Map);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), 5), "hello");
  auto mapped = MappedFile::open(path.string(), LoadMode::Map);
  ASSERT_TRUE(mapped.ok()) << mapped.error().message;
  EXPECT_EQ(mapped->mode(), LoadMode::Map);
  std::filesystem::remove(path);
}

TEST(MappedFile, MissingFileNamesPath) {
  auto m = MappedFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("/nonexistent/model.gguf"), std::string::npos);
}

TEST(MappedFile, DirectoryIsRefused) {
  auto m = MappedFile::open("/tmp");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace pi
