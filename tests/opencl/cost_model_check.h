// Shared by the cost-model OpenCL checks (scripts/opencl-check): the reference's problems as
// Halide buffers to upload, and the kernel tests' error measure.
#pragma once

#include <HalideBuffer.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cost_model_reference.h"

namespace hkfac::opencl_check {

namespace ref = hkfac::cost_model_reference;
using Halide::Runtime::Buffer;

inline Buffer<float> upload(const std::vector<double> &v, std::vector<int> extents) {
  Buffer<float> b(extents);
  for (size_t i = 0; i < v.size(); i++)
    b.data()[i] = float(v[i]);
  b.set_host_dirty();
  return b;
}

inline std::vector<double> download(Buffer<float> &b) {
  b.copy_to_host();
  return std::vector<double>(b.data(), b.data() + b.number_of_elements());
}

// The reference problem's weights, uploaded.
struct CostModelWeights {
  Buffer<float> h1f, h1b, h2f, h2b, c1f, c1b;
  explicit CostModelWeights(const ref::Problem &p)
      : h1f(upload(p.w[0], {ref::kH1, ref::kRows, ref::kTypes})), h1b(upload(p.w[1], {ref::kH1})),
        h2f(upload(p.w[2], {ref::kH2, p.S})), h2b(upload(p.w[3], {ref::kH2})),
        c1f(upload(p.w[4], {ref::kC1, ref::kC1})), c1b(upload(p.w[5], {ref::kC1})) {}
};

// max_i |a_i - b_i| / max(max_i |b_i|, floor), as the kernel tests measure against the reference.
inline double scaled_error(const std::vector<double> &a, const std::vector<double> &b,
                           double floor) {
  double e = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); i++)
    e = std::max(e, std::abs(a[i] - b[i]));
  return a.size() == b.size() ? e / std::max(ref::max_abs(b), floor) : 1e30;
}

} // namespace hkfac::opencl_check
