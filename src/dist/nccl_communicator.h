// NcclCommunicator: the Communicator over NCCL for device buffers (compiled only when CMake finds NCCL; see
// nccl_communicator.cpp).
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace trainer {

/// The NCCL communicator over all ranks of MPI_COMM_WORLD, on the CUDA device the backend `be` uses, with an MPI
/// communicator over the same ranks for the host side. Rank 0 makes the unique id and broadcasts it; the communicator
/// is created non-blocking so that a hang or an asynchronous error can be detected: a collective not complete
/// `timeout_s` seconds after it was issued, or an NCCL error, aborts the communicator and every rank (fatal()). Only in
/// builds with TRAINER_HAVE_NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(Backend& be, double timeout_s);

}  // namespace trainer
