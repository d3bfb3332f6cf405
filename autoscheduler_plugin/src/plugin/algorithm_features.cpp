// Counting a stage's operations and access patterns (see algorithm_features.h).
#include "algorithm_features.h"

#include <set>

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

int feature_type_index(const Type &t) {
  if (t.is_bool())
    return 0;
  if (t.is_float())
    return t.bits() == 64 ? 6 : 5;
  switch (t.bits()) {
  case 8: return 1;
  case 16: return 2;
  case 32: return 3;
  default: return 4;
  }
}

namespace {

class FeatureCounter : public IRVisitor {
public:
  FeatureCounter(AlgorithmFeatures &f, const Function &func, std::string self)
      : f_(f), func_(func), self_(std::move(self)) {}

  // Classifies one access by its arguments against the Func's pure variables.
  void access(const std::vector<Expr> &args, int kind, const Type &t) {
    const auto &vars = func_.args();
    std::vector<int> used_var(args.size(), -1);
    bool single = true, any_constant = false;
    std::set<int> seen;
    for (size_t i = 0; i < args.size(); ++i) {
      int count = 0;
      for (size_t v = 0; v < vars.size(); ++v) {
        if (expr_uses_var(args[i], vars[v])) {
          ++count;
          used_var[i] = static_cast<int>(v);
        }
      }
      if (count == 0)
        any_constant = true;
      if (count > 1)
        single = false;
      if (count == 1)
        seen.insert(used_var[i]);
    }
    int pattern = -1;
    bool identity = single && !any_constant && args.size() == vars.size();
    for (size_t i = 0; identity && i < args.size(); ++i)
      identity = used_var[i] == static_cast<int>(i);
    if (identity)
      pattern = kPointwise;
    else if (single && !any_constant && seen.size() == args.size() && seen.size() == vars.size())
      pattern = kTranspose;
    else if (single && !any_constant && seen.size() < vars.size())
      pattern = kBroadcast;
    else if (any_constant)
      pattern = kSlice;
    if (pattern >= 0)
      f_[access_feature_index(pattern, kind, feature_type_index(t))]++;
  }

private:
  void op(int kind, const Type &t) {
    const int ti = feature_type_index(t);
    f_[op_feature_index(kind, ti)]++;
    f_[ti] = 1;
  }
  using IRVisitor::visit;
  void visit(const IntImm *o) override { op(kOpConst, o->type); }
  void visit(const UIntImm *o) override { op(kOpConst, o->type); }
  void visit(const FloatImm *o) override { op(kOpConst, o->type); }
  void visit(const Cast *o) override { op(kOpCast, o->type); IRVisitor::visit(o); }
  void visit(const Variable *o) override { op(o->param.defined() ? kOpParam : kOpVariable, o->type); }
  void visit(const Add *o) override { op(kOpAdd, o->type); IRVisitor::visit(o); }
  void visit(const Sub *o) override { op(kOpSub, o->type); IRVisitor::visit(o); }
  void visit(const Mod *o) override { op(kOpMod, o->type); IRVisitor::visit(o); }
  void visit(const Mul *o) override { op(kOpMul, o->type); IRVisitor::visit(o); }
  void visit(const Div *o) override { op(kOpDiv, o->type); IRVisitor::visit(o); }
  void visit(const Min *o) override { op(kOpMin, o->type); IRVisitor::visit(o); }
  void visit(const Max *o) override { op(kOpMax, o->type); IRVisitor::visit(o); }
  void visit(const EQ *o) override { op(kOpEQ, o->a.type()); IRVisitor::visit(o); }
  void visit(const NE *o) override { op(kOpNE, o->a.type()); IRVisitor::visit(o); }
  void visit(const LT *o) override { op(kOpLT, o->a.type()); IRVisitor::visit(o); }
  void visit(const LE *o) override { op(kOpLE, o->a.type()); IRVisitor::visit(o); }
  void visit(const GT *o) override { op(kOpLT, o->a.type()); IRVisitor::visit(o); }
  void visit(const GE *o) override { op(kOpLE, o->a.type()); IRVisitor::visit(o); }
  void visit(const And *o) override { op(kOpAnd, o->type); IRVisitor::visit(o); }
  void visit(const Or *o) override { op(kOpOr, o->type); IRVisitor::visit(o); }
  void visit(const Not *o) override { op(kOpNot, o->type); IRVisitor::visit(o); }
  void visit(const Select *o) override { op(kOpSelect, o->type); IRVisitor::visit(o); }
  void visit(const Let *o) override { op(kOpLet, o->type); IRVisitor::visit(o); }
  void visit(const Call *o) override {
    IRVisitor::visit(o);
    if (o->call_type == Call::Image) {
      op(kOpImageCall, o->type);
      access(o->args, kLoadImage, o->type);
    } else if (o->call_type == Call::Halide) {
      const bool self = o->name == self_;
      op(self ? kOpSelfCall : kOpFuncCall, o->type);
      access(o->args, self ? kLoadSelf : kLoadFunc, o->type);
    } else {
      op(kOpExternCall, o->type);
    }
  }

  AlgorithmFeatures &f_;
  const Function &func_;
  std::string self_;
};

} // namespace

AlgorithmFeatures algorithm_features(const Function &func, const Definition &def,
                                     const std::string &self) {
  AlgorithmFeatures f{};
  FeatureCounter counter(f, func, self);
  for (const Expr &v : def.values())
    v.accept(&counter);
  for (const Expr &a : def.args())
    a.accept(&counter);
  for (const Expr &v : def.values())
    counter.access(def.args(), kStore, v.type());
  return f;
}

} // namespace hkfac::sched
