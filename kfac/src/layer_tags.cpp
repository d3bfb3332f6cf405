// model.h's helpers: layer-tag kinds, sizes and per-example gradients; a model's zero params.
#include "hkfac/kfac/model.h"

#include "hkfac/error.h"

namespace hkfac::kfac {

const char *tag_kind_name(TagKind kind) {
  switch (kind) {
  case TagKind::dense:
    return "dense";
  case TagKind::conv2d:
    return "conv2d";
  case TagKind::scale_and_shift:
    return "scale_and_shift";
  case TagKind::generic:
    return "generic";
  }
  return "unknown";
}

TagKind parse_tag_kind(const std::string &text) {
  for (TagKind k : {TagKind::dense, TagKind::conv2d, TagKind::scale_and_shift, TagKind::generic}) {
    if (text == tag_kind_name(k))
      return k;
  }
  throw Error("parse_tag_kind: expected dense, conv2d, scale_and_shift or generic, got '" + text +
              "'");
}

Params zero_params(const Model &model) {
  Params p;
  for (const ParamShape &s : model.param_shapes())
    p.push_back(Matrix::Zero(s.rows, s.cols));
  return p;
}

int tag_param_count(const LayerTag &tag, const std::vector<ParamShape> &shapes) {
  int n = 0;
  for (int i : tag.params) {
    if (i < 0 || i >= static_cast<int>(shapes.size())) {
      throw Error("tag '" + tag.name + "': parameter index " + std::to_string(i) +
                  " is out of range");
    }
    n += shapes[i].rows * shapes[i].cols;
  }
  return n;
}

Matrix per_example_gradients(const LayerTag &tag, const Matrix &inputs, const Matrix &output_grads,
                             Eigen::Index batch_size) {
  Matrix patches;
  const Matrix &x = tag.kind == TagKind::conv2d ? tag_input_rows(tag, inputs, patches) : inputs;
  const Matrix &dy = output_grads;
  const Eigen::Index batch = dy.rows();
  if (tag.kind != TagKind::generic && x.rows() != batch) {
    throw Error("per_example_gradients: tag '" + tag.name + "' recorded " +
                std::to_string(x.rows()) + " input rows (after im2col for images) but " +
                std::to_string(batch) + " output-gradient rows");
  }
  switch (tag.kind) {
  case TagKind::generic:
    return dy;
  case TagKind::dense: {
    // Row i is vec_rowmajor(x̄_i dy_iᵀ) = kron(x̄_i, dy_i): W's block, then the bias (x̄ = 1).
    const Eigen::Index din = x.cols(), dout = dy.cols();
    Matrix g(batch, (din + (tag.has_bias ? 1 : 0)) * dout);
    for (Eigen::Index i = 0; i < batch; ++i) {
      for (Eigen::Index k = 0; k < din; ++k) {
        g.block(i, k * dout, 1, dout) = x(i, k) * dy.row(i);
      }
      if (tag.has_bias)
        g.block(i, din * dout, 1, dout) = dy.row(i);
    }
    return g;
  }
  case TagKind::scale_and_shift: {
    const Eigen::Index d = dy.cols();
    Matrix g(batch, (tag.has_scale ? d : 0) + (tag.has_shift ? d : 0));
    Eigen::Index col = 0;
    if (tag.has_scale) {
      g.middleCols(col, d) = x.cwiseProduct(dy);
      col += d;
    }
    if (tag.has_shift)
      g.middleCols(col, d) = dy;
    return g;
  }
  case TagKind::conv2d: {
    // Row i is vec_rowmajor(Σ_t x̄_t ds_tᵀ) over example i's T locations.
    Eigen::Index T = tag.locations;
    if (T == 0) {
      if (batch_size < 1 || dy.rows() % batch_size != 0) {
        throw Error("per_example_gradients: tag '" + tag.name +
                    "' has per-batch locations; need a batch size dividing the " +
                    std::to_string(dy.rows()) + " recorded rows, got " +
                    std::to_string(batch_size));
      }
      T = dy.rows() / batch_size;
    }
    const Eigen::Index din = x.cols(), dout = dy.cols();
    const Eigen::Index examples = dy.rows() / T;
    Matrix g(examples, (din + (tag.has_bias ? 1 : 0)) * dout);
    for (Eigen::Index i = 0; i < examples; ++i) {
      Matrix w = x.middleRows(i * T, T).transpose() * dy.middleRows(i * T, T);
      std::copy(w.data(), w.data() + w.size(), g.row(i).data());
      if (tag.has_bias) {
        g.block(i, din * dout, 1, dout) = dy.middleRows(i * T, T).colwise().sum();
      }
    }
    return g;
  }
  }
  throw Error("per_example_gradients: tag '" + tag.name + "' has an unknown kind");
}

} // namespace hkfac::kfac
