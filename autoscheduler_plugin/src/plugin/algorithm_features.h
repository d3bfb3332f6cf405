// The 287 algorithm features of one stage: what it computes, independent of any schedule.
#pragma once

#include <array>
#include <string>

#include "Halide.h"

namespace hkfac::sched {

constexpr int kAlgorithmFeatureCount = 287;
using AlgorithmFeatures = std::array<int, kAlgorithmFeatureCount>;

// Layout (the cost model reads the last 280 as a 40 x 7 grid, generators/cost_model_features.h):
//   [0, 7)     types in use: Bool, 8-, 16-, 32-, 64-bit integers, Float, Double (1 if any value
//              or intermediate of the stage has the type)
//   7 + 7 r + t, r in [0, 24): the op histogram, count of op kind r (OpKind below) at type t
//   7 + 7 (24 + 4 m + k) + t: access pattern m (pointwise, transpose, broadcast, slice) of
//              access kind k (load from a Func, load from itself, load from an input, store)
// An access is pointwise when argument i is the Func's variable i plus a constant, a transpose
// when each argument is one distinct variable in another order, a broadcast when some variable
// is unused and the rest are single variables, a slice when some argument is constant.
enum OpKind {
  kOpConst, kOpCast, kOpVariable, kOpParam, kOpAdd, kOpSub, kOpMod, kOpMul, kOpDiv, kOpMin,
  kOpMax, kOpEQ, kOpNE, kOpLT, kOpLE, kOpAnd, kOpOr, kOpNot, kOpSelect, kOpImageCall,
  kOpFuncCall, kOpSelfCall, kOpExternCall, kOpLet, kOpKinds
};
enum AccessPattern { kPointwise, kTranspose, kBroadcast, kSlice };
enum AccessKind { kLoadFunc, kLoadSelf, kLoadImage, kStore };
constexpr int kTypesInUse = 7;
constexpr int kFeatureTypes = 7;

int feature_type_index(const Halide::Type &t);
inline int op_feature_index(int op, int type) { return kTypesInUse + op * kFeatureTypes + type; }
inline int access_feature_index(int pattern, int kind, int type) {
  return kTypesInUse + (kOpKinds + pattern * 4 + kind) * kFeatureTypes + type;
}

// The features of `def` (a definition of `func`, named `self`).
AlgorithmFeatures algorithm_features(const Halide::Internal::Function &func,
                                     const Halide::Internal::Definition &def,
                                     const std::string &self);

} // namespace hkfac::sched
