// Adam's update with bias-corrected moments, in Eigen on the parameter lists: the baseline uses no
// kernel of its own.
#include "hkfac/kfac/adam.h"

#include <cmath>

namespace hkfac::kfac {

void Adam::step(Params &params, const Params &grad) {
  check_same_shapes(params, grad, "Adam::step 'grad'");
  if (m_.empty()) {
    m_ = zeros_like(params);
    v_ = m_;
  }
  ++t_;
  const float c1 = 1.0f - std::pow(beta1_, static_cast<float>(t_));
  const float c2 = 1.0f - std::pow(beta2_, static_cast<float>(t_));
  for (size_t i = 0; i < params.size(); ++i) {
    m_[i] = beta1_ * m_[i] + (1 - beta1_) * grad[i];
    v_[i] = beta2_ * v_[i] + (1 - beta2_) * grad[i].cwiseAbs2();
    params[i].array() -= lr_ * (m_[i].array() / c1) / ((v_[i].array() / c2).sqrt() + eps_);
  }
}

} // namespace hkfac::kfac
