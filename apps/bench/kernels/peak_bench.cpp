// The machine's measured ceiling: a large square OpenBLAS sgemm (all cores).
#include <cblas.h>

#include <memory>
#include <vector>

#include "harness.h"

namespace {

hkfac::bench::Register reg([](bool quick) {
  std::vector<hkfac::bench::Case> out;
  if (quick) return out;
  const int n = 2048;
  hkfac::bench::Case c;
  c.group = "peak";
  c.shape = "sgemm 2048^3";
  c.flops = 2.0 * n * n * n;
  c.make = [n] {
    auto a = std::make_shared<std::vector<float>>(size_t(n) * n, 0.5f);
    auto b = std::make_shared<std::vector<float>>(size_t(n) * n, 0.25f);
    auto cc = std::make_shared<std::vector<float>>(size_t(n) * n, 0.0f);
    return std::vector<hkfac::bench::Contender>{
        {"openblas", [=] {
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a->data(), n,
                       b->data(), n, 0.0f, cc->data(), n);
         }}};
  };
  out.push_back(c);
  return out;
});

} // namespace
