// Which whole dimensions of an output get a constant split (see fixed_dims.h).
#include "fixed_dims.h"

#include <cmath>

#include "update_nest.h"

namespace hkfac::sched {

namespace {

// Computed in f's tiles directly, or nested in a Func that is.
bool hosted_in(const State &state, int g, int f) {
  if (state.choices[g].placement != Placement::At)
    return false;
  int site = state.choices[g].at_func;
  for (int hops = 0; site >= 0 && site != f && hops < 64; ++hops)
    site = state.choices[site].placement == Placement::At ? state.choices[site].at_func : -1;
  return site == f;
}

// Whether f, a Func hosted in its tiles or one inlined into them reads a hosted or inlined Func
// with a constant stride of 2 to 4 along its vectors (a downsample). Constant regions give such
// reads' shifted-in last vector a constant index, and Halide 14 gives a strided vector load at an
// exactly known index the full vector alignment of its shifted base (CodeGen_LLVM: the remainder
// modulo 0 becomes 0): an aligned load 2 bytes off crashed random seed 1437.
bool strided_reads_inside(const PipelineAnalysis &dag, const State &state, int f) {
  auto inside = [&](int g) {
    return g == f || state.choices[g].placement == Placement::Inline || hosted_in(state, g, f);
  };
  for (size_t g = 0; g < dag.funcs.size(); ++g) {
    if (!inside(static_cast<int>(g)))
      continue;
    for (const StageNode &s : dag.funcs[g].stages)
      for (const Access &a : s.accesses)
        if (a.producer >= 0 && a.producer != f && inside(a.producer) && a.lane_strided_calls > 0)
          return true;
  }
  return false;
}

} // namespace

std::vector<std::pair<int, int>> fixed_dims(const PipelineAnalysis &dag, const State &state,
                                            const LoopNestModel &model, const FuncNode &f,
                                            const std::vector<int> &split) {
  std::vector<std::pair<int, int>> out;
  if (!f.is_output || f.func.outputs() != 1 || split.empty())
    return out;
  bool hosts_reduction = false;
  for (size_t g = 0; g < state.choices.size(); ++g) {
    const FuncNode &r = dag.funcs[g];
    if (r.stages.size() < 2 || !hosted_in(state, static_cast<int>(g), f.id))
      continue;
    // Every split of the reduction's pure loops must divide its (now constant) region: Halide 14
    // miscompiles unrolled GuardWithIf tails over constant extents (a 24 x 67 region in blocks of
    // 16 x 4 accumulated some points twice), which it never sees at run-time extents.
    const FuncModel &rm = model.func(static_cast<int>(g));
    for (size_t st = 1; st < r.stages.size(); ++st)
      for (const UpdateSplit &sp : update_nest(r, r.stages[st], state.choices[g], rm).splits)
        for (const LoopDim &l : r.stages[st].loops)
          if (!sp.rvar && !l.is_rvar && l.var == sp.old && l.pure_arg >= 0 &&
              std::fmod(rm.region[l.pure_arg].extent(), sp.factor) != 0)
            return out;
    hosts_reduction = true;
  }
  if (!hosts_reduction || strided_reads_inside(dag, state, f.id))
    return out;
  const FuncModel &m = model.func(f.id);
  for (int d = 0; d < f.dims; ++d) {
    const double e = std::round(m.region[d].extent());
    if (!m.split[d] && e >= 1 && e < (1 << 30))
      out.push_back({d, static_cast<int>(e)});
  }
  return out;
}

} // namespace hkfac::sched
