// memfit/core/process_memory.h - how a process that plans deep programs asks the C library for memory.
#pragma once

namespace memfit {

// A plan moves its program's instruction arrays (tens to hundreds of MB for a deep model) from pass to
// pass. glibc serves each such block with a fresh mmap and unmaps it on free, so every pass faults its
// arrays in anew (a third of a 256-layer ViT plan's time). This keeps freed memory in the heap instead
// (glibc still falls back to mmap if the heap cannot grow). For short-lived planning processes - the CLI,
// the planning benchmarks - not for a library inside someone else's program. A no-op off glibc.
void keep_freed_memory_in_heap();

}  // namespace memfit
