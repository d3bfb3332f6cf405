// SerialKernels: inside a scope a thread's parallel loops run on it, in order, with the same
// results; outside, and on other threads, they reach the handler that was there before.
// (Each TEST runs in its own process, so the handler is installed afresh in each.)
#include "hkfac/serial_kernels.h"

#include <HalideRuntime.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "hkfac/kernels/covariance.h"
#include "hkfac/kernels/gemm.h"
#include "../test_util.h"

namespace hkfac {
namespace {
using namespace hkfac::testing;

struct Visits {
  std::vector<std::thread::id> thread;
  std::vector<int> order;
  std::atomic<int> next{0};
  int fail_at = -1;
  explicit Visits(int n) : thread(n), order(n, -1) {}
};

int visit(void *, int i, uint8_t *closure) {
  auto &v = *reinterpret_cast<Visits *>(closure);
  v.thread[i] = std::this_thread::get_id();
  v.order[i] = v.next++;
  // Long enough that Halide's pool would hand some iterations to a worker.
  volatile double x = 0;
  for (int k = 0; k < 20000; ++k)
    x = x + k;
  return i == v.fail_at ? -7 : 0;
}

std::atomic<int> g_counted_calls{0};
int counting_handler(void *uc, halide_task_t f, int min, int size, uint8_t *closure) {
  ++g_counted_calls;
  return halide_default_do_par_for(uc, f, min, size, closure);
}

TEST(SerialKernels, InsideAScopeEveryIterationRunsOnTheCallingThreadInOrder) {
  constexpr int n = 64;
  Visits v(n);
  {
    const SerialKernels serial;
    ASSERT_TRUE(kernels_run_serially());
    ASSERT_EQ(halide_do_par_for(nullptr, visit, 0, n, reinterpret_cast<uint8_t *>(&v)), 0);
  }
  EXPECT_FALSE(kernels_run_serially());
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(v.thread[i], std::this_thread::get_id()) << "iteration " << i;
    EXPECT_EQ(v.order[i], i) << "iteration " << i;
  }
}

TEST(SerialKernels, AFailingIterationStopsTheLoopAndItsCodeIsReturned) {
  Visits v(16);
  v.fail_at = 5;
  const SerialKernels serial;
  EXPECT_EQ(halide_do_par_for(nullptr, visit, 0, 16, reinterpret_cast<uint8_t *>(&v)), -7);
  EXPECT_EQ(v.next.load(), 6); // iterations 0..5 ran, none after the failure
  EXPECT_EQ(v.order[6], -1);
}

TEST(SerialKernels, ScopesNestAndAnOffScopeChangesNothing) {
  EXPECT_FALSE(kernels_run_serially());
  {
    const SerialKernels off(false);
    EXPECT_FALSE(kernels_run_serially());
    const SerialKernels outer;
    {
      const SerialKernels inner;
      const SerialKernels inner_off(false);
      EXPECT_TRUE(kernels_run_serially());
    }
    EXPECT_TRUE(kernels_run_serially());
  }
  EXPECT_FALSE(kernels_run_serially());
}

// A runner that counts the loops it is handed and runs them serially.
std::atomic<int> g_runner_loops{0};
int counting_runner(void *uc, ParallelLoopTask task, int min, int size, uint8_t *closure) {
  ++g_runner_loops;
  for (int i = min; i < min + size; ++i)
    if (const int r = task(uc, i, closure); r != 0)
      return r;
  return 0;
}

// The innermost scope takes this thread's loops, whichever kind it is, and leaving it restores
// the enclosing one; another thread's loops never reach this thread's runner.
TEST(ParallelLoopScope, TheInnermostScopeTakesTheLoopsAndLeavingRestoresTheEnclosing) {
  Visits v(8);
  auto loop = [&] {
    v.next = 0;
    return halide_do_par_for(nullptr, visit, 0, 8, reinterpret_cast<uint8_t *>(&v));
  };
  g_runner_loops = 0;
  {
    const ParallelLoopScope counted(counting_runner);
    EXPECT_EQ(current_parallel_loop_runner(), &counting_runner);
    ASSERT_EQ(loop(), 0);
    EXPECT_EQ(g_runner_loops.load(), 1);
    {
      const SerialKernels serial;
      EXPECT_TRUE(kernels_run_serially());
      ASSERT_EQ(loop(), 0);
      EXPECT_EQ(g_runner_loops.load(), 1); // the serial scope, not the counting one
    }
    EXPECT_FALSE(kernels_run_serially());
    ASSERT_EQ(loop(), 0);
    EXPECT_EQ(g_runner_loops.load(), 2);
    std::thread other([&] { EXPECT_EQ(loop(), 0); });
    other.join();
    EXPECT_EQ(g_runner_loops.load(), 2);
  }
  EXPECT_EQ(current_parallel_loop_runner(), nullptr);
  ASSERT_EQ(loop(), 0);
  EXPECT_EQ(g_runner_loops.load(), 2);
}

// A handler the program set before the first scope keeps receiving every call made outside a
// scope, from this thread and others, and none made inside one, kernels' loops included.
TEST(SerialKernels, CallsOutsideAScopeReachTheHandlerItReplaced) {
  const halide_do_par_for_t before_test = halide_set_custom_do_par_for(counting_handler);
  if (before_test != halide_default_do_par_for) {
    halide_set_custom_do_par_for(before_test);
    GTEST_SKIP() << "an earlier case in this process installed the scopes' handler; ctest runs "
                    "each case in a process of its own";
  }
  Visits v(8);
  auto *closure = reinterpret_cast<uint8_t *>(&v);
  {
    const SerialKernels serial; // installs its handler over counting_handler
    ASSERT_EQ(halide_do_par_for(nullptr, visit, 0, 8, closure), 0);
    EXPECT_EQ(g_counted_calls.load(), 0);

    // Another thread, while this one is inside the scope, is not serial.
    bool other_serial = true;
    std::thread other([&] {
      other_serial = kernels_run_serially();
      Visits w(8);
      halide_do_par_for(nullptr, visit, 0, 8, reinterpret_cast<uint8_t *>(&w));
    });
    other.join();
    EXPECT_FALSE(other_serial);
    EXPECT_EQ(g_counted_calls.load(), 1);
  }
  ASSERT_EQ(halide_do_par_for(nullptr, visit, 0, 8, closure), 0);
  EXPECT_EQ(g_counted_calls.load(), 2);

  // A covariance update large enough to run in parallel: its loops go through the handler
  // outside a scope and not inside.
  Buffer<float> X = random_matrix(1000, 257, 11);
  Buffer<float> C = random_symmetric(257, 12);
  const int before = g_counted_calls.load();
  kernels::covariance_update(C, X, 0.9f, 0.1f, false, Device::cpu);
  const int outside = g_counted_calls.load() - before;
  EXPECT_GT(outside, 0);
  {
    const SerialKernels serial;
    kernels::covariance_update(C, X, 0.9f, 0.1f, false, Device::cpu);
  }
  EXPECT_EQ(g_counted_calls.load() - before, outside);
}

// Every iteration computes the same values wherever it runs: the same bits inside and outside.
TEST(SerialKernels, KernelsGiveTheSameBitsInsideAndOutsideAScope) {
  for (const int d : {40, 257, 1001}) {
    Buffer<float> X = random_matrix(600, d, 3 + d);
    Buffer<float> C0 = random_symmetric(d + 1, 4 + d);
    Buffer<float> pooled = copy_of(C0), serial = copy_of(C0);
    kernels::covariance_update(pooled, X, 0.95f, 0.05f, true, Device::cpu);
    {
      const SerialKernels scope;
      kernels::covariance_update(serial, X, 0.95f, 0.05f, true, Device::cpu);
    }
    EXPECT_EQ(std::memcmp(pooled.data(), serial.data(), sizeof(float) * (d + 1) * (d + 1)), 0)
        << "covariance d=" << d;
  }
  Buffer<float> A = random_matrix(513, 300, 5), B = random_matrix(300, 257, 6);
  Buffer<float> pooled = make_matrix<float>(513, 257), serial = make_matrix<float>(513, 257);
  using kernels::Transpose;
  kernels::gemm(pooled, A, Transpose::no, B, Transpose::no, 1.0f, 0.0f, Device::cpu);
  {
    const SerialKernels scope;
    kernels::gemm(serial, A, Transpose::no, B, Transpose::no, 1.0f, 0.0f, Device::cpu);
  }
  EXPECT_EQ(std::memcmp(pooled.data(), serial.data(), sizeof(float) * 257 * 513), 0) << "gemm";
}

} // namespace
} // namespace hkfac
