// File checksums of the training checkpoints (io/checkpoint.h): CRC-32 as zlib, gzip and PNG compute it
// (ISO-HDLC: polynomial 0x04C11DB7 reflected, initial and final XOR 0xFFFFFFFF; "123456789" -> cbf43926).
// zlib does the arithmetic; the stream is cut into parts checked on several threads, and zlib's crc32_combine joins
// their CRCs, so a multi-GB file is checked at several times one core's ~3 GB/s.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

/// The CRC-32 of a byte stream fed in order, piece by piece (the pieces' boundaries do not change it).
class Crc32 {
 public:
  /// One piece of the stream: n bytes at p.
  struct Piece {
    const void* p;
    size_t n;
  };
  /// The pieces given to one update are cut into parts of at most part_bytes, whose CRCs `threads` threads (0:
  /// std::thread's hardware concurrency, at most 16) compute at once where there is more than one part; the result
  /// is the same for any cut.
  explicit Crc32(size_t part_bytes = size_t(8) << 20, int threads = 0);
  /// Adds n bytes at p (n may be 0; p may then be null).
  void update(const void* p, size_t n) { update({{p, n}}); }
  /// Adds the pieces in order: many small ones (a file's tensors) are checked in parallel as well as a large one.
  void update(const std::vector<Piece>& pieces);
  /// The CRC-32 of every byte given so far (0 for none).
  uint32_t value() const { return crc_; }
  /// value() as 8 lower-case hex digits (the manifest's form).
  std::string hex() const;

 private:
  uint32_t crc_ = 0;
  size_t part_bytes_;
  int threads_;
};

/// "cbf43926" for 0xcbf43926: 8 lower-case hex digits.
std::string crc32_hex(uint32_t crc);

/// True when s is 8 hex digits (either case): a checksum as the manifest writes it.
bool is_crc32_hex(const std::string& s);

}  // namespace trainer
