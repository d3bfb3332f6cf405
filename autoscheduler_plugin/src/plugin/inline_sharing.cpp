// Counting what inlining shares after CSE (see inline_sharing.h).
#include "inline_sharing.h"

#include <algorithm>
#include <map>
#include <set>

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

namespace {

// Whether an expression changes from point to point: it reads a loop variable (a pure Var, an
// RVar or a Let's name; a Param's or a buffer's fields do not change) or calls a Func.
class Varies : public IRVisitor {
public:
  bool found = false;

private:
  using IRVisitor::visit;
  void visit(const Variable *op) override {
    if (!op->param.defined() && !op->image.defined())
      found = true;
  }
  void visit(const Call *op) override {
    if (op->call_type == Call::Halide || op->call_type == Call::Image || !op->is_pure())
      found = true;
    IRVisitor::visit(op);
  }
};

bool varies(const Expr &e) {
  Varies v;
  e.accept(&v);
  return v.found;
}

// The per-point work of expressions as Halide computes them after common-subexpression
// elimination: each distinct subexpression once (structurally equal ones are one), its
// operations and loads counted, what does not vary from point to point not at all (Halide hoists
// it), hints to the compiler and calls to `skip` (the calls inlining replaces) not at all.
// Counted directly rather than by running the elimination, which would draw names from
// Halide's global counter and so change the names in the statement the pipeline lowers to.
class Work : public IRVisitor {
public:
  explicit Work(std::string skip) : skip_(std::move(skip)) {}
  double count = 0;

private:
  using IRVisitor::visit;
  // Counts `op` and visits its operands the first time an equal expression is met.
  template <typename T>
  void once(const T *op, bool counts) {
    const Expr e(op);
    if (!seen_.insert(e).second)
      return;
    if (counts && varies(e))
      ++count;
    IRVisitor::visit(op);
  }
  void visit(const Call *op) override {
    const bool hint = op->is_intrinsic({Call::likely, Call::likely_if_innermost,
                                        Call::promise_clamped, Call::unsafe_promise_clamped});
    once(op, op->name != skip_ && !hint);
  }
#define HKFAC_COUNT(T)                                                                           \
  void visit(const T *op) override { once(op, true); }
  HKFAC_COUNT(Cast)
  HKFAC_COUNT(Add)
  HKFAC_COUNT(Sub)
  HKFAC_COUNT(Mul)
  HKFAC_COUNT(Div)
  HKFAC_COUNT(Mod)
  HKFAC_COUNT(Min)
  HKFAC_COUNT(Max)
  HKFAC_COUNT(EQ)
  HKFAC_COUNT(NE)
  HKFAC_COUNT(LT)
  HKFAC_COUNT(LE)
  HKFAC_COUNT(GT)
  HKFAC_COUNT(GE)
  HKFAC_COUNT(And)
  HKFAC_COUNT(Or)
  HKFAC_COUNT(Not)
  HKFAC_COUNT(Select)
  HKFAC_COUNT(Load)
  HKFAC_COUNT(Ramp)
  HKFAC_COUNT(Broadcast)
  HKFAC_COUNT(Shuffle)
  HKFAC_COUNT(VectorReduce)
#undef HKFAC_COUNT
  std::string skip_;
  std::set<Expr, IRDeepCompare> seen_;
};

// Every call to `f` replaced by its value at the call's arguments. (Halide's inline_function
// asks for a locked schedule, which a pipeline being scheduled does not have yet.)
class Inline : public IRMutator {
public:
  explicit Inline(const Function &f) : f_(f) {}

private:
  using IRMutator::visit;
  Expr visit(const Call *op) override {
    if (op->call_type != Call::Halide || op->name != f_.name())
      return IRMutator::visit(op);
    std::map<std::string, Expr> at;
    for (size_t i = 0; i < op->args.size() && i < f_.args().size(); ++i)
      at[f_.args()[i]] = mutate(op->args[i]);
    calls.emplace_back(op);
    copies.push_back(substitute(at, f_.values()[op->value_index]));
    return copies.back();
  }

public:
  std::vector<Expr> calls, copies; // each call, and its value at its arguments

private:
  const Function &f_;
};

double work(const Expr &e, const std::string &skip) {
  // Lets substituted first: two copies' bodies may read the same Let name bound to different
  // values, and are then not equal.
  Work w(skip);
  substitute_in_all_lets(e).accept(&w);
  return w.count;
}

} // namespace

double inlined_copies(const std::vector<Expr> &exprs, const Function &producer, int calls) {
  if (calls <= 1)
    return calls;
  // What inlining adds to the stage once its shared subexpressions are computed once, against
  // what the calls cost one by one (each at its own arguments: a constant channel is free).
  double added = 0, alone = 0;
  int sites = 0;
  for (const Expr &e : exprs) {
    Inline in(producer);
    added += work(in.mutate(e), "") - work(e, producer.name());
    for (size_t i = 0; i < in.copies.size(); ++i)
      alone += work(in.copies[i], "") - work(in.calls[i], producer.name());
    sites += static_cast<int>(in.copies.size());
  }
  if (sites == 0 || !(alone > 0))
    return calls;
  return std::clamp(added / (alone / sites), 1.0, static_cast<double>(calls));
}

} // namespace hkfac::sched
