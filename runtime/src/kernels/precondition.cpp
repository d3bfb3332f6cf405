// Dispatch for Kronecker-factored preconditioning (explicit inverses and eigenbasis route).
#include "hkfac/kernels/precondition.h"

#include "dispatch.h"
#include "hkfac_k_kron_precondition_cpu.h"
#include "hkfac_k_kron_precondition_eigen_cpu.h"
#if HKFAC_HAVE_CUDA
#include "hkfac_k_kron_precondition_cuda.h"
#include "hkfac_k_kron_precondition_eigen_cuda.h"
#endif

namespace hkfac::kernels {

void kron_precondition(Buffer<float> &U, const Buffer<float> &A_inv, const Buffer<float> &V,
                       const Buffer<float> &G_inv, Device dev) {
  constexpr const char *k = "kron_precondition";
  detail::expect_dims(V.raw_buffer(), 2, k, "V");
  const int d_a = rows(V), d_g = cols(V);
  detail::expect_matrix(A_inv.raw_buffer(), d_a, d_a, k, "A_inv");
  detail::expect_matrix(G_inv.raw_buffer(), d_g, d_g, k, "G_inv");
  detail::expect_matrix(U.raw_buffer(), d_a, d_g, k, "U");
  // V feeds the first of the chained products while U is written.
  detail::expect_disjoint(
      k, {{U.raw_buffer(), "U"}},
      {{A_inv.raw_buffer(), "A_inv"}, {V.raw_buffer(), "V"}, {G_inv.raw_buffer(), "G_inv"}});
  detail::AlignedArgs args(dev);
  HKFAC_RUN(kron_precondition, dev, args.in(A_inv), args.in(V), args.in(G_inv), args.out(U));
  args.commit();
}

void kron_precondition_eigen(Buffer<float> &U, const Buffer<float> &Q_A,
                             const Buffer<float> &lambda_A, const Buffer<float> &V,
                             const Buffer<float> &Q_G, const Buffer<float> &lambda_G, float gamma,
                             int power, Device dev) {
  constexpr const char *k = "kron_precondition_eigen";
  if (power != 1 && power != -1) {
    throw Error(std::string(k) + ": power must be +1 or -1, got " + std::to_string(power));
  }
  detail::expect_dims(V.raw_buffer(), 2, k, "V");
  const int d_a = rows(V), d_g = cols(V);
  detail::expect_matrix(Q_A.raw_buffer(), d_a, d_a, k, "Q_A");
  detail::expect_matrix(Q_G.raw_buffer(), d_g, d_g, k, "Q_G");
  detail::expect_dims(lambda_A.raw_buffer(), 1, k, "lambda_A");
  detail::expect_extent(lambda_A.raw_buffer(), 0, d_a, k, "lambda_A");
  detail::expect_dims(lambda_G.raw_buffer(), 1, k, "lambda_G");
  detail::expect_extent(lambda_G.raw_buffer(), 0, d_g, k, "lambda_G");
  detail::expect_matrix(U.raw_buffer(), d_a, d_g, k, "U");
  detail::expect_disjoint(k, {{U.raw_buffer(), "U"}},
                          {{Q_A.raw_buffer(), "Q_A"},
                           {lambda_A.raw_buffer(), "lambda_A"},
                           {V.raw_buffer(), "V"},
                           {Q_G.raw_buffer(), "Q_G"},
                           {lambda_G.raw_buffer(), "lambda_G"}});
  detail::AlignedArgs args(dev);
  HKFAC_RUN(kron_precondition_eigen, dev, args.in(Q_A), args.in(lambda_A), args.in(V), args.in(Q_G),
            args.in(lambda_G), gamma, power, args.out(U));
  args.commit();
}

} // namespace hkfac::kernels
