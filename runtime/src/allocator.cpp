// glibc allocator thresholds (see allocator.h).
#include "hkfac/allocator.h"

// Any C library header defines __GLIBC__ on glibc (through <features.h>); without one before the
// check below, the check was false and this function compiled to nothing.
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hkfac {

void retain_freed_memory() {
#if defined(__GLIBC__)
  // Blocks up to 256 MB come from the heap rather than their own mapping, and up to 512 MB of
  // free heap top is kept. Setting either threshold also stops glibc's dynamic adjustment.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

} // namespace hkfac
