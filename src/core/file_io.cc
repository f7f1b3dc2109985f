#include "memfit/core/file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "memfit/core/text.h"

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
  const std::string name = excerpt(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found(fmt::format("cannot open {}: {}", name, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    return invalid_argument(fmt::format("{} is a directory, not a file", name));
  }
  // Read in chunks up to the bound: pipes and devices (/dev/zero) have no size to trust, and a regular file
  // may grow while it is read.
  // A character or block device (/dev/zero, /dev/urandom, a disk) may never end: reading one up to a
  // file's bound (1 GiB for a log) takes seconds and that much memory before the error, so a device gets a
  // bound of its own. A pipe or a regular file keeps the caller's.
  const bool device = S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode);
  constexpr uint64_t kMaxDeviceBytes = 64ull << 20;
  if (device && max_bytes > kMaxDeviceBytes) max_bytes = kMaxDeviceBytes;
  std::string data;
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) <= max_bytes)
    data.reserve(static_cast<size_t>(st.st_size));
  std::vector<char> buffer(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return io_error(fmt::format("cannot read {}: {}", name, std::strerror(err)));
    }
    if (n == 0) break;
    data.append(buffer.data(), static_cast<size_t>(n));
    if (data.size() > max_bytes) {
      ::close(fd);
      if (device)
        return invalid_argument(
            fmt::format("{} is a device and gave more than {} bytes, more than memfit reads from a device "
                        "(save it to a file)",
                        name, max_bytes));
      return invalid_argument(
          fmt::format("{} is larger than {} bytes, more than memfit reads", name, max_bytes));
    }
  }
  ::close(fd);
  if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
      static_cast<unsigned char>(data[1]) == 0x8b) {
    auto inflated = gunzip(data, max_bytes);
    if (!inflated.ok()) return inflated.error().with_context(name);
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
