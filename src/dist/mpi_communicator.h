// MpiCommunicator: the Communicator over MPI (a duplicate of MPI_COMM_WORLD, or a split of it), for CPU runs, for
// several ranks sharing one GPU, and for the host side of the NCCL communicator. See mpi_communicator.cpp for how
// device buffers are staged and how timeouts abort the job.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "dist/communicator.h"

namespace trainer {

/// The MPI communicator over all ranks of MPI_COMM_WORLD (its own duplicate; split() makes subgroups), bound to backend
/// `be` (whose copy functions stage device buffers through pinned host memory). A collective not complete `timeout_s`
/// seconds after it was issued aborts every rank (fatal(): one message, then MPI_Abort). MPI must be initialised
/// (MpiSession). Work handles must not outlive the communicator; a Work dropped without wait() is completed by its
/// destructor.
std::unique_ptr<Communicator> make_mpi_communicator(Backend& be, double timeout_s);

/// Test hook (tests/mpi): the same communicator, but it stages host buffers too, as if they were device buffers, so
/// the CPU-only CI covers the staging path (copy to a host block, collective, copy back in wait()).
std::unique_ptr<Communicator> make_mpi_communicator_staged(Backend& be, double timeout_s);

/// The host bytes the communicator's staging pool holds (it never frees a block before the communicator goes) after
/// it has staged `ops` in order: each op the block sizes it stages, in the order it takes them (all_reduce: the buffer;
/// reduce_scatter: the input, then the output; all_gather: the output), given back when the op is finished and then
/// reused by best fit. The pool itself, run without allocating; for collective_bench's host-memory check.
/// `after_each` (if given): the bytes held after each op, in order (one pass for every prefix).
size_t staging_pool_bytes(const std::vector<std::vector<size_t>>& ops, std::vector<size_t>* after_each = nullptr);

}  // namespace trainer
