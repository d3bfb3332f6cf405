// Non-local means denoising (Buades, Coll & Morel 2005): average the pixels of a search window,
// each weighted by how similar the patch around it is to the patch around this pixel.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class NlMeans : public Generator<NlMeans> {
public:
  GeneratorParam<int> patch_size{"patch_size", 7};
  GeneratorParam<int> search_area{"search_area", 7};
  GeneratorParam<int> width{"width", 614}; // for the estimates
  GeneratorParam<int> height{"height", 1024};

  Input<Buffer<float>> input{"input", 3}; // RGB in [0, 1]
  Input<float> sigma{"sigma", 0.12f};     // patch-distance scale of the weights
  Output<Buffer<float>> output{"output", 3};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    using hkfac::pipelines::require_odd_in_range;
    // Both windows are centred: an even size would box size + 1 pixels (patch) or offsets
    // -size/2 .. size/2 - 1 (search).
    require_odd_in_range("nl_means", patch_size, 1, 31);
    require_odd_in_range("nl_means", search_area, 1, 31);
    require_in_range("nl_means", width, 1, kMaxExtent);
    require_in_range("nl_means", height, 1, kMaxExtent);

    Func clamped = BoundaryConditions::repeat_edge(input);
    const int p = patch_size / 2, s = search_area / 2;

    // Squared colour distance between each pixel and its neighbour at offset (dx, dy).
    Expr d = 0.0f;
    for (int ch = 0; ch < 3; ch++) {
      Expr diff = clamped(x, y, ch) - clamped(x + dx, y + dy, ch);
      d += diff * diff;
    }
    dist(x, y, dx, dy) = d;

    // Patch distance: box sums over the patch, separably.
    Expr col = 0.0f;
    for (int py = -p; py <= p; py++) {
      col += dist(x, y + py, dx, dy);
    }
    dist_y(x, y, dx, dy) = col;
    Expr patch = 0.0f;
    for (int px = -p; px <= p; px++) {
      patch += dist_y(x + px, y, dx, dy);
    }
    dist_patch(x, y, dx, dy) = patch;

    Expr patch_pixels = cast<float>(3 * patch_size * patch_size);
    weight(x, y, dx, dy) = exp(-dist_patch(x, y, dx, dy) / (patch_pixels * sigma * sigma));

    // Weighted sum over the search window; channel 3 accumulates the weights.
    RDom offset(-s, search_area, -s, search_area);
    Expr w = weight(x, y, offset.x, offset.y);
    Expr value = select(c < 3, clamped(x + offset.x, y + offset.y, min(c, 2)), 1.0f);
    means(x, y, c) = 0.0f;
    means(x, y, c) += w * value;
    output(x, y, c) = means(x, y, c) / means(x, y, 3);

    input.set_estimates({{0, width}, {0, height}, {0, 3}});
    sigma.set_estimate(0.12f);
    output.set_estimates({{0, width}, {0, height}, {0, 3}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"}, c{"c"}, dx{"dx"}, dy{"dy"};
  Func dist{"dist"}, dist_y{"dist_y"}, dist_patch{"dist_patch"}, weight{"weight"};
  Func means{"means"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(NlMeans, nl_means)
