// first_failure (see communicator.h).
#include "dist/communicator.h"

namespace trainer {

std::optional<RankFailure> first_failure(Communicator& comm, const std::string& error, bool oom) {
  const uint8_t mine = error.empty() ? 0 : (oom ? 2 : 1);  // 0 ok, 1 failed, 2 out of memory
  std::vector<uint8_t> all(size_t(comm.size()));
  comm.all_gather_host(&mine, 1, all.data());
  RankFailure f;
  for (int r = 0; r < comm.size() && f.rank < 0; ++r)
    if (all[size_t(r)] != 0) f.rank = r;
  if (f.rank < 0) return std::nullopt;
  f.oom = all[size_t(f.rank)] == 2;
  for (const uint8_t s : all) f.any_oom = f.any_oom || s == 2;
  uint64_t n = comm.rank() == f.rank ? error.size() : 0;
  comm.broadcast_host(&n, sizeof n, f.rank);
  f.message = comm.rank() == f.rank ? error : std::string(n, '\0');
  if (n > 0) comm.broadcast_host(f.message.data(), n, f.rank);
  return f;
}

}  // namespace trainer
