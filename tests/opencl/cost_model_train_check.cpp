// The cost-model training generator's GPU schedule on OpenCL (scripts/opencl-check): its loss,
// predictions, weight gradients (central differences of the reference objective) and recorded
// layer inputs against the kernel tests' double-precision reference
// (tests/kernels/cost_model_reference.h), with the kernel tests' tolerances, for the feature count
// S given. Linked with the generated `kernel`.
#include <array>
#include <cstdlib>
#include <string>

#include "check_util.h"
#include "cost_model_check.h"
#include "kernel.h"

using namespace hkfac::opencl_check;

namespace {

// One problem's checks; the gradients by central differences only where `differences` (they
// cost two reference evaluations per entry).
bool check_train(int S, int batch, int stages, unsigned seed, bool differences) {
  const ref::Problem p = ref::training_problem(S, batch, stages, seed);
  const ref::Reference want = ref::reference(p);
  Buffer<float> pf = upload(p.pf, {ref::kRows, ref::kTypes, stages});
  Buffer<float> sf = upload(p.sf, {batch, S, stages});
  Buffer<float> runtimes = upload(p.runtimes, {batch}), cotangent = upload(p.cotangent, {batch});
  CostModelWeights w(p);
  Buffer<float> loss(2), pred(batch);
  std::array<Buffer<float>, 6> grads = {Buffer<float>(ref::kH1, ref::kRows, ref::kTypes),
                                        Buffer<float>(ref::kH1),
                                        Buffer<float>(ref::kH2, S),
                                        Buffer<float>(ref::kH2),
                                        Buffer<float>(ref::kC1, ref::kC1),
                                        Buffer<float>(ref::kC1)};
  Buffer<float> h1og(ref::kH1, batch, stages), h2in(S, batch, stages),
      h2og(ref::kH2, batch, stages), c1in(ref::kC1, batch, stages), c1og(ref::kC1, batch, stages);
  const int rc =
      kernel(pf, sf, w.h1f, w.h1b, w.h2f, w.h2b, w.c1f, w.c1b, p.num_cores, runtimes, cotangent,
             float(p.loss_weight), float(p.penalty_weight), loss, pred, grads[0], grads[1],
             grads[2], grads[3], grads[4], grads[5], h1og, h2in, h2og, c1in, c1og);
  const std::string tag = "cost_model_train S=" + std::to_string(S) +
                          " batch=" + std::to_string(batch) + " stages=" + std::to_string(stages) +
                          " ";
  bool ok = true;

  const std::vector<double> l = download(loss);
  const double loss_err = std::max(std::abs(l[0] - want.l_rel) / (want.l_rel + 1e-2),
                                   std::abs(l[1] - want.pen) / (want.pen + 1e-2));
  ok &= verdict(rc == 0 && loss_err < 1e-4, (tag + "loss and penalty").c_str(), rc, loss_err);
  const double pred_err = scaled_error(download(pred), want.predictions, 1e-30);
  ok &= verdict(rc == 0 && pred_err < 1e-5, (tag + "predictions").c_str(), rc, pred_err);
  const double x2_err = scaled_error(download(h2in), want.x2, 1.0);
  ok &= verdict(rc == 0 && x2_err < 1e-6, (tag + "head2_input record").c_str(), rc, x2_err);
  const double emb_err = scaled_error(download(c1in), want.emb, 1.0);
  ok &= verdict(rc == 0 && emb_err < 1e-5, (tag + "conv1_input record").c_str(), rc, emb_err);
  if (!differences)
    return ok;

  // The kernel tests' tolerance: 5e-4 of the largest derivative of the buffer.
  std::mt19937 rng(5);
  for (int b = 0; b < 6; b++) {
    const std::vector<double> got = download(grads[b]);
    std::vector<double> fd, sampled;
    for (size_t i : ref::checked_entries(got.size(), rng)) {
      fd.push_back(ref::weight_derivative(p, b, i));
      sampled.push_back(got[i]);
    }
    const double err = scaled_error(sampled, fd, 1e-30);
    ok &=
        verdict(rc == 0 && err < 5e-4 && ref::max_abs(fd) > 0,
                (tag + ref::kWeightNames[b] + " gradient vs central differences").c_str(), rc, err);
  }
  struct Record {
    ref::Nudge::Layer layer;
    Buffer<float> *grad;
    int channels;
    const char *name;
  };
  const Record records[] = {{ref::Nudge::algo, &h1og, ref::kH1, "head1_out_grad"},
                            {ref::Nudge::head2, &h2og, ref::kH2, "head2_out_grad"},
                            {ref::Nudge::conv1, &c1og, ref::kC1, "conv1_out_grad"}};
  for (const Record &rec : records) {
    const std::vector<double> got = download(*rec.grad);
    std::vector<double> fd, sampled;
    for (int s = 0; s < stages; s++) {
      for (int n = 0; n < batch; n++) {
        for (int c = 0; c < rec.channels; c += 3) {
          fd.push_back(ref::preactivation_derivative(p, rec.layer, c, n, s));
          sampled.push_back(got[c + rec.channels * (n + batch * s)]);
        }
      }
    }
    const double err = scaled_error(sampled, fd, 1e-30);
    ok &= verdict(rc == 0 && err < 5e-4,
                  (tag + rec.name + " record vs central differences").c_str(), rc, err);
  }
  return ok;
}

bool check_train(int S) {
  // The kernel tests' shapes, with central differences on the two small ones; batch 1 and 129
  // cross the 32-schedule thread tiles' edges.
  bool ok = check_train(S, 7, 3, 11, true);
  ok &= check_train(S, 5, 2, 17, true);
  ok &= check_train(S, 1, 1, 23, false);
  ok &= check_train(S, 33, 4, 7, false);
  ok &= check_train(S, 129, 20, 29, false);
  return ok;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cost_model_train_check S\n");
    return 2;
  }
  return check_train(std::atoi(argv[1])) ? 0 : 1;
}
