// Compiling Halide bound expressions into postfix programs (see bound_expr.h).
#include "bound_expr.h"

#include <algorithm>
#include <cmath>

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

namespace {

double floor_div(double a, double b) {
  if (b == 0)
    return 0; // Halide defines x / 0 = 0
  return std::floor(a / b);
}

double floor_mod(double a, double b) {
  if (b == 0)
    return 0;
  const double r = a - b * std::floor(a / b);
  return r;
}

} // namespace

BoundExpr::BoundExpr(const Expr &e, const std::vector<std::string> &symbols) {
  valid_ = e.defined() && compile(e, symbols) && max_depth() <= kMaxDepth;
  if (!valid_)
    program_.clear();
}

bool BoundExpr::compile(const Expr &e, const std::vector<std::string> &symbols) {
  auto binary = [&](const Expr &a, const Expr &b, Op op) {
    if (!compile(a, symbols) || !compile(b, symbols))
      return false;
    program_.push_back({op});
    return true;
  };
  if (const IntImm *op = e.as<IntImm>()) {
    program_.push_back({Op::Const, 0, static_cast<double>(op->value)});
    return true;
  }
  if (const UIntImm *op = e.as<UIntImm>()) {
    program_.push_back({Op::Const, 0, static_cast<double>(op->value)});
    return true;
  }
  if (const FloatImm *op = e.as<FloatImm>()) {
    program_.push_back({Op::Const, 0, op->value});
    return true;
  }
  if (const Variable *op = e.as<Variable>()) {
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (symbols[i] == op->name) {
        program_.push_back({Op::Sym, static_cast<int>(i)});
        return true;
      }
    }
    return false;
  }
  if (const Cast *op = e.as<Cast>()) {
    if (!compile(op->value, symbols))
      return false;
    if (op->type.is_int_or_uint() && op->value.type().is_float())
      program_.push_back({Op::Trunc});
    return true;
  }
  if (const Add *op = e.as<Add>())
    return binary(op->a, op->b, Op::Add);
  if (const Sub *op = e.as<Sub>())
    return binary(op->a, op->b, Op::Sub);
  if (const Mul *op = e.as<Mul>())
    return binary(op->a, op->b, Op::Mul);
  if (const Div *op = e.as<Div>())
    return binary(op->a, op->b, op->type.is_float() ? Op::Div : Op::IntDiv);
  if (const Mod *op = e.as<Mod>())
    return binary(op->a, op->b, Op::Mod);
  if (const Min *op = e.as<Min>())
    return binary(op->a, op->b, Op::Min);
  if (const Max *op = e.as<Max>())
    return binary(op->a, op->b, Op::Max);
  if (const LT *op = e.as<LT>())
    return binary(op->a, op->b, Op::LT);
  if (const LE *op = e.as<LE>())
    return binary(op->a, op->b, Op::LE);
  if (const GT *op = e.as<GT>())
    return binary(op->b, op->a, Op::LT);
  if (const GE *op = e.as<GE>())
    return binary(op->b, op->a, Op::LE);
  if (const EQ *op = e.as<EQ>())
    return binary(op->a, op->b, Op::EQ);
  if (const NE *op = e.as<NE>())
    return binary(op->a, op->b, Op::NE);
  if (const And *op = e.as<And>())
    return binary(op->a, op->b, Op::And);
  if (const Or *op = e.as<Or>())
    return binary(op->a, op->b, Op::Or);
  if (const Not *op = e.as<Not>()) {
    if (!compile(op->a, symbols))
      return false;
    program_.push_back({Op::Not});
    return true;
  }
  if (const Select *op = e.as<Select>()) {
    if (!compile(op->condition, symbols) || !compile(op->true_value, symbols) ||
        !compile(op->false_value, symbols))
      return false;
    program_.push_back({Op::Select});
    return true;
  }
  if (const Let *op = e.as<Let>())
    return compile(substitute(op->name, op->value, op->body), symbols);
  if (const Call *op = e.as<Call>()) {
    if (op->args.size() != 1)
      return false;
    Op unary;
    const std::string &n = op->name;
    if (op->is_intrinsic(Call::abs))
      unary = Op::Abs;
    else if (n.rfind("floor_f", 0) == 0)
      unary = Op::Floor;
    else if (n.rfind("ceil_f", 0) == 0)
      unary = Op::Ceil;
    else if (n.rfind("round_f", 0) == 0)
      unary = Op::Round;
    else if (n.rfind("trunc_f", 0) == 0)
      unary = Op::Trunc;
    else
      return false;
    if (!compile(op->args[0], symbols))
      return false;
    program_.push_back({unary});
    return true;
  }
  return false;
}

int BoundExpr::max_depth() const {
  int depth = 0, deepest = 0;
  for (const Instr &in : program_) {
    if (in.op == Op::Const || in.op == Op::Sym)
      ++depth;
    else if (in.op == Op::Select)
      depth -= 2;
    else if (in.op != Op::Not && in.op != Op::Floor && in.op != Op::Ceil && in.op != Op::Round &&
             in.op != Op::Trunc && in.op != Op::Abs)
      --depth;
    deepest = std::max(deepest, depth);
  }
  return deepest;
}

double BoundExpr::eval(const double *values) const {
  double stack[kMaxDepth];
  int top = 0;
  for (const Instr &in : program_) {
    switch (in.op) {
    case Op::Const:
      stack[top++] = in.value;
      continue;
    case Op::Sym:
      stack[top++] = values[in.index];
      continue;
    case Op::Not:
      stack[top - 1] = stack[top - 1] == 0 ? 1 : 0;
      continue;
    case Op::Floor:
      stack[top - 1] = std::floor(stack[top - 1]);
      continue;
    case Op::Ceil:
      stack[top - 1] = std::ceil(stack[top - 1]);
      continue;
    case Op::Round:
      stack[top - 1] = std::nearbyint(stack[top - 1]);
      continue;
    case Op::Trunc:
      stack[top - 1] = std::trunc(stack[top - 1]);
      continue;
    case Op::Abs:
      stack[top - 1] = std::fabs(stack[top - 1]);
      continue;
    case Op::Select: {
      const double f = stack[--top], t = stack[--top], c = stack[--top];
      stack[top++] = c != 0 ? t : f;
      continue;
    }
    default:
      break;
    }
    const double b = stack[--top], a = stack[--top];
    double r = 0;
    switch (in.op) {
    case Op::Add: r = a + b; break;
    case Op::Sub: r = a - b; break;
    case Op::Mul: r = a * b; break;
    case Op::Div: r = b == 0 ? 0 : a / b; break;
    case Op::IntDiv: r = floor_div(a, b); break;
    case Op::Mod: r = floor_mod(a, b); break;
    case Op::Min: r = std::min(a, b); break;
    case Op::Max: r = std::max(a, b); break;
    case Op::LT: r = a < b; break;
    case Op::LE: r = a <= b; break;
    case Op::EQ: r = a == b; break;
    case Op::NE: r = a != b; break;
    case Op::And: r = (a != 0) && (b != 0); break;
    case Op::Or: r = (a != 0) || (b != 0); break;
    default: break;
    }
    stack[top++] = r;
  }
  return stack[0];
}

} // namespace hkfac::sched
