// Shared helpers for the Catch2 tests: seeded random fills and a tolerance check that reports where it failed.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace trainer::testing {

template <class T>
std::vector<T> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = T(d(rng));
  return v;
}

/// |got - ref| <= atol + rtol * |ref| elementwise. Returns "" when all close, else a report with the worst index.
template <class A, class B>
std::string all_close(const std::vector<A>& got, const std::vector<B>& ref, double atol, double rtol) {
  if (got.size() != ref.size()) return "size mismatch " + std::to_string(got.size()) + " vs " + std::to_string(ref.size());
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = double(got[i]), r = double(ref[i]);
    const double err = std::fabs(g - r), tol = atol + rtol * std::fabs(r);
    if (!(err <= tol)) {
      ++bad;
      if (err - tol > worst_excess || std::isnan(err)) { worst_excess = err - tol; worst = i; }
    }
  }
  if (!bad) return "";
  std::ostringstream os;
  os << bad << " of " << got.size() << " elements differ; worst at " << worst << ": got " << double(got[worst])
     << " ref " << double(ref[worst]);
  return os.str();
}

/// max |got - ref| / max(|ref|, floor) over all elements.
template <class A, class B>
double max_rel_error(const std::vector<A>& got, const std::vector<B>& ref, double floor = 1e-12) {
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i)
    m = std::max(m, std::fabs(double(got[i]) - double(ref[i])) / std::max(std::fabs(double(ref[i])), floor));
  return m;
}

}  // namespace trainer::testing
