// The covariance update's tile width, shared by its generators and the runtime's dispatch: a plain
// header (no Halide), so the runtime includes it and the two cannot drift apart.
#pragma once

namespace hkfac::gen {

// Width of the square tiles of X̄ᵀX̄. The tiled variants need X at least one tile wide, so the
// dispatch sends narrower X to the untiled variant; the GPU schedule always uses it (one thread
// per element of a tile: 32² threads per block).
constexpr int kCovarianceTile = 32;

} // namespace hkfac::gen
