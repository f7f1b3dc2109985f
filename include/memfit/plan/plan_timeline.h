// memfit/plan/plan_timeline.h - a planned program as a Timeline, the seam every report and replay reads:
// each buffer allocated at the schedule step that defines it and freed after its last use, so the HTML
// timeline draws a plan and a recorded trace through one path, and `memfit replay` can run a planned
// program through an allocator policy.
#pragma once

#include "memfit/plan/hlo_plan.h"
#include "memfit/trace/timeline.h"

namespace memfit {

// The categories a planned buffer is drawn in, in this order: the model zoo's own, else from the buffer's
// kind and JAX op name (forward `jvp(` activations, backward `transpose(` gradients).
inline constexpr const char* kPlanCategories[] = {"parameters",  "optimizer_state", "gradients",
                                                  "activations", "temporaries",     "outputs"};

// Parameters and outputs live the whole step. A temporary is freed after the step of its last use; where
// the next step's result takes over its chunk (they overlap in the temp block), it is freed first, as
// XLA's heap simulator does. The Timeline is the device's: constants, buffers in host memory (offloaded)
// and temporaries placed inside an output's or a donated argument's allocation get no events. Tags are
// kPlanCategories (tag i+1 = category i); labels name every buffer. The Timeline's most live bytes are the
// plan's lower bound when nothing shares a chunk at a step boundary in other ways
// (tests/plan/plan_timeline_test.cc checks it on XLA's programs).
Timeline plan_timeline(const HloPlan& plan);

}  // namespace memfit
