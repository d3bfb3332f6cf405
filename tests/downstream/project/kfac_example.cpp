// The README's K-FAC example, built against the installed package: a small network regressing
// onto a random teacher, trained with K-FAC. It must lower the loss and resume from a checkpoint
// to the same step as the run that wrote it.
#include <hkfac/kfac/layers.h>
#include <hkfac/kfac/optimizer.h>

#include <cstdio>
#include <random>

using namespace hkfac::kfac;

int main() {
  // -- README example begins
  Sequential model(8); // 8 inputs per example
  model.add<Dense>(8, 32, Activation::tanh);
  model.add<Dense>(32, 4);
  std::mt19937 rng(1);
  Params params = model.init_params(rng);

  OptimizerOptions options;
  options.use_adaptive_learning_rate = true; // kfac-jax's recipe: the quadratic model's
  options.use_adaptive_momentum = true;      // learning rate and momentum,
  options.use_adaptive_damping = true;       // Levenberg–Marquardt damping
  options.initial_damping = 1.0;
  auto loss = [](const Matrix &outputs, const Batch &batch, ValueContext &ctx) {
    ctx.losses().register_squared_error_loss(outputs, &batch.targets);
  };
  Optimizer kfac(model, loss, options);

  const Matrix teacher = Matrix::Random(8, 4);
  auto next_batch = [&]() {
    Batch b;
    b.inputs = Matrix::Random(64, 8);
    b.targets = (b.inputs * teacher).array().tanh().matrix();
    return b;
  };
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const StepStats st = kfac.step(params, next_batch); // updates params in place
    if (step == 0)
      first = st.loss;
    last = st.loss;
  }
  kfac.save_checkpoint("kfac_example.ckpt", params); // load_checkpoint resumes from here
  // -- README example ends

  Params resumed_params = model.init_params(rng);
  Optimizer resumed(model, loss, options);
  resumed.load_checkpoint("kfac_example.ckpt", resumed_params);
  std::remove("kfac_example.ckpt");
  // The checkpoint restores every tensor, every element, bit for bit.
  bool same_params = resumed_params.size() == params.size();
  for (size_t i = 0; same_params && i < params.size(); ++i) {
    same_params = resumed_params[i].rows() == params[i].rows() &&
                  resumed_params[i].cols() == params[i].cols() && resumed_params[i] == params[i];
  }
  if (!(last < 0.5 * first) || resumed.step_count() != kfac.step_count() || !same_params) {
    std::printf("kfac example failed: loss %g -> %g, resumed at step %d of %d, parameters %s\n",
                first, last, resumed.step_count(), kfac.step_count(),
                same_params ? "restored" : "differ");
    return 1;
  }
  std::printf("kfac example ok: loss %.4f -> %.4f in 30 steps\n", first, last);
  return 0;
}
