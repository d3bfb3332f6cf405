// Conservative value ranges, so that no stage of a random pipeline has undefined behaviour.
#pragma once

#include "Halide.h"

#include <algorithm>
#include <cmath>

namespace hkfac::random_pipeline {

// Bounds on every value an Expr can take, as doubles (exact for all integer types we use).
// The generator tracks one per value so it can tell, without running anything, where a result
// would overflow a type whose overflow Halide leaves undefined (signed 32-bit), where a float could
// grow towards infinity, and where a cast from float to int needs clamping. Schedules differ in
// vectorisation and evaluation order, and undefined behaviour is exactly what makes two correct
// schedules disagree — which the scheduler agreement tests would then misreport.
struct ValueRange {
  double lo = 0, hi = 0;
};

inline ValueRange hull(ValueRange a, ValueRange b) {
  return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
}
inline ValueRange plus(ValueRange a, ValueRange b) { return {a.lo + b.lo, a.hi + b.hi}; }
inline ValueRange minus(ValueRange a, ValueRange b) { return {a.lo - b.hi, a.hi - b.lo}; }
inline ValueRange times(ValueRange a, ValueRange b) {
  const double p[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  return {*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
}
inline ValueRange scaled(ValueRange a, double k) {
  return k >= 0 ? ValueRange{a.lo * k, a.hi * k} : ValueRange{a.hi * k, a.lo * k};
}
// Arithmetic shift right by k: Halide rounds towards negative infinity.
inline ValueRange shifted_right(ValueRange a, int k) {
  return {std::floor(std::ldexp(a.lo, -k)), std::floor(std::ldexp(a.hi, -k))};
}
inline double max_abs(ValueRange a) { return std::max(std::abs(a.lo), std::abs(a.hi)); }

inline double type_min(Halide::Type t) {
  if (t.is_float()) {
    return -1e300;
  }
  return t.is_uint() ? 0.0 : -std::ldexp(1.0, t.bits() - 1);
}

inline double type_max(Halide::Type t) {
  if (t.is_float()) {
    return 1e300;
  }
  return t.is_uint() ? std::ldexp(1.0, t.bits()) - 1 : std::ldexp(1.0, t.bits() - 1) - 1;
}

inline bool fits(ValueRange r, Halide::Type t) {
  return r.lo >= type_min(t) && r.hi <= type_max(t);
}

inline ValueRange full_range(Halide::Type t) { return {type_min(t), type_max(t)}; }

// Halide defines overflow of unsigned and of 8/16-bit signed integers as wrapping; overflow of
// signed integers of 32 bits or more is undefined, so those must be kept in range explicitly.
inline bool wraps(Halide::Type t) { return t.is_uint() || (t.is_int() && t.bits() < 32); }

} // namespace hkfac::random_pipeline
