// Applying and printing schedules (see apply_schedule.h).
#include "apply_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "loop_nest_model.h"
#include "update_nest.h"

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

namespace {

std::string identifier(const std::string &name) {
  std::string s;
  for (char c : name)
    s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])))
    s = "v_" + s;
  return s;
}

std::string display_name(const std::string &name) {
  const size_t d = name.rfind('$');
  if (d == std::string::npos || d + 1 == name.size())
    return name;
  for (size_t i = d + 1; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i])))
      return name;
  return name.substr(0, d);
}

std::string factor_text(double f) { return std::to_string(static_cast<long long>(f)); }

// A pure definition's split shifts its last tile inwards where shifts_inwards allows (Halide's
// own default for pure definitions: full vectors, no predicated tail, whose code LLVM took
// minutes over); updates and everything else use GuardWithIf.
TailStrategy pure_tail(const FuncNode &f, double extent, double factor) {
  return shifts_inwards(f, extent, factor) ? TailStrategy::ShiftInwards : TailStrategy::GuardWithIf;
}

const char *tail_text(TailStrategy t) {
  return t == TailStrategy::ShiftInwards ? "ShiftInwards" : "GuardWithIf";
}

// Every Func of the pipeline and its index in Pipeline::get_func's order.
std::map<std::string, std::pair<Function, int>> pipeline_funcs(const std::vector<Function> &outputs) {
  std::map<std::string, Function> env;
  for (const Function &f : outputs) {
    auto more = find_transitive_calls(f);
    env.insert(more.begin(), more.end());
  }
  std::vector<std::string> order = topological_order(outputs, env);
  std::map<std::string, std::pair<Function, int>> out;
  for (size_t i = 0; i < order.size(); ++i)
    out.emplace(order[i], std::make_pair(env.at(order[i]), static_cast<int>(i)));
  return out;
}

// Issues scheduling calls on one Func's stages and writes the same calls as C++.
class Writer {
public:
  Writer(bool apply, std::ostringstream &src) : apply_(apply), src_(src) {}

  void begin(const Function &f, int index) {
    func_ = Func(f);
    // Halide makes Func names unique with a "$n" suffix; the C++ name drops it unless two Funcs
    // would then share one.
    name_ = identifier(display_name(f.name()));
    if (!func_names_.insert(name_).second) {
      name_ = identifier(f.name());
      func_names_.insert(name_);
    }
    site_names_[f.name()] = name_;
    src_ << "    Func " << name_ << " = pipeline.get_func(" << index << ");\n";
  }
  void declare_var(const std::string &v, bool rvar) {
    if (!declared_.insert(v).second)
      return;
    src_ << "    " << (rvar ? "RVar " : "Var ") << identifier(v) << "(\"" << v << "\");\n";
  }
  Stage stage(int s) { return s == 0 ? Stage(func_) : func_.update(s - 1); }
  std::string stage_text(int s) const {
    return s == 0 ? name_ : name_ + ".update(" + std::to_string(s - 1) + ")";
  }
  VarOrRVar var(const std::string &v, bool rvar) const {
    return rvar ? VarOrRVar(RVar(v)) : VarOrRVar(Var(v));
  }

  void split(int s, const std::string &old, bool rvar, const std::string &outer,
             const std::string &inner, double factor, TailStrategy tail) {
    declare_var(old, rvar);
    declare_var(outer, rvar);
    declare_var(inner, rvar);
    src_ << "    " << stage_text(s) << ".split(" << identifier(old) << ", " << identifier(outer)
         << ", " << identifier(inner) << ", " << factor_text(factor) << ", TailStrategy::"
         << tail_text(tail) << ");\n";
    if (apply_)
      stage(s).split(var(old, rvar), var(outer, rvar), var(inner, rvar),
                     static_cast<int>(factor), tail);
  }
  void reorder(int s, const std::vector<std::pair<std::string, bool>> &vars) {
    if (vars.size() < 2)
      return;
    std::vector<VarOrRVar> vs;
    for (const auto &v : vars)
      declare_var(v.first, v.second);
    src_ << "    " << stage_text(s) << ".reorder(";
    for (size_t i = 0; i < vars.size(); ++i) {
      src_ << (i ? ", " : "") << identifier(vars[i].first);
      vs.push_back(var(vars[i].first, vars[i].second));
    }
    src_ << ");\n";
    if (apply_)
      stage(s).reorder(vs);
  }
  void fuse(int s, const std::string &inner, const std::string &outer, const std::string &fused) {
    declare_var(inner, false);
    declare_var(outer, false);
    declare_var(fused, false);
    src_ << "    " << stage_text(s) << ".fuse(" << identifier(inner) << ", " << identifier(outer)
         << ", " << identifier(fused) << ");\n";
    if (apply_)
      stage(s).fuse(Var(inner), Var(outer), Var(fused));
  }
  // An update left as Halide's default, said so (Halide warns about it otherwise).
  void unscheduled(int s) {
    src_ << "    " << stage_text(s) << ".unscheduled();\n";
    if (apply_)
      stage(s).unscheduled();
  }
  void loop_type(int s, const std::string &v, bool rvar, const char *what) {
    declare_var(v, rvar);
    src_ << "    " << stage_text(s) << "." << what << "(" << identifier(v) << ");\n";
    if (!apply_)
      return;
    const std::string w = what;
    if (w == "parallel")
      stage(s).parallel(var(v, rvar));
    else if (w == "vectorize")
      stage(s).vectorize(var(v, rvar));
    else if (w == "unscheduled")
      stage(s).unscheduled();
    else
      stage(s).unroll(var(v, rvar));
  }
  void compute_root() {
    src_ << "    " << name_ << ".compute_root();\n";
    if (apply_)
      func_.compute_root();
  }
  void compute_at(const Function &site, const std::string &site_name, const std::string &v) {
    declare_var(v, false);
    src_ << "    " << name_ << ".compute_at(" << site_names_.at(site_name) << ", " << identifier(v)
         << ");\n";
    if (apply_)
      func_.compute_at(Func(site), Var(v));
  }
  // Storage hoisted above the compute level: at `v` of `site`, or at root when `v` is empty.
  void store_at(const Function &site, const std::string &site_name, const std::string &v) {
    if (v.empty()) {
      src_ << "    " << name_ << ".store_root();\n";
      if (apply_)
        func_.store_root();
      return;
    }
    declare_var(v, false);
    src_ << "    " << name_ << ".store_at(" << site_names_.at(site_name) << ", " << identifier(v)
         << ");\n";
    if (apply_)
      func_.store_at(Func(site), Var(v));
  }

private:
  bool apply_;
  std::ostringstream &src_;
  Func func_;
  std::string name_;
  std::set<std::string> declared_, func_names_;
  std::map<std::string, std::string> site_names_;
};

// The loop a Root Func offers its producers at `level` (see LoopNestModel::has_site).
std::string site_var(const FuncNode &f, const FuncChoice &c, const Box &region, SiteLevel level) {
  if (c.placement == Placement::At) // an At Func's row loop
    return f.func.args()[1];
  const std::vector<int> split = split_dims_outermost_first(c, region);
  const std::string fused = f.func.args()[split[0]] + "_par";
  const bool fused_several = c.parallel_dims > 1;
  if (level == kPerTask || static_cast<int>(split.size()) == c.parallel_dims)
    return fused_several ? fused : f.func.args()[split[0]] + "_o";
  return f.func.args()[split.back()] + "_o";
}

// The tile loop around a Root Func's innermost one (FuncChoice::store_outer); empty for root.
std::string outer_var(const FuncNode &f, const FuncChoice &c, const Box &region) {
  const std::vector<int> split = split_dims_outermost_first(c, region);
  if (split.size() < 2)
    return "";
  if (static_cast<int>(split.size()) - 1 == c.parallel_dims)
    return site_var(f, c, region, kPerTask);
  return f.func.args()[split[split.size() - 2]] + "_o";
}

// Splits dimension 0's innermost loop by the vector width and vectorizes it.
// A Func slid along a tile loop (store_outer) guards its tail: a shifted-in last vector would
// recompute columns before the slid region from producers whose folded storage has moved on.
void vectorize_pure(Writer &w, const FuncNode &f, const std::string &v, double extent,
                    int width, bool slid = false) {
  w.split(0, v, false, v, v + "_v", width,
          slid ? TailStrategy::GuardWithIf : pure_tail(f, extent, width));
  w.loop_type(0, v + "_v", false, "vectorize");
}

void schedule_updates(Writer &w, const FuncNode &f, const FuncChoice &c, const FuncModel &m) {
  for (size_t i = 1; i < f.stages.size(); ++i) {
    const int s = static_cast<int>(i);
    const UpdateNest n = update_nest(f, f.stages[i], c, m);
    for (const UpdateSplit &sp : n.splits)
      w.split(s, sp.old, sp.rvar, sp.outer, sp.inner, sp.factor, TailStrategy::GuardWithIf);
    if (n.reordered) {
      std::vector<std::pair<std::string, bool>> order;
      for (const UpdateLoop &l : n.loops)
        order.push_back({l.var, l.rvar});
      w.reorder(s, order);
    }
    // Vector lanes, unrolled rows, the parallel loop, unrolled RVars: the order the calls read.
    bool scheduled = false;
    auto mark = [&](UpdateLoop::Kind kind, bool rvar, const char *what) {
      for (const UpdateLoop &l : n.loops)
        if (l.kind == kind && l.rvar == rvar) {
          w.loop_type(s, l.var, l.rvar, what);
          scheduled = true;
        }
    };
    mark(UpdateLoop::kVectorized, false, "vectorize");
    mark(UpdateLoop::kUnrolled, false, "unroll");
    mark(UpdateLoop::kParallel, false, "parallel");
    mark(UpdateLoop::kUnrolled, true, "unroll");
    if (!scheduled && !n.reordered && n.splits.empty())
      w.unscheduled(s);
  }
}

} // namespace

std::string apply_schedule(const PipelineAnalysis &dag, const State &state,
                           const std::vector<Function> &outputs, bool apply) {
  const auto funcs = pipeline_funcs(outputs);
  LoopNestModel model(dag, state);
  plugin_check(model.legal()) << "Hkfac: the chosen schedule is not legal";
  std::ostringstream src;
  Writer w(apply, src);
  // Consumers first, so each compute_at names a Func already written.
  for (auto it = dag.funcs.rbegin(); it != dag.funcs.rend(); ++it) {
    const FuncNode &f = *it;
    const FuncChoice &c = state.choices[f.id];
    const FuncModel &m = model.func(f.id);
    if (c.placement == Placement::Inline)
      continue;
    plugin_check(c.placement != Placement::Undecided) << f.name << " was not decided";
    w.begin(f.func, funcs.at(f.name).second);
    if (f.is_extern) {
      w.compute_root();
      continue;
    }
    if (c.placement == Placement::At) {
      const FuncNode &site = dag.funcs[c.at_func];
      w.compute_at(site.func, site.name,
                   site_var(site, state.choices[c.at_func], model.func(c.at_func).region,
                            c.at_level));
      if (c.store_outer)
        w.store_at(site.func, site.name,
                   outer_var(site, state.choices[c.at_func], model.func(c.at_func).region));
      if (m.vector_width > 1)
        vectorize_pure(w, f, f.func.args()[0], m.inner[0], m.vector_width, c.store_outer);
      schedule_updates(w, f, c, m);
      src << "\n";
      continue;
    }
    w.compute_root();
    const std::vector<int> split = split_dims_outermost_first(c, m.region);
    const auto &args = f.func.args();
    for (int d : split)
      w.split(0, args[d], false, args[d] + "_o", args[d] + "_i", c.tile[d],
              pure_tail(f, m.region[d].extent(), c.tile[d]));
    std::vector<std::pair<std::string, bool>> order;
    for (int d = 0; d < f.dims; ++d)
      order.push_back({m.split[d] ? args[d] + "_i" : args[d], false});
    for (auto d = split.rbegin(); d != split.rend(); ++d)
      order.push_back({args[*d] + "_o", false});
    if (!split.empty())
      w.reorder(0, order);
    if (c.parallel_dims > 0) {
      std::string fused = args[split[0]] + "_o";
      if (c.parallel_dims > 1) {
        std::string current = fused;
        for (int i = 1; i < c.parallel_dims; ++i) {
          const std::string next = args[split[0]] + (i + 1 == c.parallel_dims ? "_par" : "_par" + std::to_string(i));
          w.fuse(0, args[split[i]] + "_o", current, next);
          current = next;
        }
        fused = current;
      }
      w.loop_type(0, fused, false, "parallel");
    }
    if (m.vector_width > 1 && f.dims > 0)
      vectorize_pure(w, f, m.split[0] ? args[0] + "_i" : args[0], m.inner[0], m.vector_width);
    schedule_updates(w, f, c, m);
    src << "\n";
  }
  return src.str();
}

std::string apply_fallback(const std::vector<Function> &outputs) {
  const auto funcs = pipeline_funcs(outputs);
  std::ostringstream src;
  Writer w(true, src);
  for (const auto &kv : funcs) {
    w.begin(kv.second.first, kv.second.second);
    w.compute_root();
  }
  return src.str();
}

ScheduleSnapshot::ScheduleSnapshot(const std::vector<Function> &outputs) {
  for (const auto &kv : pipeline_funcs(outputs)) {
    Function f = kv.second.first;
    Saved s{f, {}, {}};
    std::map<FunctionPtr, FunctionPtr> copied;
    s.schedule = f.schedule().deep_copy(copied);
    s.stages.push_back(f.definition().schedule().get_copy());
    for (const Definition &u : f.updates())
      s.stages.push_back(u.schedule().get_copy());
    saved_.push_back(std::move(s));
  }
}

void ScheduleSnapshot::restore() {
  for (Saved &s : saved_) {
    s.func.schedule() = s.schedule;
    s.func.definition().schedule() = s.stages[0];
    for (size_t i = 1; i < s.stages.size(); ++i)
      s.func.update(static_cast<int>(i) - 1).schedule() = s.stages[i];
  }
}

} // namespace hkfac::sched
