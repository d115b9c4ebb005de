#include "io/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace trainer {

namespace {

// zlib's crc32_z takes a size_t length; crc32_combine a z_off_t (64-bit off_t on the 64-bit Linux builds).
uint32_t crc_of(uint32_t crc, const unsigned char* p, size_t n) { return uint32_t(crc32_z(crc, p, n)); }

}  // namespace

Crc32::Crc32(size_t split_bytes, int threads) : split_bytes_(std::max<size_t>(split_bytes, 1)), threads_(threads) {
  if (threads_ <= 0) threads_ = int(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
}

void Crc32::update(const void* p, size_t n) {
  if (n == 0) return;
  const auto* b = static_cast<const unsigned char*>(p);
  const size_t parts = n < split_bytes_ ? 1 : std::min<size_t>(size_t(threads_), n / (split_bytes_ / 2 + 1));
  if (parts <= 1) {
    crc_ = crc_of(crc_, b, n);
    return;
  }
  // part i: [i n / parts, (i + 1) n / parts); each from CRC 0, joined in order with crc32_combine
  std::vector<uint32_t> part_crc(parts);
  std::vector<std::thread> pool;
  pool.reserve(parts - 1);
  auto bound = [&](size_t i) { return i * (n / parts) + std::min(i, n % parts); };
  for (size_t i = 1; i < parts; ++i)
    pool.emplace_back([&, i] { part_crc[i] = crc_of(0, b + bound(i), bound(i + 1) - bound(i)); });
  part_crc[0] = crc_of(0, b, bound(1));
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < parts; ++i)
    crc_ = uint32_t(crc32_combine(crc_, part_crc[i], z_off_t(bound(i + 1) - bound(i))));
}

std::string Crc32::hex() const { return crc32_hex(crc_); }

std::string crc32_hex(uint32_t crc) { return fmt::format("{:08x}", crc); }

bool is_crc32_hex(const std::string& s) {
  return s.size() == 8 && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

}  // namespace trainer
