#include "memfit/core/process_memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace memfit {

void keep_freed_memory_in_heap() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
#endif
}

}  // namespace memfit
