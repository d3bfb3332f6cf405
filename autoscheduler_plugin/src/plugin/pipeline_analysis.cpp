// Building the Func graph, its stages, loops and compiled footprints (see pipeline_analysis.h).
#include "pipeline_analysis.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "inline_sharing.h"

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

double box_points(const Box &b) {
  double p = 1;
  for (const Span &s : b)
    p *= std::max(s.extent(), 0.0);
  return p;
}

void box_union_into(Box &into, const Box &b) {
  if (into.empty()) {
    into = b;
    return;
  }
  for (size_t i = 0; i < into.size() && i < b.size(); ++i) {
    if (b[i].extent() <= 0)
      continue;
    if (into[i].extent() <= 0) {
      into[i] = b[i];
      continue;
    }
    into[i].min = std::min(into[i].min, b[i].min);
    into[i].max = std::max(into[i].max, b[i].max);
  }
}

double StageNode::calls_to(int producer) const {
  double c = 0;
  for (const Access &a : accesses)
    if (a.producer == producer)
      c += a.calls;
  return c;
}

double StageNode::copies_of(int producer) const {
  double c = 0;
  for (const Access &a : accesses)
    if (a.producer == producer)
      c += a.inline_copies;
  return c;
}

std::vector<double> StageNode::box_values(const Box &func_region) const {
  std::vector<double> v(loops.size() * 2);
  for (size_t i = 0; i < loops.size(); ++i) {
    const LoopDim &l = loops[i];
    if (l.is_rvar) {
      v[2 * i] = l.rmin;
      v[2 * i + 1] = l.rmin + l.rextent - 1;
    } else {
      v[2 * i] = func_region[l.pure_arg].min;
      v[2 * i + 1] = func_region[l.pure_arg].max;
    }
  }
  return v;
}

Box PipelineAnalysis::required(const Access &access, const std::vector<double> &box_values,
                               const Box &fallback) {
  if (!access.exact)
    return fallback;
  Box b(access.min.size());
  for (size_t d = 0; d < b.size(); ++d) {
    b[d].min = access.min[d].eval(box_values.data());
    b[d].max = access.max[d].eval(box_values.data());
  }
  return b;
}

namespace {

// Replaces parameters by their estimates, as the search sees the pipeline at its estimated size.
// A parameter with no estimate is the user's error, named with the parameter and dimension.
class ApplyEstimates : public IRMutator {
  using IRMutator::visit;
  Expr visit(const Variable *op) override {
    if (!op->param.defined())
      return op;
    if (!op->param.is_buffer()) {
      Expr e = op->param.estimate();
      input_check(e.defined()) << "Hkfac: the scalar parameter \"" << op->param.name()
                               << "\" needs an estimate (set_estimate) for autoscheduling\n";
      return cast(op->type, e);
    }
    for (int i = 0; i < op->param.dimensions(); ++i) {
      const std::string dim = std::to_string(i);
      if (op->name == op->param.name() + ".min." + dim) {
        Expr e = op->param.min_constraint_estimate(i);
        input_check(e.defined()) << "Hkfac: the input \"" << op->param.name()
                                 << "\" needs an estimate of the min of dimension " << i << "\n";
        return cast(op->type, e);
      }
      if (op->name == op->param.name() + ".extent." + dim) {
        Expr e = op->param.extent_constraint_estimate(i);
        input_check(e.defined()) << "Hkfac: the input \"" << op->param.name()
                                 << "\" needs an estimate of the extent of dimension " << i << "\n";
        return cast(op->type, e);
      }
    }
    return op;
  }
};

Expr with_estimates(const Expr &e) {
  ApplyEstimates m;
  return simplify(m.mutate(e));
}

double constant_of(const Expr &e, const std::string &what) {
  Expr s = simplify(e);
  if (const int64_t *i = as_const_int(s))
    return static_cast<double>(*i);
  if (const uint64_t *u = as_const_uint(s))
    return static_cast<double>(*u);
  if (const double *f = as_const_float(s))
    return *f;
  input_check(false) << "Hkfac: " << what
                     << " is not a constant after applying the estimates: " << s << "\n";
  return 0;
}

std::string expr_text(const Expr &e) {
  std::ostringstream out;
  out << e;
  const std::string t = out.str();
  return t.size() > 160 ? t.substr(0, 160) + "..." : t;
}

// A number where `e` simplifies to one.
bool constant_value(const Expr &e, double &out) {
  const Expr s = simplify(e);
  if (const int64_t *i = as_const_int(s))
    out = static_cast<double>(*i);
  else if (const uint64_t *u = as_const_uint(s))
    out = static_cast<double>(*u);
  else if (const double *f = as_const_float(s))
    out = *f;
  else
    return false;
  return true;
}

// Dimension d of the region `a` reads at the loop bounds `at`, as numbers. A region whose place
// depends on data or on values the estimates do not fix but whose size does not (a lookup at an
// index computed from the parameters reads one point, somewhere) is costed at its size; one
// whose size is not fixed either is the plugin's limit, not the user's error: it is costed as one
// point, and said in one line (Halide computes the real region when the pipeline runs).
Span constant_span(const Access &a, size_t d, const std::map<std::string, Expr> &at,
                   const std::string &what) {
  Span s;
  const Expr lo = a.raw_min[d].defined() ? substitute(at, a.raw_min[d]) : Expr();
  const Expr hi = a.raw_max[d].defined() ? substitute(at, a.raw_max[d]) : Expr();
  double extent = 0;
  if (lo.defined() && hi.defined() && constant_value(lo, s.min) && constant_value(hi, s.max))
    return s;
  if (lo.defined() && hi.defined() && constant_value(hi - lo, extent) && extent >= 0)
    return {0, extent};
  std::cerr << "Hkfac: " << what << " (dimension " << d << ") has no size under the estimates"
            << (hi.defined() && lo.defined() ? " (" + expr_text(simplify(hi - lo)) + ")" : "")
            << "; it is costed as one point and scheduled like the rest\n";
  return {0, 0};
}

// What a stage computes: its values, and an update's coordinates and predicate.
std::vector<Expr> stage_exprs(const Definition &def, bool update) {
  std::vector<Expr> exprs = def.values();
  if (update) {
    exprs.insert(exprs.end(), def.args().begin(), def.args().end());
    if (def.predicate().defined())
      exprs.push_back(def.predicate());
  }
  return exprs;
}

// Whether a required region is a single point whatever the loop bounds.
bool reads_one_point(const Halide::Internal::Box &b) {
  for (const Interval &iv : b.bounds) {
    if (!iv.is_bounded() || !is_const_zero(simplify(iv.max - iv.min)))
      return false;
  }
  return true;
}

// How each call in a stage moves along the innermost loop variable.
class CallClassifier : public IRGraphVisitor {
public:
  CallClassifier(std::string self, std::string inner)
      : self_(std::move(self)), inner_(std::move(inner)) {}
  struct Counts {
    int calls = 0, dense = 0, broadcast = 0, gather = 0, elem_bytes = 4;
    int strided = 0; // of the gathers: a constant stride of 2 to 4 in dimension 0 alone
  };
  std::map<std::string, Counts> counts;

private:
  using IRGraphVisitor::visit;
  void visit(const Call *op) override {
    IRGraphVisitor::visit(op);
    if ((op->call_type != Call::Halide && op->call_type != Call::Image) || op->name == self_)
      return;
    Counts &c = counts[op->name];
    c.calls++;
    c.elem_bytes = op->type.bytes();
    bool uses_inner = false;
    for (const Expr &a : op->args)
      uses_inner |= !inner_.empty() && expr_uses_var(a, inner_);
    if (!uses_inner) {
      c.broadcast++;
      return;
    }
    if (!op->args.empty()) {
      // Unit stride in dimension 0, and no other dimension moving with the innermost loop.
      Expr d = simplify(substitute(inner_, Variable::make(Int(32), inner_) + 1, op->args[0]) -
                        op->args[0]);
      bool others = false;
      for (size_t i = 1; i < op->args.size(); ++i)
        others |= expr_uses_var(op->args[i], inner_);
      if (is_const_one(d) && !others) {
        c.dense++;
        return;
      }
      const int64_t *stride = as_const_int(d);
      c.strided += stride && *stride >= 2 && *stride <= 4 && !others;
    }
    c.gather++;
  }
  std::string self_, inner_;
};

// Whether an expression calls a Func or reads a buffer.
class ReadsData : public IRGraphVisitor {
public:
  bool found = false;

private:
  using IRGraphVisitor::visit;
  void visit(const Call *op) override {
    found |= op->call_type == Call::Halide || op->call_type == Call::Image;
    IRGraphVisitor::visit(op);
  }
};

} // namespace

PipelineAnalysis::PipelineAnalysis(const std::vector<Function> &outputs, const Target &target)
    : gpu(target.has_gpu_feature()), target_(target) {
  std::map<std::string, Function> env = build_environment(outputs);
  std::vector<std::string> order = realization_order(outputs, env).first;
  FuncValueBounds value_bounds = compute_function_value_bounds(order, env);

  std::map<std::string, int> id_of;
  for (const std::string &name : order) {
    FuncNode n;
    n.func = env.at(name);
    n.name = name;
    n.id = static_cast<int>(funcs.size());
    n.dims = n.func.dimensions();
    n.is_extern = n.func.has_extern_definition();
    for (const Function &o : outputs)
      n.is_output |= o.same_as(n.func);
    n.bytes_per_point = 0;
    n.elem_bytes = 1;
    for (const Type &t : n.func.output_types()) {
      n.bytes_per_point += t.bytes();
      n.elem_bytes = std::max(n.elem_bytes, t.bytes());
    }
    n.vector_width = std::max(1, target.natural_vector_size(Int(n.elem_bytes * 8)));
    id_of[name] = n.id;
    funcs.push_back(std::move(n));
  }

  // Stages, their loops and their accesses.
  for (FuncNode &n : funcs) {
    if (n.is_extern) {
      n.must_be_root = true;
      for (const ExternFuncArgument &a : n.func.extern_arguments()) {
        if (a.is_func()) {
          auto it = id_of.find(Function(a.func).name());
          if (it != id_of.end())
            funcs[it->second].must_be_root = true;
        }
      }
      StageNode s;
      s.func = n.id;
      for (int d = 0; d < n.dims; ++d)
        s.loops.push_back({n.func.args()[d], false, d});
      s.pure_arg_is_loop.assign(n.dims, true);
      n.stages.push_back(std::move(s));
      continue;
    }
    const int num_defs = 1 + static_cast<int>(n.func.updates().size());
    for (int di = 0; di < num_defs; ++di) {
      const Definition &def = di == 0 ? n.func.definition() : n.func.update(di - 1);
      StageNode s;
      s.func = n.id;
      s.index = di;
      s.pure_arg_is_loop.assign(n.dims, false);
      // The default loop nest, innermost first: the RDom's variables, then the pure ones. (Not
      // the stage's current dims: a pipeline scheduled before may have split them.)
      for (const ReductionVariable &rv : def.schedule().rvars()) {
        LoopDim l;
        l.var = rv.var;
        l.is_rvar = true;
        l.rmin = constant_of(with_estimates(rv.min), "the min of " + rv.var + " in " + n.name);
        l.rextent =
            constant_of(with_estimates(rv.extent), "the extent of " + rv.var + " in " + n.name);
        l.constant_extent = is_const(rv.extent);
        s.loops.push_back(l);
      }
      // An update loops over a pure variable only where it writes its own coordinate there
      // (Halide's pure vars of an update); other coordinates come from the RDom.
      for (int a = 0; a < n.dims; ++a) {
        if (di > 0) {
          const Variable *v = def.args()[a].as<Variable>();
          if (!v || v->name != n.func.args()[a])
            continue;
        }
        LoopDim l;
        l.var = n.func.args()[a];
        l.pure_arg = a;
        s.pure_arg_is_loop[a] = true;
        s.loops.push_back(l);
      }

      const std::vector<Expr> exprs = stage_exprs(def, di > 0);
      if (di > 0) {
        ReadsData coordinates;
        for (const Expr &a : def.args())
          a.accept(&coordinates);
        s.scatters = coordinates.found;
      }
      Scope<Interval> scope;
      std::vector<std::string> symbols;
      for (const LoopDim &l : s.loops) {
        scope.push(l.var, Interval(Variable::make(Int(32), l.var + ".min"),
                                   Variable::make(Int(32), l.var + ".max")));
        symbols.push_back(l.var + ".min");
        symbols.push_back(l.var + ".max");
      }
      std::map<std::string, Halide::Internal::Box> boxes;
      for (const Expr &e : exprs) {
        for (auto &kv : boxes_required(with_estimates(e), scope, value_bounds)) {
          if (kv.first == n.name)
            continue;
          auto it = boxes.find(kv.first);
          if (it == boxes.end())
            boxes.emplace(kv.first, kv.second);
          else
            it->second = box_union(it->second, kv.second);
        }
      }
      const std::string inner = s.loops.empty() ? std::string() : s.loops[0].var;
      CallClassifier classifier(n.name, inner);
      for (const Expr &e : exprs)
        e.accept(&classifier);
      // An update whose RVars are inner classifies again against its vector lanes.
      const std::string lane = n.dims > 0 && s.pure_arg_is_loop[0] ? n.func.args()[0] : inner;
      CallClassifier lanes(n.name, lane);
      if (lane != inner)
        for (const Expr &e : exprs)
          e.accept(&lanes);
      const CallClassifier &by_lane = lane != inner ? lanes : classifier;
      // An update may vectorize a higher pure loop instead (FuncChoice::update_lanes).
      std::vector<CallClassifier> along;
      for (int d = 1; di > 0 && d < n.dims; ++d) {
        along.emplace_back(n.name, s.pure_arg_is_loop[d] ? n.func.args()[d] : "");
        if (s.pure_arg_is_loop[d])
          for (const Expr &e : exprs)
            e.accept(&along.back());
      }
      // Only an update with a pure row loop can be blocked by rows (update_nest.h).
      const bool row_loop = di > 0 && n.dims > 1 && s.pure_arg_is_loop[1];
      CallClassifier rows(n.name, row_loop ? n.func.args()[1] : "");
      if (row_loop)
        for (const Expr &e : exprs)
          e.accept(&rows);
      for (auto &kv : boxes) {
        Access a;
        a.name = kv.first;
        auto id = id_of.find(kv.first);
        a.producer = id == id_of.end() ? -1 : id->second;
        a.exact = true;
        for (const Interval &iv : kv.second.bounds) {
          // Bounds through a Func's value bounds (a lookup indexed by scalar Funcs of the
          // parameters) carry parameters the definition's estimates did not reach.
          const Expr lo = iv.has_lower_bound() ? with_estimates(iv.min) : Expr();
          const Expr hi = iv.has_upper_bound() ? with_estimates(iv.max) : Expr();
          a.raw_min.push_back(lo);
          a.raw_max.push_back(hi);
          a.min.emplace_back(lo, symbols);
          a.max.emplace_back(hi, symbols);
          a.exact &= a.min.back().valid() && a.max.back().valid();
        }
        auto c = classifier.counts.find(kv.first);
        if (c != classifier.counts.end()) {
          a.calls = c->second.calls;
          a.dense_calls = c->second.dense;
          a.broadcast_calls = c->second.broadcast;
          a.gather_calls = c->second.gather;
          a.elem_bytes = c->second.elem_bytes;
        }
        auto l = by_lane.counts.find(kv.first);
        if (l != by_lane.counts.end()) {
          a.lane_dense_calls = l->second.dense;
          a.lane_broadcast_calls = l->second.broadcast;
          a.lane_gather_calls = l->second.gather;
          a.lane_strided_calls = l->second.strided;
        }
        for (const CallClassifier &by_dim : along) {
          auto ac = by_dim.counts.find(kv.first);
          a.lanes_along.push_back(
              ac == by_dim.counts.end()
                  ? std::array<int, 3>{0, 0, 0}
                  : std::array<int, 3>{ac->second.dense, ac->second.broadcast, ac->second.gather});
        }
        auto rc = rows.counts.find(kv.first);
        if (rc != rows.counts.end())
          a.row_shared_calls = rc->second.broadcast;
        if (a.producer < 0)
          n.reads_input = true;
        if (a.gather_calls > 0 && reads_one_point(kv.second))
          n.gathers_one_point = true;
        s.accesses.push_back(std::move(a));
      }
      s.features = algorithm_features(n.func, def, n.name);
      n.stages.push_back(std::move(s));
    }
  }

  // Consumers, and who may be inlined.
  for (FuncNode &n : funcs) {
    for (const StageNode &s : n.stages) {
      for (const Access &a : s.accesses) {
        if (a.producer < 0)
          continue;
        auto &c = funcs[a.producer].consumers;
        if (std::find(c.begin(), c.end(), n.id) == c.end())
          c.push_back(n.id);
      }
    }
    num_stages += static_cast<int>(n.stages.size());
  }
  for (FuncNode &n : funcs) {
    n.can_inline = !n.is_output && !n.must_be_root && n.func.can_be_inlined() &&
                   !n.func.has_update_definition() && !n.consumers.empty() && !n.gathers_one_point;
    if (n.gathers_one_point)
      n.vector_width = 1;
  }
  for (FuncNode &n : funcs) {
    for (StageNode &s : n.stages) {
      if (n.is_extern)
        continue;
      const Definition &def = s.index == 0 ? n.func.definition() : n.func.update(s.index - 1);
      const std::vector<Expr> exprs = stage_exprs(def, s.index > 0);
      // Every pure producer, not only those the search may inline: archived schedules of
      // earlier rules inline some that it no longer does (refeaturize.h).
      for (Access &a : s.accesses) {
        if (a.producer < 0)
          continue;
        const FuncNode &p = funcs[a.producer];
        if (!p.is_extern && !p.func.has_update_definition())
          a.inline_copies = inlined_copies(exprs, p.func, a.calls);
      }
    }
  }

  // Root regions, consumers first: outputs from their estimates, producers from the union of
  // what every consumer stage needs.
  for (auto it = funcs.rbegin(); it != funcs.rend(); ++it) {
    FuncNode &n = *it;
    if (n.is_output) {
      n.root_region.assign(n.dims, Span{});
      std::vector<bool> seen(n.dims, false);
      for (const Bound &b : n.func.schedule().estimates()) {
        const auto &args = n.func.args();
        auto a = std::find(args.begin(), args.end(), b.var);
        if (a == args.end() || !b.min.defined() || !b.extent.defined())
          continue;
        const int d = static_cast<int>(a - args.begin());
        const double mn = constant_of(with_estimates(b.min), "the estimated min of " + n.name);
        const double ex =
            constant_of(with_estimates(b.extent), "the estimated extent of " + n.name);
        n.root_region[d] = {mn, mn + ex - 1};
        seen[d] = true;
      }
      for (int d = 0; d < n.dims; ++d)
        input_check(seen[d]) << "Hkfac: the output \""
                             << n.func.origin_name().substr(0, n.func.origin_name().find('$'))
                             << "\" needs an estimate on dimension " << d << " (\""
                             << n.func.args()[d] << "\") for autoscheduling\n";
    }
    if (n.root_region.empty()) {
      // Never read and not an output cannot happen in a realization order; keep it well formed.
      n.root_region.assign(n.dims, Span{0, 0});
    }
    for (StageNode &s : n.stages) {
      const std::vector<double> values = s.box_values(n.root_region);
      double points = box_points(n.root_region);
      for (const LoopDim &l : s.loops)
        if (l.is_rvar)
          points *= std::max(l.rextent, 1.0);
      if (s.index > 0) {
        // An update covers its pure loops' part of the region only.
        points = 1;
        for (const LoopDim &l : s.loops)
          points *= l.is_rvar ? std::max(l.rextent, 1.0) : n.root_region[l.pure_arg].extent();
      }
      s.points_minimum = points;
      if (s.index > 0 && n.stages[0].points_minimum > 0)
        s.runs_per_point = points / n.stages[0].points_minimum;
      for (Access &a : s.accesses) {
        if (a.producer < 0)
          continue;
        if (a.exact) {
          box_union_into(funcs[a.producer].root_region, required(a, values, {}));
          continue;
        }
        // Bounds the compiled form cannot express: Halide's simplifier at these numbers.
        std::map<std::string, Expr> at;
        for (size_t i = 0; i < s.loops.size(); ++i) {
          at[s.loops[i].var + ".min"] = make_const(Int(32), static_cast<int64_t>(values[2 * i]));
          at[s.loops[i].var + ".max"] =
              make_const(Int(32), static_cast<int64_t>(values[2 * i + 1]));
        }
        Box b(a.raw_min.size());
        for (size_t d = 0; d < b.size(); ++d)
          b[d] = constant_span(a, d, at, "the region of " + a.name + " that " + n.name + " reads");
        box_union_into(funcs[a.producer].root_region, b);
      }
    }
  }
}

} // namespace hkfac::sched
