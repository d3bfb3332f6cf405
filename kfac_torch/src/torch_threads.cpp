#include "torch_threads.h"

#include <ATen/Parallel.h>
#include <HalideRuntime.h>

#include <atomic>
#include <mutex>

namespace hkfac::kfac_torch::detail {
namespace {

thread_local int t_depth = 0;
std::atomic<halide_do_par_for_t> g_previous{nullptr};

int do_par_for(void *user_context, halide_task_t task, int min, int size, uint8_t *closure) {
  if (t_depth == 0) {
    const halide_do_par_for_t previous = g_previous.load(std::memory_order_acquire);
    return previous ? previous(user_context, task, min, size, closure)
                    : halide_default_do_par_for(user_context, task, min, size, closure);
  }
  // Halide reports the first failure it sees; the tasks after one still run, as in its pool.
  std::atomic<int> result{0};
  at::parallel_for(min, min + size, 1, [&](int64_t begin, int64_t end) {
    // A parallel loop nested in this task stays on this pool too (run inline, as LibTorch runs a
    // nested at::parallel_for), rather than waking Halide's.
    ++t_depth;
    for (int64_t i = begin; i < end; ++i) {
      if (const int r = task(user_context, static_cast<int>(i), closure); r != 0) {
        int expected = 0;
        result.compare_exchange_strong(expected, r);
      }
    }
    --t_depth;
  });
  return result.load();
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_previous.store(halide_default_do_par_for, std::memory_order_release);
    const halide_do_par_for_t previous = halide_set_custom_do_par_for(do_par_for);
    if (previous && previous != do_par_for)
      g_previous.store(previous, std::memory_order_release);
  });
}

} // namespace

KernelsOnTorchThreads::KernelsOnTorchThreads() {
  install_once();
  ++t_depth;
}

KernelsOnTorchThreads::~KernelsOnTorchThreads() { --t_depth; }

} // namespace hkfac::kfac_torch::detail
