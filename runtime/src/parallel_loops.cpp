// ParallelLoopScope: one do_par_for handler in the library's Halide runtime, reading a
// thread-local runner.
#include "hkfac/parallel_loops.h"

#include <HalideRuntime.h>

#include <atomic>
#include <mutex>
#include <type_traits>

namespace hkfac {
namespace {

static_assert(std::is_same_v<ParallelLoopTask, halide_task_t>,
              "a ParallelLoopTask is Halide's task type, passed through unchanged");

thread_local ParallelLoopRunner t_runner = nullptr;

// The handler this one replaced, read on every parallel call outside a scope.
std::atomic<halide_do_par_for_t> g_previous{nullptr};

int do_par_for(void *user_context, halide_task_t task, int min, int size, uint8_t *closure) {
  if (t_runner)
    return t_runner(user_context, task, min, size, closure);
  const halide_do_par_for_t previous = g_previous.load(std::memory_order_acquire);
  return previous ? previous(user_context, task, min, size, closure)
                  : halide_default_do_par_for(user_context, task, min, size, closure);
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Stored before the handler is visible, so a kernel already running on another thread
    // never sees a null predecessor it would have to guess about.
    g_previous.store(halide_default_do_par_for, std::memory_order_release);
    const halide_do_par_for_t previous = halide_set_custom_do_par_for(do_par_for);
    if (previous && previous != do_par_for)
      g_previous.store(previous, std::memory_order_release);
  });
}

} // namespace

ParallelLoopScope::ParallelLoopScope(ParallelLoopRunner runner) : enclosing_(t_runner) {
  install_once();
  t_runner = runner;
}

ParallelLoopScope::~ParallelLoopScope() { t_runner = enclosing_; }

ParallelLoopRunner current_parallel_loop_runner() { return t_runner; }

} // namespace hkfac
