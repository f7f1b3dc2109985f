#include "memfit/core/file_io.h"

#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace memfit {

Expected<std::string> gunzip(std::string_view data, uint64_t max_bytes) {
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 32) != Z_OK) return internal_error("zlib: inflateInit2 failed");
  std::string out;
  char buffer[1 << 16];
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof(buffer);
    rc = inflate(&stream, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&stream);
      return invalid_argument(rc == Z_BUF_ERROR
                                  ? "gzip data is truncated"
                                  : fmt::format("gzip data is corrupt ({})", stream.msg ? stream.msg : "?"));
    }
    out.append(buffer, sizeof(buffer) - stream.avail_out);
    if (out.size() > max_bytes) {
      inflateEnd(&stream);
      return invalid_argument(fmt::format("gzip data expands beyond {} bytes", max_bytes));
    }
    if (rc == Z_OK && stream.avail_in == 0 && stream.avail_out != 0) {
      inflateEnd(&stream);
      return invalid_argument("gzip data is truncated");
    }
  }
  inflateEnd(&stream);
  return out;
}

Expected<std::string> read_file(const std::string& path, uint64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return io_error(fmt::format("cannot read '{}'", path));
  std::string data = std::move(buffer).str();
  if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
      static_cast<unsigned char>(data[1]) == 0x8b) {
    auto inflated = gunzip(data, max_bytes);
    if (!inflated.ok()) return inflated.error().with_context(path);
    return std::move(inflated).value();
  }
  return data;
}

Status write_file_atomic(const std::string& path, std::string_view contents) {
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return io_error(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return io_error(fmt::format("cannot write '{}'", path));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return io_error(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
  }
  return ok_status();
}

}  // namespace memfit
