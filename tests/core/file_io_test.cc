#include "memfit/core/file_io.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

namespace memfit {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))).string();
}

std::string gzip(const std::string& data) {
  z_stream s{};
  deflateInit2(&s, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&s, data.size()) + 32, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  deflate(&s, Z_FINISH);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

TEST(FileIo, WritesAtomicallyAndReadsBack) {
  const std::string path = temp_path("memfit-io");
  ASSERT_TRUE(write_file_atomic(path, "hello").ok());
  EXPECT_EQ(*read_file(path), "hello");
  ASSERT_TRUE(write_file_atomic(path, "second").ok());
  EXPECT_EQ(*read_file(path), "second");
  std::filesystem::remove(path);
  EXPECT_EQ(read_file(path).error().code(), ErrorCode::kNotFound);
}

TEST(FileIo, WriteIntoMissingFolderFailsCleanly) {
  auto s = write_file_atomic("/nonexistent-memfit-dir/x.json", "{}");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kIo);
}

TEST(FileIo, GzipIsDecompressedAndBounded) {
  const std::string text(100000, 'a');
  const std::string path = temp_path("memfit-gz");
  ASSERT_TRUE(write_file_atomic(path, gzip(text)).ok());
  EXPECT_EQ(*read_file(path), text);
  auto bomb = read_file(path, 1000);
  ASSERT_FALSE(bomb.ok());
  EXPECT_NE(bomb.error().message().find("expands beyond"), std::string::npos);
  const std::string gz = gzip(text);
  auto truncated = gunzip(std::string_view(gz).substr(0, gz.size() / 2));
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.error().message().find("truncated"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace memfit
