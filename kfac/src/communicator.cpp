// The communicator's traffic accounting, and the stand-in for builds without MPI.
#include "hkfac/kfac/communicator.h"

#include "hkfac/error.h"

namespace hkfac::kfac {

void Communicator::count(const char *phase, size_t bytes) {
  Traffic &t = traffic_[phase];
  ++t.calls;
  t.bytes += bytes;
}

void Communicator::sum(float *data, size_t n, const char *phase) {
  count(phase, n * sizeof(float));
  if (size() > 1 && n > 0)
    sum_in_place(data, n);
}

void Communicator::sum(double *data, size_t n, const char *phase) {
  count(phase, n * sizeof(double));
  if (size() > 1 && n > 0)
    sum_in_place(data, n);
}

void Communicator::broadcast(float *data, size_t n, int root, const char *phase) {
  if (root < 0 || root >= size()) {
    throw Error("Communicator::broadcast: root " + std::to_string(root) + " is not a rank of " +
                std::to_string(size()));
  }
  count(phase, n * sizeof(float));
  if (size() > 1 && n > 0)
    broadcast_in_place(data, n, root);
}

bool Communicator::all(bool ok, const char *phase) {
  double failures = ok ? 0.0 : 1.0;
  sum(&failures, 1, phase);
  return failures == 0.0;
}

std::vector<int64_t> Communicator::all_gather(int64_t value, const char *phase) {
  count(phase, sizeof(int64_t));
  std::vector<int64_t> out(static_cast<size_t>(size()), value);
  if (size() > 1)
    all_gather_into(value, out.data());
  return out;
}

void Communicator::barrier() {
  if (size() > 1)
    wait_for_all();
}

#if !HKFAC_KFAC_HAVE_MPI
bool mpi_available() { return false; }

std::shared_ptr<Communicator> mpi_world_communicator() {
  throw Error("multi_device: this build of hkfac::kfac has no MPI (configure with HKFAC_MPI=ON "
              "and Open MPI's libopenmpi-dev installed)");
}
#endif

} // namespace hkfac::kfac
