// Atomic scatter updates on the GPU (see gpu_atomics.h).
#include "gpu_atomics.h"

#include <algorithm>
#include <cmath>

namespace hkfac::sched {

using namespace Halide;
using namespace Halide::Internal;

AtomicLaunch gpu_atomic_launch(const FuncNode &f, const StageNode &s) {
  AtomicLaunch a;
  if (s.index == 0 || f.is_extern || f.func.outputs() != 1)
    return a;
  const Type t = f.func.output_types()[0];
  if (t.bits() != 32 || t.lanes() != 1)
    return a;
  std::vector<const LoopDim *> rvars;
  for (const LoopDim &l : s.loops) {
    if (!l.is_rvar)
      return a; // a pure loop: parallel over it instead (schedule_device_stage)
    rvars.push_back(&l);
  }
  if (rvars.empty() || rvars.size() > 2)
    return a;
  const Definition &d = f.func.update(s.index - 1);
  const AssociativeOp op = prove_associativity(f.func.name(), d.args(), d.values());
  if (!op.associative() || !op.commutative())
    return a;
  const double inner = std::max(1.0, rvars[0]->rextent);
  a.ok = true;
  a.inner = rvars[0]->var;
  a.threads = static_cast<int>(std::min(256.0, std::ceil(inner / 32) * 32));
  if (rvars.size() == 2) {
    a.outer = rvars[1]->var;
    a.blocks = std::max(1.0, rvars[1]->rextent);
  } else {
    a.blocks = std::ceil(inner / a.threads);
  }
  a.per_thread = inner * (rvars.size() == 2 ? a.blocks : 1) / (a.blocks * a.threads);
  return a;
}

} // namespace hkfac::sched
