// A long chain of 3×3 box stencils on a 16-bit image, the classic test of fusion depth.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

#include <vector>

namespace {

using namespace Halide;

class StencilChain : public Generator<StencilChain> {
public:
  GeneratorParam<int> stencils{"stencils", 32};
  GeneratorParam<int> width{"width", 1536}; // for the estimates
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<uint16_t>> input{"input", 2};
  Output<Buffer<uint16_t>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("stencil_chain", stencils, 1, 128);
    require_in_range("stencil_chain", width, 1, kMaxExtent);
    require_in_range("stencil_chain", height, 1, kMaxExtent);

    std::vector<Func> stages;
    stages.push_back(BoundaryConditions::repeat_edge(input));
    for (int i = 1; i <= stencils; i++) {
      Func prev = stages.back();
      Expr sum = cast<uint32_t>(0);
      for (int dy = -1; dy <= 1; dy++) {
        for (int dx = -1; dx <= 1; dx++) {
          sum += cast<uint32_t>(prev(x + dx, y + dy));
        }
      }
      Func stage("stage_" + std::to_string(i));
      stage(x, y) = cast<uint16_t>((sum + 4) / 9); // rounded mean
      stages.push_back(stage);
    }
    output(x, y) = stages.back()(x, y);

    input.set_estimates({{0, width}, {0, height}});
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(StencilChain, stencil_chain)
