#include "parallel/strategy.h"

namespace trainer {

std::unique_ptr<Strategy> make_none_strategy(const RunConfig& cfg, Backend& be);

std::unique_ptr<Strategy> make_strategy(const RunConfig& cfg, Backend& be, Communicator* comm) {
  const std::string& s = cfg.parallel.strategy;
  if (s == "none") return make_none_strategy(cfg, be);
  throw ConfigError(fmt::format("parallel.strategy: '{}' is not available in this build", s));
}

}  // namespace trainer
