#include "dist/bootstrap.h"

#include <mpi.h>

#include <functional>

#include "core/errors.h"
#include "dist/communicator.h"
#include "dist/mpi_communicator.h"
#include "dist/nccl_communicator.h"

namespace trainer {

MpiSession::MpiSession(int* argc, char*** argv) {
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  MPI_CHECK(MPI_Comm_size(local, &local_size_));
  MPI_CHECK(MPI_Comm_free(&local));
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int MpiSession::first_failing_rank(bool failed) const {
  int mine = failed ? rank_ : size_, first = size_;
  MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  return first < size_ ? first : -1;
}

int MpiSession::first_rank_differing(const std::string& text) const {
  unsigned long long h = std::hash<std::string>{}(text), root = h;
  MPI_CHECK(MPI_Bcast(&root, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
  return first_failing_rank(h != root);
}

std::unique_ptr<Communicator> make_communicator(const RunConfig& cfg, Backend& be, const RunContext& ctx) {
  CONFIG_CHECK(cfg.parallel.strategy != "none" || ctx.world_size == 1,
               "parallel.strategy: 'none' runs one process, but {} ranks were started (use ddp_*, zero1 or fsdp)",
               ctx.world_size);
  if (cfg.parallel.strategy == "none") return make_mpi_communicator(be, cfg.parallel.comm_timeout_s);
  return make_world_communicator(cfg.parallel.comm, cfg.parallel.comm_timeout_s, be);
}

std::unique_ptr<Communicator> make_world_communicator(const std::string& comm, double timeout_s, Backend& be) {
  if (comm == "mpi") return make_mpi_communicator(be, timeout_s);
  if (comm == "nccl") {
    CONFIG_CHECK(be.device() == Device::cuda,
                 "parallel.comm: 'nccl' needs device 'cuda' (this run is on {}); use parallel.comm=mpi", be.name());
#ifdef TRAINER_HAVE_NCCL
    return make_nccl_communicator(be, timeout_s);
#else
    throw ConfigError("parallel.comm: 'nccl' is not available: this trainer was built without NCCL (configure with "
                      "NCCL_HOME pointing at an NCCL install), use parallel.comm=mpi");
#endif
  }
  throw ConfigError(fmt::format("parallel.comm: '{}' is not a communicator (mpi | nccl)", comm));
}

}  // namespace trainer
