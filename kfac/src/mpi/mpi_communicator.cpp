// The Communicator over MPI: Open MPI's collectives (built with HKFAC_MPI only).
#include "hkfac/kfac/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "hkfac/error.h"

namespace hkfac::kfac {
namespace {

void check(int rc, const char *what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw Error(std::string(what) + " failed: " + std::string(text, static_cast<size_t>(len)));
  }
}

// MPI counts are ints; a factor of the largest layers can pass INT_MAX elements.
template <typename F> void in_chunks(size_t n, F &&f) {
  constexpr size_t kChunk = static_cast<size_t>(INT_MAX);
  for (size_t start = 0; start < n; start += kChunk)
    f(start, static_cast<int>(std::min(kChunk, n - start)));
}

class MpiCommunicator final : public Communicator {
public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

protected:
  void sum_in_place(float *data, size_t n) override {
    in_chunks(n, [&](size_t s, int c) {
      check(MPI_Allreduce(MPI_IN_PLACE, data + s, c, MPI_FLOAT, MPI_SUM, comm_), "MPI_Allreduce");
    });
  }
  void sum_in_place(double *data, size_t n) override {
    in_chunks(n, [&](size_t s, int c) {
      check(MPI_Allreduce(MPI_IN_PLACE, data + s, c, MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
    });
  }
  void broadcast_in_place(float *data, size_t n, int root) override {
    in_chunks(n, [&](size_t s, int c) {
      check(MPI_Bcast(data + s, c, MPI_FLOAT, root, comm_), "MPI_Bcast");
    });
  }
  void all_gather_into(int64_t value, int64_t *out) override {
    check(MPI_Allgather(&value, 1, MPI_INT64_T, out, 1, MPI_INT64_T, comm_), "MPI_Allgather");
  }
  void wait_for_all() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

} // namespace

std::shared_ptr<Communicator> mpi_communicator(MPI_Comm comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    throw Error("mpi_communicator: MPI is not initialised (call MPI_Init first)");
  return std::make_shared<MpiCommunicator>(comm);
}

bool mpi_available() { return true; }

std::shared_ptr<Communicator> mpi_world_communicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Only the calling thread talks to MPI; the kernels' worker threads never do.
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
  }
  return mpi_communicator(MPI_COMM_WORLD);
}

} // namespace hkfac::kfac
