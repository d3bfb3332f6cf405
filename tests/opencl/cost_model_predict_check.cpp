// The cost-model inference generator's GPU schedule on OpenCL (scripts/opencl-check): its
// predictions against the kernel tests' double-precision reference
// (tests/kernels/cost_model_reference.h) on the kernel tests' shapes and tolerance, for the
// feature count S given. Linked with the generated `kernel`.
#include <cstdlib>
#include <string>

#include "check_util.h"
#include "cost_model_check.h"
#include "kernel.h"

using namespace hkfac::opencl_check;

namespace {

bool check_predict(int S) {
  bool ok = true;
  for (int batch : {1, 7, 129}) {
    for (int stages : {1, 3, 20}) {
      const ref::Problem p =
          ref::rounded(ref::random_problem(S, batch, stages, 1000 * batch + stages));
      const ref::Reference want = ref::reference(p);
      Buffer<float> pf = upload(p.pf, {ref::kRows, ref::kTypes, stages});
      Buffer<float> sf = upload(p.sf, {batch, S, stages});
      CostModelWeights w(p);
      Buffer<float> pred(batch);
      const int rc = kernel(pf, sf, w.h1f, w.h1b, w.h2f, w.h2b, w.c1f, w.c1b, p.num_cores, pred);
      const std::vector<double> got = download(pred);
      // Float error: a few ulps of the absolute-value sums, as the CPU kernel test allows.
      double worst = 0;
      bool within = rc == 0;
      for (int n = 0; n < batch; n++) {
        const double err = std::abs(got[n] - want.predictions[n]);
        within &= err <= 2e-5 * want.magnitudes[n];
        worst = std::max(worst, err / std::max(want.magnitudes[n], 1e-30));
      }
      const std::string what = "cost_model_predict S=" + std::to_string(S) +
                               " batch=" + std::to_string(batch) +
                               " stages=" + std::to_string(stages);
      ok &= verdict(within, what.c_str(), rc, worst);
    }
  }
  return ok;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cost_model_predict_check S\n");
    return 2;
  }
  return check_predict(std::atoi(argv[1])) ? 0 : 1;
}
