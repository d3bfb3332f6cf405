// The model interface K-FAC trains: a differentiable function whose layers declare themselves
// with layer tags, recording what the curvature blocks need on every forward and backward.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hkfac/kernels/patch_covariance.h"
#include "hkfac/kfac/types.h"

namespace hkfac::kfac {

// What kind of layer a tag describes; the kind picks the default curvature block.
enum class TagKind { dense, conv2d, scale_and_shift, generic };
const char *tag_kind_name(TagKind kind);
// Parses "dense", "conv2d", "scale_and_shift" or "generic"; throws hkfac::Error otherwise.
TagKind parse_tag_kind(const std::string &text);

// A tagged layer, as the model declares it. `params` index into the model's Params.
//  - dense:           params {W (d_in x d_out), b (1 x d_out) when has_bias}; the layer computes
//                     s = x W + b and records x (B x d_in) and ds (B x d_out), the gradient with
//                     respect to its pre-activation output s.
//  - scale_and_shift: params {scale (1 x d) when has_scale, shift (1 x d) when has_shift};
//                     y = x ⊙ scale + shift; records x and dy (both B x d).
//  - generic:         any parameters; records the per-example parameter gradients, one row per
//                     example with every parameter flattened row-major and concatenated.
//  - conv2d:          params {kernel (k·k·C_in x C_out), b (1 x C_out) when has_bias}; the layer
//                     is a dense layer over image patches: it records the patches (B·T x k·k·C_in,
//                     the T = `locations` output positions of each example in consecutive rows)
//                     and the pre-activation gradients at every location (B·T x C_out).
//                     `locations` = 0 means T varies from batch to batch (a per-stage layer of a
//                     network over pipelines of different lengths); T is then read from each
//                     batch as rows / batch size.
//                     With `geometry` set, the layer records its input images instead (B x
//                     geometry->image_size(), as im2col below reads them): the KFC block then
//                     forms A from the images with the patch covariance kernel, and nothing holds
//                     a copy of the patches (k·k times the image). input_dim must be
//                     geometry->patch_size() and locations geometry->locations().
struct LayerTag {
  TagKind kind = TagKind::generic;
  std::string name;
  std::vector<int> params;
  bool has_bias = false;  // dense
  bool has_scale = false; // scale_and_shift
  bool has_shift = false; // scale_and_shift
  int input_dim = 0;      // dense, scale_and_shift
  int output_dim = 0;     // dense, scale_and_shift, conv2d; generic: flattened parameter count
  int locations = 1;      // conv2d: output positions per example (rows per example); 0: per batch
  std::optional<kernels::PatchGeometry> geometry; // conv2d: the record holds images, not patches
};

// What the last forward / backward recorded for one tag (see LayerTag for the meaning per kind).
// For generic tags `inputs` is empty and `output_grads` holds the per-example parameter
// gradients.
struct TagRecord {
  Matrix inputs;
  Matrix output_grads;
};

// A model with layer tags.
//
// K-FAC needs more than a loss gradient: the curvature estimator backpropagates cotangents of its
// own making (sampled targets, one-hot directions times the loss's Fisher square root, random
// signs) through the network and reads, per tagged layer, the inputs and per-example output
// gradients. So `backward` must accept any cotangent, and must not reduce over the batch before
// recording: row i of each record belongs to example i. C++ has no tracer, so layers declare
// their tags themselves; the layer library (layers.h) implements this interface, and users may
// implement their own models against it.
//
// Contract: `forward` keeps a pointer to `params`; they must stay alive and unchanged until the
// backward / jvp calls that follow it. Examples must not interact (row i of the output depends on
// row i of the input only), which is what makes per-example gradients well defined.
class Model {
public:
  virtual ~Model() = default;

  virtual std::vector<ParamShape> param_shapes() const = 0;
  virtual const std::vector<LayerTag> &tags() const = 0;

  // Network outputs (B x K) for batch.inputs; records each tag's inputs.
  virtual Matrix forward(const Params &params, const Batch &batch) = 0;
  // Gradients of sum_i <cotangent_i, output_i> with respect to the parameters (summed over the
  // batch), at the last forward's point; records each tag's per-example output gradients.
  virtual Params backward(const Matrix &output_cotangent) = 0;
  // The records of backward (each tag's per-example output gradients) without the parameter
  // gradients, which the curvature estimator's passes have no use for: forming them is as much
  // work again as the rest of a dense layer's backward. The default runs backward and drops them.
  virtual void backward_records(const Matrix &output_cotangent) { backward(output_cotangent); }
  // The Jacobian-vector product J t (B x K) at the last forward's point, for a parameter tangent
  // t. Needed for the exact curvature-vector products of rho and the adaptive learning rate and
  // momentum.
  virtual Matrix jvp(const Params &tangent) = 0;
  virtual const TagRecord &record(int tag) const = 0;
};

// Zero-initialised parameters with the model's shapes.
Params zero_params(const Model &model);

// The per-example gradients of a tag's parameters (B x P, parameters flattened row-major and
// concatenated in LayerTag::params order), computed from what the tag recorded (`inputs` is
// ignored for generic tags; images for a conv2d tag with a geometry). Lets any tag be handled by a
// generic (diagonal or full) block. `batch_size` is needed only for conv2d tags with a per-batch
// number of locations.
Matrix per_example_gradients(const LayerTag &tag, const Matrix &inputs, const Matrix &output_grads,
                             Eigen::Index batch_size = 0);

// The patch matrix of a batch of images (B x g.image_size() -> B·T x g.patch_size()), in the
// layout of kernels::PatchGeometry: rows example-major, then output row and column; columns
// (kernel row, kernel column, channel). col2im is its adjoint: it sums each patch entry back into
// the pixel it came from. Both throw hkfac::Error on a shape that does not fit the geometry.
Matrix im2col(const Matrix &images, const kernels::PatchGeometry &g);
Matrix col2im(const Matrix &patches, const kernels::PatchGeometry &g);

// The rows a tag's blocks consume as inputs: im2col of the recorded images for a conv2d tag with
// a geometry, the recorded inputs themselves otherwise (returned by reference, no copy; `storage`
// holds the patches when they are formed).
const Matrix &tag_input_rows(const LayerTag &tag, const Matrix &recorded, Matrix &storage);

// Throws hkfac::Error unless a tag's geometry (if any) is consistent: conv2d kind, a valid
// geometry, input_dim = patch_size() and locations = locations().
void validate_tag_geometry(const LayerTag &tag);

// Total number of scalar parameters of a tag, from the model's shapes.
int tag_param_count(const LayerTag &tag, const std::vector<ParamShape> &shapes);

} // namespace hkfac::kfac
