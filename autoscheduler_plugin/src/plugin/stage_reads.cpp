// Counting what a stage reads (see stage_reads.h).
#include "stage_reads.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace hkfac::sched {

namespace {
constexpr double kLine = 64; // bytes in a cache line
} // namespace

void footprint(const Box &b, int elem_bytes, double &bytes, double &lines) {
  if (b.empty()) {
    bytes = elem_bytes;
    lines = 1;
    return;
  }
  const double row = std::max(b[0].extent(), 1.0) * elem_bytes;
  double rows = 1;
  for (size_t d = 1; d < b.size(); ++d)
    rows *= std::max(b[d].extent(), 1.0);
  bytes = row * rows;
  lines = std::ceil(row / kLine + 1) * rows;
}

void reads(const PipelineAnalysis &dag, const LoopNestModel &model, const StageNode &s,
           const Box &stage_box, double &bytes, double &lines, double &alloc_bytes) {
  bytes = lines = alloc_bytes = 0;
  const std::vector<double> values = s.box_values(stage_box);
  for (const Access &a : s.accesses) {
    const Box fallback = a.producer >= 0 ? dag.funcs[a.producer].root_region : Box{};
    const Box need = PipelineAnalysis::required(a, values, fallback);
    double b = 0, l = 0;
    footprint(need, a.elem_bytes, b, l);
    bytes += b;
    lines += l;
    if (a.producer >= 0 && model.func(a.producer).computed)
      alloc_bytes += box_points(model.func(a.producer).storage) * dag.funcs[a.producer].bytes_per_point;
  }
}

VectorLoads vector_loads(const StageNode &s, int vw, int rows, int vectors, int lanes) {
  VectorLoads v;
  for (const Access &a : s.accesses) {
    // Dense, broadcast and gather calls against the vectorized loop.
    const auto [lane_dense, lane_broadcast, lane_gather] =
        lanes > 0 && static_cast<size_t>(lanes) <= a.lanes_along.size()
            ? a.lanes_along[lanes - 1]
            : std::array<int, 3>{a.lane_dense_calls, a.lane_broadcast_calls, a.lane_gather_calls};
    // Under row blocking, the calls no row depends on are loaded once for all `rows` rows.
    // Which of an access's calls they are is not kept, so its kinds share them in proportion.
    const double shared =
        rows > 1 && a.calls > 0 ? static_cast<double>(a.row_shared_calls) / a.calls : 0;
    const double per_row = 1 - shared + shared / std::max(rows, 1);
    const double dense = (vw > 1 ? lane_dense : a.dense_calls) * per_row;
    const double broadcast = (vw > 1 ? lane_broadcast / static_cast<double>(std::max(vectors, 1))
                                     : a.broadcast_calls) *
                             per_row;
    const double gather = (vw > 1 ? lane_gather : a.gather_calls) * per_row;
    if (vw > 1) {
      v.scalar_loads += broadcast + gather * vw;
      v.vector_loads += dense;
    }
    v.bytes += (dense * vw + broadcast + gather * vw) * static_cast<double>(a.elem_bytes);
    v.lines += dense * std::ceil(vw * a.elem_bytes / kLine + 0.5) + broadcast + gather * vw;
  }
  return v;
}

} // namespace hkfac::sched
