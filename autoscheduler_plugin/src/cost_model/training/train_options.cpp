// The training options' one set of checks, and the K-FAC rate schedule they describe.
#include "hkfac/cost_model/train_options.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "hkfac/error.h"

namespace hkfac::cost_model {

namespace {

// NaN fails every comparison, so `in_range` alone would let it through a plain `> 0` test.
void check_number(const char *name, double value, bool in_range, const char *range) {
  if (!std::isfinite(value) || !in_range) {
    std::ostringstream msg;
    msg << name << ": expected a finite number " << range << ", got " << value;
    throw Error(msg.str());
  }
}

void check_integer(const char *name, int value, int low) {
  if (value < low) {
    throw Error(std::string(name) + ": expected an integer >= " + std::to_string(low) + ", got " +
                std::to_string(value));
  }
}

} // namespace

OptimizerKind parse_optimizer(const std::string &text) {
  if (text == "kfac")
    return OptimizerKind::kfac;
  if (text == "adam")
    return OptimizerKind::adam;
  throw Error("optimizer: expected 'kfac' or 'adam', got '" + text + "'");
}

void validate(const TrainOptions &o) {
  check_integer("epochs", o.epochs, 0);
  check_integer("batch_size", o.batch_size, 2);
  check_integer("schedules_per_visit", o.schedules_per_visit, 0);
  check_integer("num_cores", o.num_cores, 1);
  if (o.optimizer == OptimizerKind::adam) // Adam's alone: K-FAC runs leave it unset
    check_number("rate", o.rate, o.rate > 0, "> 0");
  check_number("penalty_weight", o.penalty_weight, o.penalty_weight >= 0, ">= 0");
  check_number("max_seconds", o.max_seconds, o.max_seconds >= 0, ">= 0");
  check_number("kfac_rate", o.kfac_rate, o.kfac_rate > 0, "> 0");
  if (o.kfac_final_rate) {
    const double r = *o.kfac_final_rate;
    check_number("kfac_final_rate", r, r > 0, "> 0, or none");
    if (o.kfac_adaptive)
      throw Error("kfac_final_rate schedules a fixed rate; kfac_adaptive computes its own");
  }
  check_number("kfac_damping", o.kfac_damping, o.kfac_damping > 0, "> 0");
  // A momentum of 1 or more never lets old updates decay.
  check_number("kfac_momentum", o.kfac_momentum, o.kfac_momentum >= 0 && o.kfac_momentum < 1,
               "in [0, 1)");
  check_integer("kfac_inverse_period", o.kfac_inverse_period, 1);
  check_integer("kfac_curvature_period", o.kfac_curvature_period, 1);
  check_number("kfac_l2", o.kfac_l2, o.kfac_l2 >= 0, ">= 0");
  if (o.kfac_norm_constraint) {
    const double c = *o.kfac_norm_constraint;
    check_number("kfac_norm_constraint", c, c > 0, "> 0, or none");
  }
  check_number("top_choice_weight", o.top_choice_weight, o.top_choice_weight >= 0, ">= 0");
  if (o.top_choice_weight > 0 && o.optimizer != OptimizerKind::kfac)
    throw Error("top_choice_weight is a K-FAC loss term; Adam trains on L_rel alone");
  check_number("top_choice_temperature", o.top_choice_temperature, o.top_choice_temperature > 0,
               "> 0");
}

double scheduled_kfac_rate(const TrainOptions &o, int step, int total_steps) {
  if (!o.kfac_final_rate || total_steps <= 1)
    return o.kfac_rate;
  const double f = std::min(1.0, static_cast<double>(step) / (total_steps - 1));
  return *o.kfac_final_rate + 0.5 * (o.kfac_rate - *o.kfac_final_rate) * (1.0 + std::cos(M_PI * f));
}

} // namespace hkfac::cost_model
