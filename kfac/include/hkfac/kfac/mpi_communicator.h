// A Communicator over any MPI communicator (builds with HKFAC_MPI only; includes mpi.h).
#pragma once

#include <memory>

#include <mpi.h>

#include "hkfac/kfac/communicator.h"

namespace hkfac::kfac {

// The ranks of `comm`, which must stay valid while the result is in use. MPI must be initialised.
std::shared_ptr<Communicator> mpi_communicator(MPI_Comm comm);

} // namespace hkfac::kfac
