// Circular max filter (grey-scale dilation by a disk): each disk row is a horizontal window
// whose maximum two overlapping power-of-two windows of a sparse table give in O(1).
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

#include <cmath>
#include <vector>

namespace {

using namespace Halide;

class MaxFilter : public Generator<MaxFilter> {
public:
  GeneratorParam<int> radius{"radius", 26};
  GeneratorParam<int> width{"width", 1536}; // for the estimates
  GeneratorParam<int> height{"height", 2560};

  Input<Buffer<float>> input{"input", 3}; // RGB
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("max_filter", radius, 1, 64);
    require_in_range("max_filter", width, 1, kMaxExtent);
    require_in_range("max_filter", height, 1, kMaxExtent);

    const int r = radius;
    Func clamped = BoundaryConditions::repeat_edge(input);

    // Sparse table: level i holds the maximum of the 2^i pixels starting at x.
    int levels = 1;
    while ((2 << levels) <= 2 * r + 1) {
      levels++;
    }
    std::vector<Func> span_max(levels + 1);
    span_max[0] = Func("span_max_0");
    span_max[0](x, y, c) = clamped(x, y, c);
    for (int i = 1; i <= levels; i++) {
      span_max[i] = Func("span_max_" + std::to_string(i));
      span_max[i](x, y, c) =
          max(span_max[i - 1](x, y, c), span_max[i - 1](x + (1 << (i - 1)), y, c));
    }

    // Row dy of the disk spans [x - w, x + w]; cover it with two windows of length 2^i.
    Expr result;
    for (int dy = -r; dy <= r; dy++) {
      const int w = static_cast<int>(std::floor(std::sqrt(double(r * r - dy * dy))));
      const int length = 2 * w + 1;
      int i = 0;
      while ((2 << i) <= length) {
        i++;
      }
      Expr row = max(span_max[i](x - w, y + dy, c), span_max[i](x + w + 1 - (1 << i), y + dy, c));
      result = result.defined() ? max(result, row) : row;
    }
    output(x, y, c) = result;

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(MaxFilter, max_filter)
