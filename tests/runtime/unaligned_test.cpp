// Kernels accept host buffers at any float alignment (wrapped Eigen storage, sub-views) and give
// exactly the results they give on hkfac's own 128-byte-aligned buffers.
#include "hkfac/kernels/covariance.h"
#include "hkfac/kernels/dense.h"
#include "hkfac/kernels/diagonal.h"
#include "hkfac/kernels/gemm.h"
#include "hkfac/kernels/patch_covariance.h"
#include "hkfac/kernels/precondition.h"

#include <memory>

#include "../test_util.h"

namespace hkfac {
namespace {

using testing::random_matrix;

// Storage whose first float sits 4 bytes past a 64-byte boundary: misaligned for every vector
// width while rows of 16k floats keep the row starts congruent (what makes Halide 14 assume
// alignment from the index alone).
class Unaligned {
public:
  Buffer<float> copy_of(const Buffer<float> &src) {
    const size_t n = src.number_of_elements();
    blocks_.push_back(std::make_unique<float[]>(n + 32));
    uintptr_t p = reinterpret_cast<uintptr_t>(blocks_.back().get());
    float *base = reinterpret_cast<float *>((p + 63) / 64 * 64) + 1;
    Buffer<float> b = src.dimensions() == 1
                          ? Buffer<float>(base, src.dim(0).extent())
                          : Buffer<float>(base, src.dim(0).extent(), src.dim(1).extent());
    hkfac::copy_values(b, src);
    return b;
  }

private:
  std::vector<std::unique_ptr<float[]>> blocks_;
};

void expect_same(const Buffer<float> &aligned, const Buffer<float> &unaligned, const char *what) {
  int mismatches = 0;
  aligned.for_each_element([&](const int *pos) {
    if (aligned(pos) != unaligned(pos))
      mismatches++;
  });
  EXPECT_EQ(mismatches, 0) << what;
}

// (batch n, input width d, output width m): K-FAC shapes and odd ones with vector tails.
class UnalignedBuffers : public ::testing::TestWithParam<std::tuple<int, int, int>> {};
TEST_P(UnalignedBuffers, EveryKernelMatchesItsAlignedRun) {
  Unaligned u;
  auto [n, d, m] = GetParam();
  Buffer<float> X = random_matrix(n, d, 1), W = random_matrix(d, m, 2);
  Buffer<float> b = testing::random_vector(m, 3), dY = random_matrix(n, m, 4);

  Buffer<float> Y = make_matrix<float>(n, m), Yu = u.copy_of(Y);
  kernels::dense_forward(Y, X, W, b, kernels::Activation::identity, Device::cpu);
  kernels::dense_forward(Yu, u.copy_of(X), u.copy_of(W), u.copy_of(b),
                         kernels::Activation::identity, Device::cpu);
  expect_same(Y, Yu, "dense_forward");

  Buffer<float> dZ = make_matrix<float>(n, m), dX = make_matrix<float>(n, d);
  Buffer<float> dW = make_matrix<float>(d, m), db = make_vector<float>(m);
  Buffer<float> dZu = u.copy_of(dZ), dXu = u.copy_of(dX), dWu = u.copy_of(dW), dbu = u.copy_of(db);
  kernels::dense_backward(dZ, dX, dW, db, dY, Y, X, W, kernels::Activation::identity, Device::cpu);
  kernels::dense_backward(dZu, dXu, dWu, dbu, u.copy_of(dY), Yu, u.copy_of(X), u.copy_of(W),
                          kernels::Activation::identity, Device::cpu);
  expect_same(dX, dXu, "dense_backward dX");
  expect_same(dW, dWu, "dense_backward dW");
  expect_same(db, dbu, "dense_backward db");

  Buffer<float> C = make_matrix<float>(d + 1, d + 1), Cu = u.copy_of(C);
  kernels::covariance_update(C, X, 0.5f, 0.25f, true, Device::cpu);
  kernels::covariance_update(Cu, u.copy_of(X), 0.5f, 0.25f, true, Device::cpu);
  expect_same(C, Cu, "covariance_update");

  // X's rows as 1 x d images of one channel, under a window up to 33 wide (tiled from 32).
  kernels::PatchGeometry row;
  row.height = 1, row.width = d, row.channels = 1, row.kernel_h = 1,
  row.kernel_w = std::min(d + 2, 33), row.pad_w = 1;
  Buffer<float> P = make_matrix<float>(row.patch_size() + 1, row.patch_size() + 1),
                Pu = u.copy_of(P);
  kernels::patch_covariance_update(P, X, row, 0.5f, 0.25f, true, Device::cpu);
  kernels::patch_covariance_update(Pu, u.copy_of(X), row, 0.5f, 0.25f, true, Device::cpu);
  expect_same(P, Pu, "patch_covariance_update");

  Buffer<float> G = make_matrix<float>(d, m), Gu = u.copy_of(G);
  kernels::gemm(G, X, kernels::Transpose::yes, dY, kernels::Transpose::no, 1.0f, 0.0f, Device::cpu);
  kernels::gemm(Gu, u.copy_of(X), kernels::Transpose::yes, u.copy_of(dY), kernels::Transpose::no,
                1.0f, 0.0f, Device::cpu);
  expect_same(G, Gu, "gemm");

  Buffer<float> A = random_matrix(d, d, 5), Gi = random_matrix(m, m, 6);
  Buffer<float> U = make_matrix<float>(d, m), Uu = u.copy_of(U);
  kernels::kron_precondition(U, A, W, Gi, Device::cpu);
  kernels::kron_precondition(Uu, u.copy_of(A), u.copy_of(W), u.copy_of(Gi), Device::cpu);
  expect_same(U, Uu, "kron_precondition");

  Buffer<float> g = testing::random_vector(m, 7), dd = testing::random_vector(m, 8, 0.0f, 1.0f);
  Buffer<float> q = make_vector<float>(m), qu = u.copy_of(q);
  kernels::diagonal_matpower(q, g, dd, 0.1f, -1, Device::cpu);
  kernels::diagonal_matpower(qu, u.copy_of(g), u.copy_of(dd), 0.1f, -1, Device::cpu);
  expect_same(q, qu, "diagonal_matpower");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, UnalignedBuffers,
    ::testing::Values(std::make_tuple(7, 64, 48), std::make_tuple(128, 64, 16),
                      std::make_tuple(5, 32, 1), std::make_tuple(128, 1000, 500),
                      std::make_tuple(128, 20, 1000), std::make_tuple(128, 250, 30),
                      std::make_tuple(1, 784, 1000), std::make_tuple(100, 30, 250),
                      std::make_tuple(3, 17, 33)));
} // namespace
} // namespace hkfac
