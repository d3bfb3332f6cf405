// The collectives data-parallel K-FAC needs, behind an interface that does not expose MPI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hkfac::kfac {

// Payload moved by one phase of the optimizer: how many collective calls, and how many bytes each
// rank handed to them (the vector sizes; the wire cost of an algorithm is a multiple of this, for
// a ring allreduce 2(p-1)/p).
struct Traffic {
  uint64_t calls = 0;
  uint64_t bytes = 0;
};

// A group of processes ("ranks") that take K-FAC steps together, each on its shard of the batch.
//
// Every collective must be called by all ranks in the same order with the same sizes (the MPI
// contract); the optimizer guarantees that by taking every decision from reduced values only.
// Reductions must give every rank the same bits, since each rank applies the update itself and
// parameters that drift apart by a rounding would stay apart. Each call names the optimizer
// phase it belongs to, and the communicator counts the payload per phase (traffic()), which is
// what the bandwidth model in docs/RESULTS.md#mpi-k-fac is built on.
//
// The MPI implementation (mpi_world_communicator, mpi_communicator.h) exists when the library is
// built with HKFAC_MPI; the interface does not need mpi.h, so the library and its users build
// without MPI.
class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Element-wise sums across ranks, in place.
  void sum(float *data, size_t n, const char *phase);
  void sum(double *data, size_t n, const char *phase);
  // Overwrites `data` on every rank with root's.
  void broadcast(float *data, size_t n, int root, const char *phase);
  // Whether `ok` holds on every rank.
  bool all(bool ok, const char *phase);
  // Every rank's `value`, by rank.
  std::vector<int64_t> all_gather(int64_t value, const char *phase);
  void barrier();

  const std::map<std::string, Traffic> &traffic() const { return traffic_; }
  void reset_traffic() { traffic_.clear(); }

protected:
  virtual void sum_in_place(float *data, size_t n) = 0;
  virtual void sum_in_place(double *data, size_t n) = 0;
  virtual void broadcast_in_place(float *data, size_t n, int root) = 0;
  virtual void all_gather_into(int64_t value, int64_t *out) = 0;
  virtual void wait_for_all() = 0;

private:
  void count(const char *phase, size_t bytes);
  std::map<std::string, Traffic> traffic_;
};

// Whether this build has the MPI communicator (HKFAC_MPI).
bool mpi_available();
// MPI_COMM_WORLD (initialising MPI on first use, and finalising it at exit if it did). Throws
// hkfac::Error in a build without MPI.
std::shared_ptr<Communicator> mpi_world_communicator();

} // namespace hkfac::kfac
