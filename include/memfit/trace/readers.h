// memfit/trace/readers.h - recorded allocation traces into a Timeline.
//
// Formats (gzip-compressed input is accepted for all):
//   pytorch-snapshot  the pickle torch.cuda.memory._dump_snapshot() writes: one device's device_traces - the
//                     only one with events, or `device` (each device has its own allocator)
//   pytorch-csv       device_traces flattened to `action,addr,size,stream,time_us`
//   rmm-csv           RMM's logging_resource_adaptor: `Thread,Time,Action,Pointer,Size,Stream`
//   memfit            memfit's own recorder (trace/writer.h): `# memfit-trace v1` then
//                     `event,buffer,size_bytes,stream,time_us,tag`
// PyTorch actions: alloc and free_completed (or free_requested, when a trace has no free_completed) make the
// timeline; segment_alloc/segment_free/segment_map/segment_unmap give the recorded run's peak reserved.
// Errors name the line (or pickle byte) and the reason; nothing is half-read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "memfit/trace/timeline.h"

namespace memfit {

// `device`: which device's trace of a PyTorch snapshot (an error for the one-device formats).
Expected<Timeline> read_trace_file(const std::string& path, std::optional<uint32_t> device = std::nullopt);
// Detects the format from the content.
Expected<Timeline> parse_trace(std::string_view data, std::optional<uint32_t> device = std::nullopt);

// Without `device`: the one device whose trace has events; several is an error that names them.
Expected<Timeline> parse_pytorch_snapshot(std::string_view pickle_bytes,
                                          std::optional<uint32_t> device = std::nullopt);
Expected<Timeline> parse_pytorch_csv(std::string_view text);
Expected<Timeline> parse_rmm_csv(std::string_view text);
Expected<Timeline> parse_memfit_trace(std::string_view text);

}  // namespace memfit
