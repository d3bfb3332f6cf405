// A small fork-join loop over the cores the plugin may use.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hkfac::sched {

// Runs body(i) for i in [0, n) on up to `threads` threads (0: every core), dynamically balanced.
// The first exception thrown by any body is rethrown on the calling thread.
inline void parallel_for(int n, int threads, const std::function<void(int)> &body) {
  int t = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  t = std::max(1, std::min(t, n / 4));
  if (t <= 1) {
    for (int i = 0; i < n; ++i)
      body(i);
    return;
  }
  std::atomic<int> next{0};
  std::exception_ptr error;
  std::mutex m;
  auto work = [&]() {
    for (int i = next++; i < n; i = next++) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error)
          error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < t; ++k)
    pool.emplace_back(work);
  work();
  for (auto &th : pool)
    th.join();
  if (error)
    std::rethrow_exception(error);
}

} // namespace hkfac::sched
