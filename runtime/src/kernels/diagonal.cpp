// Dispatch for the diagonal-block kernels.
#include "hkfac/kernels/diagonal.h"

#include "dispatch.h"
#include "hkfac_k_diagonal_ema_cpu.h"
#include "hkfac_k_diagonal_matpower_cpu.h"
#if HKFAC_HAVE_CUDA
#include "hkfac_k_diagonal_ema_cuda.h"
#include "hkfac_k_diagonal_matpower_cuda.h"
#endif

namespace hkfac::kernels {

void diagonal_ema(Buffer<float> &d, const Buffer<float> &g, float a, float b, Device dev) {
  constexpr const char *k = "diagonal_ema";
  detail::expect_dims(d.raw_buffer(), 1, k, "d");
  detail::expect_dims(g.raw_buffer(), 2, k, "g");
  detail::expect_extent(g.raw_buffer(), 0, d.dim(0).extent(), k, "g");
  HKFAC_RUN(diagonal_ema, dev, d.raw_buffer(), detail::raw(g), a, b, d.raw_buffer());
}

void diagonal_matpower(Buffer<float> &u, const Buffer<float> &g, const Buffer<float> &d,
                       float gamma, int power, Device dev) {
  constexpr const char *k = "diagonal_matpower";
  if (power != 1 && power != -1) {
    throw Error(std::string(k) + ": power must be +1 or -1, got " + std::to_string(power));
  }
  detail::expect_dims(u.raw_buffer(), 1, k, "u");
  detail::expect_dims(g.raw_buffer(), 1, k, "g");
  detail::expect_dims(d.raw_buffer(), 1, k, "d");
  detail::expect_extent(g.raw_buffer(), 0, u.dim(0).extent(), k, "g");
  detail::expect_extent(d.raw_buffer(), 0, u.dim(0).extent(), k, "d");
  HKFAC_RUN(diagonal_matpower, dev, detail::raw(g), detail::raw(d), gamma, power,
            u.raw_buffer());
}

} // namespace hkfac::kernels
