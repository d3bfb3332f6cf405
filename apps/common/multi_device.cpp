// An app's shard of a data-parallel run (see multi_device.h).
#include "multi_device.h"

#include <cstdio>
#include <string>

#include "cli.h"
#include "hkfac/error.h"

namespace hkfac::apps {

BatchShard shard_batches(int batch_size, bool multi_device) {
  BatchShard s;
  s.rows = batch_size;
  if (!multi_device)
    return s;
  s.comm = kfac::mpi_world_communicator();
  const long ranks = s.comm->size(), rank = s.comm->rank();
  require_flag(batch_size >= ranks, "--batch_size", batch_size,
               ">= the number of ranks (" + std::to_string(ranks) + "): each needs examples");
  s.first = static_cast<int>(batch_size * rank / ranks);
  s.rows = static_cast<int>(batch_size * (rank + 1) / ranks) - s.first;
  if (rank != 0 && !std::freopen("/dev/null", "w", stdout))
    throw Error("--multi_device: rank " + std::to_string(rank) + " cannot silence stdout");
  return s;
}

} // namespace hkfac::apps
