// How much of an inlined Func's work its consumer's common-subexpression elimination shares.
#pragma once

#include <vector>

#include "Halide.h"

namespace hkfac::sched {

// The copies of `producer`'s work that one point of a stage computes when `producer` is inlined
// into it, after Halide's common-subexpression elimination: between 1 and `calls` (the call
// sites). Calls that share their arguments' work (bgu's output reads affine(x, y, k, i) for four
// i with one trilinear lookup's coordinates and weights) cost less than one copy each; counting
// every call in full made inlining such a Func look dearer than computing it per row, though on
// bgu it takes 0.78 of that time. `exprs` are the stage's values (an update's also its
// coordinates and predicate). The work of an expression is its count of distinct operations and
// loads that vary from point to point.
double inlined_copies(const std::vector<Halide::Expr> &exprs,
                      const Halide::Internal::Function &producer, int calls);

} // namespace hkfac::sched
