// jemalloc's configuration for the executables that link memfit_malloc (src/CMakeLists.txt): the planner's.
//
// Why not glibc's malloc: a plan is memory-bound. A 300-layer step is ~240,000 HloInstructions (440 bytes
// each; 712 when this was measured, before HloInstruction::Rare), and each pass that rebuilds a computation
// writes a fresh array of them, 105-170 MB; glibc serves every block over 32 MB with a fresh mmap, so each
// pass faults its array in again 4 KiB at a time and walks it through 4 KiB TLB entries. jemalloc keeps freed
// extents for reuse and, with `thp:always`, backs them with 2 MiB transparent huge pages (this kernel's THP
// mode is `madvise`, which jemalloc asks for); its background thread returns unused pages without stalling
// the planner's threads. Measured on this 2-core machine (alternating runs, 2026-12-07): `memfit plan --model
// gpt --layers 300 --donate --precision mixed --remat full --attn cudnn --sharding fsdp --mesh
// data=4` 5.7-6.2 s with glibc, 5.5-6.1 s with jemalloc's defaults, 3.1-4.0 s with `thp:always`, 2.8-3.0 s
// with `thp:always` and the background thread.
//
// jemalloc reads this string at its first allocation (the `malloc_conf` global its manual documents); a
// MALLOC_CONF in the environment still overrides it.
extern "C" {
// NOLINTNEXTLINE: the name and type are jemalloc's interface.
extern const char* malloc_conf;
const char* malloc_conf = "thp:always,background_thread:true";
}
