// SerialKernels: a thread-local switch read by a do_par_for handler in the library's Halide
// runtime.
#include "hkfac/serial_kernels.h"

#include <HalideRuntime.h>

#include <atomic>
#include <mutex>

namespace hkfac {
namespace {

thread_local int t_serial_depth = 0;

// The handler this one replaced, read on every parallel call outside a scope.
std::atomic<halide_do_par_for_t> g_previous{nullptr};

int do_par_for(void *user_context, halide_task_t task, int min, int size, uint8_t *closure) {
  if (t_serial_depth > 0) {
    // In order, stopping at the first failure as Halide's pool reports the first error it sees.
    for (int i = min; i < min + size; ++i) {
      if (const int r = task(user_context, i, closure); r != 0)
        return r;
    }
    return 0;
  }
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

SerialKernels::SerialKernels(bool on) : on_(on) {
  if (on_) {
    install_once();
    ++t_serial_depth;
  }
}

SerialKernels::~SerialKernels() {
  if (on_)
    --t_serial_depth;
}

bool kernels_run_serially() { return t_serial_depth > 0; }

} // namespace hkfac
