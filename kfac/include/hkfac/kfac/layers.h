// The layer library: Dense, activations, ScaleAndShift, Bias, and Sequential, the Model that
// chains them. Dense layers run on the generated dense forward/backward kernels.
#pragma once

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "hkfac/kernels/dense.h"
#include "hkfac/kfac/model.h"

namespace hkfac::kfac {

using kernels::Activation;
const char *activation_name(Activation act);

// One stage of a Sequential model.
//
// A layer sees only its own parameters (`params` points at the first of them, in the order of
// param_shapes()). forward caches what backward and jvp need, so backward may be called any
// number of times after one forward — the curvature estimator does exactly that, one call per
// cotangent. Tagged layers write their TagRecord (inputs on forward, per-example output gradients
// on backward); untagged layers get a null record.
class Layer {
public:
  virtual ~Layer() = default;

  virtual std::string kind() const = 0;
  virtual std::vector<ParamShape> param_shapes() const { return {}; }
  // Output width for an input of width `input_dim` (throws hkfac::Error when it does not fit).
  virtual int output_dim(int input_dim) const = 0;
  virtual void initialize(Matrix *params, std::mt19937 &rng) const;
  // The tag this layer declares, with `params` indices relative to the layer's first parameter
  // (Sequential offsets them); nullopt for untagged layers.
  virtual std::optional<LayerTag> tag() const { return std::nullopt; }

  virtual Matrix forward(const Matrix *params, const Matrix &x, TagRecord *record) = 0;
  // Returns dx; *adds* the batch-summed parameter gradients into grads[0..].
  virtual Matrix backward(const Matrix *params, const Matrix &dy, Matrix *grads,
                          TagRecord *record) = 0;
  // dx and the record without the parameter gradients (Model::backward_records: the curvature
  // estimator's passes). The default runs backward into scratch gradients; the library's layers
  // with parameters do not form them.
  virtual Matrix backward_records(const Matrix *params, const Matrix &dy, TagRecord *record);
  // backward and backward_records for a layer whose input gradient nobody reads (a Sequential's
  // first layer: its input is data). The defaults call those and drop dx; Dense and Conv2D skip
  // the dx product (and Conv2D its col2im), the largest product of the pass when the input is
  // wide, as an autoencoder's 784-pixel images are.
  virtual void backward_without_input_grad(const Matrix *params, const Matrix &dy, Matrix *grads,
                                           TagRecord *record);
  virtual void backward_records_without_input_grad(const Matrix *params, const Matrix &dy,
                                                   TagRecord *record);
  virtual Matrix jvp(const Matrix *params, const Matrix *tangents, const Matrix &dx) = 0;
};

// y = act(x W + b), the dense tag on the pre-activation s = x W + b. W is Glorot-uniform
// initialised, b zero. The activation is fused into the kernel.
class Dense : public Layer {
public:
  Dense(int input_dim, int output_dim, Activation act = Activation::identity, bool use_bias = true);
  std::string kind() const override { return "dense"; }
  std::vector<ParamShape> param_shapes() const override;
  int output_dim(int input_dim) const override;
  void initialize(Matrix *params, std::mt19937 &rng) const override;
  std::optional<LayerTag> tag() const override;
  Matrix forward(const Matrix *params, const Matrix &x, TagRecord *record) override;
  Matrix backward(const Matrix *params, const Matrix &dy, Matrix *grads,
                  TagRecord *record) override;
  Matrix backward_records(const Matrix *params, const Matrix &dy, TagRecord *record) override;
  void backward_without_input_grad(const Matrix *params, const Matrix &dy, Matrix *grads,
                                   TagRecord *record) override;
  void backward_records_without_input_grad(const Matrix *params, const Matrix &dy,
                                           TagRecord *record) override;
  Matrix jvp(const Matrix *params, const Matrix *tangents, const Matrix &dx) override;

private:
  int input_dim_, output_dim_;
  Activation act_;
  bool use_bias_;
  Matrix x_, y_; // cached forward input and output
};

// A 2-D convolution over NHWC images, each example one row of height·width·channels values
// (row-major over (h, w, c)); the output is laid out the same way (out_h, out_w, out_channels).
// Zero padding of `padding` on every side, square kernel and stride. It runs as a dense layer over
// image patches (im2col): the fused dense kernels compute act(P K + b) for the patch matrix P. The
// conv2d tag carries the layer's geometry and records the input images (the KFC block reads the
// patches from them with the patch covariance kernel) and the per-location pre-activation
// gradients.
class Conv2D : public Layer {
public:
  Conv2D(int height, int width, int in_channels, int out_channels, int kernel_size, int stride = 1,
         int padding = 0, Activation act = Activation::identity, bool use_bias = true);
  std::string kind() const override { return "conv2d"; }
  std::vector<ParamShape> param_shapes() const override;
  int output_dim(int input_dim) const override;
  void initialize(Matrix *params, std::mt19937 &rng) const override;
  std::optional<LayerTag> tag() const override;
  Matrix forward(const Matrix *params, const Matrix &x, TagRecord *record) override;
  Matrix backward(const Matrix *params, const Matrix &dy, Matrix *grads,
                  TagRecord *record) override;
  Matrix backward_records(const Matrix *params, const Matrix &dy, TagRecord *record) override;
  void backward_without_input_grad(const Matrix *params, const Matrix &dy, Matrix *grads,
                                   TagRecord *record) override;
  void backward_records_without_input_grad(const Matrix *params, const Matrix &dy,
                                           TagRecord *record) override;
  Matrix jvp(const Matrix *params, const Matrix *tangents, const Matrix &dx) override;

  int out_height() const { return geometry_.out_h(); }
  int out_width() const { return geometry_.out_w(); }

  const kernels::PatchGeometry &geometry() const { return geometry_; }

private:
  // The input image, kernel, stride and padding: every size but out_c_ derives from it.
  kernels::PatchGeometry geometry_;
  int out_c_;
  Activation act_;
  bool use_bias_;
  Matrix patches_, y_; // cached forward patches and (B·T x C_out) output
};

// An elementwise activation without parameters.
class ActivationLayer : public Layer {
public:
  explicit ActivationLayer(Activation act) : act_(act) {}
  std::string kind() const override { return activation_name(act_); }
  int output_dim(int input_dim) const override { return input_dim; }
  Matrix forward(const Matrix *params, const Matrix &x, TagRecord *record) override;
  Matrix backward(const Matrix *params, const Matrix &dy, Matrix *grads,
                  TagRecord *record) override;
  Matrix jvp(const Matrix *params, const Matrix *tangents, const Matrix &dx) override;

private:
  Activation act_;
  Matrix y_;
};

// y = x ⊙ scale + shift (per feature), the scale_and_shift tag. scale starts at 1, shift at 0.
class ScaleAndShift : public Layer {
public:
  explicit ScaleAndShift(int dim, bool has_scale = true, bool has_shift = true);
  std::string kind() const override { return "scale_and_shift"; }
  std::vector<ParamShape> param_shapes() const override;
  int output_dim(int input_dim) const override;
  void initialize(Matrix *params, std::mt19937 &rng) const override;
  std::optional<LayerTag> tag() const override;
  Matrix forward(const Matrix *params, const Matrix &x, TagRecord *record) override;
  Matrix backward(const Matrix *params, const Matrix &dy, Matrix *grads,
                  TagRecord *record) override;
  Matrix backward_records(const Matrix *params, const Matrix &dy, TagRecord *record) override;
  Matrix jvp(const Matrix *params, const Matrix *tangents, const Matrix &dx) override;

private:
  int dim_;
  bool has_scale_, has_shift_;
  Matrix x_;
};

// y = x + b with a generic tag: the library's example of a parameter no structured block knows,
// curvature-estimated from its per-example gradients (NaiveDiagonal by default).
class Bias : public Layer {
public:
  explicit Bias(int dim);
  std::string kind() const override { return "bias"; }
  std::vector<ParamShape> param_shapes() const override;
  int output_dim(int input_dim) const override;
  std::optional<LayerTag> tag() const override;
  Matrix forward(const Matrix *params, const Matrix &x, TagRecord *record) override;
  Matrix backward(const Matrix *params, const Matrix &dy, Matrix *grads,
                  TagRecord *record) override;
  Matrix backward_records(const Matrix *params, const Matrix &dy, TagRecord *record) override;
  Matrix jvp(const Matrix *params, const Matrix *tangents, const Matrix &dx) override;

private:
  int dim_;
};

// A chain of layers, the library's Model. Parameters are the layers' parameters in order; tags
// are named "<kind>_<n>" with n counting layers of that kind (e.g. dense_0, dense_1).
class Sequential : public Model {
public:
  explicit Sequential(int input_dim);

  // Appends a layer (its input width is the current output width) and returns it.
  template <typename L, typename... Args> L &add(Args &&...args) {
    auto layer = std::make_unique<L>(std::forward<Args>(args)...);
    L &ref = *layer;
    append(std::move(layer));
    return ref;
  }
  void append(std::unique_ptr<Layer> layer);

  int input_dim() const { return input_dim_; }
  int output_dim() const { return output_dim_; }
  size_t num_layers() const { return layers_.size(); }

  // Freshly initialised parameters (Glorot uniform for dense weights), reproducible from rng.
  Params init_params(std::mt19937 &rng) const;

  std::vector<ParamShape> param_shapes() const override { return shapes_; }
  const std::vector<LayerTag> &tags() const override { return tags_; }
  Matrix forward(const Params &params, const Batch &batch) override;
  Params backward(const Matrix &output_cotangent) override;
  void backward_records(const Matrix &output_cotangent) override;
  Matrix jvp(const Params &tangent) override;
  const TagRecord &record(int tag) const override;

private:
  // Backward through every layer; parameter gradients go to `grads` unless it is null.
  void run_backward(const Matrix &output_cotangent, Params *grads, const char *who);
  struct Stage {
    std::unique_ptr<Layer> layer;
    int first_param = 0;
    int tag = -1; // index into tags_, or -1
  };
  int input_dim_, output_dim_;
  std::vector<Stage> layers_;
  std::vector<ParamShape> shapes_;
  std::vector<LayerTag> tags_;
  std::vector<TagRecord> records_;
  const Params *params_ = nullptr; // of the last forward
  Eigen::Index batch_size_ = 0;
};

} // namespace hkfac::kfac
