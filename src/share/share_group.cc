#include "memfit/share/share_group.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

#include "memfit/core/bytes.h"
#include "memfit/core/checked.h"
#include "share_table.h"

namespace memfit {
namespace share_detail {
namespace {

// Reads /proc/PID/stat: the state letter and the start time (field 22). The command may hold spaces and
// parentheses, so the fields are counted from the last ')'. One read(2) into a stack buffer: members call
// this for every row of the table a few times a second, and a stream per call was most of their CPU time
// with dozens of members.
bool read_stat(int64_t pid, char* state, uint64_t* start_ticks) {
  char path[40];
  const auto written = fmt::format_to_n(path, sizeof(path) - 1, "/proc/{}/stat", pid);
  *written.out = '\0';
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[1024];  // the command is at most 64 bytes; the fields up to 22 fit many times over
  ssize_t n = 0;
  while ((n = ::read(fd, text, sizeof(text) - 1)) < 0 && errno == EINTR) {
  }
  ::close(fd);
  if (n <= 0) return false;
  const std::string_view line(text, static_cast<size_t>(n));
  const size_t close = line.rfind(')');
  if (close == std::string_view::npos) return false;
  size_t at = close + 1;
  std::string_view field;
  for (int i = 3; i <= 22; ++i) {  // field 3 is the state
    while (at < line.size() && line[at] == ' ') ++at;
    const size_t end = std::min(line.find(' ', at), line.size());
    if (end == at) return false;
    field = line.substr(at, end - at);
    at = end;
    if (i == 3) *state = field[0];
  }
  const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), *start_ticks);
  return ec == std::errc() && ptr != field.data();
}

void copy_text(char* out, size_t capacity, std::string_view text) {
  const size_t n = std::min(text.size(), capacity - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

std::string row_text(const char* text, size_t capacity) { return std::string(text, strnlen(text, capacity)); }

}  // namespace

bool member_alive(int64_t pid, uint64_t start_ticks) {
  if (pid <= 0) return false;
  char state = '?';
  uint64_t ticks = 0;
  if (!read_stat(pid, &state, &ticks)) return false;  // gone
  if (state == 'Z' || state == 'X') return false;     // killed, not yet waited for: holds no memory
  return ticks == start_ticks;
}

uint64_t own_start_ticks() {
  char state = '?';
  uint64_t ticks = 0;
  return read_stat(::getpid(), &state, &ticks) ? ticks : 0;
}

std::string own_command() {
  std::ifstream in("/proc/self/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

namespace {
// What a user does about a table that does not read as one. `name` is the POSIX shm name (/memfit-...).
std::string how_to_clear(const std::string& name) {
  return fmt::format("(once no process uses it: rm /dev/shm{})", name);
}
}  // namespace

Expected<std::unique_ptr<Segment>> Segment::open(std::string_view group, int device, bool create,
                                                 uint64_t capacity_bytes, std::string_view device_name) {
  MEMFIT_RETURN_IF_ERROR(validate_share_name(group));
  const std::string name = share_segment_name(group, device);
  bool writable = true;
  int fd = ::shm_open(name.c_str(), O_RDWR | (create ? O_CREAT : 0) | O_CLOEXEC, 0660);
  if (fd < 0 && !create && (errno == EACCES || errno == EPERM)) {  // another user's group: read it only
    writable = false;
    fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  }
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found(fmt::format("no share group '{}' on device {}", group, device));
    return io_error(fmt::format("share group '{}': shm_open {}: {}", group, name, std::strerror(err)));
  }
  auto fail = [&](std::string what) -> Error {
    const int err = errno;
    ::close(fd);
    return io_error(fmt::format("share group '{}': {}: {}", group, what, std::strerror(err)));
  };
  // Made under the lock, so a second process never sees a half-made table; one whose maker died before
  // writing the magic (written last) is made again.
  if (::flock(fd, writable ? LOCK_EX : LOCK_SH) != 0) return fail("flock");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::flock(fd, LOCK_UN);
    return fail("fstat");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size != 0 && size != sizeof(Table)) {
    ::flock(fd, LOCK_UN);
    ::close(fd);
    return failed_precondition(
        fmt::format("share group '{}': {} is {} bytes, not a memfit lease table of {} {}", group, name, size,
                    sizeof(Table), how_to_clear(name)));
  }
  if (size == 0) {
    if (!create) {
      ::flock(fd, LOCK_UN);
      ::close(fd);
      return not_found(fmt::format("no share group '{}' on device {}", group, device));
    }
    if (::ftruncate(fd, sizeof(Table)) != 0) {
      ::flock(fd, LOCK_UN);
      return fail("ftruncate");
    }
  }
  void* mapped =
      ::mmap(nullptr, sizeof(Table), writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) {
    ::flock(fd, LOCK_UN);
    return fail("mmap");
  }
  auto* table = static_cast<Table*>(mapped);
  const bool made = std::memcmp(table->header.magic, kMagic, sizeof(kMagic)) == 0;
  if (!made) {
    if (!create || !writable) {
      ::munmap(mapped, sizeof(Table));
      ::flock(fd, LOCK_UN);
      ::close(fd);
      return not_found(
          fmt::format("no share group '{}' on device {} (its table is not made yet)", group, device));
    }
    std::memset(static_cast<void*>(table), 0, sizeof(Table));
    table->header.version = kVersion;
    table->header.row_bytes = sizeof(Row);
    table->header.capacity_bytes = capacity_bytes;
    table->header.device = device;
    table->header.next_member_id = 1;
    copy_text(table->header.device_name, sizeof(table->header.device_name), device_name);
    std::memcpy(table->header.magic, kMagic, sizeof(kMagic));
  } else if (table->header.version != kVersion || table->header.row_bytes != sizeof(Row)) {
    ::munmap(mapped, sizeof(Table));
    ::flock(fd, LOCK_UN);
    ::close(fd);
    return failed_precondition(
        fmt::format("share group '{}': {} has table version {}, this memfit reads {} {}", group, name,
                    table->header.version, kVersion, how_to_clear(name)));
  }
  ::flock(fd, LOCK_UN);
  return std::unique_ptr<Segment>(new Segment(fd, table, writable));
}

Segment::~Segment() {
  ::munmap(table_, sizeof(Table));
  ::close(fd_);
}

Segment::Lock::Lock(Segment& segment) : segment_(segment) {
  segment_.mu_.lock();
  // EINTR only: flock on an open descriptor has no other failure that waiting again would not cure.
  while (::flock(segment_.fd_, segment_.writable_ ? LOCK_EX : LOCK_SH) != 0 && errno == EINTR) {
  }
}

Segment::Lock::~Lock() {
  ::flock(segment_.fd_, LOCK_UN);
  segment_.mu_.unlock();
}

int reap_dead(Table& table) {
  int reaped = 0;
  for (Row& row : table.rows) {
    if (row.pid == 0 || member_alive(row.pid, row.start_ticks)) continue;
    std::memset(static_cast<void*>(&row), 0, sizeof(Row));
    ++reaped;
  }
  return reaped;
}

uint64_t leased_bytes(const Table& table) {
  uint64_t sum = 0;
  for (const Row& row : table.rows)
    if (row.pid != 0) sum = saturating_add(sum, row.lease_bytes);
  return sum;
}

std::vector<uint64_t> fair_shares(const Table& table) {
  std::vector<uint32_t> weights;
  std::vector<uint64_t> quotas;
  std::vector<int> index;
  for (int i = 0; i < kMaxShareMembers; ++i) {
    const Row& row = table.rows[i];
    if (row.pid == 0) continue;
    weights.push_back(static_cast<uint32_t>(std::clamp<uint64_t>(row.weight, 1, 1000)));
    quotas.push_back(row.quota_bytes);
    index.push_back(i);
  }
  const std::vector<uint64_t> shares = share_fair_shares(table.header.capacity_bytes, weights, quotas);
  std::vector<uint64_t> out(kMaxShareMembers, 0);
  for (size_t k = 0; k < index.size(); ++k) out[static_cast<size_t>(index[k])] = shares[k];
  return out;
}

ShareGroupInfo describe(const Table& table, std::string_view group, bool check_alive) {
  ShareGroupInfo info;
  info.name = std::string(group);
  info.device = table.header.device;
  info.device_name = row_text(table.header.device_name, sizeof(table.header.device_name));
  info.capacity_bytes = table.header.capacity_bytes;
  info.leased_bytes = leased_bytes(table);
  const std::vector<uint64_t> fair = fair_shares(table);
  for (int i = 0; i < kMaxShareMembers; ++i) {
    const Row& row = table.rows[i];
    if (row.pid == 0 || (check_alive && !member_alive(row.pid, row.start_ticks))) continue;
    ShareMemberInfo m;
    m.pid = row.pid;
    m.command = row_text(row.command, sizeof(row.command));
    m.weight = static_cast<uint32_t>(std::clamp<uint64_t>(row.weight, 1, 1000));
    m.quota_bytes = row.quota_bytes;
    m.fair_share_bytes = fair[static_cast<size_t>(i)];
    m.limit_bytes = row.limit_bytes;
    m.lease_bytes = row.lease_bytes;
    m.pool_bytes = row.pool_bytes;
    m.bytes_in_use = row.bytes_in_use;
    m.peak_bytes_in_use = row.peak_bytes_in_use;
    m.demand_bytes = row.demand_bytes;
    info.members.push_back(std::move(m));
  }
  std::sort(info.members.begin(), info.members.end(),
            [](const ShareMemberInfo& a, const ShareMemberInfo& b) { return a.pid < b.pid; });
  return info;
}

}  // namespace share_detail

using share_detail::Segment;

Status validate_share_name(std::string_view name) {
  const bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
  if (!ok || name == "." || name == "..")
    return invalid_argument(fmt::format("share group name '{}' must be 1-64 of A-Z a-z 0-9 _ . -",
                                        name.substr(0, std::min<size_t>(name.size(), 80))));
  return ok_status();
}

std::string share_segment_name(std::string_view name, int device) {
  return fmt::format("/memfit-share-{}-dev{}", name, device);
}

Expected<ShareGroupInfo> read_share_group(std::string_view name, int device) {
  MEMFIT_ASSIGN_OR_RETURN(auto segment, Segment::open(name, device, false, 0, {}));
  Segment::Lock lock(*segment);
  if (segment->writable()) share_detail::reap_dead(segment->table());
  ShareGroupInfo info = share_detail::describe(segment->table(), name, /*check_alive=*/!segment->writable());
  // What members write keeps in use <= pool <= lease <= the group's capacity (a pool grows only inside its
  // lease, a lease only from free capacity, and gives back only down to its pool). A row that breaks it was
  // not written by a member: its figures are not shown as if they were.
  for (const ShareMemberInfo& m : info.members) {
    const uint64_t capacity = info.capacity_bytes;
    if (m.lease_bytes <= capacity && m.pool_bytes <= m.lease_bytes && m.bytes_in_use <= capacity &&
        m.peak_bytes_in_use <= capacity)
      continue;
    return failed_precondition(fmt::format(
        "share group '{}': its table on device {} holds figures no member writes (pid {}: lease {}, pool {}, "
        "in use {}, peak {} on a group of {}): corrupt, or not memfit's {}",
        name, device, m.pid, format_bytes(m.lease_bytes), format_bytes(m.pool_bytes),
        format_bytes(m.bytes_in_use), format_bytes(m.peak_bytes_in_use), format_bytes(capacity),
        share_detail::how_to_clear(share_segment_name(name, device))));
  }
  return info;
}

std::vector<ShareTableFile> share_table_files() {
  std::vector<ShareTableFile> files;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return files;
  constexpr std::string_view kPrefix = "memfit-share-";
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view file = entry->d_name;
    if (!file.starts_with(kPrefix)) continue;
    const size_t dev = file.rfind("-dev");
    if (dev == std::string_view::npos || dev < kPrefix.size()) continue;
    const std::string_view group = file.substr(kPrefix.size(), dev - kPrefix.size());
    const std::string digits(file.substr(dev + 4));
    if (digits.empty() || digits.size() > 4 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
      continue;
    if (!validate_share_name(group).ok()) continue;
    files.push_back({std::string(group), std::stoi(digits)});
  }
  ::closedir(dir);
  std::sort(files.begin(), files.end(), [](const ShareTableFile& a, const ShareTableFile& b) {
    return std::tie(a.name, a.device) < std::tie(b.name, b.device);
  });
  return files;
}

ShareTables read_share_tables(std::string_view name) {
  ShareTables tables;
  for (const ShareTableFile& f : share_table_files()) {
    if (!name.empty() && f.name != name) continue;
    auto info = read_share_group(f.name, f.device);
    if (info.ok()) {
      tables.groups.push_back(std::move(*info));
    } else if (info.error().code() != ErrorCode::kNotFound) {
      tables.unreadable.push_back({f.name, f.device, info.error()});
    }
  }
  return tables;
}

std::vector<ShareGroupInfo> list_share_groups() { return read_share_tables().groups; }

Status remove_share_group(std::string_view name, int device) {
  MEMFIT_RETURN_IF_ERROR(validate_share_name(name));
  const std::string segment = share_segment_name(name, device);
  if (::shm_unlink(segment.c_str()) != 0 && errno != ENOENT)
    return io_error(fmt::format("shm_unlink {}: {}", segment, std::strerror(errno)));
  return ok_status();
}

std::vector<uint64_t> share_fair_shares(uint64_t capacity_bytes, const std::vector<uint32_t>& weights,
                                        const std::vector<uint64_t>& quotas) {
  std::vector<uint64_t> shares(weights.size(), 0);
  uint64_t quoted = 0;
  uint128_t weight_sum = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (i < quotas.size() && quotas[i] > 0) {
      // Quotas are served in join order while capacity lasts.
      shares[i] = std::min(quotas[i], capacity_bytes - quoted);
      quoted += shares[i];
    } else {
      weight_sum += std::max<uint32_t>(weights[i], 1);
    }
  }
  const uint64_t rest = capacity_bytes - quoted;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (i < quotas.size() && quotas[i] > 0) continue;
    shares[i] =
        static_cast<uint64_t>(static_cast<uint128_t>(rest) * std::max<uint32_t>(weights[i], 1) / weight_sum);
  }
  return shares;
}

}  // namespace memfit
