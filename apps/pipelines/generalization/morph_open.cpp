// Morphological opening of an 8-bit gray image: 5×5 erosion then 5×5 dilation, each as separable
// minimum / maximum reductions over a 5-tap domain.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class MorphOpen : public Generator<MorphOpen> {
public:
  GeneratorParam<int> width{"width", 3840}; // for the estimates
  GeneratorParam<int> height{"height", 2160};

  Input<Buffer<uint8_t>> input{"input", 2};
  Output<Buffer<uint8_t>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("morph_open", width, 1, kMaxExtent);
    require_in_range("morph_open", height, 1, kMaxExtent);

    Func clamped = BoundaryConditions::repeat_edge(input);
    RDom window(-2, 5);
    erode_x(x, y) = minimum(clamped(x + window, y));
    erode(x, y) = minimum(erode_x(x, y + window));
    dilate_x(x, y) = maximum(erode(x + window, y));
    output(x, y) = maximum(dilate_x(x, y + window));

    input.set_estimates({{0, width}, {0, height}});
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
  Func erode_x{"erode_x"}, erode{"erode"}, dilate_x{"dilate_x"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(MorphOpen, morph_open)
