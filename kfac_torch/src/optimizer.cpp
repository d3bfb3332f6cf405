// KfacOptimizer: the K-FAC step over the preconditioner, with momentum, KL clip and adaptive
// damping.
#include "hkfac/kfac_torch/optimizer.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "hkfac/error.h"

namespace hkfac::kfac_torch {
namespace {

// A plain loop in double: torch::dot in double goes to the BLAS, whose own threads then spin
// beside LibTorch's and the kernels' on every step (a third of a K-FAC step on two cores).
double dot(const std::vector<torch::Tensor> &a, const std::vector<torch::Tensor> &b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].numel() != b[i].numel())
      throw Error("KfacOptimizer: an inner product of tensors of " + std::to_string(a[i].numel()) +
                  " and " + std::to_string(b[i].numel()) + " elements");
    if (a[i].scalar_type() != torch::kFloat || b[i].scalar_type() != torch::kFloat) {
      s += (a[i].to(torch::kDouble) * b[i].to(torch::kDouble)).sum().item<double>();
      continue;
    }
    const torch::Tensor x = a[i].contiguous();
    const torch::Tensor y = b[i].contiguous();
    const float *px = x.data_ptr<float>(), *py = y.data_ptr<float>();
    for (int64_t k = 0, n = x.numel(); k < n; ++k)
      s += static_cast<double>(px[k]) * static_cast<double>(py[k]);
  }
  return s;
}

double squared_norm(const std::vector<torch::Tensor> &a) { return dot(a, a); }

void check_options(const KfacOptimizerOptions &o) {
  auto finite_nonnegative = [](double v, const char *name) {
    if (!(v >= 0.0) || !std::isfinite(v))
      throw Error(std::string("KfacOptimizer: '") + name + "' must be finite and >= 0, got " +
                  std::to_string(v));
  };
  finite_nonnegative(o.learning_rate, "learning_rate");
  finite_nonnegative(o.momentum, "momentum");
  finite_nonnegative(o.damping, "damping");
  finite_nonnegative(o.weight_decay, "weight_decay");
  if (o.kl_clip && !(*o.kl_clip > 0.0))
    throw Error("KfacOptimizer: 'kl_clip' must be > 0, got " + std::to_string(*o.kl_clip));
  if (o.use_adaptive_damping) {
    if (o.damping_adaptation_interval < 1)
      throw Error("KfacOptimizer: 'damping_adaptation_interval' must be >= 1");
    if (!(o.min_damping <= o.damping && o.damping <= o.max_damping))
      throw Error("KfacOptimizer: with adaptive damping, 'damping' must lie in "
                  "[min_damping, max_damping]");
    if (o.damping_adaptation_decay &&
        !(*o.damping_adaptation_decay > 0.0 && *o.damping_adaptation_decay < 1.0))
      throw Error("KfacOptimizer: 'damping_adaptation_decay' must lie in (0, 1)");
  }
}

} // namespace

KfacOptimizer::KfacOptimizer(torch::nn::Module &model, KfacOptimizerOptions options)
    : options_((check_options(options), std::move(options))),
      preconditioner_(model, options_.preconditioner), damping_(options_.damping) {
  for (const torch::Tensor &p : preconditioner_.params())
    velocity_.push_back(torch::zeros_like(p));
}

void KfacOptimizer::zero_grad() {
  for (const torch::Tensor &p : preconditioner_.params()) {
    if (p.grad().defined()) {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
}

KfacStepStats KfacOptimizer::step() { return do_step(std::nullopt, nullptr); }

KfacStepStats KfacOptimizer::step(double loss, const std::function<double()> &closure) {
  return do_step(loss, &closure);
}

KfacStepStats KfacOptimizer::do_step(std::optional<double> loss,
                                     const std::function<double()> *closure) {
  if (options_.use_adaptive_damping && !closure)
    throw Error("KfacOptimizer: use_adaptive_damping needs step(loss, closure)");
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> &params = preconditioner_.params();
  const double wd = options_.weight_decay;
  KfacStepStats stats;
  stats.step = steps_;
  stats.learning_rate = options_.learning_rate;
  stats.momentum = steps_ == 0 ? 0.0 : options_.momentum;
  stats.damping = damping_;

  // 1. The gradient of the objective (loss + wd/2·||θ||²), of the global batch when data
  // parallel: everything after it is computed from values that are the same on every rank.
  preconditioner_.average_gradients();
  std::vector<torch::Tensor> g;
  for (const torch::Tensor &p : params) {
    torch::Tensor gi = p.grad().defined() ? p.grad().clone() : torch::zeros_like(p);
    if (wd > 0)
      gi.add_(p, wd);
    g.push_back(std::move(gi));
  }
  stats.grad_norm = std::sqrt(squared_norm(g));

  // 2-3. Curvature updates and the preconditioned gradient.
  const double diagonal_weight = damping_ + wd;
  preconditioner_.update_curvature(diagonal_weight);
  std::vector<torch::Tensor> u = preconditioner_.multiply(g, -1, diagonal_weight);

  // 4. KL clip.
  const double lr = options_.learning_rate, mu = stats.momentum;
  if (options_.kl_clip) {
    const double s = lr * lr * dot(u, g);
    if (s > *options_.kl_clip)
      stats.clip_scale = std::sqrt(*options_.kl_clip / s);
  }

  // 5. Δ = −lr·u + μ·v; v ← Δ; θ ← θ + Δ.
  std::vector<torch::Tensor> delta;
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor d = u[i].mul(-lr * stats.clip_scale).view(params[i].sizes());
    if (mu != 0.0)
      d.add_(velocity_[i], mu);
    delta.push_back(d);
  }
  stats.update_norm = std::sqrt(squared_norm(delta));
  if (!std::isfinite(stats.update_norm))
    throw Error("KfacOptimizer: the update is not finite (raise the damping?)");
  const double before_sq = wd > 0 ? squared_norm(params) : 0.0;
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].add_(delta[i]);
    velocity_[i] = delta[i];
  }

  // 6. Adaptive damping (Levenberg–Marquardt on ρ).
  if (options_.use_adaptive_damping && (steps_ + 1) % options_.damping_adaptation_interval == 0) {
    const std::vector<torch::Tensor> f_delta = preconditioner_.multiply(delta, 1, wd);
    const double q = dot(g, delta) + 0.5 * dot(delta, f_delta);
    // The shards' losses, before and after, as the global batch's.
    const std::vector<double> losses = preconditioner_.global_losses({*loss, (*closure)()});
    const double after = losses[1] + (wd > 0 ? 0.5 * wd * squared_norm(params) : 0.0);
    const double before = losses[0] + 0.5 * wd * before_sq;
    if (q != 0.0 && std::isfinite(after)) {
      const double rho = (after - before) / q;
      stats.rho = rho;
      const double decay = options_.damping_adaptation_decay.value_or(
          std::pow(0.95, options_.damping_adaptation_interval));
      if (rho > 0.75)
        damping_ *= decay;
      else if (rho < 0.25)
        damping_ /= decay;
      damping_ = std::min(std::max(damping_, options_.min_damping), options_.max_damping);
    }
  }
  ++steps_;
  return stats;
}

void KfacOptimizer::save(torch::serialize::OutputArchive &archive,
                         const std::string &prefix) const {
  torch::serialize::OutputArchive state(archive.compilation_unit());
  state.write("steps", c10::IValue(steps_));
  state.write("damping", c10::IValue(damping_));
  state.write("num_params", c10::IValue(static_cast<int64_t>(velocity_.size())));
  for (size_t i = 0; i < velocity_.size(); ++i)
    state.write("velocity_" + std::to_string(i), velocity_[i]);
  preconditioner_.save(state, "preconditioner");
  archive.write(prefix, state);
}

void KfacOptimizer::load(torch::serialize::InputArchive &archive, const std::string &prefix) {
  torch::serialize::InputArchive state;
  if (!archive.try_read(prefix, state))
    throw Error("KfacOptimizer: load: the archive has no '" + prefix + "'");
  c10::IValue steps, damping, n;
  if (!state.try_read("steps", steps) || !state.try_read("damping", damping) ||
      !state.try_read("num_params", n)) {
    throw Error("KfacOptimizer: load: '" + prefix + "' lacks steps, damping or num_params");
  }
  if (n.toInt() != static_cast<int64_t>(velocity_.size())) {
    throw Error("KfacOptimizer: load: '" + prefix + "' has " + std::to_string(n.toInt()) +
                " velocities, this optimizer " + std::to_string(velocity_.size()) + " parameters");
  }
  std::vector<torch::Tensor> velocity;
  for (size_t i = 0; i < velocity_.size(); ++i) {
    torch::Tensor v;
    const std::string key = "velocity_" + std::to_string(i);
    if (!state.try_read(key, v) || v.sizes() != velocity_[i].sizes())
      throw Error("KfacOptimizer: load: '" + prefix + "'s '" + key +
                  "' is missing or does not have its parameter's shape");
    velocity.push_back(v.to(velocity_[i].scalar_type()).contiguous());
  }
  preconditioner_.load(state, "preconditioner"); // checks everything before it changes anything
  velocity_ = std::move(velocity);
  steps_ = steps.toInt();
  damping_ = damping.toDouble();
}

} // namespace hkfac::kfac_torch
