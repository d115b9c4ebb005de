// File checksums of the training checkpoints (io/checkpoint.h): CRC-32 as zlib, gzip and PNG compute it
// (ISO-HDLC: polynomial 0x04C11DB7 reflected, initial and final XOR 0xFFFFFFFF; "123456789" -> cbf43926), of the
// whole file and of each block of kChecksumBlockBytes (so that a rank that reads part of a file, a resume on another
// world size, checks what it reads without reading the rest). zlib does the arithmetic; the stream is cut into parts
// checked on several threads, and zlib's crc32_combine joins their CRCs, so a multi-GB file is checked at several
// times one core's ~3 GB/s.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainer {

/// FNV-1a, 64 bits (Fowler, Noll, Vo: offset basis 14695981039346656037, prime 1099511628211), of `bytes`: the
/// project's one non-cryptographic hash of short texts (a config's, a path's, a layout's), compared between ranks or
/// runs, never stored as a checksum of data.
inline uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char ch : bytes) h = (h ^ ch) * 1099511628211ull;
  return h;
}

/// The block a checkpoint file's CRC-32s are recorded for (its last block may be shorter).
inline constexpr uint64_t kChecksumBlockBytes = uint64_t(64) << 20;

/// The parts Crc32 spreads over threads (small enough for ~450 tensors of a 13.6 GB file to spread well).
inline constexpr size_t kCrcPartBytes = size_t(8) << 20;

/// The CRC-32 of a byte stream fed in order, piece by piece (the pieces' boundaries do not change it), and, where
/// block_bytes > 0, of each block_bytes of it.
class Crc32 {
 public:
  /// One piece of the stream: n bytes at p.
  struct Piece {
    const void* p;
    size_t n;
  };
  /// The pieces given to one update are cut into parts of at most part_bytes (and at block boundaries), whose CRCs
  /// `threads` threads (0: the CPUs this process may run on, at most 16) compute at once where there is more than
  /// one part; the result is the same for any cut.
  explicit Crc32(size_t part_bytes = kCrcPartBytes, int threads = 0, uint64_t block_bytes = 0);
  /// Adds n bytes at p (n may be 0; p may then be null).
  void update(const void* p, size_t n) { update({{p, n}}); }
  /// Adds the pieces in order: many small ones (a file's tensors) are checked in parallel as well as a large one.
  void update(const std::vector<Piece>& pieces);
  /// The CRC-32 of every byte given so far (0 for none).
  uint32_t value() const { return crc_; }
  /// value() as 8 lower-case hex digits (the manifest's form).
  std::string hex() const;
  /// The CRC-32 of each block so far, the last one possibly partial (block_bytes > 0; empty for no bytes).
  std::vector<uint32_t> blocks() const;

 private:
  uint32_t crc_ = 0, block_crc_ = 0;
  uint64_t pos_ = 0, block_bytes_ = 0;
  size_t part_bytes_;
  int threads_;
  std::vector<uint32_t> blocks_;  // the finished blocks'
};

/// The CRC-32 of a stream A then B from A's CRC, B's CRC and B's length (zlib's crc32_combine).
uint32_t crc32_join(uint32_t a, uint32_t b, uint64_t b_bytes);

/// "cbf43926" for 0xcbf43926: 8 lower-case hex digits.
std::string crc32_hex(uint32_t crc);

/// True when s is 8 hex digits (either case): a checksum as the manifest writes it.
bool is_crc32_hex(const std::string& s);

/// The CPUs this process may run on (its affinity mask: one under mpirun's default binding of a rank to a core),
/// at least 1.
int usable_cpus();

}  // namespace trainer
