// Layer library: gradients, Jacobian-vector products and tag records against double-precision
// finite differences of an independent reference forward pass.
#include <gtest/gtest.h>

#include <functional>
#include <new>

#include "hkfac/error.h"
#include "reference.h"

namespace hkfac::kfac {
namespace {

using namespace testref;

// Every layer type and every activation, in one chain.
std::vector<RefLayer> every_layer_net() {
  return {
      {RefLayer::dense, Activation::tanh, 3, 4, true},
      {RefLayer::scale_and_shift, Activation::identity, 4, 4},
      {RefLayer::bias, Activation::identity, 4, 4},
      {RefLayer::activation, Activation::sigmoid, 4, 4},
      {RefLayer::dense, Activation::relu, 4, 5, true},
      {RefLayer::dense, Activation::sigmoid, 5, 3, false},
      {RefLayer::activation, Activation::tanh, 3, 3},
      {RefLayer::activation, Activation::relu, 3, 3},
      {RefLayer::dense, Activation::identity, 3, 2, true},
  };
}

struct Fixture {
  std::vector<RefLayer> net = every_layer_net();
  Sequential model = build(net, 3);
  Params params;
  Batch batch;
  Fixture() {
    std::mt19937 rng(7);
    params = model.init_params(rng);
    // Non-trivial scale/shift/bias values so their gradients are exercised.
    for (size_t i = 2; i <= 4; ++i)
      params[i] = random_matrix(1, 4, rng, 0.5f, 1.5f);
    batch.inputs = random_matrix(5, 3, rng);
  }
};

TEST(kfacLayers, BackwardMatchesFiniteDifferencesForEveryLayer) {
  Fixture f;
  std::mt19937 rng(3);
  const Matrix cot = random_matrix(5, 2, rng);
  f.model.forward(f.params, f.batch);
  const Params grads = f.model.backward(cot);
  const MatrixXd x = f.batch.inputs.cast<double>(), c = cot.cast<double>();
  const VectorXd ref = fd_gradient(
      [&](const std::vector<MatrixXd> &p) { return forward(f.net, p, x).cwiseProduct(c).sum(); },
      to_double(f.params));
  size_t k = 0;
  for (size_t t = 0; t < grads.size(); ++t) {
    for (Eigen::Index e = 0; e < grads[t].size(); ++e, ++k) {
      EXPECT_NEAR(grads[t].data()[e], ref(k), 1e-4 * std::max(1.0, std::abs(ref(k))))
          << "param " << t << " (" << f.model.param_shapes()[t].name << ") element " << e;
    }
  }
}

TEST(kfacLayers, ForwardMatchesReference) {
  Fixture f;
  const Matrix out = f.model.forward(f.params, f.batch);
  const MatrixXd ref = forward(f.net, to_double(f.params), f.batch.inputs.cast<double>());
  EXPECT_LT(rel_err(out.cast<double>(), ref), 1e-5);
}

TEST(kfacLayers, JvpMatchesFiniteDifferences) {
  Fixture f;
  std::mt19937 rng(5);
  Params t;
  for (const Matrix &p : f.params)
    t.push_back(random_matrix(p.rows(), p.cols(), rng));
  f.model.forward(f.params, f.batch);
  const Matrix jv = f.model.jvp(t);
  const double h = 1e-6;
  std::vector<MatrixXd> pp = to_double(f.params), pm = pp;
  for (size_t i = 0; i < pp.size(); ++i) {
    pp[i] += h * t[i].cast<double>();
    pm[i] -= h * t[i].cast<double>();
  }
  const MatrixXd x = f.batch.inputs.cast<double>();
  const MatrixXd ref = (forward(f.net, pp, x) - forward(f.net, pm, x)) / (2 * h);
  EXPECT_LT(rel_err(jv.cast<double>(), ref), 1e-4);
}

TEST(kfacLayers, PerExampleGradientsSumToTheBatchGradient) {
  Fixture f;
  std::mt19937 rng(9);
  f.model.forward(f.params, f.batch);
  const Params grads = f.model.backward(random_matrix(5, 2, rng));
  for (size_t t = 0; t < f.model.tags().size(); ++t) {
    const LayerTag &tag = f.model.tags()[t];
    const TagRecord &rec = f.model.record(static_cast<int>(t));
    EXPECT_EQ(rec.output_grads.rows(), 5) << tag.name;
    const Matrix per = per_example_gradients(tag, rec.inputs, rec.output_grads);
    const Matrix summed = per.colwise().sum();
    Eigen::Index at = 0;
    for (int p : tag.params) {
      const Matrix &g = grads[p];
      for (Eigen::Index e = 0; e < g.size(); ++e, ++at) {
        EXPECT_NEAR(summed(0, at), g.data()[e], 1e-5) << tag.name << " param " << p;
      }
    }
    EXPECT_EQ(at, per.cols()) << tag.name;
  }
}

std::vector<RefLayer> conv_net() {
  RefLayer second = RefLayer::conv2d(3, 2, 3, 2, 2, 1, 0, Activation::sigmoid);
  second.use_bias = false;
  return {RefLayer::conv2d(5, 4, 2, 3, 3, 2, 1, Activation::tanh),
          second,
          {RefLayer::dense, Activation::identity, 4, 2, true}};
}

TEST(kfacLayers, Conv2DForwardBackwardAndJvpMatchFiniteDifferences) {
  const std::vector<RefLayer> net = conv_net();
  Sequential model = build(net, 40);
  ASSERT_EQ(model.output_dim(), 2);
  std::mt19937 rng(21);
  Params params = model.init_params(rng);
  params[1] = random_matrix(1, 3, rng); // non-zero conv bias
  Batch batch;
  batch.inputs = random_matrix(3, 40, rng);
  const Matrix cot = random_matrix(3, 2, rng);
  const MatrixXd x = batch.inputs.cast<double>(), c = cot.cast<double>();

  const Matrix out = model.forward(params, batch);
  EXPECT_LT(rel_err(out.cast<double>(), forward(net, to_double(params), x)), 1e-5);
  const Params grads = model.backward(cot);
  const VectorXd ref = fd_gradient(
      [&](const std::vector<MatrixXd> &p) { return forward(net, p, x).cwiseProduct(c).sum(); },
      to_double(params));
  size_t k = 0;
  for (size_t t = 0; t < grads.size(); ++t) {
    for (Eigen::Index e = 0; e < grads[t].size(); ++e, ++k) {
      EXPECT_NEAR(grads[t].data()[e], ref(k), 1e-4 * std::max(1.0, std::abs(ref(k))))
          << "param " << t << " element " << e;
    }
  }
  // The conv2d tag carries the layer's geometry and records the input images (B rows), and B·T
  // rows of output gradients; its per-example gradients sum to the batch gradient.
  const LayerTag &tag = model.tags()[0];
  EXPECT_EQ(tag.kind, TagKind::conv2d);
  EXPECT_EQ(tag.locations, 6);
  ASSERT_TRUE(tag.geometry.has_value());
  EXPECT_EQ(tag.geometry->locations(), 6);
  EXPECT_EQ(tag.geometry->patch_size(), tag.input_dim);
  const TagRecord &rec = model.record(0);
  EXPECT_EQ(rec.inputs, batch.inputs);
  EXPECT_EQ(rec.output_grads.rows(), 18);
  const Matrix per = per_example_gradients(tag, rec.inputs, rec.output_grads);
  ASSERT_EQ(per.rows(), 3);
  const Matrix summed = per.colwise().sum();
  for (Eigen::Index e = 0; e < grads[0].size(); ++e)
    EXPECT_NEAR(summed(0, e), grads[0].data()[e], 1e-5);
  for (Eigen::Index e = 0; e < grads[1].size(); ++e) {
    EXPECT_NEAR(summed(0, grads[0].size() + e), grads[1].data()[e], 1e-5);
  }

  Params t;
  for (const Matrix &p : params)
    t.push_back(random_matrix(p.rows(), p.cols(), rng));
  const Matrix jv = model.jvp(t);
  const double h = 1e-6;
  std::vector<MatrixXd> pp = to_double(params), pm = pp;
  for (size_t i = 0; i < pp.size(); ++i) {
    pp[i] += h * t[i].cast<double>();
    pm[i] -= h * t[i].cast<double>();
  }
  EXPECT_LT(rel_err(jv.cast<double>(), (forward(net, pp, x) - forward(net, pm, x)) / (2 * h)),
            1e-4);
}

// col2im is im2col's adjoint: <im2col(x), P> = <x, col2im(P)> for any images x and patches P,
// with strides and padding that leave pixels unread and windows overhanging the image.
// The curvature estimator's passes skip the parameter gradients; the records they leave must be
// the ones a full backward leaves (every layer type, dense and conv2d, with and without bias).
TEST(kfacLayers, BackwardRecordsMatchTheFullBackward) {
  struct Case {
    std::vector<RefLayer> net;
    int input_dim, batch;
  };
  for (const Case &c : {Case{every_layer_net(), 3, 5}, Case{conv_net(), 40, 3}}) {
    Sequential model = build(c.net, c.input_dim);
    std::mt19937 rng(31);
    const Params params = model.init_params(rng);
    Batch batch;
    batch.inputs = random_matrix(c.batch, c.input_dim, rng);
    const Matrix cot = random_matrix(c.batch, model.output_dim(), rng);
    const Matrix other = random_matrix(c.batch, model.output_dim(), rng);
    model.forward(params, batch);
    model.backward(other); // records of another cotangent, to be overwritten
    model.backward_records(cot);
    std::vector<Matrix> got;
    for (size_t t = 0; t < model.tags().size(); ++t)
      got.push_back(model.record(static_cast<int>(t)).output_grads);
    model.backward(cot);
    ASSERT_FALSE(got.empty());
    for (size_t t = 0; t < got.size(); ++t) {
      const Matrix &want = model.record(static_cast<int>(t)).output_grads;
      ASSERT_EQ(got[t].rows(), want.rows()) << model.tags()[t].name;
      ASSERT_EQ(got[t].cols(), want.cols()) << model.tags()[t].name;
      EXPECT_GT(want.norm(), 0.0f) << model.tags()[t].name;
      EXPECT_LT(rel_err(got[t].cast<double>(), want.cast<double>()), 1e-6) << model.tags()[t].name;
    }
  }
  Sequential fresh = build(every_layer_net(), 3);
  EXPECT_THROW(fresh.backward_records(Matrix::Zero(5, 2)), Error);
}

// A user's layer that knows nothing of backward_records: the default must run its backward into
// scratch gradients (it writes grads[0]) and leave the other layers' records right.
class UserScale : public Layer {
public:
  explicit UserScale(int dim) : dim_(dim) {}
  std::string kind() const override { return "user_scale"; }
  std::vector<ParamShape> param_shapes() const override { return {{1, dim_, "s"}}; }
  int output_dim(int input_dim) const override { return input_dim; }
  void initialize(Matrix *params, std::mt19937 &) const override {
    params[0] = Matrix::Constant(1, dim_, 1.5f);
  }
  Matrix forward(const Matrix *params, const Matrix &x, TagRecord *) override {
    x_ = x;
    return x.array().rowwise() * params[0].row(0).array();
  }
  Matrix backward(const Matrix *params, const Matrix &dy, Matrix *grads, TagRecord *) override {
    ++backward_calls;
    grads[0] += x_.cwiseProduct(dy).colwise().sum();
    return dy.array().rowwise() * params[0].row(0).array();
  }
  Matrix jvp(const Matrix *, const Matrix *, const Matrix &dx) override { return dx; }

  int backward_calls = 0; // so a test can see that a pass ran it

private:
  int dim_;
  Matrix x_;
};

TEST(kfacLayers, BackwardRecordsRunsAUserLayersBackward) {
  Sequential model(3);
  model.add<Dense>(3, 4, Activation::tanh);
  model.add<UserScale>(4);
  model.add<Dense>(4, 2);
  std::mt19937 rng(41);
  const Params params = model.init_params(rng);
  Batch batch;
  batch.inputs = random_matrix(6, 3, rng);
  const Matrix cot = random_matrix(6, 2, rng);
  model.forward(params, batch);
  model.backward_records(cot);
  const Matrix first = model.record(0).output_grads;
  model.backward(cot);
  EXPECT_GT(first.norm(), 0.0f);
  EXPECT_LT(rel_err(first.cast<double>(), model.record(0).output_grads.cast<double>()), 1e-6);
}

// A model's first layer skips its input gradient: the parameter gradients and records it leaves
// must be those of the full backward (the fused kernel), for every activation, with and without
// bias, dense and conv2d.
TEST(kfacLayers, FirstLayerPassesWithoutInputGradMatchTheFullOnes) {
  std::mt19937 rng(51);
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<int> input_dims;
  for (Activation act :
       {Activation::identity, Activation::tanh, Activation::relu, Activation::sigmoid}) {
    for (bool bias : {true, false}) {
      layers.push_back(std::make_unique<Dense>(7, 129, act, bias));
      input_dims.push_back(7);
    }
  }
  // 5 x 6 images, 2 channels, 3 output channels, 3 x 3 kernels, stride 2, padding 1.
  layers.push_back(std::make_unique<Conv2D>(5, 6, 2, 3, 3, 2, 1, Activation::tanh, true));
  input_dims.push_back(5 * 6 * 2);
  for (size_t l = 0; l < layers.size(); ++l) {
    Layer &layer = *layers[l];
    std::vector<Matrix> params;
    for (const ParamShape &s : layer.param_shapes())
      params.push_back(random_matrix(s.rows, s.cols, rng));
    const Matrix x = random_matrix(9, input_dims[l], rng);
    TagRecord full, lean;
    const Matrix y = layer.forward(params.data(), x, &full);
    lean.inputs = full.inputs;
    const Matrix dy = random_matrix(y.rows(), y.cols(), rng);
    std::vector<Matrix> want, got;
    for (const Matrix &p : params) {
      want.push_back(Matrix::Constant(p.rows(), p.cols(), 0.25f)); // adds, not assigns
      got.push_back(want.back());
    }
    layer.backward(params.data(), dy, want.data(), &full);
    layer.backward_without_input_grad(params.data(), dy, got.data(), &lean);
    const std::string what = layer.kind() + " " + std::to_string(l);
    for (size_t t = 0; t < params.size(); ++t)
      EXPECT_LT(rel_err(got[t].cast<double>(), want[t].cast<double>()), 1e-5)
          << what << " param " << t;
    EXPECT_GT(full.output_grads.norm(), 0.0f) << what;
    EXPECT_LT(rel_err(lean.output_grads.cast<double>(), full.output_grads.cast<double>()), 1e-6)
        << what;
    TagRecord records_only;
    layer.backward_records_without_input_grad(params.data(), dy, &records_only);
    EXPECT_LT(rel_err(records_only.output_grads.cast<double>(), full.output_grads.cast<double>()),
              1e-6)
        << what;
    // Without a record (an untagged use) the pass fails nowhere and leaves the layer's forward
    // state alone: a recorded pass after it still gives the full backward's records.
    EXPECT_NO_THROW(layer.backward_records_without_input_grad(params.data(), dy, nullptr)) << what;
    TagRecord after_untagged;
    layer.backward_records_without_input_grad(params.data(), dy, &after_untagged);
    EXPECT_LT(rel_err(after_untagged.output_grads.cast<double>(), full.output_grads.cast<double>()),
              1e-6)
        << what;
  }
}

// A user's layer first in the model: the default first-layer passes run its backward.
TEST(kfacLayers, AUserLayerFirstStillGetsItsGradient) {
  Sequential model(3);
  const UserScale &scale = model.add<UserScale>(3);
  model.add<Dense>(3, 2, Activation::tanh);
  std::mt19937 rng(61);
  const Params params = model.init_params(rng);
  Batch batch;
  batch.inputs = random_matrix(4, 3, rng);
  const Matrix cot = random_matrix(4, 2, rng);
  model.forward(params, batch);
  const Params grads = model.backward(cot);
  // d/ds of Σ cot ⊙ tanh((x ⊙ s) W + b) = Σ_rows x ⊙ (dz Wᵀ), dz = cot ⊙ (1 - y²).
  const Matrix y = model.forward(params, batch);
  const Matrix dz = cot.array() * (1.0f - y.array().square());
  const Matrix want = batch.inputs.cwiseProduct(dz * params[1].transpose()).colwise().sum();
  EXPECT_LT(rel_err(grads[0].cast<double>(), want.cast<double>()), 1e-5);
  // The records pass runs the user layer's backward too (into scratch), without throwing, and
  // leaves the dense tag's per-example output gradients dz.
  const int calls = scale.backward_calls;
  EXPECT_NO_THROW(model.backward_records(cot));
  EXPECT_EQ(scale.backward_calls, calls + 1);
  EXPECT_LT(rel_err(model.record(0).output_grads.cast<double>(), dz.cast<double>()), 1e-5);
}

TEST(kfacLayers, Col2imIsTheAdjointOfIm2col) {
  kernels::PatchGeometry g;
  g.height = 5, g.width = 6, g.channels = 3, g.kernel_h = 3, g.kernel_w = 2;
  g.stride_h = 2, g.stride_w = 3, g.pad_h = 1, g.pad_w = 0;
  std::mt19937 rng(33);
  const Matrix x = random_matrix(4, g.image_size(), rng);
  const Matrix p = random_matrix(4 * g.locations(), g.patch_size(), rng);
  const Matrix px = im2col(x, g), cp = col2im(p, g);
  ASSERT_EQ(px.rows(), p.rows());
  ASSERT_EQ(cp.cols(), x.cols());
  const double lhs = px.cast<double>().cwiseProduct(p.cast<double>()).sum();
  const double rhs = x.cast<double>().cwiseProduct(cp.cast<double>()).sum();
  // col2im sums in float: the tolerance scales with the sum of the terms' magnitudes.
  const double scale = px.cast<double>().cwiseProduct(p.cast<double>()).cwiseAbs().sum();
  EXPECT_NEAR(lhs, rhs, 1e-6 * scale);
  EXPECT_THROW(im2col(random_matrix(4, g.image_size() + 1, rng), g), Error);
  EXPECT_THROW(col2im(random_matrix(3, g.patch_size(), rng), g), Error);
}

TEST(kfacLayers, TagsDeclareKindsNamesAndParameters) {
  Fixture f;
  const std::vector<LayerTag> &tags = f.model.tags();
  ASSERT_EQ(tags.size(), 6u);
  EXPECT_EQ(tags[0].name, "dense_0");
  EXPECT_EQ(tags[0].params, (std::vector<int>{0, 1}));
  EXPECT_TRUE(tags[0].has_bias);
  EXPECT_EQ(tags[1].kind, TagKind::scale_and_shift);
  EXPECT_EQ(tags[2].kind, TagKind::generic);
  EXPECT_EQ(tags[2].output_dim, 4);
  EXPECT_EQ(tags[4].name, "dense_2");
  EXPECT_FALSE(tags[4].has_bias);
  EXPECT_EQ(tags[4].params, (std::vector<int>{7}));
}

TEST(kfacLayers, ShapeErrorsNameTheArgument) {
  Fixture f;
  Batch bad;
  bad.inputs = Matrix::Zero(2, 4);
  try {
    f.model.forward(f.params, bad);
    FAIL() << "expected hkfac::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("batch.inputs"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Sequential(3).add<Dense>(4, 2), Error);
  f.model.forward(f.params, f.batch);
  EXPECT_THROW(f.model.backward(Matrix::Zero(5, 3)), Error);
}

// Sizes are ints downstream (ParamShape, LayerTag, the blocks' dimensions): a layer whose
// parameter count or output width overflows int is refused when built, naming it and the size,
// instead of wrapping (Dense(65536, 65536) had a diagonal block of dimension 0).
TEST(kfacLayers, SizesBeyondIntAreRefusedNamingTheLayerAndTheSize) {
  expect_error_names([] { Dense(65536, 65536, Activation::identity, false); },
                     {"Dense(65536, 65536)", "parameter count", "4294967296"});
  expect_error_names([] { Dense(4, 2000000000); },
                     {"Dense(4, 2000000000)", "(w and b)", "10000000000"});
  // 46341·46340 < 2^31 - 1 < 46342·46340: the bias is what overflows.
  EXPECT_NO_THROW(Dense(46341, 46340, Activation::identity, false));
  expect_error_names([] { Dense(46341, 46340); }, {"2147488280"});
  expect_error_names([] { Conv2D(30000, 30000, 2, 3, 1); },
                     {"Conv2D(30000 x 30000 x 2 -> 3, kernel 1", "output width", "2700000000"});
  expect_error_names([] { Conv2D(1, 1, 50000, 50000, 1); },
                     {"Conv2D(1 x 1 x 50000 -> 50000", "parameter count", "2500050000"});
  // A 1 x 1 image padded by 40000 has 80001² locations.
  expect_error_names([] { Conv2D(1, 1, 1, 1, 1, 1, 40000); }, {"output locations", "6400160001"});
  expect_error_names([] { ScaleAndShift(1200000000); },
                     {"ScaleAndShift(1200000000)", "2400000000"});
  EXPECT_NO_THROW(ScaleAndShift(1200000000, true, false));
}

// A user's layer is checked when appended: its parameters' sizes and its tag's indices.
class UserLayer : public Layer {
public:
  UserLayer(std::vector<ParamShape> shapes, std::vector<int> tagged)
      : shapes_(std::move(shapes)), tagged_(std::move(tagged)) {}
  std::string kind() const override { return "user"; }
  std::vector<ParamShape> param_shapes() const override { return shapes_; }
  int output_dim(int input_dim) const override { return input_dim; }
  std::optional<LayerTag> tag() const override {
    LayerTag t;
    t.params = tagged_;
    return t;
  }
  void initialize(Matrix *, std::mt19937 &) const override { throw std::bad_alloc(); }
  Matrix forward(const Matrix *, const Matrix &x, TagRecord *) override { return x; }
  Matrix backward(const Matrix *, const Matrix &dy, Matrix *, TagRecord *) override { return dy; }
  Matrix jvp(const Matrix *, const Matrix *, const Matrix &dx) override { return dx; }

private:
  std::vector<ParamShape> shapes_;
  std::vector<int> tagged_;
};

TEST(kfacLayers, AppendChecksAUserLayersSizesAndTag) {
  Sequential m(3);
  m.add<Dense>(3, 3);
  expect_error_names(
      [&] {
        m.add<UserLayer>(std::vector<ParamShape>{{70000, 70000, "w"}}, std::vector<int>{0});
      },
      {"layer 1 (user)", "parameter 'w'", "4900000000"});
  expect_error_names(
      [&] {
        m.add<UserLayer>(std::vector<ParamShape>{{-1, 2, "w"}}, std::vector<int>{0});
      },
      {"layer 1 (user)", "negative extent"});
  // Each fits, the generic tag's block over both does not.
  expect_error_names(
      [&] {
        m.add<UserLayer>(std::vector<ParamShape>{{40000, 40000, "a"}, {40000, 40000, "b"}},
                         std::vector<int>{0, 1});
      },
      {"tagged parameter count", "3200000000"});
  expect_error_names(
      [&] {
        m.add<UserLayer>(std::vector<ParamShape>{{1, 3, "w"}}, std::vector<int>{1});
      },
      {"tag names parameter 1"});
  // Refused layers leave the model as it was.
  EXPECT_EQ(m.num_layers(), 1u);
  EXPECT_EQ(m.param_shapes().size(), 2u);
  EXPECT_EQ(m.tags().size(), 1u);
}

// Sizes that fit in int can still exceed memory: init_params names the layer instead of letting
// a bare std::bad_alloc through.
TEST(kfacLayers, InitParamsOutOfMemoryNamesTheLayer) {
  Sequential m(3);
  m.add<Dense>(3, 3);
  m.add<UserLayer>(std::vector<ParamShape>{{2, 3, "w"}}, std::vector<int>{0});
  std::mt19937 rng(1);
  expect_error_names([&] { m.init_params(rng); },
                     {"init_params", "out of memory", "layer 1 (user)", "6 floats (24 bytes)"});
}

} // namespace
} // namespace hkfac::kfac
