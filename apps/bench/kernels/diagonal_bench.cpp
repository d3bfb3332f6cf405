// Diagonal-block kernels vs Eigen (OpenBLAS has no counterpart for these elementwise ops).
#include <Eigen/Core>
#include <memory>

#include "harness.h"
#include "hkfac/kernels/diagonal.h"

namespace {

using hkfac::Buffer;

hkfac::bench::Register reg([](bool) {
  std::vector<hkfac::bench::Case> out;
  for (int p : {257 * 500, 1001 * 500}) {
    const int n = 128;
    hkfac::bench::Case c;
    c.group = "diagonal_ema";
    c.shape = "p=" + std::to_string(p) + " n=" + std::to_string(n);
    c.flops = 2.0 * n * p + 3.0 * p;
    c.make = [p, n] {
      auto d = std::make_shared<Buffer<float>>(hkfac::make_vector<float>(p));
      auto g = std::make_shared<Buffer<float>>(hkfac::make_matrix<float>(n, p));
      g->fill(0.5f);
      auto de = std::make_shared<Eigen::VectorXf>(Eigen::VectorXf::Zero(p));
      auto ge = std::make_shared<hkfac::RowMajorMatrix<float>>(
          hkfac::RowMajorMatrix<float>::Constant(n, p, 0.5f));
      return std::vector<hkfac::bench::Contender>{
          {"halide", [=] { hkfac::kernels::diagonal_ema(*d, *g, 0.95f, 1.0f / n, hkfac::bench::device()); }},
          {"eigen", [=] {
             *de = 0.95f * *de + (1.0f / n) * ge->array().square().colwise().sum().transpose().matrix();
           }}};
    };
    out.push_back(c);
  }
  return out;
});

} // namespace
