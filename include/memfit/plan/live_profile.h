// memfit/plan/live_profile.h - "will the next step fit in this process": a program's peak on top of what a
// live process already holds, read from its device memory profile (memfit/trace/device_profile.h).
//
// The step's arguments (parameters, optimizer state, the batch) are taken to be among the live arrays, so
// the step adds its peak less its arguments; what the profile holds beyond them (other arrays, leaks) stays.
// Executables are listed but not counted: their code is loaded outside the allocator's pool.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "memfit/trace/device_profile.h"

namespace memfit {

struct NextStepFit {
  std::string device;  // the profile's device label used
  uint64_t live_buffer_bytes = 0;
  uint64_t executable_bytes = 0;
  uint64_t step_peak_bytes = 0;
  uint64_t step_argument_bytes = 0;
  uint64_t needed_bytes = 0;  // live + peak - min(arguments, live)
  // The same with the step's peak in the program's own order (HloPlan::peak_upper_bytes): the most the next
  // step needs whatever order XLA's memory scheduler keeps.
  uint64_t needed_upper_bytes = 0;
  std::optional<uint64_t> limit_bytes;
  std::optional<bool> fits;
  std::optional<bool> fits_in_every_order;
};

// live + peak - min(arguments, live): the bytes the next step needs in a process holding `live_bytes`;
// nullopt when the sum passes 2^64.
std::optional<uint64_t> next_step_needed_bytes(uint64_t live_bytes, uint64_t step_peak_bytes,
                                               uint64_t step_argument_bytes);

// `device` empty: the device holding the most buffers. kNotFound when the profile has no such device.
// `step_peak_upper_bytes`: the step's peak in the program's own order (below `step_peak_bytes`: the same).
Expected<NextStepFit> next_step_fit(const DeviceMemoryProfile& profile, std::string_view device,
                                    uint64_t step_peak_bytes, uint64_t step_argument_bytes,
                                    std::optional<uint64_t> limit_bytes, uint64_t step_peak_upper_bytes = 0);

}  // namespace memfit
