#include "io/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace trainer {

namespace {

// zlib's crc32_z takes a size_t length; crc32_combine a z_off_t (64-bit off_t on the 64-bit Linux builds).
uint32_t crc_of(uint32_t crc, const unsigned char* p, size_t n) { return uint32_t(crc32_z(crc, p, n)); }

}  // namespace

Crc32::Crc32(size_t part_bytes, int threads) : part_bytes_(std::max<size_t>(part_bytes, 1)), threads_(threads) {
  if (threads_ <= 0) threads_ = int(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
}

void Crc32::update(const std::vector<Piece>& pieces) {
  std::vector<Piece> parts;  // the pieces cut into parts of at most part_bytes_, in order
  for (const Piece& q : pieces)
    for (size_t at = 0; at < q.n; at += part_bytes_)
      parts.push_back({static_cast<const unsigned char*>(q.p) + at, std::min(part_bytes_, q.n - at)});
  if (parts.size() <= 1 || threads_ == 1) {
    for (const Piece& q : parts) crc_ = crc_of(crc_, static_cast<const unsigned char*>(q.p), q.n);
    return;
  }
  // each part's CRC from 0 (threads take the next part in turn), then joined in order with crc32_combine
  std::vector<uint32_t> part_crc(parts.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < parts.size();)
      part_crc[i] = crc_of(0, static_cast<const unsigned char*>(parts[i].p), parts[i].n);
  };
  std::vector<std::thread> pool;
  const size_t helpers = std::min(parts.size(), size_t(threads_)) - 1;
  pool.reserve(helpers);
  for (size_t t = 0; t < helpers; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < parts.size(); ++i) crc_ = uint32_t(crc32_combine(crc_, part_crc[i], z_off_t(parts[i].n)));
}

std::string Crc32::hex() const { return crc32_hex(crc_); }

std::string crc32_hex(uint32_t crc) { return fmt::format("{:08x}", crc); }

bool is_crc32_hex(const std::string& s) {
  return s.size() == 8 && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

}  // namespace trainer
