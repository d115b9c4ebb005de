// first_failure (see communicator.h).
#include "dist/communicator.h"

namespace trainer {

std::optional<RankFailure> first_failure(Communicator& comm, const std::string& error, bool oom) {
  const uint8_t mine = error.empty() ? 0 : (oom ? 2 : 1);  // 0 ok, 1 failed, 2 out of memory
  std::vector<uint8_t> all(size_t(comm.size()));
  comm.all_gather_host(&mine, 1, all.data());
  RankFailure f;  // the first rank out of memory, else the first failed rank
  for (int r = 0; r < comm.size() && !f.oom; ++r)
    if (all[size_t(r)] == 2 || (all[size_t(r)] == 1 && f.rank < 0)) {
      f.rank = r;
      f.oom = all[size_t(r)] == 2;
    }
  if (f.rank < 0) return std::nullopt;
  uint64_t n = comm.rank() == f.rank ? error.size() : 0;
  comm.broadcast_host(&n, sizeof n, f.rank);
  f.message = comm.rank() == f.rank ? error : std::string(n, '\0');
  if (n > 0) comm.broadcast_host(f.message.data(), n, f.rank);
  return f;
}

}  // namespace trainer
