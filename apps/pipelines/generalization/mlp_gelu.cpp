// A transformer's feed-forward block on a batch of tokens: y = x + (gelu(x·W1 + b1)·W2 + b2), with
// GELU's tanh approximation. Two chained matrix products around a transcendental.
#include "Halide.h"
#include "generator_params.h"
#include "reference_schedule.h"

namespace {

using namespace Halide;

class MlpGelu : public Generator<MlpGelu> {
public:
  GeneratorParam<int> tokens{"tokens", 512}; // rows of x and y, for the estimates
  GeneratorParam<int> model_dim{"model_dim", 256};
  GeneratorParam<int> hidden_dim{"hidden_dim", 1024};

  Input<Buffer<float>> x{"x", 2};   // (model_dim, tokens)
  Input<Buffer<float>> w1{"w1", 2}; // (hidden_dim, model_dim)
  Input<Buffer<float>> b1{"b1", 1}; // (hidden_dim)
  Input<Buffer<float>> w2{"w2", 2}; // (model_dim, hidden_dim)
  Input<Buffer<float>> b2{"b2", 1}; // (model_dim)
  Output<Buffer<float>> output{"output", 2}; // (model_dim, tokens)

  void generate() {
    using hkfac::pipelines::require_in_range;
    require_in_range("mlp_gelu", tokens, 1, 1 << 16);
    require_in_range("mlp_gelu", model_dim, 1, 1 << 14);
    require_in_range("mlp_gelu", hidden_dim, 1, 1 << 14);

    RDom d(0, x.dim(0).extent());
    pre(h, i) = b1(h);
    pre(h, i) += x(d, i) * w1(h, d);
    // GELU, tanh form: 0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³))).
    Expr v = pre(h, i);
    hidden(h, i) = 0.5f * v * (1.0f + tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
    RDom r(0, w2.dim(1).extent());
    projected(j, i) = b2(j);
    projected(j, i) += hidden(r, i) * w2(j, r);
    output(j, i) = x(j, i) + projected(j, i);

    x.set_estimates({{0, model_dim}, {0, tokens}});
    w1.set_estimates({{0, hidden_dim}, {0, model_dim}});
    b1.set_estimates({{0, hidden_dim}});
    w2.set_estimates({{0, model_dim}, {0, hidden_dim}});
    b2.set_estimates({{0, model_dim}});
    output.set_estimates({{0, model_dim}, {0, tokens}});
    if (!get_auto_schedule()) {
      hkfac::pipelines::schedule_reference(output);
    }
  }

private:
  Var h{"h"}, i{"i"}, j{"j"};
  Func pre{"pre"}, hidden{"hidden"}, projected{"projected"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(MlpGelu, mlp_gelu)
