// Bound expressions compiled once and evaluated millions of times during the search.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "Halide.h"

namespace hkfac::sched {

// A symbolic bound (one end of a required interval), written by Halide's bounds inference in
// terms of a stage's loop bounds (`v.min`, `v.max` for every loop variable v), compiled into a
// postfix program over doubles. The search evaluates each edge's footprint for every candidate
// tiling; calling Halide's simplifier there would cost milliseconds per state, this costs tens of
// nanoseconds. Integer semantics follow Halide's (flooring division and modulo, truncating
// casts). Anything the program cannot express (a call to a Func inside an index, say) leaves it
// invalid, and the caller falls back to the producer's whole region.
class BoundExpr {
public:
  BoundExpr() = default;
  // `symbols` names the variables the expression may use, in the order eval() receives them.
  BoundExpr(const Halide::Expr &e, const std::vector<std::string> &symbols);

  bool valid() const { return valid_; }
  // The value at `values` (indexed as `symbols`). Only call when valid().
  double eval(const double *values) const;

private:
  enum class Op : uint8_t {
    Const, Sym, Add, Sub, Mul, Div, IntDiv, Mod, Min, Max, Select, LT, LE, EQ, NE, And, Or,
    Not, Floor, Ceil, Round, Trunc, Abs
  };
  struct Instr {
    Op op;
    int index = 0;
    double value = 0;
  };
  static constexpr int kMaxDepth = 64;
  bool compile(const Halide::Expr &e, const std::vector<std::string> &symbols);
  int max_depth() const;

  std::vector<Instr> program_;
  bool valid_ = false;
};

} // namespace hkfac::sched
