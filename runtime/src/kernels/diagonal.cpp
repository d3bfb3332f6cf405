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
  detail::expect_disjoint(k, {{d.raw_buffer(), "d"}}, {{g.raw_buffer(), "g"}});
  detail::AlignedArgs args(dev);
  halide_buffer_t *dd = args.out(d);
  HKFAC_RUN(diagonal_ema, dev, dd, args.in(g), a, b, dd);
  args.commit();
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
  // Elementwise, so u may be g itself (the header allows it), but no other overlap.
  const bool u_is_g = detail::same_view(u.raw_buffer(), g.raw_buffer());
  detail::expect_disjoint(k, {{u.raw_buffer(), "u"}},
                          {{u_is_g ? nullptr : g.raw_buffer(), "g"}, {d.raw_buffer(), "d"}});
  detail::AlignedArgs args(dev);
  HKFAC_RUN(diagonal_matpower, dev, args.in(g), args.in(d), gamma, power, args.out(u));
  args.commit();
}

} // namespace hkfac::kernels
