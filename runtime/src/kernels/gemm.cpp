// Dispatch for the general matrix multiply: picks the library generated for the transpose pair.
#include "hkfac/kernels/gemm.h"

#include "dispatch.h"
#include "hkfac_k_gemm_nn_cpu.h"
#include "hkfac_k_gemm_nn_narrow_cpu.h"
#include "hkfac_k_gemm_nn_one_column_cpu.h"
#include "hkfac_k_gemm_nt_cpu.h"
#include "hkfac_k_gemm_nt_narrow_cpu.h"
#include "hkfac_k_gemm_nt_one_column_cpu.h"
#include "hkfac_k_gemm_tn_cpu.h"
#include "hkfac_k_gemm_tn_narrow_cpu.h"
#include "hkfac_k_gemm_tn_packed_cpu.h"
#include "hkfac_k_gemm_tt_cpu.h"
#include "hkfac_k_gemm_tt_narrow_cpu.h"
#if HKFAC_HAVE_CUDA
#include "hkfac_k_gemm_nn_cuda.h"
#include "hkfac_k_gemm_nt_cuda.h"
#include "hkfac_k_gemm_tn_cuda.h"
#include "hkfac_k_gemm_tt_cuda.h"
#endif

namespace hkfac::kernels {

void gemm(Buffer<float> &C, const Buffer<float> &A, Transpose ta, const Buffer<float> &B,
          Transpose tb, float alpha, float beta, Device dev) {
  constexpr const char *k = "gemm";
  detail::expect_dims(C.raw_buffer(), 2, k, "C");
  detail::expect_dims(A.raw_buffer(), 2, k, "A");
  detail::expect_dims(B.raw_buffer(), 2, k, "B");
  for (const auto &[t, name] : {std::pair{ta, "ta"}, std::pair{tb, "tb"}}) {
    if (t != Transpose::no && t != Transpose::yes) {
      throw Error(std::string(k) + ": argument '" + name + "' is not a Transpose value (" +
                  std::to_string(static_cast<int>(t)) + ")");
    }
  }
  const bool at = ta == Transpose::yes, bt = tb == Transpose::yes;
  // op(A) is (m x depth), op(B) (depth x n); a transposed operand swaps its buffer dimensions.
  const int m = rows(C), n = cols(C);
  const int depth = at ? rows(A) : cols(A);
  detail::expect_extent(A.raw_buffer(), at ? 0 : 1, m, k, "A");
  detail::expect_extent(B.raw_buffer(), bt ? 0 : 1, depth, k, "B");
  detail::expect_extent(B.raw_buffer(), bt ? 1 : 0, n, k, "B");
  detail::expect_disjoint(k, {{C.raw_buffer(), "C"}},
                          {{A.raw_buffer(), "A"}, {B.raw_buffer(), "B"}});
  detail::AlignedArgs args(dev);
  halide_buffer_t *c = args.out(C), *a = args.in(A), *b = args.in(B);
  if (dev == Device::cpu && n == 1 && !at && depth >= detail::kOneColumnDepthFrom) {
    // One column of an untransposed A's rows: their dot products with B's column.
    auto one_column = !bt ? hkfac_k_gemm_nn_one_column_cpu : hkfac_k_gemm_nt_one_column_cpu;
    detail::check_halide_result(one_column(a, b, c, alpha, beta, c), "gemm_one_column", dev);
  } else if (dev == Device::cpu && n <= detail::kNarrowColumnsTo) {
    // C with a few columns: the variants with one-vector tiles.
    auto narrow = !at ? (!bt ? hkfac_k_gemm_nn_narrow_cpu : hkfac_k_gemm_nt_narrow_cpu)
                      : (!bt ? hkfac_k_gemm_tn_narrow_cpu : hkfac_k_gemm_tt_narrow_cpu);
    detail::check_halide_result(narrow(a, b, c, alpha, beta, c), "gemm_narrow", dev);
  } else if (!at && !bt) {
    HKFAC_RUN(gemm_nn, dev, a, b, c, alpha, beta, c);
  } else if (!at && bt) {
    HKFAC_RUN(gemm_nt, dev, a, b, c, alpha, beta, c);
  } else if (at && !bt && dev == Device::cpu && depth >= detail::kGemmPackedDepthFrom &&
             long(m) * n >= detail::kGemmPackedOutputsFrom) {
    detail::check_halide_result(hkfac_k_gemm_tn_packed_cpu(a, b, c, alpha, beta, c),
                                "gemm_tn_packed", dev);
  } else if (at && !bt) {
    HKFAC_RUN(gemm_tn, dev, a, b, c, alpha, beta, c);
  } else {
    HKFAC_RUN(gemm_tt, dev, a, b, c, alpha, beta, c);
  }
  args.commit();
}

} // namespace hkfac::kernels
