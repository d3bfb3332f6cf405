#include "torch_threads.h"

#include <ATen/Parallel.h>

#include <atomic>

namespace hkfac::kfac_torch::detail {
namespace {

int run_on_torch_threads(void *user_context, ParallelLoopTask task, int min, int size,
                         uint8_t *closure) {
  // Halide reports the first failure it sees; the tasks after one still run, as in its pool.
  std::atomic<int> result{0};
  at::parallel_for(min, min + size, 1, [&](int64_t begin, int64_t end) {
    // A parallel loop nested in this task stays on this pool too (run inline, as LibTorch runs a
    // nested at::parallel_for), rather than waking Halide's.
    const ParallelLoopScope nested(run_on_torch_threads);
    for (int64_t i = begin; i < end; ++i) {
      if (const int r = task(user_context, static_cast<int>(i), closure); r != 0) {
        int expected = 0;
        result.compare_exchange_strong(expected, r);
      }
    }
  });
  return result.load();
}

} // namespace

KernelsOnTorchThreads::KernelsOnTorchThreads() : scope_(run_on_torch_threads) {}

} // namespace hkfac::kfac_torch::detail
