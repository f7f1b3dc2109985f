// memfit/core/file_io.h - whole-file reads (gzip transparently) and all-or-nothing writes.
#pragma once

#include <string>
#include <string_view>

#include "memfit/core/status.h"

namespace memfit {

// Reads a file; if it starts with the gzip magic bytes it is decompressed. `max_bytes` bounds the
// decompressed size so a gzip bomb is an error, not an exhausted host.
Expected<std::string> read_file(const std::string& path, uint64_t max_bytes = 8ull << 30);

// Decompresses gzip data held in memory (same bound).
Expected<std::string> gunzip(std::string_view data, uint64_t max_bytes = 8ull << 30);

// Writes to `path.tmp-PID` then renames over `path`: a reader never sees half a file.
Status write_file_atomic(const std::string& path, std::string_view contents);

}  // namespace memfit
