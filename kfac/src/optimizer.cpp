// The K-FAC optimizer step.
#include "hkfac/kfac/optimizer.h"

#include <chrono>
#include <cmath>

#include "hkfac/error.h"
#include "hkfac/serial_kernels.h"

namespace hkfac::kfac {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

BlockSelection block_selection(const OptimizerOptions &o) {
  BlockSelection s;
  s.register_only_generic = o.register_only_generic;
  s.layer_tag_to_block = o.layer_tag_to_block;
  s.patterns_to_skip = o.patterns_to_skip;
  s.block_options.use_exact_inverses = o.use_exact_inverses;
  s.block_options.debug_checks = o.debug;
  return s;
}

const OptimizerOptions &validated(const OptimizerOptions &o) {
  auto require = [](bool ok, const std::string &msg) {
    if (!ok)
      throw Error("OptimizerOptions: " + msg);
  };
  require(!o.multi_device, "multi_device is not supported by this build (single device only)");
  require(o.curvature_ema >= 0.0 && o.curvature_ema <= 1.0, "curvature_ema must be in [0, 1]");
  require(o.num_burnin_steps >= 0, "num_burnin_steps must be >= 0");
  require(o.inverse_update_period >= 1, "inverse_update_period must be >= 1");
  require(o.curvature_update_period >= 1, "curvature_update_period must be >= 1");
  require(o.curvature_batch_size >= 0,
          "curvature_batch_size must be >= 0 (0 = the whole batch), got " +
              std::to_string(o.curvature_batch_size));
  require(o.l2_reg >= 0.0f && std::isfinite(o.l2_reg), "l2_reg must be finite and >= 0");
  require(o.min_damping >= 0.0 && o.max_damping >= o.min_damping,
          "need 0 <= min_damping <= max_damping");
  require(!o.norm_constraint || *o.norm_constraint > 0.0, "norm_constraint must be > 0");
  require(!(o.use_adaptive_damping && o.damping_schedule),
          "damping_schedule and use_adaptive_damping are mutually exclusive");
  require(!(o.use_adaptive_learning_rate && o.learning_rate_schedule),
          "learning_rate_schedule and use_adaptive_learning_rate are mutually exclusive");
  require(!(o.use_adaptive_momentum && o.momentum_schedule),
          "momentum_schedule and use_adaptive_momentum are mutually exclusive");
  require(!o.use_adaptive_momentum || o.use_adaptive_learning_rate,
          "use_adaptive_momentum needs use_adaptive_learning_rate");
  require(o.damping_adaptation_interval >= 1, "damping_adaptation_interval must be >= 1");
  require(!o.damping_adaptation_decay ||
              (*o.damping_adaptation_decay > 0.0 && *o.damping_adaptation_decay < 1.0),
          "damping_adaptation_decay must be in (0, 1)");
  require(o.initial_damping > 0.0, "initial_damping must be > 0");
  require(o.rejected_step_damping_factor > 1.0, "rejected_step_damping_factor must be > 1");
  return o;
}

// A quantity from its schedule or an explicit value, never both.
double schedule_or_value(const Schedule &schedule, const std::optional<double> &value, int step,
                         const char *name) {
  if (schedule && value) {
    throw Error(std::string(name) + ": both " + name +
                "_schedule and a per-step value were given; use one");
  }
  if (schedule)
    return schedule(step);
  if (value)
    return *value;
  throw Error(std::string(name) + ": neither " + name + "_schedule nor a per-step value was given");
}

} // namespace

std::mt19937 &ValueContext::rng() {
  if (!rng_)
    throw Error("ValueContext::rng: set value_func_has_rng to use an rng");
  return *rng_;
}

std::any &ValueContext::state() {
  if (!state_)
    throw Error("ValueContext::state: set value_func_has_state to keep state");
  return *state_;
}

void ValueContext::set_aux(const std::string &name, double value) {
  if (!has_aux_)
    throw Error("ValueContext::set_aux('" + name + "'): set value_func_has_aux");
  aux_[name] = value;
}

Optimizer::Optimizer(Model &model, ValueFunction value_func, OptimizerOptions options)
    : model_(model), value_func_(std::move(value_func)), options_(validated(options)),
      estimator_(model, options_.estimation_mode, block_selection(options_)), rng_(options_.seed),
      value_rng_(options_.seed ^ 0x9e3779b9u), damping_(options_.initial_damping) {
  if (!value_func_)
    throw Error("Optimizer: 'value_func' is empty");
  velocity_ = zero_params(model_);
}

void Optimizer::check_params(const Params &params, const char *what) const {
  const std::vector<ParamShape> shapes = model_.param_shapes();
  if (params.size() != shapes.size()) {
    throw Error(std::string(what) + ": 'params' has " + std::to_string(params.size()) +
                " tensors, the model has " + std::to_string(shapes.size()));
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (params[i].rows() != shapes[i].rows || params[i].cols() != shapes[i].cols) {
      throw Error(std::string(what) + ": params[" + std::to_string(i) + "] (" + shapes[i].name +
                  ") must be " + std::to_string(shapes[i].rows) + " x " +
                  std::to_string(shapes[i].cols));
    }
  }
  if (options_.debug && !all_finite(params)) {
    throw Error(std::string(what) + ": 'params' contain NaN or Inf");
  }
}

Optimizer::Resolved Optimizer::resolve(const StepValues &values) const {
  Resolved r;
  if (options_.use_adaptive_learning_rate) {
    if (values.learning_rate) {
      throw Error("learning_rate: use_adaptive_learning_rate is on; pass no per-step value");
    }
  } else {
    r.learning_rate = schedule_or_value(options_.learning_rate_schedule, values.learning_rate,
                                        step_, "learning_rate");
  }
  if (options_.use_adaptive_momentum) {
    if (values.momentum) {
      throw Error("momentum: use_adaptive_momentum is on; pass no per-step value");
    }
  } else {
    r.momentum = schedule_or_value(options_.momentum_schedule, values.momentum, step_, "momentum");
  }
  // The velocity is zero on the first step, and a schedule's first value must not pretend
  // otherwise.
  if (step_ == 0)
    r.momentum = 0.0;
  if (options_.use_adaptive_damping) {
    if (values.damping) {
      throw Error("damping: use_adaptive_damping is on; pass no per-step value");
    }
    r.damping = damping_;
  } else {
    r.damping = damping_boost_ *
                schedule_or_value(options_.damping_schedule, values.damping, step_, "damping");
  }
  r.damping = std::min(std::max(r.damping, options_.min_damping), options_.max_damping);
  return r;
}

Batch Optimizer::pull(const std::function<Batch()> &next_batch) {
  if (!next_batch)
    throw Error("Optimizer::step: 'next_batch' is empty");
  Batch b = next_batch();
  if (options_.batch_process_func)
    b = options_.batch_process_func(b);
  return b;
}

double Optimizer::forward(const Params &params, const Batch &batch, LossRegistry &losses,
                          std::map<std::string, double> *aux, bool with_value,
                          const double *params_squared_norm) {
  const Matrix outputs = model_.forward(params, batch);
  ValueContext ctx(losses, options_.value_func_has_rng ? &value_rng_ : nullptr,
                   options_.value_func_has_state ? &state_ : nullptr, options_.value_func_has_aux);
  value_func_(outputs, batch, ctx);
  if (losses.empty())
    throw Error("value function: no loss was registered on the outputs");
  for (const auto &l : losses.losses()) {
    if (l->inputs().rows() != outputs.rows() || l->inputs().cols() != outputs.cols()) {
      throw Error("value function: loss '" + l->name() +
                  "' must be registered on the model outputs (same shape)");
    }
  }
  if (aux)
    *aux = ctx.aux();
  if (!with_value)
    return 0.0;
  const double sq = params_squared_norm ? *params_squared_norm : squared_norm(params);
  return losses.total_values().mean() + 0.5 * options_.l2_reg * sq;
}

Params Optimizer::backward_gradient(const Params &params, const LossRegistry &losses) {
  const Matrix cot = losses.total_gradient() / static_cast<float>(losses.losses()[0]->batch_size());
  Params g = model_.backward(cot);
  if (options_.l2_reg > 0.0f)
    axpy(options_.l2_reg, params, g);
  return g;
}

bool Optimizer::uses_curvature_subset(const Batch &batch) const {
  return options_.curvature_batch_size > 0 && options_.curvature_batch_size < batch.inputs.rows();
}

Batch Optimizer::curvature_subset(const Batch &batch) const {
  const Eigen::Index m = options_.curvature_batch_size;
  Batch head;
  head.inputs = batch.inputs.topRows(m);
  // Targets travel with their examples; a batch without targets has none to cut.
  if (batch.targets.rows() == batch.inputs.rows()) {
    head.targets = batch.targets.topRows(m);
  } else if (batch.targets.size() != 0) {
    throw Error("curvature_batch_size: batch.targets has " + std::to_string(batch.targets.rows()) +
                " rows and batch.inputs " + std::to_string(batch.inputs.rows()) +
                "; a curvature subset needs one target row per example (or no targets)");
  }
  return head;
}

double Optimizer::evaluate(const Params &params, const Batch &batch,
                           std::map<std::string, double> *aux) {
  const SerialKernels serial(options_.debug || options_.serial_kernels);
  LossRegistry losses;
  return forward(params, batch, losses, aux, true);
}

Params Optimizer::gradient(const Params &params, const Batch &batch) {
  const SerialKernels serial(options_.debug || options_.serial_kernels);
  LossRegistry losses;
  forward(params, batch, losses, nullptr, false);
  return backward_gradient(params, losses);
}

void Optimizer::burn_in(const Params &params, const std::function<Batch()> &next_batch) {
  const int n = options_.num_burnin_steps;
  for (int i = 0; i < n; ++i) {
    Batch batch = pull(next_batch);
    if (uses_curvature_subset(batch))
      batch = curvature_subset(batch);
    LossRegistry losses;
    forward(params, batch, losses, nullptr, false);
    estimator_.update_curvature_estimate(model_, losses, 1.0f, 1.0f / static_cast<float>(n), rng_);
    ++curvature_updates_;
  }
  burned_in_ = true;
}

StepStats Optimizer::step(Params &params, const std::function<Batch()> &next_batch,
                          const StepValues &values) {
  const SerialKernels serial(options_.debug || options_.serial_kernels);
  const Clock::time_point start = Clock::now();
  check_params(params);
  StepStats st;
  st.step = step_;
  Resolved r = resolve(values);

  if (!burned_in_) {
    const Clock::time_point t = Clock::now();
    burn_in(params, next_batch);
    st.burned_in = true;
    st.timings.curvature_update_s += seconds_since(t);
  }
  const Batch batch = pull(next_batch);
  const float l2 = options_.l2_reg;
  const float gamma = static_cast<float>(l2 + r.damping);

  auto reject = [&]() {
    ++rejected_steps_;
    force_inverse_update_ = true;
    if (options_.use_adaptive_damping) {
      damping_ = std::min(damping_ * options_.rejected_step_damping_factor, options_.max_damping);
    } else {
      damping_boost_ *= options_.rejected_step_damping_factor;
    }
    st.rejected = true;
    st.rho = 0.0;
    st.rejected_steps = rejected_steps_;
    st.inverse_failures = inverse_failures_;
    st.learning_rate = r.learning_rate;
    st.momentum = r.momentum;
    st.damping = r.damping;
    ++step_;
    st.timings.total_s = seconds_since(start);
    return st;
  };

  // Loss and gradient.
  Clock::time_point t = Clock::now();
  LossRegistry losses;
  st.loss = forward(params, batch, losses, &st.aux, true);
  const Params g = backward_gradient(params, losses);
  // The squared norm doubles as the finiteness check (as in all_finite).
  st.grad_norm = std::sqrt(squared_norm(g));
  st.timings.forward_backward_s = seconds_since(t);
  if (!std::isfinite(st.loss) || !std::isfinite(st.grad_norm)) {
    // One bad batch is rejected; the same parameters failing on several batches in a row are
    // broken themselves (an accepted update blew them up), and rejecting forever would only
    // raise the damping while the run stands still.
    if (++nonfinite_batches_ >= kMaxNonfiniteBatches) {
      throw Error("Optimizer::step: the " +
                  std::string(std::isfinite(st.loss) ? "gradient" : "loss") +
                  " at the current parameters was not finite on " +
                  std::to_string(nonfinite_batches_) + " batches in a row (steps " +
                  std::to_string(step_ - nonfinite_batches_ + 1) + "-" + std::to_string(step_) +
                  "): an earlier update made the parameters unusable; restart from a checkpoint "
                  "with more damping (min_damping, l2_reg) or a smaller learning rate");
    }
    return reject();
  }
  nonfinite_batches_ = 0;

  // The point curvature is measured at: this forward's records on the whole batch, or (with a
  // curvature subset) a second forward over the subset, made when first needed. After it the
  // model's records are the subset's; the gradient is already taken.
  LossRegistry subset_losses;
  const LossRegistry *curvature_losses = &losses;
  Eigen::Index curvature_rows = batch.inputs.rows();
  auto at_curvature_point = [&]() -> const LossRegistry & {
    if (curvature_losses == &losses && uses_curvature_subset(batch)) {
      const Batch head = curvature_subset(batch);
      forward(params, head, subset_losses, nullptr, false);
      curvature_losses = &subset_losses;
      curvature_rows = head.inputs.rows();
    }
    return *curvature_losses;
  };

  // Curvature and inverses.
  t = Clock::now();
  if (step_ % options_.curvature_update_period == 0) {
    estimator_.update_curvature_estimate(model_, at_curvature_point(),
                                         static_cast<float>(options_.curvature_ema), 1.0f, rng_);
    ++curvature_updates_;
  }
  st.timings.curvature_update_s += seconds_since(t);
  t = Clock::now();
  if (step_ % options_.inverse_update_period == 0 || force_inverse_update_) {
    try {
      estimator_.update_inverse(gamma);
    } catch (const CurvatureInverseError &e) {
      // A damped estimate too close to singular for its damping: rejected like a non-finite
      // update, so the next step retries the inverse with more damping — unless there is no
      // more to give.
      st.timings.inverse_s = seconds_since(t);
      ++inverse_failures_;
      st.inverse_failures = inverse_failures_;
      if (!(r.damping > 0.0) || r.damping >= options_.max_damping) {
        throw Error(std::string(e.what()) + "; the damping (" + std::to_string(r.damping) +
                    ") cannot be raised further (max_damping " +
                    std::to_string(options_.max_damping) + ")");
      }
      return reject();
    }
    ++inverse_updates_;
    force_inverse_update_ = false;
  }
  st.timings.inverse_s = seconds_since(t);

  t = Clock::now();
  Params u = estimator_.multiply_matpower(g, -1, gamma);
  st.timings.precondition_s = seconds_since(t);

  // The exact curvature (Fisher or GGN of the data term, + l2_reg I) as a bilinear form, from
  // Jacobian-vector products at θ.
  // With a curvature subset, the products are the subset's average (an estimate of the batch's).
  const bool ggn = is_ggn_mode(options_.estimation_mode);
  auto jvp = [&](const Params &tangent) {
    at_curvature_point();
    return model_.jvp(tangent);
  };
  auto curvature_form = [&](const Matrix &ja, const Matrix &jb) {
    const Matrix cjb = multiply_output_curvature(*curvature_losses, jb, ggn);
    return dot(ja, cjb) / static_cast<double>(curvature_rows);
  };

  t = Clock::now();
  // The update phase's rejections: its time so far is still recorded.
  auto reject_update = [&]() {
    st.timings.update_s = seconds_since(t);
    return reject();
  };
  // The quadratic model's J u and J v, kept: rho's J Δ is their combination (J is linear), which
  // saves a Jacobian-vector product on every damping adaptation.
  Matrix ju, jv;
  double alpha = 0.0, beta = 0.0;
  if (options_.use_adaptive_learning_rate) {
    // Minimise q(α, β) = ½ [α β] M [α β]ᵀ + [gᵀu gᵀv] [α β]ᵀ with M_ab = aᵀ(C + γI)b over
    // Δ = α u + β v. The dots of g, u and v come from one pass over the three lists.
    ju = jvp(u);
    const bool with_velocity = step_ > 0;
    const Eigen::MatrixXd dots = with_velocity ? gram({&g, &u, &velocity_}) : gram({&g, &u});
    const double muu = curvature_form(ju, ju) + gamma * dots(1, 1);
    const double bu = dots(0, 1);
    alpha = -bu / muu;
    if (with_velocity) {
      jv = jvp(velocity_);
      const double muv = curvature_form(ju, jv) + gamma * dots(1, 2);
      const double mvv = curvature_form(jv, jv) + gamma * dots(2, 2);
      const double bv = dots(0, 2);
      if (options_.use_adaptive_momentum) {
        const double det = muu * mvv - muv * muv;
        if (det > 1e-12 * std::abs(muu * mvv) && mvv > 0.0) {
          alpha = (-mvv * bu + muv * bv) / det;
          beta = (muv * bu - muu * bv) / det;
        }
      } else {
        beta = r.momentum;
        alpha = -(bu + beta * muv) / muu;
      }
    }
    r.learning_rate = -alpha;
    r.momentum = beta;
  } else {
    if (options_.norm_constraint) {
      const double s = r.learning_rate * r.learning_rate * dot(u, g);
      if (s > *options_.norm_constraint) {
        scale(static_cast<float>(std::sqrt(*options_.norm_constraint / s)), u);
      }
    }
    alpha = -r.learning_rate;
    beta = r.momentum;
  }
  st.learning_rate = r.learning_rate;
  st.momentum = r.momentum;
  st.damping = r.damping;
  // Δ = α u + β v and θ + Δ, with the sums below, in one pass. Non-finite values show as
  // non-finite squared norms (see all_finite).
  const StepSums sums = form_step(static_cast<float>(alpha), u, static_cast<float>(beta), velocity_,
                                  params, g, next_velocity_, next_params_);
  const double delta_sq = sums.delta_squared_norm;
  if (!std::isfinite(delta_sq) || !std::isfinite(sums.next_squared_norm))
    return reject_update();
  const bool adapt_damping =
      options_.use_adaptive_damping && (step_ + 1) % options_.damping_adaptation_interval == 0;
  if (adapt_damping || options_.always_compute_rho) {
    // rho on this batch: actual change over the quadratic model's predicted change.
    Matrix jd;
    if (ju.size() == 0) {
      jd = jvp(next_velocity_);
    } else {
      jd = static_cast<float>(alpha) * ju;
      if (jv.size() != 0)
        jd += static_cast<float>(beta) * jv;
    }
    const double predicted = sums.g_dot_delta + 0.5 * (curvature_form(jd, jd) + l2 * delta_sq);
    LossRegistry new_losses;
    const double new_loss =
        forward(next_params_, batch, new_losses, nullptr, true, &sums.next_squared_norm);
    if (!std::isfinite(new_loss))
      return reject_update();
    st.rho = predicted != 0.0 ? (new_loss - st.loss) / predicted : 0.0;
  }

  // Element-wise swaps: a caller's reference to one of params' matrices stays valid and sees
  // the new values; the old ones become next step's scratch.
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].swap(next_params_[i]);
    velocity_[i].swap(next_velocity_[i]);
  }
  st.update_norm = std::sqrt(delta_sq);

  if (adapt_damping) {
    const double decay = options_.damping_adaptation_decay
                             ? *options_.damping_adaptation_decay
                             : std::pow(0.95, options_.damping_adaptation_interval);
    if (*st.rho < 0.25) {
      damping_ /= decay;
    } else if (*st.rho > 0.75) {
      damping_ *= decay;
    }
    damping_ = std::min(std::max(damping_, options_.min_damping), options_.max_damping);
  }
  st.timings.update_s = seconds_since(t);
  ++step_;
  st.rejected_steps = rejected_steps_;
  st.inverse_failures = inverse_failures_;
  st.timings.total_s = seconds_since(start);
  return st;
}

} // namespace hkfac::kfac
