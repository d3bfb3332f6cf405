// The kernels' C++ dispatch (argument checks, staging, the call) makes no heap allocation once
// its arguments exist. The plugin's search calls the cost model thousands of times a second and
// the optimizer calls the other kernels every step, so a check that builds a vector or a staging
// container that allocates when empty is paid on every call. This binary replaces the global
// operator new with one that counts, so a regression shows as a count, not as a timing.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>

#include "hkfac/buffer.h"
#include "hkfac/kernels/cost_model.h"
#include "hkfac/kernels/covariance.h"
#include "hkfac/kernels/dense.h"
#include "hkfac/kernels/diagonal.h"
#include "hkfac/kernels/gemm.h"
#include "hkfac/kernels/patch_covariance.h"
#include "hkfac/kernels/precondition.h"
#include "../test_util.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
} // namespace

// Every replaceable allocating form funnels through these two; the aligned forms are replaced
// too, so an aligned allocation by the dispatch cannot slip past the count.
void *operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void *p = std::malloc(n ? n : 1))
    return p;
  throw std::bad_alloc();
}
void *operator new[](std::size_t n) { return operator new(n); }
void *operator new(std::size_t n, std::align_val_t a) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t align = static_cast<std::size_t>(a);
  if (void *p = std::aligned_alloc(align, (n + align - 1) / align * align))
    return p;
  throw std::bad_alloc();
}
void *operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
// GCC pairs malloc with free across these definitions and warns; they are the pairing.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace hkfac {
namespace {

using namespace kernels;
using testing::random_buffer;
using testing::random_matrix;

// Positive values: the diagonal kernels divide by d + γ, the eigen route by λ_A λ_Gᵀ + γ.
Buffer<float> random_vector(int n, unsigned seed) {
  return testing::random_vector(n, seed, 0.1f, 1.0f);
}

// Operator-new calls made by `call` on its third to fifth run: the first runs may fill per-thread
// caches (the cost model's padded batch, the staging blocks) and start Halide's thread pool.
template <typename F> long allocations_per_call(F &&call) {
  call();
  call();
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < 3; ++i)
    call();
  g_counting = false;
  return g_allocations.load();
}

class DispatchAllocations : public ::testing::Test {
protected:
  void SetUp() override {
#if defined(HKFAC_SANITIZE)
    GTEST_SKIP() << "built with AddressSanitizer, which replaces operator new itself";
#endif
  }
};

// The counter itself: a call that does allocate must be seen, or every zero below is vacuous.
TEST_F(DispatchAllocations, CounterSeesAnAllocation) {
  EXPECT_EQ(allocations_per_call([] {
              // A direct call: a new-expression's allocation may be elided.
              void *p = ::operator new(16);
              ::operator delete(p);
            }),
            3);
}

TEST_F(DispatchAllocations, MatrixKernels) {
  Buffer<float> A = random_matrix(33, 47, 1), B = random_matrix(47, 20, 2),
                C = make_matrix<float>(33, 20);
  EXPECT_EQ(allocations_per_call([&] { gemm(C, A, Transpose::no, B, Transpose::no, 1.0f, 0.5f); }),
            0);

  Buffer<float> X = random_matrix(64, 129, 3), S = make_matrix<float>(130, 130);
  EXPECT_EQ(allocations_per_call([&] { covariance_update(S, X, 0.9f, 0.1f, true); }), 0);

  PatchGeometry g;
  g.height = g.width = 8;
  g.channels = 4;
  g.kernel_h = g.kernel_w = 3;
  g.pad_h = g.pad_w = 1;
  Buffer<float> images = random_matrix(2, g.image_size(), 4);
  Buffer<float> P = make_matrix<float>(g.patch_size() + 1, g.patch_size() + 1);
  EXPECT_EQ(allocations_per_call([&] { patch_covariance_update(P, images, g, 0.9f, 0.1f, true); }),
            0);

  Buffer<float> Ai = random_matrix(40, 40, 5), V = random_matrix(40, 24, 6),
                Gi = random_matrix(24, 24, 7), U = make_matrix<float>(40, 24);
  EXPECT_EQ(allocations_per_call([&] { kron_precondition(U, Ai, V, Gi); }), 0);
  Buffer<float> la = random_vector(40, 8), lg = random_vector(24, 9);
  EXPECT_EQ(allocations_per_call([&] { kron_precondition_eigen(U, Ai, la, V, Gi, lg, 0.01f); }), 0);
}

TEST_F(DispatchAllocations, LayerAndDiagonalKernels) {
  const int batch = 16, d_in = 30, d_out = 17;
  Buffer<float> X = random_matrix(batch, d_in, 1), W = random_matrix(d_in, d_out, 2),
                b = random_vector(d_out, 3), Y = make_matrix<float>(batch, d_out);
  EXPECT_EQ(allocations_per_call([&] { dense_forward(Y, X, W, b, Activation::tanh); }), 0);
  Buffer<float> dY = random_matrix(batch, d_out, 4), dZ = make_matrix<float>(batch, d_out),
                dX = make_matrix<float>(batch, d_in), dW = make_matrix<float>(d_in, d_out),
                db = make_vector<float>(d_out);
  EXPECT_EQ(
      allocations_per_call([&] { dense_backward(dZ, dX, dW, db, dY, Y, X, W, Activation::tanh); }),
      0);

  // d over p = 100 parameters, fed by 8 per-example gradients.
  Buffer<float> d = random_vector(100, 5), grads = random_matrix(8, 100, 6),
                grad = random_vector(100, 7), u = make_vector<float>(100);
  EXPECT_EQ(allocations_per_call([&] { diagonal_ema(d, grads, 0.9f, 0.1f); }), 0);
  EXPECT_EQ(allocations_per_call([&] { diagonal_matpower(u, grad, d, 0.01f, -1); }), 0);
}

// The plugin's case: small batches (padded to a vector inside the dispatch) and a search-sized one.
TEST_F(DispatchAllocations, CostModel) {
  const int stages = 5;
  const CostModelWeights w = testing::random_cost_model_weights(1);
  Buffer<float> pf = random_buffer({40, 7, stages}, 7);
  for (int batch : {1, 16}) {
    SCOPED_TRACE(batch);
    Buffer<float> sf = random_buffer({batch, 39, stages}, 8), predictions(batch);
    EXPECT_EQ(allocations_per_call([&] { cost_model_predict(pf, sf, w, 2, predictions); }), 0);

    Buffer<float> runtimes = random_buffer({batch}, 9), cotangent(batch);
    for_each_value(runtimes, [](float &t) { t += 1.0f; });
    for_each_value(cotangent, [](float &c) { c = 0.0f; });
    CostModelTrainOutputs out;
    EXPECT_EQ(allocations_per_call(
                  [&] { cost_model_train(pf, sf, w, 2, runtimes, cotangent, 1.0f, 0.0f, out); }),
              0);
  }
}

} // namespace
} // namespace hkfac
