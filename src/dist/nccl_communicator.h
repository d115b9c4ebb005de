// NcclCommunicator: the Communicator over NCCL for device buffers (compiled only when CMake finds NCCL; see
// nccl_communicator.cpp).
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace trainer {

/// The NCCL communicator over all `size` ranks of MPI_COMM_WORLD (this process is `rank`), on the CUDA device the
/// backend `be` uses. Rank 0 makes the unique id and MPI_Bcasts it; the communicator is created non-blocking so that
/// a hang or an asynchronous error can be detected: a collective not complete `timeout_s` seconds after it was issued,
/// or an NCCL error, aborts the communicator and every rank (fatal()). Only in builds with TRAINER_HAVE_NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(Backend& be, int rank, int size, double timeout_s);

}  // namespace trainer
