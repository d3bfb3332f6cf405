// Kronecker preconditioning against Eigen: direct products, round trips, brute-force Kronecker.
#include "hkfac/kernels/precondition.h"

#include <Eigen/Cholesky>
#include <Eigen/Eigenvalues>
#include <utility>

#include "test_util.h"

namespace hkfac {
namespace {

using testing::random_matrix;
using testing::random_vector;
using testing::rel_error;
using testing::to_eigen_d;

// (dA, dG): each awkward extent on each side, plus K-FAC's smallest layer.
const std::vector<std::pair<int, int>> kShapes = {{1, 1},    {7, 129}, {129, 7},  {1001, 7},
                                                  {7, 1001}, {1, 33},  {31, 250}, {129, 129}};

Buffer<float> to_buffer(const Eigen::MatrixXd &m) {
  Buffer<float> b = make_matrix<float>(static_cast<int>(m.rows()), static_cast<int>(m.cols()));
  as_eigen(b) = m.cast<float>();
  return b;
}

Buffer<float> to_vector_buffer(const Eigen::VectorXd &v) {
  Buffer<float> b = make_vector<float>(static_cast<int>(v.size()));
  for (int i = 0; i < v.size(); i++)
    b(i) = static_cast<float>(v(i));
  return b;
}

// A well-conditioned random SPD matrix: M Mᵀ / d + I.
Eigen::MatrixXd random_spd(int d, unsigned seed) {
  Buffer<float> m = random_matrix(d, d, seed);
  Eigen::MatrixXd md = to_eigen_d(m);
  return md * md.transpose() / d + Eigen::MatrixXd::Identity(d, d);
}

class PreconditionKernels : public ::testing::TestWithParam<Device> {};

TEST_P(PreconditionKernels, MatchesEigenTripleProductOnAwkwardShapes) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (auto [d_a, d_g] : kShapes) {
    const unsigned seed = 19 * d_a + 23 * d_g;
    Buffer<float> A_inv = random_matrix(d_a, d_a, seed), G_inv = random_matrix(d_g, d_g, seed + 1);
    Buffer<float> V = random_matrix(d_a, d_g, seed + 2), U = make_matrix<float>(d_a, d_g);
    kernels::kron_precondition(U, A_inv, V, G_inv, dev);
    to_host(U);
    Eigen::MatrixXd ref = to_eigen_d(A_inv) * to_eigen_d(V) * to_eigen_d(G_inv);
    EXPECT_LT(rel_error(to_eigen_d(U), ref), 3e-5) << "dA=" << d_a << " dG=" << d_g;
  }
}

TEST_P(PreconditionKernels, InversesThenFactorsRecoverV) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  for (auto [d_a, d_g] : {std::pair{7, 129}, std::pair{129, 7}, std::pair{31, 250}}) {
    Eigen::MatrixXd A = random_spd(d_a, d_a), G = random_spd(d_g, d_g + 1);
    Buffer<float> A_inv = to_buffer(A.llt().solve(Eigen::MatrixXd::Identity(d_a, d_a)));
    Buffer<float> G_inv = to_buffer(G.llt().solve(Eigen::MatrixXd::Identity(d_g, d_g)));
    Buffer<float> V = random_matrix(d_a, d_g, 5), U = make_matrix<float>(d_a, d_g);
    kernels::kron_precondition(U, A_inv, V, G_inv, dev);
    to_host(U);
    EXPECT_LT(rel_error(A * to_eigen_d(U) * G, to_eigen_d(V)), 1e-4)
        << "dA=" << d_a << " dG=" << d_g;
  }
}

// The kernel's formula with arbitrary (not orthogonal) Q and signed λ, at every awkward shape.
TEST_P(PreconditionKernels, EigenRouteMatchesEigenFormulaOnAwkwardShapes) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const float gamma = 0.3f;
  for (int power : {-1, 1}) {
    for (auto [d_a, d_g] : kShapes) {
      const unsigned seed = 29 * d_a + 31 * d_g;
      Buffer<float> Q_A = random_matrix(d_a, d_a, seed), Q_G = random_matrix(d_g, d_g, seed + 1);
      Buffer<float> l_A = random_vector(d_a, seed + 2, -0.5f, 2.0f);
      Buffer<float> l_G = random_vector(d_g, seed + 3, -0.5f, 2.0f);
      Buffer<float> V = random_matrix(d_a, d_g, seed + 4), U = make_matrix<float>(d_a, d_g);
      kernels::kron_precondition_eigen(U, Q_A, l_A, V, Q_G, l_G, gamma, power, dev);
      to_host(U);
      const Eigen::MatrixXd qa = to_eigen_d(Q_A), qg = to_eigen_d(Q_G);
      const Eigen::ArrayXd la = to_eigen_d(l_A).reshaped().array().max(0.0);
      const Eigen::ArrayXd lg = to_eigen_d(l_G).reshaped().array().max(0.0);
      Eigen::ArrayXXd curvature = (la.matrix() * lg.matrix().transpose()).array() + gamma;
      Eigen::ArrayXXd scale = power > 0 ? curvature : curvature.inverse();
      Eigen::MatrixXd inner = (qa.transpose() * to_eigen_d(V) * qg).array() * scale;
      EXPECT_LT(rel_error(to_eigen_d(U), qa * inner * qg.transpose()), 3e-5)
          << "power=" << power << " dA=" << d_a << " dG=" << d_g;
    }
  }
}

// Vec convention: vec(V) stacks V's rows (row-major), so (A ⊗ G) vec(V) = vec(A V Gᵀ) and, G
// being symmetric, the eigen route must equal (A ⊗ G + γI)^power vec(V) built explicitly.
TEST_P(PreconditionKernels, EigenRouteMatchesBruteForceKronecker) {
  const Device dev = GetParam();
  HKFAC_SKIP_IF_UNAVAILABLE(dev);
  const int d_a = 3, d_g = 4;
  const double gamma = 0.2;
  // A has a negative eigenvalue: the kernel clips it to 0, as the reference does explicitly.
  Eigen::MatrixXd A = random_spd(d_a, 41);
  A -= 1.5 * Eigen::MatrixXd::Identity(d_a, d_a);
  Eigen::MatrixXd G = random_spd(d_g, 43);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> ea(A), eg(G);
  ASSERT_LT(ea.eigenvalues().minCoeff(), 0.0);
  const Eigen::MatrixXd A_clipped = ea.eigenvectors() *
                                    ea.eigenvalues().cwiseMax(0.0).asDiagonal() *
                                    ea.eigenvectors().transpose();
  Eigen::MatrixXd F(d_a * d_g, d_a * d_g);
  for (int i = 0; i < d_a; i++) {
    for (int k = 0; k < d_a; k++)
      F.block(i * d_g, k * d_g, d_g, d_g) = A_clipped(i, k) * G;
  }
  F += gamma * Eigen::MatrixXd::Identity(d_a * d_g, d_a * d_g);

  Buffer<float> V = random_matrix(d_a, d_g, 47);
  const Eigen::MatrixXd v = to_eigen_d(V);
  const Eigen::VectorXd vec_v = v.reshaped<Eigen::RowMajor>();
  Buffer<float> Q_A = to_buffer(ea.eigenvectors()), Q_G = to_buffer(eg.eigenvectors());
  Buffer<float> l_A = to_vector_buffer(ea.eigenvalues());
  Buffer<float> l_G = to_vector_buffer(eg.eigenvalues());
  for (int power : {-1, 1}) {
    Buffer<float> U = make_matrix<float>(d_a, d_g);
    kernels::kron_precondition_eigen(U, Q_A, l_A, V, Q_G, l_G, float(gamma), power, dev);
    to_host(U);
    Eigen::VectorXd ref = power > 0 ? Eigen::VectorXd(F * vec_v) : F.lu().solve(vec_v);
    Eigen::MatrixXd ref_mat = ref.reshaped<Eigen::RowMajor>(d_a, d_g);
    EXPECT_LT(rel_error(to_eigen_d(U), ref_mat), 1e-5) << "power=" << power;
  }
}

TEST(PreconditionKernelsErrors, BadArgumentsAreNamed) {
  const int d_a = 4, d_g = 3;
  Buffer<float> A = make_matrix<float>(d_a, d_a), G = make_matrix<float>(d_g, d_g);
  Buffer<float> V = make_matrix<float>(d_a, d_g), U = make_matrix<float>(d_a, d_g);
  Buffer<float> l_A = make_vector<float>(d_a), l_G = make_vector<float>(d_g);
  const Device cpu = Device::cpu;
  testing::expect_error_naming("A_inv", [&] { kernels::kron_precondition(U, G, V, G, cpu); });
  testing::expect_error_naming("G_inv", [&] { kernels::kron_precondition(U, A, V, A, cpu); });
  testing::expect_error_naming("U", [&] { kernels::kron_precondition(A, A, V, G, cpu); });
  testing::expect_error_naming("U", [&] { kernels::kron_precondition(V, A, V, G, cpu); });
  testing::expect_error_naming(
      "Q_A", [&] { kernels::kron_precondition_eigen(U, G, l_A, V, G, l_G, 0.1f, -1, cpu); });
  testing::expect_error_naming(
      "lambda_G", [&] { kernels::kron_precondition_eigen(U, A, l_A, V, G, l_A, 0.1f, -1, cpu); });
  EXPECT_THROW(kernels::kron_precondition_eigen(U, A, l_A, V, G, l_G, 0.1f, 2, cpu), Error);
}

INSTANTIATE_TEST_SUITE_P(AllDevices, PreconditionKernels,
                         ::testing::ValuesIn(testing::all_devices()), testing::device_param_name);

} // namespace
} // namespace hkfac
