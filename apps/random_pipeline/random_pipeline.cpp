// Halide generator of random unscheduled pipelines (seed, stages): scheduler tests, training data.
#include "Halide.h"
#include "rng.h"
#include "value_range.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace Halide;
using Halide::Internal::is_const_zero;
using Halide::Internal::make_const;
using Halide::Internal::make_zero;
using hkfac::Rng;
using namespace hkfac::random_pipeline;

// One point of a stage: an Expr together with the range of its values.
struct Val {
  Expr e;
  ValueRange r;
  Type type() const { return e.type(); }
};

// One Func of the growing pipeline. Every Func is 3-D over (x, y, c) and defined everywhere
// (inputs are wrapped in boundary conditions), so any stage may read any other at any offset.
// `scale` is log2 of its resolution relative to the inputs; whole-image reductions use it to size
// their RDoms, and binary ops use it to line operands up. `uses` finds the sinks at the end.
struct Node {
  Func f;
  ValueRange r;
  int scale = 0;
  int uses = 0;
  Type type() const { return f.output_types()[0]; }
};

Expr constant(Type t, double v) {
  return t.is_float() ? make_const(t, v) : make_const(t, static_cast<int64_t>(v));
}

// Converts v to t without undefined behaviour: out-of-range values are clamped first, unless t
// wraps, the source is an integer, and `wrap` asks for C-cast semantics.
Val convert(const Val &v, Type t, bool wrap = false) {
  const Type from = v.type();
  if (from == t) {
    return v;
  }
  if (t.is_float()) {
    return {cast(t, v.e), v.r};
  }
  // Float to int truncates towards zero, so the integer hull of the range is still an upper bound.
  const ValueRange whole = {std::floor(v.r.lo), std::ceil(v.r.hi)};
  if (fits(whole, t)) {
    return {cast(t, v.e), whole};
  }
  if (wrap && !from.is_float()) {
    return {cast(t, v.e), full_range(t)};
  }
  if (whole.lo > type_max(t) || whole.hi < type_min(t)) {
    // Saturating a range that lies wholly outside t would give a constant, and every stage before
    // it would be dead code (one pipeline compiled to a constant output). Shift the range to
    // start at zero first, as a hand-written pipeline rescales before narrowing.
    return convert({v.e - constant(from, whole.lo), {0, whole.hi - whole.lo}}, t, wrap);
  }
  double lo = std::max(type_min(t), whole.lo);
  double hi = std::min(type_max(t), whole.hi);
  if (from.is_float()) {
    // A float bound near 2^31 rounds up past the int range; +-2^30 is exact and safe.
    lo = std::max(lo, -std::ldexp(1.0, 30));
    hi = std::min(hi, std::ldexp(1.0, 30));
  }
  hi = std::max(hi, lo);
  return {cast(t, clamp(v.e, constant(from, lo), constant(from, hi))), {lo, hi}};
}

// Smallest of our integer types of at least t's width that holds r, or Int(32) if none does.
Type widened(ValueRange r, Type t) {
  const std::vector<Type> order = r.lo >= 0 ? std::vector<Type>{UInt(8), UInt(16), UInt(32)}
                                            : std::vector<Type>{Int(8), Int(16), Int(32)};
  for (const Type &c : order) {
    if (c.bits() >= t.bits() && fits(r, c)) {
      return c;
    }
  }
  return Int(32);
}

// Keeps float magnitudes below 1e4 by a power-of-two scale (exact), so chains of products never
// reach infinity or NaN. The multiply is strict_float: otherwise Halide 14's vectoriser rewrites
// float32(u8 · u8) · 2^-k into an integer widening multiply by a float16 constant (2^-k is exact
// in float16) and LLVM code generation fails under every autoscheduler (seed 5001 in the sweep;
// the all-root build compiles). A factor that is not a float16 value avoids that too, but it is
// not exact, and the seed-8 agreement test then saw float-to-int results differ by one between
// schedules.
Val renormalized(const Val &v) {
  if (!v.type().is_float() || max_abs(v.r) <= 1e4) {
    return v;
  }
  const int k = static_cast<int>(std::ceil(std::log2(max_abs(v.r) / 64.0)));
  const double s = std::ldexp(1.0, -k);
  return {strict_float(v.e * constant(v.type(), s)), scaled(v.r, s)};
}

enum class BinOp { Add, Sub, Mul, Min, Max, Absd };

ValueRange op_range(BinOp op, ValueRange a, ValueRange b) {
  switch (op) {
  case BinOp::Add:
    return plus(a, b);
  case BinOp::Sub:
    return minus(a, b);
  case BinOp::Mul:
    return times(a, b);
  case BinOp::Min:
    return {std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
  case BinOp::Max:
    return {std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
  case BinOp::Absd:
    return {0.0, std::max(std::abs(a.hi - b.lo), std::abs(b.hi - a.lo))};
  }
  return a;
}

Expr op_expr(BinOp op, const Expr &a, const Expr &b) {
  switch (op) {
  case BinOp::Add:
    return a + b;
  case BinOp::Sub:
    return a - b;
  case BinOp::Mul:
    return a * b;
  case BinOp::Min:
    return min(a, b);
  case BinOp::Max:
    return max(a, b);
  case BinOp::Absd:
    return absd(a, b);
  }
  return a;
}

// a op b for operands of one type. Wrapping types may wrap; signed 32-bit operands are shifted
// right until the result provably fits; floats are renormalised.
Val arith(BinOp op, Val a, Val b) {
  const Type t = a.type();
  ValueRange r = op_range(op, a.r, b.r);
  if (t.is_float()) {
    return renormalized({op_expr(op, a.e, b.e), r});
  }
  if (!fits(r, t)) {
    if (wraps(t)) {
      r = op == BinOp::Absd ? ValueRange{0, type_max(t.with_code(Type::UInt))} : full_range(t);
    } else {
      int k = 0;
      while (!fits(op_range(op, shifted_right(a.r, k), shifted_right(b.r, k)), t)) {
        ++k;
      }
      a = {a.e >> k, shifted_right(a.r, k)};
      b = {b.e >> k, shifted_right(b.r, k)};
      r = op_range(op, a.r, b.r);
    }
  }
  return {op_expr(op, a.e, b.e), r};
}

// Sum of weight * value in type t (weights are small integers, exact in every type).
//
// Where the sum could overflow a type that must not wrap, every operand is shifted right once, by
// the least k that makes all partial sums fit. Left to arith(), each addition would shift the
// running sum again: a 7 x 7 tent on uint32 values became 49 nested shifts, and Halide's lowering
// of that ran for over ten minutes under every schedule (docs/data.md).
Val weighted_sum(const std::vector<Val> &vals, const std::vector<int> &weights, Type t) {
  std::vector<Val> in_t; // the operands with a nonzero weight, in t
  std::vector<int> w;
  for (size_t i = 0; i < vals.size(); ++i) {
    if (weights[i] != 0) {
      in_t.push_back(convert(vals[i], t));
      w.push_back(weights[i]);
    }
  }
  int k = 0;
  if (!t.is_float() && !wraps(t)) {
    auto partial_sums = [&](int shift) {
      ValueRange total = {0, 0};
      for (size_t i = 0; i < in_t.size(); ++i) {
        total = plus(total, hull(scaled(shifted_right(in_t[i].r, shift), w[i]), {0, 0}));
      }
      return total;
    };
    while (!fits(partial_sums(k), t)) {
      ++k;
    }
  }
  Val acc = {make_zero(t), {0, 0}};
  for (size_t i = 0; i < in_t.size(); ++i) {
    const Val v = k > 0 ? Val{in_t[i].e >> k, shifted_right(in_t[i].r, k)} : in_t[i];
    const Val term =
        w[i] == 1 ? v : arith(BinOp::Mul, v, {constant(t, w[i]), {1.0 * w[i], 1.0 * w[i]}});
    acc = is_const_zero(acc.e) ? term : arith(BinOp::Add, acc, term);
  }
  return acc;
}

// The type to accumulate a weighted sum of values of type t and range r in: floats stay, integers
// widen to fit, and 32-bit integers are narrowed first (by the caller's shift) when nothing fits.
Type accumulator(Type t, ValueRange r, const std::vector<int> &weights) {
  if (t.is_float()) {
    return t;
  }
  // Negative weights need a signed accumulator even when the values happen to be all zero.
  ValueRange total = {
      std::min(*std::min_element(weights.begin(), weights.end()), 0) < 0 ? -1.0 : 0.0, 0};
  for (int w : weights) {
    total = plus(total, scaled(r, w));
  }
  return widened(hull(total, r), t);
}

class RandomPipeline : public Halide::Generator<RandomPipeline> {
public:
  GeneratorParam<int> seed{"seed", 0};
  GeneratorParam<int> stages{"stages", 8, 1, 256};
  // Estimates of the input images (every input is width x height [x 3]); outputs match.
  GeneratorParam<int> width{"width", 1024, 16, 1 << 14};
  GeneratorParam<int> height{"height", 1024, 16, 1 << 14};
  // The reference build of the scheduler agreement tests: every Func at root. Left unscheduled,
  // Halide would inline all pure stages (exponential in stencil depth) and recompute each
  // reduction per consumer point, which neither compiles nor runs in reasonable time.
  GeneratorParam<bool> root_schedule{"root_schedule", false};
  // Generation 3 adds reductions whose RVar is not the vector loop's axis: a product of image
  // blocks (a matrix product, like cuda_mat_mul and conv_layer) and a vertical RDom filter.
  // Generation 2 (the default) builds exactly what every archived g2 seed built.
  GeneratorParam<int> generation{"generation", 2, 2, 3};

  // Inputs and outputs depend on the seed, so they are declared here rather than as members.
  void configure() {
    rng_ = Rng(static_cast<uint64_t>(static_cast<int>(seed)));
    const std::vector<Type> input_types = {UInt(8), UInt(8), UInt(16), Int(16), Float(32)};
    const int num_inputs = 1 + rng_.weighted({45, 40, 15});
    for (int i = 0; i < num_inputs; ++i) {
      const Type t = rng_.pick(input_types);
      const int dims = rng_.chance(20) ? 2 : 3;
      inputs_.push_back(add_input<Buffer<>>("input_" + std::to_string(i), t, dims));
    }
    const std::vector<Type> output_types = {UInt(8), UInt(16), Int(16), Int(32), Float(32)};
    const int num_outputs = rng_.chance(25) ? 2 : 1;
    for (int i = 0; i < num_outputs; ++i) {
      outputs_.push_back(
          add_output<Buffer<>>("output_" + std::to_string(i), rng_.pick(output_types), 3));
    }
  }

  void generate() {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      pool_.push_back(wrap_input(static_cast<int>(i)));
    }
    for (stage_ = 0; stage_ < stages; ++stage_) {
      add_stage();
    }
    define_outputs();
    if (root_schedule) {
      for (Node &n : pool_) {
        n.f.compute_root();
      }
      for (Func &f : helpers_) {
        f.compute_root();
      }
    }
    for (auto *in : inputs_) {
      Region est = {{0, static_cast<int>(width)}, {0, static_cast<int>(height)}, {0, 3}};
      est.resize(in->dimensions());
      in->set_estimates(est);
    }
    for (auto *out : outputs_) {
      out->set_estimates({{0, static_cast<int>(width)}, {0, static_cast<int>(height)}, {0, 3}});
      out->dim(2).set_bounds(0, 3);
    }
  }

private:
  Rng rng_;
  std::vector<GeneratorInput<Buffer<>> *> inputs_;
  std::vector<GeneratorOutput<Buffer<>> *> outputs_;
  std::vector<Node> pool_;
  std::vector<Func> helpers_; // Funcs outside the pool (histograms, tables, statistics)
  int stage_ = 0;
  Var x{"x"}, y{"y"}, c{"c"};

  std::string name(const std::string &what) const {
    return "s" + std::to_string(stage_) + "_" + what;
  }

  Node define(const std::string &what, const Val &v, int scale) {
    Func f(name(what));
    f(x, y, c) = v.e;
    return {f, v.r, scale, 0};
  }

  Val at(const Node &n, const Expr &xx, const Expr &yy, const Expr &cc) const {
    return {n.f(xx, yy, cc), n.r};
  }
  Val here(const Node &n) const { return at(n, x, y, c); }

  // Extent of the image at a scale, from the first input (all inputs share width and height).
  Expr extent(int dim, int scale) const { return max(inputs_[0]->dim(dim).extent() >> -scale, 1); }

  // Recent nodes are favoured so that pipelines grow deep as well as wide.
  Node &operand() {
    Node &n = rng_.chance(50) ? pool_.back() : pool_[rng_.below(static_cast<int>(pool_.size()))];
    ++n.uses;
    return n;
  }

  Node wrap_input(int i) {
    GeneratorInput<Buffer<>> &in = *inputs_[i];
    const Type t = in.type();
    Func bounded;
    switch (rng_.below(5)) {
    case 0:
      bounded = BoundaryConditions::repeat_edge(in);
      break;
    case 1:
      bounded = BoundaryConditions::constant_exterior(in, make_zero(t));
      break;
    case 2:
      bounded = BoundaryConditions::mirror_image(in);
      break;
    case 3:
      bounded = BoundaryConditions::mirror_interior(in);
      break;
    default:
      bounded = BoundaryConditions::repeat_image(in);
      break;
    }
    Val v = {in.dimensions() == 3 ? bounded(x, y, c) : bounded(x, y), full_range(t)};
    if (t.is_float()) {
      // Float inputs are arbitrary; clamping gives them a range (and realistic images are bounded).
      v = {clamp(v.e, -1.0f, 1.0f), {-1, 1}};
    }
    Func f("input_" + std::to_string(i) + "_bounded");
    f(x, y, c) = v.e;
    return {f, v.r, 0, 0};
  }

  // One random step. Weights favour the cheap pointwise and stencil steps that dominate real
  // pipelines; reductions and resampling are rarer but present in most pipelines of 8+ steps.
  // Changing the weights or the order of draws changes what every seed means.
  void add_stage() {
    const int kind = generation >= 3
                         ? rng_.weighted({14, 14, 8, 8, 6, 8, 6, 6, 3, 4, 4, 4, 5, 4, 3, 5, 4})
                         : rng_.weighted({14, 14, 8, 8, 6, 8, 6, 6, 3, 4, 4, 4, 5, 4, 3});
    switch (kind) {
    case 0:
      pool_.push_back(unary(operand()));
      break;
    case 1:
      binary();
      break;
    case 2:
      pool_.push_back(recast(operand()));
      break;
    case 3:
      pool_.push_back(stencil(operand()));
      break;
    case 4:
      window_reduction(operand());
      break;
    case 5:
      separable(operand());
      break;
    case 6:
      downsample(operand());
      break;
    case 7:
      upsample(operand());
      break;
    case 8:
      pool_.push_back(transpose(operand()));
      break;
    case 9:
      equalize(operand());
      break;
    case 10:
      normalize(operand());
      break;
    case 11:
      scan(operand());
      break;
    case 12:
      pool_.push_back(channel_mix(operand()));
      break;
    case 13:
      lookup_table(operand());
      break;
    case 15: {
      Node a = operand(); // two statements: argument order is unspecified
      matrix_product(a, operand());
      break;
    }
    case 16:
      column_filter(operand());
      break;
    default:
      pool_.push_back(rebound(operand()));
      break;
    }
  }

  Node unary(Node a) {
    const Type t = a.type();
    const Val v = here(a);
    if (t.is_float()) {
      switch (rng_.below(6)) {
      case 0: {
        const double k = rng_.pick(std::vector<double>{-2, -0.5, 0.25, 1.5, 2});
        const double b = rng_.pick(std::vector<double>{-1, 0, 0.5});
        const Val m = arith(BinOp::Mul, v, {constant(t, k), {k, k}});
        return define("affine", arith(BinOp::Add, m, {constant(t, b), {b, b}}), a.scale);
      }
      case 1:
        return define("sqrt", {sqrt(abs(v.e)), {0, std::sqrt(max_abs(v.r))}}, a.scale);
      case 2:
        return define("gauss", {exp(-(v.e * v.e)), {0, 1}}, a.scale);
      case 3:
        return define("log", {log(abs(v.e) + constant(t, 1)), {0, std::log1p(max_abs(v.r))}},
                      a.scale);
      case 4:
        return define("sin", {sin(v.e), {-1, 1}}, a.scale);
      default: {
        const double lo = v.r.lo + (v.r.hi - v.r.lo) / 4, hi = v.r.hi - (v.r.hi - v.r.lo) / 4;
        return define("clamp", {clamp(v.e, constant(t, lo), constant(t, hi)), {lo, hi}}, a.scale);
      }
      }
    }
    const double mid = std::floor((v.r.lo + v.r.hi) / 2);
    const Val m = {constant(t, mid), {mid, mid}};
    switch (rng_.below(6)) {
    case 0: {
      const int k = t.is_int() ? rng_.pick(std::vector<int>{-1, 2, 3}) : rng_.between(2, 3);
      return define("scale", arith(BinOp::Mul, v, {constant(t, k), {1.0 * k, 1.0 * k}}), a.scale);
    }
    case 1: {
      const int k = rng_.between(1, 3);
      return define("shift", {v.e >> k, shifted_right(v.r, k)}, a.scale);
    }
    case 2: {
      const int k = rng_.pick(std::vector<int>{3, 5, 7});
      return define("div", {v.e / k, {std::floor(v.r.lo / k), std::floor(v.r.hi / k)}}, a.scale);
    }
    case 3:
      return define("absd", arith(BinOp::Absd, v, m), a.scale);
    case 4: {
      // Over a range of width one (a float in [0, 1] cast to an integer) the midpoint is the
      // bottom, and select(v > lo, lo, v) is the constant lo: the stages before it would be dead
      // (Mullapudi2016 fails an internal lookup on such pipelines). Cut at the top instead.
      const Val cut = mid > v.r.lo ? m : Val{constant(t, v.r.hi), {v.r.hi, v.r.hi}};
      return define("threshold", {select(v.e > cut.e, cut.e, v.e), v.r}, a.scale);
    }
    default:
      if (t.is_uint()) {
        return define("gray", {v.e ^ (v.e >> 1), full_range(t)}, a.scale);
      }
      return define("max", arith(BinOp::Max, v, m), a.scale);
    }
  }

  // Brings a node to another resolution (nearest-neighbour up, decimation down).
  Node &at_scale(Node &n, int scale) {
    Node *cur = &n;
    while (cur->scale != scale) {
      const bool up = cur->scale < scale;
      Val v = up ? at(*cur, x / 2, y / 2, c) : at(*cur, x * 2, y * 2, c);
      ++cur->uses;
      pool_.push_back(define(up ? "match_up" : "match_down", v, cur->scale + (up ? 1 : -1)));
      cur = &pool_.back();
    }
    return *cur;
  }

  static Type common_type(Type a, Type b) {
    if (a.is_float() || b.is_float()) {
      const int bits = std::max(a.is_float() ? a.bits() : 0, b.is_float() ? b.bits() : 0);
      return Float(bits);
    }
    if (a == b) {
      return a;
    }
    const bool is_signed = a.is_int() || b.is_int();
    int bits = std::max(a.bits(), b.bits());
    if (is_signed && ((a.is_uint() && a.bits() >= bits) || (b.is_uint() && b.bits() >= bits))) {
      bits = std::min(32, bits * 2);
    }
    return is_signed ? Int(bits) : UInt(bits);
  }

  void binary() {
    // Copy: pool_ grows below, which would invalidate references.
    const Node a = operand();
    const size_t b_index = pool_.size() > 1 && rng_.chance(70)
                               ? static_cast<size_t>(rng_.below(static_cast<int>(pool_.size())))
                               : pool_.size() - 1;
    ++pool_[b_index].uses;
    const Node b = at_scale(pool_[b_index], a.scale);
    Type t = common_type(a.type(), b.type());
    BinOp op = static_cast<BinOp>(rng_.below(6));
    if ((op == BinOp::Sub || op == BinOp::Absd) && a.f.name() == b.f.name()) {
      // a - a is zero: the simplifier would leave a stage nobody reads, which no hand-written
      // pipeline has and which makes Mullapudi2016 fail an internal map lookup. Changing the op
      // without a new draw keeps every other seed's pipeline as it was.
      op = BinOp::Add;
    }
    Val va = convert(here(a), t), vb = convert(here(b), t);
    if (!t.is_float() && !fits(op_range(op, va.r, vb.r), t) && rng_.chance(60)) {
      // Widen as a hand-written pipeline would (u8 + u8 in u16), instead of letting it wrap.
      t = widened(op_range(op, va.r, vb.r), t);
      va = convert(va, t);
      vb = convert(vb, t);
    }
    static const char *const names[] = {"add", "sub", "mul", "min", "max", "absd"};
    Val v = arith(op, va, vb);
    if (rng_.chance(20)) {
      v = {select(va.e > vb.e, v.e, cast(v.type(), va.e)), hull(v.r, va.r)};
      if (!fits(v.r, v.type())) {
        v.r = full_range(v.type());
      }
    }
    pool_.push_back(define(names[static_cast<int>(op)], v, a.scale));
  }

  Node recast(Node a) {
    Type t = rng_.chance(6) ? Float(64)
                            : rng_.pick(std::vector<Type>{UInt(8), UInt(16), Int(16), Int(32),
                                                          UInt(32), Int(8), Float(32)});
    if (t == a.type()) {
      // A cast to its own type is a copy, and a later a - copy(a) is zero with its producers dead
      // (Mullapudi2016 failed on such a pipeline). Cast to another type, without a new draw.
      t = t.is_float() ? Int(32) : Float(32);
    }
    return define("cast", convert(here(a), t, rng_.chance(30)), a.scale);
  }

  // Normalises a weighted sum back to the type and rough range of its source.
  Val normalized(const Val &sum, int total, Type t) {
    if (total <= 1) {
      return convert(sum, t);
    }
    if (sum.type().is_float()) {
      return convert({sum.e * constant(sum.type(), 1.0 / total), scaled(sum.r, 1.0 / total)}, t);
    }
    if (!fits({1.0 * total, 1.0 * total}, sum.type())) {
      return normalized(convert(sum, Int(32)), total, t);
    }
    return convert({sum.e / constant(sum.type(), total),
                    {std::floor(sum.r.lo / total), std::floor(sum.r.hi / total)}},
                   t);
  }

  // A 2-D convolution with inline taps: box, binomial, or signed (edge-like) weights, of any
  // footprint up to 7 x 7, sometimes dilated.
  Node stencil(Node a) {
    int rx = rng_.below(4), ry = rng_.below(4);
    if (rx == 0 && ry == 0) {
      rx = 1;
    }
    const int dilation = rng_.chance(15) ? 2 : 1;
    const int kind = rng_.below(3);
    std::vector<Val> taps;
    std::vector<int> weights;
    int total = 0;
    for (int j = -ry; j <= ry; ++j) {
      for (int i = -rx; i <= rx; ++i) {
        const int w = kind == 0   ? 1
                      : kind == 1 ? (rx + 1 - std::abs(i)) * (ry + 1 - std::abs(j))
                                  : rng_.between(-2, 3);
        taps.push_back(at(a, x + i * dilation, y + j * dilation, c));
        weights.push_back(w);
        total += w;
      }
    }
    const Type acc = accumulator(a.type(), a.r, weights);
    const Val sum = weighted_sum(taps, weights, acc);
    if (kind == 2) {
      return define("edge", sum, a.scale);
    }
    return define(kind == 0 ? "box" : "tent", normalized(sum, total, a.type()), a.scale);
  }

  // Windowed reduction with an RDom: a weighted sum (update stage) or a max / min filter.
  void window_reduction(Node a) {
    const int rx = rng_.between(0, 3), ry = rng_.between(rx == 0 ? 1 : 0, 3);
    RDom r(-rx, 2 * rx + 1, -ry, 2 * ry + 1, name("r"));
    if (rng_.chance(50)) {
      const bool is_max = rng_.chance(50);
      Expr v = a.f(x + r.x, y + r.y, c);
      pool_.push_back(
          define(is_max ? "dilate" : "erode", {is_max ? maximum(v) : minimum(v), a.r}, a.scale));
      return;
    }
    std::vector<int> weights;
    for (int j = -ry; j <= ry; ++j) {
      for (int i = -rx; i <= rx; ++i) {
        weights.push_back((rx + 1 - std::abs(i)) * (ry + 1 - std::abs(j)));
      }
    }
    weighted_mean(a, "window", weights, [&](Type acc) {
      return cast(acc, a.f(x + r.x, y + r.y, c)) *
             cast(acc, (rx + 1 - abs(r.x)) * (ry + 1 - abs(r.y)));
    });
  }

  // Pushes `<what>_sum`, an update over an RDom adding term(acc) (a value of `a` times its
  // integer weight, in the accumulator type those weights need), and `<what>_mean`, the sum
  // normalised back to a's type.
  void weighted_mean(const Node &a, const std::string &what, const std::vector<int> &weights,
                     const std::function<Expr(Type)> &term) {
    int total = 0;
    ValueRange range = {0, 0};
    for (int w : weights) {
      total += w;
      range = plus(range, scaled(a.r, w));
    }
    const Type acc = accumulator(a.type(), a.r, weights);
    Func sum(name(what + "_sum"));
    sum(x, y, c) = make_zero(acc);
    sum(x, y, c) += term(acc);
    Node s = {sum, range, a.scale, 1};
    pool_.push_back(s);
    pool_.push_back(define(what + "_mean", normalized(here(s), total, a.type()), a.scale));
  }

  // A product of image blocks, P(x, y) = sum over k < K of A(k, y) B(x, k) per channel: a
  // reduction whose operands are a broadcast (A) and a dense row (B) along the vectorized x, as
  // in a matrix product or a convolution over channels, not along its RVar.
  void matrix_product(Node a, Node b) {
    const int k = rng_.pick(std::vector<int>{16, 32, 64});
    RDom r(0, k, name("r_k"));
    Func p(name("matmul"));
    p(x, y, c) = 0.0f;
    p(x, y, c) += cast<float>(a.f(r, y, c)) * cast<float>(b.f(x, r, c));
    const ValueRange one = times(a.r, b.r);
    const ValueRange range = hull(scaled(one, k), {0, 0});
    Node n = {p, range, b.scale, 1};
    pool_.push_back(n);
    pool_.push_back(define("matmul_mean", renormalized(normalized(here(n), k, Float(32))),
                           b.scale));
  }

  // A vertical filter as a 1-D RDom over rows, F(x, y) = sum over r of w(r) A(x, y + r): its
  // loads are broadcasts along the RVar and dense along the vectorized x.
  void column_filter(Node a) {
    const int ry = rng_.between(2, 8);
    RDom r(-ry, 2 * ry + 1, name("r_col"));
    std::vector<int> weights;
    for (int j = -ry; j <= ry; ++j) {
      weights.push_back(ry + 1 - std::abs(j));
    }
    weighted_mean(a, "column", weights, [&](Type acc) {
      return cast(acc, a.f(x, y + r, c)) * cast(acc, ry + 1 - abs(r));
    });
  }

  static std::vector<int> binomial(int radius) {
    std::vector<int> w = {1};
    for (int k = 0; k < 2 * radius; ++k) {
      std::vector<int> next(w.size() + 1, 0);
      for (size_t i = 0; i < w.size(); ++i) {
        next[i] += w[i];
        next[i + 1] += w[i];
      }
      w = next;
    }
    return w;
  }

  // Separable convolution: a horizontal pass then a vertical one, normalised at the end.
  void separable(Node a) {
    const int radius = rng_.between(1, 3);
    const std::vector<int> w =
        rng_.chance(50) ? binomial(radius) : std::vector<int>(2 * radius + 1, 1);
    int total = 0;
    for (int v : w) {
      total += v;
    }
    std::vector<int> outer;
    for (int u : w) {
      for (int v : w) {
        outer.push_back(u * v);
      }
    }
    const Type acc = accumulator(a.type(), a.r, outer);
    std::vector<Val> row;
    for (int i = -radius; i <= radius; ++i) {
      row.push_back(at(a, x + i, y, c));
    }
    Node bx = define("blur_x", weighted_sum(row, w, acc), a.scale);
    bx.uses = 1;
    std::vector<Val> col;
    for (int j = -radius; j <= radius; ++j) {
      col.push_back(at(bx, x, y + j, c));
    }
    pool_.push_back(bx);
    pool_.push_back(
        define("blur_y", normalized(weighted_sum(col, w, acc), total * total, a.type()), a.scale));
  }

  void downsample(Node a) {
    if (a.scale <= -2) {
      pool_.push_back(unary(a));
      return;
    }
    const Type acc = accumulator(a.type(), a.r, {1, 3, 3, 1, 1, 3, 3, 1});
    switch (rng_.below(3)) {
    case 0:
      pool_.push_back(define("decimate", at(a, 2 * x, 2 * y, c), a.scale - 1));
      break;
    case 1: {
      const std::vector<Val> q = {at(a, 2 * x, 2 * y, c), at(a, 2 * x + 1, 2 * y, c),
                                  at(a, 2 * x, 2 * y + 1, c), at(a, 2 * x + 1, 2 * y + 1, c)};
      pool_.push_back(define(
          "down_box", normalized(weighted_sum(q, {1, 1, 1, 1}, acc), 4, a.type()), a.scale - 1));
      break;
    }
    default: {
      const std::vector<int> w = {1, 3, 3, 1};
      std::vector<Val> row, col;
      for (int i = 0; i < 4; ++i) {
        row.push_back(at(a, 2 * x + i - 1, y, c));
      }
      const Type acc2 =
          accumulator(a.type(), a.r, {1, 3, 3, 1, 3, 9, 9, 3, 3, 9, 9, 3, 1, 3, 3, 1});
      Node dx = define("down_x", weighted_sum(row, w, acc2), a.scale);
      dx.uses = 1;
      for (int j = 0; j < 4; ++j) {
        col.push_back(at(dx, x, 2 * y + j - 1, c));
      }
      pool_.push_back(dx);
      pool_.push_back(
          define("down_y", normalized(weighted_sum(col, w, acc2), 64, a.type()), a.scale - 1));
      break;
    }
    }
  }

  void upsample(Node a) {
    if (a.scale >= 0) {
      downsample(a);
      return;
    }
    if (rng_.chance(40)) {
      pool_.push_back(define("up_nearest", at(a, x / 2, y / 2, c), a.scale + 1));
      return;
    }
    // Linear interpolation, separable: even outputs copy, odd ones average two neighbours.
    const Type acc = accumulator(a.type(), a.r, {1, 1, 1, 1});
    Node ux = define(
        "up_x", weighted_sum({at(a, x / 2, y, c), at(a, (x + 1) / 2, y, c)}, {1, 1}, acc), a.scale);
    ux.uses = 1;
    const Val sum = weighted_sum({at(ux, x, y / 2, c), at(ux, x, (y + 1) / 2, c)}, {1, 1}, acc);
    pool_.push_back(ux);
    pool_.push_back(define("up_y", normalized(sum, 4, a.type()), a.scale + 1));
  }

  Node transpose(Node a) { return define("transpose", at(a, y, x, c), a.scale); }

  // An integer index in [0, n) from a value, by its known range (for histograms and LUTs).
  Expr quantized(const Val &v, int n) const {
    const double span = std::max(v.r.hi - v.r.lo, 1.0);
    Expr q;
    if (!v.type().is_float() && span * n < std::ldexp(1.0, 30) &&
        max_abs(v.r) < std::ldexp(1.0, 30)) {
      q = ((cast<int>(v.e) - static_cast<int>(v.r.lo)) * n) / static_cast<int>(span + 1);
    } else {
      const Expr f = cast<float>(v.e);
      q = cast<int>(clamp((f - static_cast<float>(v.r.lo)) * static_cast<float>(n / span), 0.0f,
                          static_cast<float>(n - 1)));
    }
    return clamp(q, 0, n - 1);
  }

  // Histogram equalisation: a data-dependent scatter (histogram), a scan (CDF) and a gather.
  void equalize(Node a) {
    const int bins = rng_.pick(std::vector<int>{16, 32, 64, 256});
    Func bin(name("bin")), hist(name("hist")), cdf(name("cdf"));
    Var b("b");
    bin(x, y, c) = quantized(here(a), bins);
    RDom r(0, extent(0, a.scale), 0, extent(1, a.scale), name("r_image"));
    hist(b, c) = 0;
    hist(bin(r.x, r.y, c), c) += 1;
    RDom rb(1, bins - 1, name("r_bins"));
    cdf(b, c) = hist(b, c);
    cdf(rb, c) += cdf(rb - 1, c);
    helpers_.insert(helpers_.end(), {bin, hist, cdf});
    const Expr pixels = cast<float>(extent(0, a.scale) * extent(1, a.scale));
    pool_.push_back(
        define("equalized", {cast<float>(cdf(bin(x, y, c), c)) / pixels, {0, 1}}, a.scale));
  }

  // Whole-image statistics per channel (mean or max), then a pointwise normalisation by them.
  void normalize(Node a) {
    const Type t = rng_.chance(25) ? Float(64) : Float(32);
    RDom r(0, extent(0, a.scale), 0, extent(1, a.scale), name("r_image"));
    Func stat(name("stat"));
    helpers_.push_back(stat);
    const Val v = convert(here(a), t);
    if (rng_.chance(50)) {
      stat(c) = make_zero(t);
      stat(c) += cast(t, a.f(r.x, r.y, c));
      const Expr count = cast(t, extent(0, a.scale) * extent(1, a.scale));
      pool_.push_back(define("centered", {v.e - stat(c) / count, minus(v.r, v.r)}, a.scale));
    } else {
      stat(c) = constant(t, a.r.lo);
      stat(c) = max(stat(c), cast(t, a.f(r.x, r.y, c)));
      const Expr lo = constant(t, a.r.lo);
      // Points outside the reduced image may exceed its maximum, hence the loose range.
      const Val unit = {(v.e - lo) / (stat(c) - lo + constant(t, 1)), {0, a.r.hi - a.r.lo}};
      pool_.push_back(define("unit", renormalized(unit), a.scale));
    }
  }

  // A first-order recursive filter along x or y (an IIR scan: an update over an RDom).
  void scan(Node a) {
    const bool along_x = rng_.chance(50);
    RDom r(1, extent(along_x ? 0 : 1, a.scale) - 1, name("r_scan"));
    Func f(name(along_x ? "scan_x" : "scan_y"));
    Type t = a.type();
    if (!t.is_float()) {
      t = widened(scaled(a.r, 4), t);
    }
    const Val v = convert(here(a), t);
    ValueRange range = v.r;
    f(x, y, c) = v.e;
    Expr prev = along_x ? f(r - 1, y, c) : f(x, r - 1, c);
    Expr cur = along_x ? f(r, y, c) : f(x, r, c);
    Expr next;
    if (t.is_float()) {
      const double k = rng_.between(1, 7) / 8.0;
      next = prev * constant(t, k) + cur * constant(t, 1 - k);
    } else if (fits(scaled(a.r, 4), t)) {
      next = (prev * 3 + cur) >> 2;
    } else {
      next = (prev >> 1) + (cur >> 1);
      range.lo -= 1; // floor rounding of two odd negatives
    }
    if (along_x) {
      f(r, y, c) = next;
    } else {
      f(x, r, c) = next;
    }
    pool_.push_back({f, range, a.scale, 0});
  }

  // A 3 x 3 colour matrix: each output channel mixes the three input channels.
  Node channel_mix(Node a) {
    std::vector<std::vector<int>> w(3, std::vector<int>(3));
    std::vector<int> all;
    for (auto &row : w) {
      for (int &v : row) {
        v = rng_.between(-2, 4);
        all.push_back(std::abs(v));
      }
    }
    const Type acc = accumulator(a.type(), hull(a.r, scaled(a.r, -1)), all);
    std::vector<Val> chans = {at(a, x, y, 0), at(a, x, y, 1), at(a, x, y, 2)};
    Val rows[3];
    for (int i = 0; i < 3; ++i) {
      rows[i] = weighted_sum(chans, w[i], acc);
      if (is_const_zero(rows[i].e)) {
        rows[i] = convert(chans[i], acc);
      }
    }
    const ValueRange r = hull(rows[0].r, hull(rows[1].r, rows[2].r));
    return define("mix", renormalized({select(c == 0, rows[0].e, c == 1, rows[1].e, rows[2].e), r}),
                  a.scale);
  }

  // A tone curve tabulated in a 1-D Func and applied by a gather, like camera_pipe's curve.
  void lookup_table(Node a) {
    const int n = rng_.pick(std::vector<int>{256, 1024});
    const Type t = rng_.pick(std::vector<Type>{UInt(8), UInt(16), Float(32)});
    const float gamma = rng_.pick(std::vector<float>{0.45f, 0.8f, 1.5f, 2.2f});
    Func lut(name("lut"));
    helpers_.push_back(lut);
    Var i("i");
    const Expr u = pow((cast<float>(i) + 0.5f) / n, gamma);
    const double top = t.is_float() ? 1.0 : type_max(t);
    lut(i) = t.is_float() ? u : cast(t, u * static_cast<float>(top));
    pool_.push_back(define("curve", {lut(quantized(here(a), n)), {0, top}}, a.scale));
  }

  // A boundary condition on an intermediate (as pipelines do before a resampling step).
  Node rebound(Node a) {
    const Region box = {{0, extent(0, a.scale)}, {0, extent(1, a.scale)}, {0, 3}};
    Func f;
    ValueRange r = a.r;
    switch (rng_.below(3)) {
    case 0:
      f = BoundaryConditions::repeat_edge(a.f, box);
      break;
    case 1:
      f = BoundaryConditions::mirror_interior(a.f, box);
      break;
    default:
      f = BoundaryConditions::constant_exterior(a.f, make_zero(a.type()), box);
      r = hull(r, {0, 0});
      break;
    }
    return define("rebound", {f(x, y, c), r}, a.scale);
  }

  // Every sink (a Func nobody reads) feeds some output, so no stage is dead code.
  void define_outputs() {
    std::vector<size_t> sinks;
    for (size_t i = 0; i < pool_.size(); ++i) {
      if (pool_[i].uses == 0) {
        sinks.push_back(i);
      }
    }
    for (size_t o = 0; o < outputs_.size(); ++o) {
      std::vector<size_t> mine;
      for (size_t k = o; k < sinks.size(); k += outputs_.size()) {
        mine.push_back(sinks[k]);
      }
      if (mine.empty()) {
        mine.push_back(pool_.size() - 1);
      }
      bool any_float = false;
      for (size_t i : mine) {
        any_float = any_float || pool_[i].type().is_float();
      }
      const Type acc = any_float ? Float(32) : Int(32);
      Val total = {make_zero(acc), {0, 0}};
      for (size_t i : mine) {
        ++pool_[i].uses;
        const Node up = at_scale(pool_[i], 0);
        total = arith(BinOp::Add, total, convert(here(up), acc));
      }
      GeneratorOutput<Buffer<>> &out = *outputs_[o];
      out(x, y, c) = convert(total, out.type(), rng_.chance(30)).e;
    }
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(RandomPipeline, random_pipeline)
