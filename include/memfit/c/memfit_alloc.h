/* memfit/c/memfit_alloc.h - memfit's allocators behind a C ABI (libmemfit_alloc.so), for programs that bring
 * their own: PyTorch's torch.cuda.memory.CUDAPluggableAllocator(path, "memfit_alloc", "memfit_free") and CuPy
 * (cupy.cuda.set_allocator with a ctypes wrapper; see gpu/memfit_allocators.py).
 *
 * Configured like JAX, by the XLA variables of the process (XLA_PYTHON_CLIENT_ALLOCATOR, ..._PREALLOCATE,
 * XLA_CLIENT_MEM_FRACTION): the same variables give the same allocator and limit. MEMFIT_SIMULATED_BYTES=N
 * (e.g. 80GiB) uses a simulated device instead of the GPU: addresses that must not be dereferenced, for
 * tests and dry runs. MEMFIT_VMM_CACHE=BYTES bounds the page-mapped pool's cache of freed, still-mapped pages
 * (default 2% of the device). One allocator per device, created at its first allocation; thread-safe. */
#ifndef MEMFIT_C_MEMFIT_ALLOC_H_
#define MEMFIT_C_MEMFIT_ALLOC_H_

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* PyTorch's CUDAPluggableAllocator signatures (stream is a cudaStream_t). NULL when out of memory:
 * memfit_last_error() then holds the OOM report. */
void* memfit_alloc(ssize_t size, int device, void* stream);
void memfit_free(void* ptr, ssize_t size, int device, void* stream);

/* JAX's memory_stats() keys as one JSON object. Returns the length of the whole text (without the NUL);
 * writes at most `capacity` bytes including the NUL. -1 when the device has no allocator yet. */
int memfit_stats_json(int device, char* buffer, size_t capacity);

/* The last failure on this thread (an OOM report in words, or why the allocator could not be made), same
 * convention; 0 when there was none. */
int memfit_last_error(char* buffer, size_t capacity);

/* Sets peak_bytes_in_use to bytes_in_use (what users ask JAX for in jax#8096). */
void memfit_reset_peak(int device);

/* Gives the pages the page-mapped pool (XLA_PYTHON_CLIENT_ALLOCATOR=vmm) keeps mapped for reuse back to the
 * device, once the work queued on them has finished: PyTorch's torch.cuda.empty_cache(). 0 on success (and
 * for the other allocators, which keep no such cache), -1 when the device has no allocator yet or it failed.
 */
int memfit_empty_cache(int device);

#ifdef __cplusplus
}
#endif

#endif /* MEMFIT_C_MEMFIT_ALLOC_H_ */
