// Guided filter (He et al.): smooths a float image p while keeping the edges of a float guide I,
// with local linear models q = a·I + b fitted by box means of I, p, I·p and I·I.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

#include <string>

namespace {

using namespace Halide;

class GuidedFilter : public Generator<GuidedFilter> {
public:
  GeneratorParam<int> radius{"radius", 4};  // of the box windows
  GeneratorParam<int> width{"width", 1920}; // for the estimates
  GeneratorParam<int> height{"height", 1080};

  Input<Buffer<float>> guide{"guide", 2}; // I, gray in [0, 1]
  Input<Buffer<float>> input{"input", 2}; // p, the image to filter
  Input<float> eps{"eps", 0.01f};         // regularization: larger smooths more
  Output<Buffer<float>> output{"output", 2};

  void generate() {
    using hkfac::pipelines::kMaxExtent;
    using hkfac::pipelines::require_in_range;
    require_in_range("guided_filter", radius, 1, 64);
    require_in_range("guided_filter", width, 1, kMaxExtent);
    require_in_range("guided_filter", height, 1, kMaxExtent);

    Func I = BoundaryConditions::repeat_edge(guide);
    Func p = BoundaryConditions::repeat_edge(input);
    I_times_p(x, y) = I(x, y) * p(x, y);
    I_squared(x, y) = I(x, y) * I(x, y);

    Func mean_I = box_mean(I, "mean_I");
    Func mean_p = box_mean(p, "mean_p");
    Func corr_Ip = box_mean(I_times_p, "corr_Ip");
    Func corr_II = box_mean(I_squared, "corr_II");

    Expr var_I = corr_II(x, y) - mean_I(x, y) * mean_I(x, y);
    Expr cov_Ip = corr_Ip(x, y) - mean_I(x, y) * mean_p(x, y);
    a(x, y) = cov_Ip / (var_I + eps);
    b(x, y) = mean_p(x, y) - a(x, y) * mean_I(x, y);

    Func mean_a = box_mean(a, "mean_a");
    Func mean_b = box_mean(b, "mean_b");
    output(x, y) = mean_a(x, y) * guide(x, y) + mean_b(x, y);

    guide.set_estimates({{0, width}, {0, height}});
    input.set_estimates({{0, width}, {0, height}});
    eps.set_estimate(0.01f);
    output.set_estimates({{0, width}, {0, height}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var x{"x"}, y{"y"};
  Func I_times_p{"I_times_p"}, I_squared{"I_squared"}, a{"a"}, b{"b"};

  // The mean of f over the (2 radius + 1)² window, as a row pass and a column pass.
  Func box_mean(Func f, const std::string &name) {
    const int r = radius;
    Func sum_x(name + "_x"), mean(name);
    Expr row = 0.0f;
    for (int i = -r; i <= r; i++) {
      row += f(x + i, y);
    }
    sum_x(x, y) = row;
    Expr column = 0.0f;
    for (int i = -r; i <= r; i++) {
      column += sum_x(x, y + i);
    }
    mean(x, y) = column * (1.0f / ((2 * r + 1) * (2 * r + 1)));
    return mean;
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(GuidedFilter, guided_filter)
