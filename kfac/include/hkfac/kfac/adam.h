// Adam (Kingma & Ba 2015) on parameter lists: the first-order baseline K-FAC is compared with (the
// apps, the cost model's trainer), on the same parameter layout, so only the optimizer differs.
#pragma once

#include "hkfac/kfac/types.h"

namespace hkfac::kfac {

class Adam {
public:
  explicit Adam(double learning_rate, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f)
      : lr_(static_cast<float>(learning_rate)), beta1_(beta1), beta2_(beta2), eps_(eps) {}
  // One bias-corrected update of `params` in place from `grad`.
  void step(Params &params, const Params &grad);

private:
  float lr_, beta1_, beta2_, eps_;
  int t_ = 0;
  Params m_, v_;
};

} // namespace hkfac::kfac
