// Sequential: the layer library's Model.
#include <iterator>
#include <new>

#include "checked_size.h"
#include "hkfac/error.h"
#include "hkfac/kfac/layers.h"

namespace hkfac::kfac {

Sequential::Sequential(int input_dim) : input_dim_(input_dim), output_dim_(input_dim) {
  if (input_dim < 1) {
    throw Error("Sequential: input_dim must be >= 1, got " + std::to_string(input_dim));
  }
}

void Sequential::append(std::unique_ptr<Layer> layer) {
  if (!layer)
    throw Error("Sequential::append: 'layer' is null");
  Stage stage;
  stage.first_param = static_cast<int>(shapes_.size());
  const std::string where =
      "Sequential::append: layer " + std::to_string(layers_.size()) + " (" + layer->kind() + ")";
  const int output_dim = layer->output_dim(output_dim_);
  // The library's layers check their sizes when built; a user's layer is checked here.
  std::vector<ParamShape> shapes = layer->param_shapes();
  for (const ParamShape &s : shapes) {
    if (s.rows < 0 || s.cols < 0) {
      throw Error(where + ": parameter '" + s.name + "' has a negative extent (" +
                  std::to_string(s.rows) + " x " + std::to_string(s.cols) + ")");
    }
    detail::checked_int(static_cast<long long>(s.rows) * s.cols, where,
                        "the size of parameter '" + s.name + "'");
  }
  std::optional<LayerTag> t = layer->tag();
  if (t) {
    long long count = 0;
    for (int p : t->params) {
      if (p < 0 || p >= static_cast<int>(shapes.size()))
        throw Error(where + ": its tag names parameter " + std::to_string(p) + ", which it lacks");
      count += static_cast<long long>(shapes[p].rows) * shapes[p].cols;
    }
    // A generic tag's block is as wide as the tagged parameters together.
    if (t->kind == TagKind::generic)
      t->output_dim = detail::checked_int(count, where, "the tagged parameter count");
  }
  output_dim_ = output_dim;
  for (ParamShape &s : shapes)
    shapes_.push_back(std::move(s));
  if (t) {
    int count = 0;
    for (const LayerTag &other : tags_)
      count += other.kind == t->kind ? 1 : 0;
    t->name = std::string(tag_kind_name(t->kind)) + "_" + std::to_string(count);
    for (int &p : t->params)
      p += stage.first_param;
    stage.tag = static_cast<int>(tags_.size());
    tags_.push_back(*t);
    records_.emplace_back();
  }
  for (size_t i = stage.first_param; i < shapes_.size(); ++i) {
    shapes_[i].name = "layer" + std::to_string(layers_.size()) + "/" + shapes_[i].name;
  }
  stage.layer = std::move(layer);
  layers_.push_back(std::move(stage));
}

Params Sequential::init_params(std::mt19937 &rng) const {
  Params p;
  p.reserve(shapes_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Stage &st = layers_[l];
    const size_t end =
        l + 1 < layers_.size() ? static_cast<size_t>(layers_[l + 1].first_param) : shapes_.size();
    // Sizes that fit in int can still exceed memory; say which layer rather than a bare
    // std::bad_alloc.
    try {
      for (size_t i = st.first_param; i < end; ++i)
        p.push_back(Matrix::Zero(shapes_[i].rows, shapes_[i].cols));
      st.layer->initialize(p.data() + st.first_param, rng);
    } catch (const std::bad_alloc &) {
      long long floats = 0;
      for (size_t i = st.first_param; i < end; ++i)
        floats += static_cast<long long>(shapes_[i].rows) * shapes_[i].cols;
      throw Error("Sequential::init_params: out of memory for layer " + std::to_string(l) + " (" +
                  st.layer->kind() + "), whose parameters are " + std::to_string(floats) +
                  " floats (" + std::to_string(4 * floats) + " bytes)");
    }
  }
  return p;
}

Matrix Sequential::forward(const Params &params, const Batch &batch) {
  if (params.size() != shapes_.size()) {
    throw Error("Sequential::forward: 'params' has " + std::to_string(params.size()) +
                " tensors, the model has " + std::to_string(shapes_.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].rows() != shapes_[i].rows || params[i].cols() != shapes_[i].cols) {
      throw Error("Sequential::forward: params[" + std::to_string(i) + "] (" + shapes_[i].name +
                  ") must be " + std::to_string(shapes_[i].rows) + " x " +
                  std::to_string(shapes_[i].cols));
    }
  }
  if (batch.inputs.cols() != input_dim_ || batch.inputs.rows() < 1) {
    throw Error("Sequential::forward: 'batch.inputs' must have >= 1 rows and " +
                std::to_string(input_dim_) + " columns, got " +
                std::to_string(batch.inputs.rows()) + " x " + std::to_string(batch.inputs.cols()));
  }
  params_ = &params;
  batch_size_ = batch.inputs.rows();
  Matrix x = batch.inputs;
  for (Stage &st : layers_) {
    TagRecord *rec = st.tag >= 0 ? &records_[st.tag] : nullptr;
    x = st.layer->forward(params.data() + st.first_param, x, rec);
  }
  return x;
}

void Sequential::run_backward(const Matrix &output_cotangent, Params *grads, const char *who) {
  if (!params_)
    throw Error(std::string("Sequential::") + who + ": called before forward");
  if (output_cotangent.rows() != batch_size_ || output_cotangent.cols() != output_dim_) {
    throw Error(std::string("Sequential::") + who + ": 'output_cotangent' must be " +
                std::to_string(batch_size_) + " x " + std::to_string(output_dim_) + ", got " +
                std::to_string(output_cotangent.rows()) + " x " +
                std::to_string(output_cotangent.cols()));
  }
  Matrix dy = output_cotangent;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    TagRecord *rec = it->tag >= 0 ? &records_[it->tag] : nullptr;
    const Matrix *p = params_->data() + it->first_param;
    Matrix *g = grads ? grads->data() + it->first_param : nullptr;
    if (std::next(it) == layers_.rend()) {
      // The first layer's input is data: nothing reads its gradient.
      if (g)
        it->layer->backward_without_input_grad(p, dy, g, rec);
      else
        it->layer->backward_records_without_input_grad(p, dy, rec);
      break;
    }
    dy = g ? it->layer->backward(p, dy, g, rec) : it->layer->backward_records(p, dy, rec);
  }
}

Params Sequential::backward(const Matrix &output_cotangent) {
  if (!params_)
    throw Error("Sequential::backward: called before forward");
  Params grads = zeros_like(*params_);
  run_backward(output_cotangent, &grads, "backward");
  return grads;
}

void Sequential::backward_records(const Matrix &output_cotangent) {
  run_backward(output_cotangent, nullptr, "backward_records");
}

Matrix Sequential::jvp(const Params &tangent) {
  if (!params_)
    throw Error("Sequential::jvp: called before forward");
  check_same_shapes(*params_, tangent, "Sequential::jvp 'tangent'");
  Matrix dx = Matrix::Zero(batch_size_, input_dim_);
  for (Stage &st : layers_) {
    dx = st.layer->jvp(params_->data() + st.first_param, tangent.data() + st.first_param, dx);
  }
  return dx;
}

const TagRecord &Sequential::record(int tag) const {
  if (tag < 0 || tag >= static_cast<int>(records_.size())) {
    throw Error("Sequential::record: 'tag' " + std::to_string(tag) + " is out of range");
  }
  return records_[tag];
}

} // namespace hkfac::kfac
