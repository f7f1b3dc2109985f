#include "memfit/plan/live_profile.h"

#include <fmt/format.h>

#include <algorithm>

#include "memfit/core/checked.h"

namespace memfit {

std::optional<uint64_t> next_step_needed_bytes(uint64_t live_bytes, uint64_t step_peak_bytes,
                                               uint64_t step_argument_bytes) {
  const uint64_t arguments = std::min(step_argument_bytes, step_peak_bytes);
  return checked_add(live_bytes, step_peak_bytes - std::min(arguments, live_bytes));
}

Expected<NextStepFit> next_step_fit(const DeviceMemoryProfile& profile, std::string_view device,
                                    uint64_t step_peak_bytes, uint64_t step_argument_bytes,
                                    std::optional<uint64_t> limit_bytes, uint64_t step_peak_upper_bytes) {
  const ProfileDevice* chosen = nullptr;
  for (const ProfileDevice& d : profile.devices) {
    if (!device.empty() ? d.device == device : (!chosen || d.buffer_bytes > chosen->buffer_bytes))
      chosen = &d;
  }
  if (!chosen) {
    std::string names;
    for (const ProfileDevice& d : profile.devices) names += (names.empty() ? "" : ", ") + d.device;
    return not_found(fmt::format("the profile has no device '{}' (it has: {})", device, names));
  }
  NextStepFit f;
  f.device = chosen->device;
  f.live_buffer_bytes = chosen->buffer_bytes;
  f.executable_bytes = profile.executable_bytes;
  f.step_peak_bytes = step_peak_bytes;
  f.step_argument_bytes = std::min(step_argument_bytes, step_peak_bytes);
  const auto needed = next_step_needed_bytes(f.live_buffer_bytes, step_peak_bytes, step_argument_bytes);
  if (!needed) return invalid_argument("the live bytes and the step's peak overflow 64 bits");
  f.needed_bytes = *needed;
  const auto needed_upper = next_step_needed_bytes(
      f.live_buffer_bytes, std::max(step_peak_upper_bytes, step_peak_bytes), step_argument_bytes);
  if (!needed_upper) return invalid_argument("the live bytes and the step's peak overflow 64 bits");
  f.needed_upper_bytes = *needed_upper;
  f.limit_bytes = limit_bytes;
  if (limit_bytes) {
    f.fits = f.needed_bytes <= *limit_bytes;
    f.fits_in_every_order = f.needed_upper_bytes <= *limit_bytes;
  }
  return f;
}

}  // namespace memfit
