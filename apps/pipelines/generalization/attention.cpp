// Single-head scaled dot-product attention, softmax(Q·Kᵀ / √d)·V, for a batch of sequences.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class Attention : public Generator<Attention> {
public:
  GeneratorParam<int> seq{"seq", 256}; // for the estimates: tokens per sequence
  GeneratorParam<int> dim{"dim", 64};  // width of a query, key and value
  GeneratorParam<int> batch{"batch", 8};

  Input<Buffer<float>> query{"query", 3};    // (d, i, n)
  Input<Buffer<float>> key{"key", 3};        // (d, j, n)
  Input<Buffer<float>> value{"value", 3};    // (d, j, n)
  Output<Buffer<float>> output{"output", 3}; // (d, i, n)

  void generate() {
    using hkfac::pipelines::require_in_range;
    require_in_range("attention", seq, 1, 1 << 16);
    require_in_range("attention", dim, 1, 4096);
    require_in_range("attention", batch, 1, 1024);

    RDom rd(0, query.dim(0).extent());
    RDom rj(0, key.dim(1).extent());
    Expr inv_sqrt_d = 1.0f / sqrt(cast<float>(query.dim(0).extent()));

    scores(j, i, n) = 0.0f;
    scores(j, i, n) += query(rd, i, n) * key(rd, j, n);
    scaled_scores(j, i, n) = scores(j, i, n) * inv_sqrt_d;

    row_max(i, n) = Float(32).min();
    row_max(i, n) = max(row_max(i, n), scaled_scores(rj, i, n));
    exponentials(j, i, n) = exp(scaled_scores(j, i, n) - row_max(i, n));
    row_sum(i, n) = 0.0f;
    row_sum(i, n) += exponentials(rj, i, n);
    weights(j, i, n) = exponentials(j, i, n) / row_sum(i, n);

    output(d, i, n) = 0.0f;
    output(d, i, n) += weights(rj, i, n) * value(d, rj, n);

    query.set_estimates({{0, dim}, {0, seq}, {0, batch}});
    key.set_estimates({{0, dim}, {0, seq}, {0, batch}});
    value.set_estimates({{0, dim}, {0, seq}, {0, batch}});
    output.set_estimates({{0, dim}, {0, seq}, {0, batch}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var d{"d"}, i{"i"}, j{"j"}, n{"n"};
  Func scores{"scores"}, scaled_scores{"scaled_scores"}, row_max{"row_max"},
      exponentials{"exponentials"}, row_sum{"row_sum"}, weights{"weights"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(Attention, attention)
