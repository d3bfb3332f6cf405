// The cost-model network behind kfac's Model interface.
#include "hkfac/cost_model/network.h"

#include <cmath>
#include <cstring>

#include "hkfac/cost_model/schedule_batch.h"
#include "hkfac/error.h"

namespace hkfac::cost_model {

namespace {

constexpr int kGrid = kPipelineFeatureRows * kPipelineFeatureTypes; // 280

// A Halide view of a parameter matrix's floats with the weight buffer's dimensions.
Buffer<float> view(const kfac::Matrix &m, const std::vector<int> &shape) {
  return Buffer<float>(const_cast<float *>(m.data()), shape);
}

kfac::Matrix copy_to_matrix(const Buffer<float> &b, int rows, int cols, const char *what) {
  if (static_cast<long>(b.number_of_elements()) != static_cast<long>(rows) * cols)
    throw Error(std::string("cost model: '") + what + "' has the wrong number of elements");
  kfac::Matrix m(rows, cols);
  std::memcpy(m.data(), b.data(), sizeof(float) * m.size());
  return m;
}

// σ'(x) of head1's raw filter: the Jacobian of the sigmoid that keeps its weights positive.
kfac::Matrix sigmoid_slope(const kfac::Matrix &raw) {
  const kfac::Matrix sig = (1.0f + (-raw.array()).exp()).inverse().matrix();
  return sig.array() * (1.0f - sig.array());
}

} // namespace

kernels::CostModelWeights kernel_weights(const Weights &w) {
  return {w.head1_filter, w.head1_bias, w.head2_filter, w.head2_bias, w.conv1_filter, w.conv1_bias};
}

kfac::Params params_from_weights(const Weights &w) {
  validate_weights(w);
  const int S = w.schedule_features();
  return {copy_to_matrix(w.head1_filter, kGrid, kHead1Channels, "head1_filter"),
          copy_to_matrix(w.head1_bias, 1, kHead1Channels, "head1_bias"),
          copy_to_matrix(w.head2_filter, S, kHead2Channels, "head2_filter"),
          copy_to_matrix(w.head2_bias, 1, kHead2Channels, "head2_bias"),
          copy_to_matrix(w.conv1_filter, kConv1Channels, kConv1Channels, "conv1_filter"),
          copy_to_matrix(w.conv1_bias, 1, kConv1Channels, "conv1_bias")};
}

Weights weights_from_params(const kfac::Params &p, int S) {
  if (p.size() != kNumWeightBuffers)
    throw Error("weights_from_params: expected 6 parameter matrices, got " +
                std::to_string(p.size()));
  Weights w = make_weights(S);
  auto buffers = w.buffers();
  for (int i = 0; i < kNumWeightBuffers; ++i) {
    Buffer<float> &b = *buffers[i];
    if (static_cast<long>(b.number_of_elements()) != static_cast<long>(p[i].size())) {
      throw Error(std::string("weights_from_params: parameter '") + kWeightBufferNames[i] +
                  "' has " + std::to_string(p[i].size()) + " values, expected " +
                  std::to_string(b.number_of_elements()));
    }
    std::memcpy(b.data(), p[i].data(), sizeof(float) * p[i].size());
  }
  return w;
}

CostModelNet::CostModelNet(const TrainingData &data, int num_cores, Device device)
    : data_(data), num_cores_(num_cores), device_(device), S_(data.schedule_features) {
  kfac::LayerTag head1;
  head1.kind = kfac::TagKind::generic;
  head1.name = "head1";
  head1.params = {0, 1};
  head1.output_dim = kGrid * kHead1Channels + kHead1Channels;
  kfac::LayerTag head2;
  head2.kind = kfac::TagKind::conv2d;
  head2.name = "head2";
  head2.params = {2, 3};
  head2.has_bias = true;
  head2.input_dim = S_;
  head2.output_dim = kHead2Channels;
  head2.locations = 0;
  kfac::LayerTag conv1 = head2;
  conv1.name = "conv1";
  conv1.params = {4, 5};
  conv1.input_dim = kConv1Channels;
  conv1.output_dim = kConv1Channels;
  tags_ = {head1, head2, conv1};
  records_.resize(tags_.size());
}

std::vector<kfac::ParamShape> CostModelNet::param_shapes() const {
  return {{kGrid, kHead1Channels, "head1_filter"},
          {1, kHead1Channels, "head1_bias"},
          {S_, kHead2Channels, "head2_filter"},
          {1, kHead2Channels, "head2_bias"},
          {kConv1Channels, kConv1Channels, "conv1_filter"},
          {1, kConv1Channels, "conv1_bias"}};
}

kfac::Matrix CostModelNet::example_major(const Buffer<float> &b) const {
  const int F = b.dim(0).extent();
  if (b.dimensions() != 3 || b.dim(1).extent() != B_ || b.dim(2).extent() != T_ ||
      b.dim(0).stride() != 1)
    throw Error("cost model: a training-kernel output is not an (F, batch, stages) buffer with "
                "unit stride in F");
  // Row n·T + s is b(:, n, s): F contiguous floats at n·stride1 + s·stride2.
  kfac::Matrix m(static_cast<Eigen::Index>(B_) * T_, F);
  const float *base = b.data();
  const std::ptrdiff_t s1 = b.dim(1).stride(), s2 = b.dim(2).stride();
  for (int n = 0; n < B_; ++n) {
    for (int s = 0; s < T_; ++s)
      std::memcpy(m.row(static_cast<Eigen::Index>(n) * T_ + s).data(), base + n * s1 + s * s2,
                  sizeof(float) * F);
  }
  return m;
}

void CostModelNet::run_ones_pass() {
  // With a cotangent of ones (and no loss term), the recorded output gradients are
  // ∂p_n/∂(layer output).
  Buffer<float> ones(B_);
  fill(ones, 1.0f);
  kernels::cost_model_train(pipeline_->pipeline_features, schedule_features_,
                            kernel_weights(weights_view_), num_cores_, runtimes_, ones, 0.0f, 0.0f,
                            out_, device_);
  for (Buffer<float> *b : {&out_.predictions, &out_.head2_input, &out_.conv1_input,
                           &out_.head2_out_grad, &out_.conv1_out_grad, &out_.head1_out_grad})
    to_host(*b);
  records_[1].inputs = example_major(out_.head2_input);
  records_[2].inputs = example_major(out_.conv1_input);
  ones_head2_ = example_major(out_.head2_out_grad);
  dp_dc1_ = example_major(out_.conv1_out_grad);

  // head1's per-example gradients: Σ_s pf(:, s) ⊗ ∂p_n/∂algo(:, s), times the sigmoid's slope.
  // The kernel's (8, batch, stages) output is, as it lies in memory, the T x 8B matrix
  // [∂p_1/∂algo ... ∂p_B/∂algo], so every example's product comes out of one pfᵀ G product
  // (280 x 8B); one small product per example cost more (docs/RESULTS.md#cost-model-training).
  const Buffer<float> &dalgo = out_.head1_out_grad;
  if (dalgo.dim(0).stride() != 1 || dalgo.dim(1).stride() != kHead1Channels ||
      dalgo.dim(2).stride() != kHead1Channels * B_)
    throw Error("cost model: head1_out_grad is not a dense (8, batch, stages) buffer");
  const Eigen::Map<const kfac::Matrix> pf(pipeline_->pipeline_features.data(), T_, kGrid);
  const Eigen::Map<const kfac::Matrix> g_all(dalgo.data(), T_,
                                             static_cast<Eigen::Index>(kHead1Channels) * B_);
  const kfac::Matrix slope = sigmoid_slope((*params_)[0]);
  const kfac::Matrix products = pf.transpose() * g_all;
  const Eigen::RowVectorXf bias = g_all.colwise().sum();
  ones_head1_.resize(B_, kGrid * kHead1Channels + kHead1Channels);
  for (int n = 0; n < B_; ++n) {
    float *row = ones_head1_.row(n).data();
    for (int j = 0; j < kGrid; ++j) {
      for (int c = 0; c < kHead1Channels; ++c)
        row[j * kHead1Channels + c] = products(j, n * kHead1Channels + c) * slope(j, c);
    }
    for (int c = 0; c < kHead1Channels; ++c)
      row[kGrid * kHead1Channels + c] = bias(n * kHead1Channels + c);
  }
}

kfac::Matrix CostModelNet::forward(const kfac::Params &params, const kfac::Batch &batch) {
  kfac::check_same_shapes(params, kfac::zero_params(*this), "CostModelNet::forward params");
  const ScheduleBatch which = schedules_of(batch, data_, "CostModelNet::forward");
  pipeline_ = &data_.pipelines[which.pipeline];
  const std::vector<int> &schedules = which.schedules;
  params_ = &params;
  B_ = static_cast<int>(schedules.size());
  T_ = pipeline_->num_stages;
  schedule_features_ = pack_schedule_features(*pipeline_, schedules);
  runtimes_ = Buffer<float>(B_);
  for (int n = 0; n < B_; ++n)
    runtimes_(n) = pipeline_->runtimes_ms[schedules[n]];

  weights_view_ = make_weights(S_);
  auto buffers = weights_view_.buffers();
  for (int i = 0; i < kNumWeightBuffers; ++i) {
    std::vector<int> shape = weight_buffer_shape(i, S_);
    *buffers[i] = view(params[i], shape);
  }

  // The ones pass right away: nearly every forward is followed by backward passes, and the
  // training kernel's predictions make the inference kernel's call redundant. (A forward at a
  // candidate point only, for rho, pays for records it does not use; that is one step in
  // damping_adaptation_interval.)
  run_ones_pass();
  kfac::Matrix predictions(B_, 1);
  for (int n = 0; n < B_; ++n)
    predictions(n, 0) = out_.predictions(n);
  return predictions;
}

void CostModelNet::backward_records(const kfac::Matrix &output_cotangent) {
  if (!params_)
    throw Error("CostModelNet: call forward before backward");
  if (output_cotangent.rows() != B_ || output_cotangent.cols() != 1) {
    throw Error("CostModelNet: the cotangent must be " + std::to_string(B_) + " x 1, got " +
                std::to_string(output_cotangent.rows()) + " x " +
                std::to_string(output_cotangent.cols()));
  }
  // Each schedule's output is one scalar, so every backward pass is the ones pass scaled per
  // example: the optimizer's gradient and curvature passes share forward's kernel run.
  auto scale_rows = [&](const kfac::Matrix &per_stage, kfac::Matrix &out) {
    out.resize(per_stage.rows(), per_stage.cols());
    for (int n = 0; n < B_; ++n) {
      const Eigen::Index first = static_cast<Eigen::Index>(n) * T_;
      out.middleRows(first, T_) = per_stage.middleRows(first, T_) * output_cotangent(n, 0);
    }
  };
  records_[0].output_grads = output_cotangent.col(0).asDiagonal() * ones_head1_;
  scale_rows(ones_head2_, records_[1].output_grads);
  scale_rows(dp_dc1_, records_[2].output_grads);
}

kfac::Params CostModelNet::backward(const kfac::Matrix &output_cotangent) {
  backward_records(output_cotangent);
  kfac::Params grads = kfac::zeros_like(*params_);
  const Eigen::RowVectorXf head1 = records_[0].output_grads.colwise().sum();
  std::memcpy(grads[0].data(), head1.data(), sizeof(float) * grads[0].size());
  grads[1].row(0) = head1.tail(kHead1Channels);
  for (int tag : {1, 2}) {
    const kfac::TagRecord &r = records_[tag];
    const int filter = tags_[tag].params[0], bias = tags_[tag].params[1];
    grads[filter] = r.inputs.transpose() * r.output_grads;
    grads[bias] = r.output_grads.colwise().sum();
  }
  return grads;
}

kfac::Matrix CostModelNet::jvp(const kfac::Params &t) {
  if (!params_)
    throw Error("CostModelNet::jvp: call forward first");
  kfac::check_same_shapes(t, *params_, "CostModelNet::jvp tangent");
  const kfac::Params &p = *params_;
  const Eigen::Map<const kfac::Matrix> pf(pipeline_->pipeline_features.data(), T_, kGrid);
  const kfac::Matrix slope = sigmoid_slope(p[0]);
  // Tangent of the per-stage algorithm embedding, then of the whole 32-wide embedding.
  const kfac::Matrix d_algo = (pf * slope.cwiseProduct(t[0])).rowwise() + t[1].row(0);
  // head2's ReLU passes the tangent where its pre-activation is positive.
  const kfac::Matrix h2pre = (records_[1].inputs * p[2]).rowwise() + p[3].row(0);
  const kfac::Matrix d_h2 = (h2pre.array() > 0.0f).cast<float>().matrix().cwiseProduct(
      kfac::Matrix((records_[1].inputs * t[2]).rowwise() + t[3].row(0)));
  kfac::Matrix d_emb(static_cast<Eigen::Index>(B_) * T_, kConv1Channels);
  for (int n = 0; n < B_; ++n)
    d_emb.block(static_cast<Eigen::Index>(n) * T_, 0, T_, kHead1Channels) = d_algo;
  d_emb.rightCols(kHead2Channels) = d_h2;
  const kfac::Matrix d_c1 = (records_[2].inputs * t[4] + d_emb * p[4]).rowwise() + t[5].row(0);
  const Eigen::VectorXf per_row = dp_dc1_.cwiseProduct(d_c1).rowwise().sum();
  kfac::Matrix jv(B_, 1);
  for (int n = 0; n < B_; ++n)
    jv(n, 0) = per_row.segment(static_cast<Eigen::Index>(n) * T_, T_).sum();
  return jv;
}

} // namespace hkfac::cost_model
