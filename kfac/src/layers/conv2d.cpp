// Conv2D as a dense layer over im2col patches, on the generated dense kernels.
#include <cmath>

#include "affine_jvp.h"
#include "affine_parameter_grads.h"
#include "checked_size.h"
#include "hkfac/error.h"
#include "hkfac/kfac/layers.h"
#include "kernel_dispatch.h"

namespace hkfac::kfac {

Conv2D::Conv2D(int height, int width, int in_channels, int out_channels, int kernel_size,
               int stride, int padding, Activation act, bool use_bias)
    : out_c_(out_channels), act_(act), use_bias_(use_bias) {
  if (height < 1 || width < 1 || in_channels < 1 || out_channels < 1 || kernel_size < 1 ||
      stride < 1 || padding < 0) {
    throw Error("Conv2D: sizes, kernel_size and stride must be >= 1 and padding >= 0");
  }
  geometry_.height = height, geometry_.width = width, geometry_.channels = in_channels;
  geometry_.kernel_h = geometry_.kernel_w = kernel_size;
  geometry_.stride_h = geometry_.stride_w = stride;
  geometry_.pad_h = geometry_.pad_w = padding;
  geometry_.validate("Conv2D"); // names the kernel that exceeds the padded image, or overflow
  // The geometry's accessors multiply in int: recompute in 64 bits what they would return.
  const std::string layer = "Conv2D(" + std::to_string(height) + " x " + std::to_string(width) +
                            " x " + std::to_string(in_channels) + " -> " +
                            std::to_string(out_channels) + ", kernel " +
                            std::to_string(kernel_size) + ", stride " + std::to_string(stride) +
                            ", padding " + std::to_string(padding) + ")";
  const long long out_h = (height + 2LL * padding - kernel_size) / stride + 1,
                  out_w = (width + 2LL * padding - kernel_size) / stride + 1;
  const long long locations = detail::checked_int(out_h * out_w, layer, "the output locations");
  detail::checked_int(locations * out_channels, layer, "the output width (locations x channels)");
  const long long patch = static_cast<long long>(kernel_size) * kernel_size * in_channels;
  detail::checked_int((patch + (use_bias ? 1 : 0)) * out_channels, layer,
                      use_bias ? "the parameter count (kernel and b)" : "the parameter count");
}

std::vector<ParamShape> Conv2D::param_shapes() const {
  std::vector<ParamShape> s{{geometry_.patch_size(), out_c_, "kernel"}};
  if (use_bias_)
    s.push_back({1, out_c_, "b"});
  return s;
}

int Conv2D::output_dim(int input_dim) const {
  if (input_dim != geometry_.image_size()) {
    throw Error("Conv2D: input width " + std::to_string(input_dim) + " is not height·width·" +
                "channels = " + std::to_string(geometry_.image_size()));
  }
  return geometry_.locations() * out_c_;
}

void Conv2D::initialize(Matrix *params, std::mt19937 &rng) const {
  // Glorot uniform with the receptive field in both fans.
  const int window = geometry_.kernel_h * geometry_.kernel_w;
  const float fan_in = static_cast<float>(geometry_.patch_size()),
              fan_out = static_cast<float>(window * out_c_);
  const float limit = std::sqrt(6.0f / (fan_in + fan_out));
  std::uniform_real_distribution<float> u(-limit, limit);
  params[0] = Matrix::NullaryExpr(geometry_.patch_size(), out_c_, [&]() { return u(rng); });
  if (use_bias_)
    params[1] = Matrix::Zero(1, out_c_);
}

std::optional<LayerTag> Conv2D::tag() const {
  LayerTag t;
  t.kind = TagKind::conv2d;
  t.params = use_bias_ ? std::vector<int>{0, 1} : std::vector<int>{0};
  t.has_bias = use_bias_;
  t.input_dim = geometry_.patch_size();
  t.output_dim = out_c_;
  t.locations = geometry_.locations();
  t.geometry = geometry_;
  return t;
}

namespace {
// (B·T) x C_out <-> B x (T·C_out): the same row-major storage read two ways.
Matrix reshaped(const Matrix &m, Eigen::Index rows, Eigen::Index cols) {
  return Eigen::Map<const Matrix>(m.data(), rows, cols);
}
} // namespace

Matrix Conv2D::forward(const Matrix *params, const Matrix &x, TagRecord *record) {
  patches_ = im2col(x, geometry_);
  ops::dense_forward(y_, patches_, params[0], use_bias_ ? &params[1] : nullptr, act_);
  // The images, not the patches: k·k times smaller, and what the patch covariance kernel reads.
  if (record)
    record->inputs = x;
  return reshaped(y_, x.rows(), static_cast<Eigen::Index>(geometry_.locations()) * out_c_);
}

Matrix Conv2D::backward(const Matrix *params, const Matrix &dy, Matrix *grads, TagRecord *record) {
  const Matrix dy_rows = reshaped(dy, y_.rows(), out_c_);
  Matrix dz, dpatches, dw, db;
  ops::dense_backward(dz, dpatches, dw, db, dy_rows, y_, patches_, params[0], act_);
  grads[0] += dw;
  if (use_bias_)
    grads[1] += db;
  if (record)
    record->output_grads = std::move(dz);
  return col2im(dpatches, geometry_);
}

Matrix Conv2D::backward_records(const Matrix *params, const Matrix &dy, TagRecord *record) {
  Matrix dz, dpatches;
  ops::dense_backward_input(dz, dpatches, reshaped(dy, y_.rows(), out_c_), y_, params[0], act_);
  if (record)
    record->output_grads = std::move(dz);
  return col2im(dpatches, geometry_);
}

void Conv2D::backward_without_input_grad(const Matrix *, const Matrix &dy, Matrix *grads,
                                         TagRecord *record) {
  detail::affine_parameter_grads(reshaped(dy, y_.rows(), out_c_), y_, patches_, act_, grads,
                                 use_bias_, record);
}

void Conv2D::backward_records_without_input_grad(const Matrix *, const Matrix &dy,
                                                 TagRecord *record) {
  if (record)
    record->output_grads = detail::times_derivative(reshaped(dy, y_.rows(), out_c_), y_, act_);
}

Matrix Conv2D::jvp(const Matrix *params, const Matrix *tangents, const Matrix &dx) {
  const Matrix ds = detail::affine_jvp(
      dx, [&] { return im2col(dx, geometry_); }, patches_, params[0], tangents[0],
      use_bias_ ? &tangents[1] : nullptr, y_, act_);
  return reshaped(ds, dx.rows(), static_cast<Eigen::Index>(geometry_.locations()) * out_c_);
}

} // namespace hkfac::kfac
