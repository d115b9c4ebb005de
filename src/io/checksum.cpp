#include "io/checksum.h"

#include <sched.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace trainer {

namespace {

// zlib's crc32_z takes a size_t length; crc32_combine a z_off_t (64-bit off_t on the 64-bit Linux builds).
uint32_t crc_of(uint32_t crc, const unsigned char* p, size_t n) { return uint32_t(crc32_z(crc, p, n)); }
}  // namespace

uint32_t crc32_join(uint32_t a, uint32_t b, uint64_t b_bytes) {
  return uint32_t(crc32_combine(a, b, z_off_t(b_bytes)));
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

Crc32::Crc32(size_t part_bytes, int threads, uint64_t block_bytes)
    : block_bytes_(block_bytes), part_bytes_(std::max<size_t>(part_bytes, 1)), threads_(threads) {
  if (threads_ <= 0) threads_ = std::min(usable_cpus(), 16);
}

void Crc32::update(const std::vector<Piece>& pieces) {
  std::vector<Piece> parts;  // the pieces cut into parts of at most part_bytes_, and at block boundaries, in order
  uint64_t pos = pos_;
  for (const Piece& q : pieces)
    for (size_t at = 0; at < q.n;) {
      size_t n = std::min(part_bytes_, q.n - at);
      if (block_bytes_ > 0) n = size_t(std::min<uint64_t>(n, block_bytes_ - pos % block_bytes_));
      parts.push_back({static_cast<const unsigned char*>(q.p) + at, n});
      at += n;
      pos += n;
    }
  // each part's CRC from 0 (threads take the next part in turn; the caller's thread too, which finishes the work
  // alone if no other thread can start)
  std::vector<uint32_t> part_crc(parts.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < parts.size();)
      part_crc[i] = crc_of(0, static_cast<const unsigned char*>(parts[i].p), parts[i].n);
  };
  std::vector<std::thread> pool;
  const size_t helpers = parts.size() > 1 ? std::min(parts.size(), size_t(threads_)) - 1 : 0;
  pool.reserve(helpers);
  for (size_t t = 0; t < helpers; ++t) try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {  // no thread to be had (EAGAIN): fewer helpers
      break;
    }
  work();
  for (std::thread& t : pool) t.join();
  // joined in order: the whole stream's CRC and each block's
  for (size_t i = 0; i < parts.size(); ++i) {
    crc_ = crc32_join(crc_, part_crc[i], parts[i].n);
    if (block_bytes_ == 0) continue;
    block_crc_ = crc32_join(block_crc_, part_crc[i], parts[i].n);
    pos_ += parts[i].n;
    if (pos_ % block_bytes_ == 0) {
      blocks_.push_back(block_crc_);
      block_crc_ = 0;
    }
  }
  if (block_bytes_ == 0) pos_ = pos;
}

std::vector<uint32_t> Crc32::blocks() const {
  std::vector<uint32_t> b = blocks_;
  if (block_bytes_ > 0 && pos_ % block_bytes_ != 0) b.push_back(block_crc_);
  return b;
}

std::string Crc32::hex() const { return crc32_hex(crc_); }

std::string crc32_hex(uint32_t crc) { return fmt::format("{:08x}", crc); }

bool is_crc32_hex(const std::string& s) {
  return s.size() == 8 && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

}  // namespace trainer
