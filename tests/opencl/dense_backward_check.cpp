// The dense backward generator's GPU schedule on OpenCL (scripts/opencl-check), identity
// activation: dX = dY Wᵀ, dW = Xᵀ dY, db = Σ dY on the dense test's shapes against
// double-precision loops, linked with the generated `kernel`.
#include <cmath>
#include <string>

#include "check_util.h"
#include "kernel.h"

using Halide::Runtime::Buffer;

int main() {
  std::mt19937 rng(3);
  bool all_ok = true;
  for (const auto &s : hkfac::opencl_check::kDenseShapes) {
    const int batch = s[0], d_in = s[1], d_out = s[2];
    Buffer<float> dY(d_out, batch), Y(d_out, batch), X(d_in, batch), W(d_out, d_in);
    Buffer<float> dZ(d_out, batch), dX(d_in, batch), dW(d_out, d_in), db(d_out);
    for (Buffer<float> *b : {&dY, &Y, &X, &W})
      hkfac::opencl_check::fill_random(*b, rng);
    const int rc = kernel(dY, Y, X, W, dZ, dX, dW, db);
    dX.copy_to_host();
    dW.copy_to_host();
    db.copy_to_host();
    double err = 0;
    auto check = [&](double want, float got) {
      err = std::max(err, std::fabs(want - got) / (1 + std::fabs(want)));
    };
    for (int i = 0; i < batch; i++) {
      for (int j = 0; j < d_in; j++) {
        double sum = 0;
        for (int o = 0; o < d_out; o++)
          sum += double(dY(o, i)) * W(o, j);
        check(sum, dX(j, i));
      }
    }
    for (int j = 0; j < d_in; j++) {
      for (int o = 0; o < d_out; o++) {
        double sum = 0;
        for (int i = 0; i < batch; i++)
          sum += double(X(j, i)) * dY(o, i);
        check(sum, dW(o, j));
      }
    }
    for (int o = 0; o < d_out; o++) {
      double sum = 0;
      for (int i = 0; i < batch; i++)
        sum += dY(o, i);
      check(sum, db(o));
    }
    const std::string what = "dense_backward batch=" + std::to_string(batch) +
                             " d_in=" + std::to_string(d_in) + " d_out=" + std::to_string(d_out);
    all_ok &= hkfac::opencl_check::verdict(rc == 0 && err < 1e-4, what.c_str(), rc, err);
  }
  return all_ok ? 0 : 1;
}
