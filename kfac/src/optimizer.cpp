// The K-FAC optimizer step.
#include "hkfac/kfac/optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "hkfac/error.h"
#include "hkfac/serial_kernels.h"

namespace hkfac::kfac {
namespace {

// The step's float arithmetic (learning rate, momentum, diagonal weight) overflows beyond this.
constexpr double kFloatMax = std::numeric_limits<float>::max();

// A double as %g prints it: std::to_string would show a damping of 1e-8 as 0.000000.
std::string describe(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

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
  require(!o.distributed_inverses || o.multi_device, "distributed_inverses needs multi_device");
  // A head of each shard is not the head of the global batch, so the ranks' curvature subset
  // would not be the one a single process takes.
  require(!(o.multi_device && o.curvature_batch_size > 0),
          "curvature_batch_size and multi_device are mutually exclusive");
  require(!o.communicator || o.multi_device, "a communicator is given but multi_device is off");
  require(o.curvature_ema >= 0.0 && o.curvature_ema <= 1.0, "curvature_ema must be in [0, 1]");
  require(o.num_burnin_steps >= 0, "num_burnin_steps must be >= 0");
  require(o.inverse_update_period >= 1, "inverse_update_period must be >= 1");
  require(o.curvature_update_period >= 1, "curvature_update_period must be >= 1");
  require(o.curvature_batch_size >= 0,
          "curvature_batch_size must be >= 0 (0 = the whole batch), got " +
              std::to_string(o.curvature_batch_size));
  require(o.l2_reg >= 0.0f && std::isfinite(o.l2_reg), "l2_reg must be finite and >= 0");
  require(o.min_damping >= 0.0 && std::isfinite(o.min_damping),
          "min_damping must be finite and >= 0, got " + describe(o.min_damping));
  require(o.max_damping >= o.min_damping, "max_damping (" + describe(o.max_damping) +
                                              ") must be >= min_damping (" +
                                              describe(o.min_damping) + ")");
  require(!o.norm_constraint || *o.norm_constraint > 0.0, "norm_constraint must be > 0");
  require(!(o.use_adaptive_damping && o.damping_schedule),
          "damping_schedule and use_adaptive_damping are mutually exclusive");
  require(!(o.use_adaptive_learning_rate && o.learning_rate_schedule),
          "learning_rate_schedule and use_adaptive_learning_rate are mutually exclusive");
  // The quadratic model sizes the adaptive step itself; a constraint on lr²⟨u, g⟩ would be
  // ignored (kfac-jax refuses the pair too).
  require(!(o.use_adaptive_learning_rate && o.norm_constraint),
          "norm_constraint and use_adaptive_learning_rate are mutually exclusive");
  require(!(o.use_adaptive_momentum && o.momentum_schedule),
          "momentum_schedule and use_adaptive_momentum are mutually exclusive");
  require(!o.use_adaptive_momentum || o.use_adaptive_learning_rate,
          "use_adaptive_momentum needs use_adaptive_learning_rate");
  require(o.damping_adaptation_interval >= 1, "damping_adaptation_interval must be >= 1");
  require(!o.damping_adaptation_decay ||
              (*o.damping_adaptation_decay > 0.0 && *o.damping_adaptation_decay < 1.0),
          "damping_adaptation_decay must be in (0, 1)");
  require(o.initial_damping > 0.0 && std::isfinite(o.initial_damping),
          "initial_damping must be finite and > 0, got " + describe(o.initial_damping));
  // Adaptive damping starts there, and quietly clamping it would start somewhere else.
  require(!o.use_adaptive_damping ||
              (o.initial_damping >= o.min_damping && o.initial_damping <= o.max_damping),
          "initial_damping (" + describe(o.initial_damping) +
              ") must be in [min_damping, max_damping] = [" + describe(o.min_damping) + ", " +
              describe(o.max_damping) + "]");
  require(o.rejected_step_damping_factor > 1.0 && std::isfinite(o.rejected_step_damping_factor),
          "rejected_step_damping_factor must be finite and > 1, got " +
              describe(o.rejected_step_damping_factor));
  return o;
}

// A quantity from its schedule or an explicit value, never both, checked before the step
// touches any state: finite in the float the step computes with (and >= 0 if `nonnegative`).
double schedule_or_value(const Schedule &schedule, const std::optional<double> &value, int step,
                         const char *name, bool nonnegative) {
  if (schedule && value) {
    throw Error(std::string(name) + ": both " + name +
                "_schedule and a per-step value were given; use one");
  }
  if (!schedule && !value) {
    throw Error(std::string(name) + ": neither " + name +
                "_schedule nor a per-step value was given");
  }
  const double v = schedule ? schedule(step) : *value;
  if (!(std::abs(v) <= kFloatMax) || (nonnegative && !(v >= 0.0))) {
    const std::string from =
        schedule ? std::string(name) + "_schedule(" + std::to_string(step) + ") returned "
                 : std::string("StepValues::") + name + " is ";
    throw Error(std::string(name) + ": " + from + describe(v) + "; need a finite value" +
                (nonnegative ? " >= 0" : "") + " (within float range)");
  }
  return v;
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
  if (options_.multi_device) {
    if (!options_.communicator)
      options_.communicator = mpi_world_communicator();
    comm_ = options_.communicator;
  }
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
    // Non-negative: the update is Δ = -learning_rate · u + momentum · v, so a negative rate
    // climbs the loss (the apps refuse one too).
    r.learning_rate = schedule_or_value(options_.learning_rate_schedule, values.learning_rate,
                                        step_, "learning_rate", true);
  }
  if (options_.use_adaptive_momentum) {
    if (values.momentum) {
      throw Error("momentum: use_adaptive_momentum is on; pass no per-step value");
    }
  } else {
    r.momentum =
        schedule_or_value(options_.momentum_schedule, values.momentum, step_, "momentum", false);
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
    // The boost applies to the damping in use, so that it raises a value below min_damping too.
    const double asked =
        schedule_or_value(options_.damping_schedule, values.damping, step_, "damping", true);
    r.damping = damping_boost_ * std::max(asked, options_.min_damping);
  }
  r.damping = std::min(std::max(r.damping, options_.min_damping), options_.max_damping);
  if (!(options_.l2_reg + r.damping <= kFloatMax)) {
    throw Error("damping: " + describe(r.damping) +
                (options_.use_adaptive_damping ? "" : " (with the rejected steps' boost)") +
                " plus l2_reg overflows the float diagonal weight; lower max_damping");
  }
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
  return options_.curvature_batch_size > 0 && options_.curvature_batch_size < batch.size();
}

Batch Optimizer::curvature_subset(const Batch &batch) const {
  const Eigen::Index m = options_.curvature_batch_size, rows = batch.size();
  Batch head;
  // Inputs, indices and targets travel with their examples; a part a batch lacks has none to cut.
  const auto cut = [&](const auto &part, auto &into, const char *name) {
    if (part.rows() == rows) {
      into = part.topRows(m);
    } else if (part.size() != 0) {
      throw Error(std::string("curvature_batch_size: batch.") + name + " has " +
                  std::to_string(part.rows()) + " rows and the batch " + std::to_string(rows) +
                  " examples; a curvature subset needs one row per example (or none)");
    }
  };
  cut(batch.inputs, head.inputs, "inputs");
  cut(batch.indices, head.indices, "indices");
  cut(batch.targets, head.targets, "targets");
  return head;
}

double Optimizer::evaluate(const Params &params, const Batch &batch,
                           std::map<std::string, double> *aux) {
  const SerialKernels serial(options_.debug || options_.serial_kernels);
  LossRegistry losses;
  double value = forward(params, batch, losses, aux, true);
  if (comm_) {
    const BatchShard shard = shard_of(batch);
    std::vector<double> values{value};
    if (aux) {
      for (const auto &[name, v] : *aux)
        values.push_back(v);
    }
    average(values.data(), values.size(), shard, "evaluate");
    value = values[0];
    if (aux) {
      size_t i = 1;
      for (auto &entry : *aux)
        entry.second = values[i++];
    }
  }
  return value;
}

Params Optimizer::gradient(const Params &params, const Batch &batch) {
  const SerialKernels serial(options_.debug || options_.serial_kernels);
  LossRegistry losses;
  forward(params, batch, losses, nullptr, false);
  Params g = backward_gradient(params, losses);
  if (comm_)
    average(g, shard_of(batch), "evaluate");
  return g;
}

void Optimizer::burn_in(const Params &params, const std::function<Batch()> &next_batch) {
  // Interrupted by an exception (the data iterator's, the value function's), burn-in leaves no
  // partial mean for the retry to add to: the next step() starts it as a new optimizer would.
  const std::mt19937 rng = rng_, value_rng = value_rng_;
  const int curvature_updates = curvature_updates_;
  try {
    const int n = options_.num_burnin_steps;
    for (int i = 0; i < n; ++i) {
      Batch batch = pull(next_batch);
      if (uses_curvature_subset(batch))
        batch = curvature_subset(batch);
      const BatchShard shard = shard_of(batch);
      LossRegistry losses;
      forward(params, batch, losses, nullptr, false);
      // A batch whose statistics would not be finite is left out, and the estimate S / w is
      // the mean of the others.
      if (estimator_.update_curvature_estimate(model_, losses, 1.0f, 1.0f / static_cast<float>(n),
                                               rng_, shard)) {
        ++curvature_updates_;
      }
    }
  } catch (...) {
    estimator_.init();
    rng_ = rng;
    value_rng_ = value_rng;
    curvature_updates_ = curvature_updates;
    throw;
  }
  burned_in_ = true;
}

// One step's values, from the batch to the accepted update.
struct Optimizer::StepState {
  StepState(Params &p, Resolved values) : params(p), r(values) {}

  Params &params;
  Resolved r; // learning rate, momentum and damping in use (the adaptive ones set by phase 6)
  Clock::time_point start = Clock::now();
  Clock::time_point phase = start; // when the current phase began
  StepStats st;
  Batch batch;
  float gamma = 0.0f; // l2_reg + damping: the diagonal the inverses and the quadratic model use
  LossRegistry losses;
  // The curvature point: `losses` on the whole batch, or a subset's own forward (see
  // at_curvature_point).
  LossRegistry subset_losses;
  const LossRegistry *curvature_losses = &losses;
  Eigen::Index curvature_rows = 0;
  Params g;         // the gradient
  Params u;         // the preconditioned gradient F̂⁻¹ g
  BatchShard shard; // where the batch sits in the global batch (multi_device)
  // The quadratic model's J u and J v, kept: rho's J Δ is their combination (J is linear), which
  // saves a Jacobian-vector product on every damping adaptation.
  Matrix ju, jv;
  double alpha = 0.0, beta = 0.0; // Δ = α u + β v
  bool adapt_damping = false;
};

StepStats Optimizer::step(Params &params, const std::function<Batch()> &next_batch,
                          const StepValues &values) {
  const SerialKernels serial(options_.debug || options_.serial_kernels);
  check_params(params);
  StepState s(params, resolve(values));
  s.st.step = step_;
  if (!burned_in_) {
    const Clock::time_point t = Clock::now();
    burn_in(params, next_batch);
    s.st.burned_in = true;
    s.st.timings.curvature_update_s += seconds_since(t);
  }
  s.batch = pull(next_batch);
  s.shard = shard_of(s.batch);
  s.curvature_rows = s.batch.size();
  s.gamma = static_cast<float>(options_.l2_reg + s.r.damping);

  if (auto rejected = loss_and_gradient(s))
    return *rejected;
  if (auto rejected = curvature_update(s))
    return *rejected;
  if (auto rejected = inverses_update(s))
    return *rejected;
  precondition(s);
  step_coefficients(s);
  if (auto rejected = parameters_update(s))
    return *rejected;
  damping_update(s);
  return accepted(s);
}

std::optional<StepStats> Optimizer::loss_and_gradient(StepState &s) {
  s.phase = Clock::now();
  s.st.loss = forward(s.params, s.batch, s.losses, &s.st.aux, true);
  s.g = backward_gradient(s.params, s.losses);
  if (comm_) {
    // Non-finite values stay non-finite in the sums, so every rank rejects a bad shard.
    std::vector<double> values{s.st.loss};
    for (const auto &[name, v] : s.st.aux)
      values.push_back(v);
    average(values.data(), values.size(), s.shard, "loss_and_gradient");
    s.st.loss = values[0];
    size_t i = 1;
    for (auto &entry : s.st.aux)
      entry.second = values[i++];
    average(s.g, s.shard, "loss_and_gradient");
  }
  // The squared norm doubles as the finiteness check (as in all_finite).
  s.st.grad_norm = std::sqrt(squared_norm(s.g));
  s.st.timings.forward_backward_s = seconds_since(s.phase);
  if (!std::isfinite(s.st.loss) || !std::isfinite(s.st.grad_norm))
    return reject_batch(s, std::isfinite(s.st.loss) ? "gradient" : "loss", "was");
  return std::nullopt;
}

std::optional<StepStats> Optimizer::curvature_update(StepState &s) {
  s.phase = Clock::now();
  if (step_ % options_.curvature_update_period == 0) {
    if (!estimator_.update_curvature_estimate(model_, at_curvature_point(s),
                                              static_cast<float>(options_.curvature_ema), 1.0f,
                                              rng_, s.shard)) {
      s.st.timings.curvature_update_s += seconds_since(s.phase);
      return reject_batch(s, "curvature statistics", "were");
    }
    ++curvature_updates_;
  }
  nonfinite_batches_ = 0;
  s.st.timings.curvature_update_s += seconds_since(s.phase);
  return std::nullopt;
}

std::optional<StepStats> Optimizer::inverses_update(StepState &s) {
  s.phase = Clock::now();
  if (step_ % options_.inverse_update_period == 0 || force_inverse_update_) {
    try {
      estimator_.update_inverse(s.gamma, options_.distributed_inverses ? comm_.get() : nullptr);
    } catch (const CurvatureInverseError &e) {
      // A damped estimate too close to singular for its damping.
      s.st.timings.inverse_s = seconds_since(s.phase);
      ++inverse_failures_;
      s.st.inverse_failures = inverse_failures_;
      return reject_for_damping(s, e.what());
    }
    ++inverse_updates_;
    force_inverse_update_ = false;
  }
  s.st.timings.inverse_s = seconds_since(s.phase);
  return std::nullopt;
}

void Optimizer::precondition(StepState &s) {
  s.phase = Clock::now();
  s.u = estimator_.multiply_matpower(s.g, -1, s.gamma);
  s.st.timings.precondition_s = seconds_since(s.phase);
}

void Optimizer::step_coefficients(StepState &s) {
  // The update phase's time runs from here to the accepted (or rejected) update.
  s.phase = Clock::now();
  Resolved &r = s.r;
  if (options_.use_adaptive_learning_rate) {
    // Minimise q(α, β) = ½ [α β] M [α β]ᵀ + [gᵀu gᵀv] [α β]ᵀ with M_ab = aᵀ(C + γI)b over
    // Δ = α u + β v. The dots of g, u and v come from one pass over the three lists.
    // Along one direction the minimiser of ½ m α² + b α is -b/m, and 0 where q has no slope
    // (u = 0, as at a zero gradient), which -b/m would turn into 0/0 and a rejected step.
    auto minimiser = [](double b, double m) { return b == 0.0 ? 0.0 : -b / m; };
    s.ju = jvp(s, s.u);
    const bool with_velocity = step_ > 0;
    const Eigen::MatrixXd dots =
        with_velocity ? gram({&s.g, &s.u, &velocity_}) : gram({&s.g, &s.u});
    // The data term's curvature products are averages over the batch (across ranks with
    // multi_device); the parameter-space dots are the same on every rank.
    double forms[3] = {curvature_form(s, s.ju, s.ju), 0.0, 0.0};
    if (with_velocity) {
      s.jv = jvp(s, velocity_);
      forms[1] = curvature_form(s, s.ju, s.jv);
      forms[2] = curvature_form(s, s.jv, s.jv);
    }
    if (comm_)
      average(forms, with_velocity ? 3 : 1, s.shard, "quadratic_model");
    const double muu = forms[0] + s.gamma * dots(1, 1);
    const double bu = dots(0, 1);
    s.alpha = minimiser(bu, muu);
    if (with_velocity) {
      const double muv = forms[1] + s.gamma * dots(1, 2);
      const double mvv = forms[2] + s.gamma * dots(2, 2);
      const double bv = dots(0, 2);
      if (options_.use_adaptive_momentum) {
        const double det = muu * mvv - muv * muv;
        if (det > 1e-12 * std::abs(muu * mvv) && mvv > 0.0) {
          s.alpha = (-mvv * bu + muv * bv) / det;
          s.beta = (muv * bu - muu * bv) / det;
        }
      } else {
        s.beta = r.momentum;
        s.alpha = minimiser(bu + s.beta * muv, muu);
      }
    }
    r.learning_rate = -s.alpha;
    r.momentum = s.beta;
  } else {
    if (options_.norm_constraint) {
      const double c = r.learning_rate * r.learning_rate * dot(s.u, s.g);
      if (c > *options_.norm_constraint) {
        scale(static_cast<float>(std::sqrt(*options_.norm_constraint / c)), s.u);
      }
    }
    s.alpha = -r.learning_rate;
    s.beta = r.momentum;
  }
  s.st.learning_rate = r.learning_rate;
  s.st.momentum = r.momentum;
  s.st.damping = r.damping;
}

std::optional<StepStats> Optimizer::parameters_update(StepState &s) {
  // Its rejections keep the update phase's time so far.
  auto reject_update = [&](const char *why) {
    s.st.timings.update_s = seconds_since(s.phase);
    return reject_for_damping(s, std::string("Optimizer::step: ") + why);
  };
  // Δ = α u + β v and θ + Δ, with the sums below, in one pass. Non-finite values show as
  // non-finite squared norms (see all_finite).
  const StepSums sums = form_step(static_cast<float>(s.alpha), s.u, static_cast<float>(s.beta),
                                  velocity_, s.params, s.g, next_velocity_, next_params_);
  const double delta_sq = sums.delta_squared_norm;
  if (!std::isfinite(delta_sq) || !std::isfinite(sums.next_squared_norm))
    return reject_update("the update was not finite");
  // A zero update (u = 0 and no velocity to carry) predicts no change and makes none: rho would
  // be 0/0, so it is not computed, and the damping has nothing to adapt to.
  const bool moved = delta_sq > 0.0;
  s.adapt_damping = moved && options_.use_adaptive_damping &&
                    (step_ + 1) % options_.damping_adaptation_interval == 0;
  if (moved && (s.adapt_damping || options_.always_compute_rho)) {
    // rho on this batch: actual change over the quadratic model's predicted change.
    Matrix jd;
    if (s.ju.size() == 0) {
      jd = jvp(s, next_velocity_);
    } else {
      jd = static_cast<float>(s.alpha) * s.ju;
      if (s.jv.size() != 0)
        jd += static_cast<float>(s.beta) * s.jv;
    }
    LossRegistry new_losses;
    // The curvature product and the new loss are this batch's; with multi_device, averaged in
    // one reduction (a non-finite loss on one rank is non-finite on all).
    double rho_terms[2] = {
        curvature_form(s, jd, jd),
        forward(next_params_, s.batch, new_losses, nullptr, true, &sums.next_squared_norm)};
    if (comm_)
      average(rho_terms, 2, s.shard, "rho");
    const double predicted = sums.g_dot_delta + 0.5 * (rho_terms[0] + options_.l2_reg * delta_sq);
    const double new_loss = rho_terms[1];
    if (!std::isfinite(new_loss))
      return reject_update("the loss after the update was not finite");
    s.st.rho = predicted != 0.0 ? (new_loss - s.st.loss) / predicted : 0.0;
  }

  // Element-wise swaps: a caller's reference to one of params' matrices stays valid and sees
  // the new values; the old ones become next step's scratch.
  for (size_t i = 0; i < s.params.size(); ++i) {
    s.params[i].swap(next_params_[i]);
    velocity_[i].swap(next_velocity_[i]);
  }
  s.st.update_norm = std::sqrt(delta_sq);
  return std::nullopt;
}

void Optimizer::damping_update(StepState &s) {
  if (!s.adapt_damping)
    return;
  // Levenberg–Marquardt: more damping where the quadratic model overestimated the decrease.
  const double decay = options_.damping_adaptation_decay
                           ? *options_.damping_adaptation_decay
                           : std::pow(0.95, options_.damping_adaptation_interval);
  if (*s.st.rho < 0.25) {
    damping_ /= decay;
  } else if (*s.st.rho > 0.75) {
    damping_ *= decay;
  }
  damping_ = std::min(std::max(damping_, options_.min_damping), options_.max_damping);
}

StepStats Optimizer::accepted(StepState &s) {
  s.st.timings.update_s = seconds_since(s.phase);
  ++step_;
  s.st.rejected_steps = rejected_steps_;
  s.st.inverse_failures = inverse_failures_;
  s.st.timings.total_s = seconds_since(s.start);
  return s.st;
}

// A rejected step changes no parameters; what else it changes depends on its cause.
StepStats Optimizer::reject(StepState &s) {
  ++rejected_steps_;
  s.st.rejected = true;
  s.st.rho = 0.0;
  s.st.rejected_steps = rejected_steps_;
  s.st.inverse_failures = inverse_failures_;
  s.st.learning_rate = s.r.learning_rate;
  s.st.momentum = s.r.momentum;
  s.st.damping = s.r.damping;
  ++step_;
  s.st.timings.total_s = seconds_since(s.start);
  return s.st;
}

// A bad batch (its loss, gradient or curvature statistics not finite) changes nothing else:
// more damping cannot mend data, and would stay for the rest of the run. The same parameters
// failing on several batches in a row are broken themselves (an accepted update blew them up),
// and rejecting forever would only stand still.
StepStats Optimizer::reject_batch(StepState &s, const std::string &what, const char *was) {
  if (++nonfinite_batches_ >= kMaxNonfiniteBatches) {
    throw Error("Optimizer::step: the " + what + " at the current parameters " + was +
                " not finite on " + std::to_string(nonfinite_batches_) +
                " batches in a row (steps " + std::to_string(step_ - nonfinite_batches_ + 1) + "-" +
                std::to_string(step_) +
                "): an earlier update made the parameters unusable; restart from a checkpoint "
                "with more damping (min_damping, l2_reg) or a smaller learning rate");
  }
  return reject(s);
}

// A non-finite update, a failed inverse or a non-finite loss at θ+Δ: the step was too long for
// the curvature, and more damping shortens the next try (with fresh inverses) — unless there is
// no more to give, where rejecting forever would hide the failure.
StepStats Optimizer::reject_for_damping(StepState &s, const std::string &why) {
  const double damping = s.r.damping;
  const double raised =
      std::min(damping * options_.rejected_step_damping_factor, options_.max_damping);
  if (!(damping > 0.0) || damping >= options_.max_damping ||
      !(options_.l2_reg + raised <= kFloatMax)) {
    throw Error(why + "; the damping (" + describe(damping) +
                ") cannot be raised further (max_damping " + describe(options_.max_damping) + ")");
  }
  force_inverse_update_ = true;
  if (options_.use_adaptive_damping) {
    damping_ = raised;
  } else {
    damping_boost_ *= options_.rejected_step_damping_factor;
  }
  return reject(s);
}

// The point curvature is measured at: the loss-and-gradient forward's records on the whole
// batch, or (with a curvature subset) a second forward over the subset, made when first needed.
// After it the model's records are the subset's; the gradient is already taken.
const LossRegistry &Optimizer::at_curvature_point(StepState &s) {
  if (s.curvature_losses == &s.losses && uses_curvature_subset(s.batch)) {
    const Batch head = curvature_subset(s.batch);
    forward(s.params, head, s.subset_losses, nullptr, false);
    s.curvature_losses = &s.subset_losses;
    s.curvature_rows = head.size();
  }
  return *s.curvature_losses;
}

// The exact curvature (Fisher or GGN of the data term, + l2_reg I) as a bilinear form, from
// Jacobian-vector products at θ. With a curvature subset, the products are the subset's average
// (an estimate of the batch's).
Matrix Optimizer::jvp(StepState &s, const Params &tangent) {
  at_curvature_point(s);
  return model_.jvp(tangent);
}

double Optimizer::curvature_form(const StepState &s, const Matrix &ja, const Matrix &jb) const {
  const Matrix cjb =
      multiply_output_curvature(*s.curvature_losses, jb, is_ggn_mode(options_.estimation_mode));
  return dot(ja, cjb) / static_cast<double>(s.curvature_rows);
}

} // namespace hkfac::kfac
