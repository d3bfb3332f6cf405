// Keeping freed memory in the process, for programs that call kernels in a tight loop.
#pragma once

namespace hkfac {

// glibc returns large freed blocks to the kernel (munmap, or trimming the heap top) and maps
// them again on the next allocation; every page then faults in anew, with a TLB shootdown on
// each unmap. A training step allocates and frees the same few megabytes (batch-shaped kernel
// outputs, Eigen temporaries), so that round trip can cost as much as the arithmetic. This
// raises glibc's mmap and trim thresholds so such blocks stay in the heap. Call it once from
// main(); it changes process-wide allocator settings, which a library must not do on its own.
// A no-op on other C libraries.
void retain_freed_memory();

} // namespace hkfac
