// Covariance (K-FAC factor) update: C <- a*C + b*X̄ᵀX̄, one triangle computed, mirrored exactly
// (upper_only: not mirrored, the upper triangle alone, as ssyrk writes it).
// The algorithm and schedules are in covariance_tiles.h; this generator reads X from a matrix.
#include "Halide.h"
#include "covariance_tiles.h"

namespace {

using namespace Halide;

class CovarianceUpdate : public Generator<CovarianceUpdate> {
public:
  // X narrower than one tile (hkfac::gen::kCovarianceTile columns; on the CPU, narrower than the
  // runtime's kCovarianceCpuTiledFrom) uses the variant built with tiled=false.
  GeneratorParam<bool> tiled{"tiled", true};
  // Tile width on the CPU: hkfac::gen::kCovarianceTile, or kCovarianceWideTile for wide inputs.
  GeneratorParam<int> tile{"tile", hkfac::gen::kCovarianceTile};
  // Write only the upper triangle, as ssyrk does (CovarianceTiles; tiled form only).
  GeneratorParam<bool> upper_only{"upper_only", false};

  Input<Buffer<float>> c_in{"c_in", 2};
  Input<Buffer<float>> x{"x", 2};
  Input<float> a{"a"};
  Input<float> b{"b"};
  Output<Buffer<float>> c_out{"c_out", 2};

  void generate() {
    const Expr d = c_in.dim(0).extent(), dx = x.dim(0).extent(), n = x.dim(1).extent();
    // X̄: X with ones past its last column (the homogeneous column, and the tiled form's padding).
    Func xbar = BoundaryConditions::constant_exterior(x, 1.0f, {{0, dx}, {0, n}});
    const bool gpu = get_target().has_gpu_feature();
    hkfac::gen::CovarianceTiles cov(tiled, hkfac::gen::tile_width(tile, get_target()),
                                    gpu ? 0 : natural_vector_size<float>(), /*x_padded=*/false,
                                    c_out, c_in, x, xbar, d, dx, n, a, b, upper_only);

    x.dim(0).set_min(0).dim(1).set_min(0);
    c_in.dim(0).set_min(0).dim(1).set_bounds(0, d);
    c_out.dim(0).set_bounds(0, d).dim(1).set_bounds(0, d);
    c_in.set_estimates({{0, 1001}, {0, 1001}});
    x.set_estimates({{0, 1000}, {0, 1000}});
    c_out.set_estimates({{0, 1001}, {0, 1001}});
    a.set_estimate(0.95f);
    b.set_estimate(0.05f);

    if (gpu) {
      cov.schedule_gpu();
    } else {
      cov.schedule_cpu(natural_vector_size<float>(), true);
    }
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(CovarianceUpdate, hkfac_covariance_update)
