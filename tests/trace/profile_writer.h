// Device memory profiles as JAX writes them (pprof's Profile message, gzipped), made with the protobuf
// library for the tests of memfit/trace/device_profile.h and `memfit profile`.
#pragma once

#include <fmt/format.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "profile.pb.h"

namespace memfit::testing {

inline std::string gzip(const std::string& data) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, data.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A profile as JAX writes it: strings interned, sample types allocations/count and space/bytes.
class ProfileWriter {
 public:
  ProfileWriter() {
    s("");
    auto* count = p_.add_sample_type();
    count->set_type(s("allocations"));
    count->set_unit(s("count"));
    auto* bytes = p_.add_sample_type();
    bytes->set_type(s("space"));
    bytes->set_unit(s("bytes"));
  }
  int64_t s(const std::string& text) {
    for (int i = 0; i < p_.string_table_size(); ++i)
      if (p_.string_table(i) == text) return i;
    p_.add_string_table(text);
    return p_.string_table_size() - 1;
  }
  // A Python frame: one function, one location.
  uint64_t frame(const std::string& function, const std::string& file, int64_t line) {
    auto* f = p_.add_function();
    f->set_id(static_cast<uint64_t>(p_.function_size()));
    f->set_name(s(function));
    f->set_filename(s(file));
    auto* loc = p_.add_location();
    loc->set_id(static_cast<uint64_t>(p_.location_size()));
    auto* l = loc->add_line();
    l->set_function_id(f->id());
    l->set_line(line);
    return loc->id();
  }
  void sample(const std::vector<uint64_t>& stack, int64_t count, int64_t bytes, const std::string& kind,
              const std::string& device) {
    auto* x = p_.add_sample();
    for (uint64_t id : stack) x->add_location_id(id);
    x->add_value(count);
    x->add_value(bytes);
    auto* k = x->add_label();
    k->set_key(s("kind"));
    k->set_str(s(kind));
    if (!device.empty()) {
      auto* d = x->add_label();
      d->set_key(s("device"));
      d->set_str(s(device));
    }
  }
  perftools::profiles::Profile& proto() { return p_; }
  std::string saved() const { return gzip(p_.SerializeAsString()); }

 private:
  perftools::profiles::Profile p_;
};

// A process holding one 10 GiB array on cuda:0 (the case of ../shared/FACTS.md), and its jitted function.
inline ProfileWriter ten_gib_array() {
  ProfileWriter w;
  const uint64_t init = w.frame("init_params", "model.py", 12);
  const uint64_t module = w.frame("<module>", "train.py", 3);
  const uint64_t jit = w.frame("step", "train.py", 9);
  w.sample({init, module}, 1, static_cast<int64_t>(10ull << 30), "buffer", "cuda:0");
  w.sample({jit, module}, 1, 1 << 20, "executable", "");
  return w;
}

}  // namespace memfit::testing
