#include <gtest/gtest.h>

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
