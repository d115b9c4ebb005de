// Token sources and token file checks; see token_data.h.
#include "io/token_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/errors.h"

namespace trainer {
namespace {

// Token files are little-endian; we read them in place, so the host must be little-endian too (x86-64, aarch64).
static_assert(std::endian::native == std::endian::little, "token files are read in place: little-endian host only");

/// splitmix64 finaliser of x (Steele, Lea, Flood, OOPSLA 2014; the constants of java.util.SplittableRandom).
inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Maps a uniform 64-bit x to [0, n) by the high half of x * n (Lemire, "Fast random integer generation in an
/// interval", 2019); the bias is below n / 2^64.
inline uint64_t uniform_below(uint64_t x, uint64_t n) { return uint64_t((unsigned __int128)x * n >> 64); }

size_t token_dtype_size(const std::string& dtype) {
  if (dtype == "uint16") return 2;
  if (dtype == "uint32") return 4;
  throw ConfigError(fmt::format("data.dtype: unknown token dtype '{}' (uint16 | uint32)", dtype));
}

/// A token file mapped read-only. Raises ConfigError "data.path: ..." when it cannot be opened, mapped, or its size
/// is not a multiple of the element size.
class MappedTokens {
 public:
  MappedTokens(const std::string& path, const std::string& dtype) : path_(path), elem_(token_dtype_size(dtype)) {
    // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      std::error_code ec;  // a relative path not found: say which directory it was read from
      const std::string cwd = std::filesystem::current_path(ec).string();
      const bool relative = err == ENOENT && !ec && std::filesystem::path(path).is_relative();
      throw ConfigError(fmt::format("data.path: cannot read '{}': {}{}", path, std::strerror(err),
                                    relative ? fmt::format(" (a relative path, read from the current directory '{}')",
                                                           cwd)
                                             : std::string()));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw ConfigError(fmt::format("data.path: cannot read '{}': {}", path, std::strerror(err)));
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      throw ConfigError(fmt::format("data.path: cannot read '{}': Is a directory", path));
    }
    if (!S_ISREG(st.st_mode)) {  // a FIFO, a socket, a device: not a token file that can be mapped
      ::close(fd);
      throw ConfigError(fmt::format("data.path: cannot read '{}': not a regular file", path));
    }
    bytes_ = uint64_t(st.st_size);
    if (bytes_ % elem_ != 0) {
      ::close(fd);
      throw ConfigError(fmt::format("data.path: '{}' has {} bytes, not a multiple of {} (data.dtype {}): not a token "
                                    "file of that dtype?",
                                    path, bytes_, elem_, dtype));
    }
    if (bytes_ > 0) {
      void* p = ::mmap(nullptr, size_t(bytes_), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw ConfigError(fmt::format("data.path: cannot read '{}': mmap failed: {}", path, std::strerror(err)));
      }
      data_ = static_cast<const unsigned char*>(p);
    }
    ::close(fd);  // the mapping stays valid without the descriptor
  }
  ~MappedTokens() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_t(bytes_));
  }
  MappedTokens(const MappedTokens&) = delete;
  MappedTokens& operator=(const MappedTokens&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return bytes_ / elem_; }  // tokens
  uint32_t operator[](uint64_t i) const {
    if (elem_ == 2) {
      uint16_t v;
      std::memcpy(&v, data_ + 2 * i, 2);
      return v;
    }
    uint32_t v;
    std::memcpy(&v, data_ + 4 * i, 4);
    return v;
  }
  /// The first index in [begin, end) whose token is >= limit, or end when there is none.
  uint64_t first_at_least(uint64_t begin, uint64_t end, uint64_t limit) const {
    return elem_ == 2 ? first_at_least_t<uint16_t>(begin, end, limit) : first_at_least_t<uint32_t>(begin, end, limit);
  }
  void advise(int advice) const {
    if (data_) ::madvise(const_cast<unsigned char*>(data_), size_t(bytes_), advice);
  }

 private:
  template <class T>
  uint64_t first_at_least_t(uint64_t begin, uint64_t end, uint64_t limit) const {
    // Chunked: a branch-free max over each chunk (vectorises), then a search only inside a chunk that fails.
    constexpr uint64_t kChunk = 1 << 16;
    for (uint64_t c = begin; c < end; c += kChunk) {
      const uint64_t ce = std::min(end, c + kChunk);
      T mx = 0;
      for (uint64_t i = c; i < ce; ++i) {
        T v;
        std::memcpy(&v, data_ + sizeof(T) * i, sizeof(T));
        mx = std::max(mx, v);
      }
      if (uint64_t(mx) >= limit)
        for (uint64_t i = c; i < ce; ++i)
          if ((*this)[i] >= limit) return i;
    }
    return end;
  }

  std::string path_;
  size_t elem_;
  uint64_t bytes_ = 0;
  const unsigned char* data_ = nullptr;
};

void check_rows(int64_t step, int global_rows, int row_begin, int rows, int T) {
  TRAINER_CHECK(step >= 0 && T >= 1 && rows >= 0 && row_begin >= 0 && row_begin + rows <= global_rows,
                "TokenSource::batch: step {} rows [{}, {}) of a global batch of {} rows, T {}", step, row_begin,
                row_begin + rows, global_rows, T);
}

class RandomTokenSource final : public TokenSource {
 public:
  RandomTokenSource(uint64_t seed, int vocab_size) : seed_(seed), vocab_(uint64_t(vocab_size)) {}
  void batch(int64_t step, int global_rows, int row_begin, int rows, int T, int32_t* inputs,
             int32_t* targets) override {
    check_rows(step, global_rows, row_begin, rows, T);
    for (int r = 0; r < rows; ++r) {
      const uint64_t row = uint64_t(row_begin + r);
      int32_t* in = inputs + int64_t(r) * T;
      int32_t* tg = targets + int64_t(r) * T;
      // window position p in [0, T]: inputs take p < T, targets take p >= 1.
      for (int p = 0; p <= T; ++p) {
        const auto tok = int32_t(uniform_below(token_hash(seed_, uint64_t(step), row, uint64_t(p)), vocab_));
        if (p < T) in[p] = tok;
        if (p > 0) tg[p - 1] = tok;
      }
    }
  }

 private:
  uint64_t seed_, vocab_;
};

class FileTokenSource final : public TokenSource {
 public:
  FileTokenSource(const DataCfg& d, int vocab_size)
      : tokens_(*d.path, d.dtype), seed_(d.seed), vocab_(vocab_size), sequential_(d.sampling == "sequential") {
    tokens_.advise(sequential_ ? MADV_SEQUENTIAL : MADV_RANDOM);
  }
  void batch(int64_t step, int global_rows, int row_begin, int rows, int T, int32_t* inputs,
             int32_t* targets) override {
    check_rows(step, global_rows, row_begin, rows, T);
    const uint64_t n = tokens_.size();
    CONFIG_CHECK(n >= uint64_t(T) + 1, "data.path: '{}' holds {} tokens, fewer than context_length + 1 = {}",
                 tokens_.path(), n, int64_t(T) + 1);
    const uint64_t m = n - uint64_t(T);  // number of valid window starts: [0, n - T - 1]
    for (int r = 0; r < rows; ++r) {
      const uint64_t row = uint64_t(row_begin + r);
      uint64_t start;
      if (sequential_) {  // ((step * global_rows + row) * T) mod (n - T), exactly, without overflow
        const auto k = ((unsigned __int128)step * uint64_t(global_rows) + row) % m;
        start = uint64_t(k * uint64_t(T) % m);
      } else {
        start = uniform_below(token_hash(seed_, uint64_t(step), row, 0), m);
      }
      const uint64_t bad = tokens_.first_at_least(start, start + uint64_t(T) + 1, uint64_t(vocab_));
      CONFIG_CHECK(bad == start + uint64_t(T) + 1, "data.path: token {} at position {} of '{}' is >= model.vocab_size {}",
                   tokens_[bad], bad, tokens_.path(), vocab_);
      int32_t* in = inputs + int64_t(r) * T;
      int32_t* tg = targets + int64_t(r) * T;
      for (int t = 0; t < T; ++t) in[t] = int32_t(tokens_[start + uint64_t(t)]);
      for (int t = 0; t < T; ++t) tg[t] = int32_t(tokens_[start + uint64_t(t) + 1]);
    }
  }

 private:
  MappedTokens tokens_;
  uint64_t seed_;
  int vocab_;
  bool sequential_;
};

}  // namespace

uint64_t token_hash(uint64_t seed, uint64_t step, uint64_t row, uint64_t index) {
  // Each splitmix64 is a bijection of 64-bit words; chaining them keys the stream by every coordinate in turn.
  return splitmix64(splitmix64(splitmix64(splitmix64(seed) ^ step) ^ row) ^ index);
}

void check_token_file(const std::string& path, const std::string& dtype, int vocab_size, int context_length) {
  MappedTokens tokens(path, dtype);
  const uint64_t n = tokens.size();
  CONFIG_CHECK(n >= uint64_t(context_length) + 1,
               "data.path: '{}' holds {} tokens, fewer than model.context_length + 1 = {}", path, n,
               int64_t(context_length) + 1);
  tokens.advise(MADV_SEQUENTIAL);
  // A uint32 file (ids < 65536) read as uint16 has a zero in every other slot (the high halves); no real token
  // stream has token 0 in 32 alternate slots in a row. Checked on the first 2^20 slots (at least 64).
  if (dtype == "uint16" && n >= 64) {
    const uint64_t m = std::min<uint64_t>(n, uint64_t(1) << 20) & ~uint64_t(1);
    bool odd_all_zero = true, even_any = false;
    for (uint64_t i = 0; i < m && odd_all_zero; i += 2) {
      even_any = even_any || tokens[i] != 0;
      odd_all_zero = tokens[i + 1] == 0;
    }
    CONFIG_CHECK(!(odd_all_zero && even_any),
                 "data.path: '{}' read as uint16 has a zero in every odd slot of its first {} tokens: it looks like "
                 "a uint32 token file; set data.dtype=uint32", path, m);
  }
  const uint64_t bad = tokens.first_at_least(0, n, uint64_t(vocab_size));
  if (bad != n && dtype == "uint32") {
    // A uint16 file read as uint32 pairs two ids into one: hint at the dtype when both halves are valid ids.
    const uint32_t v = tokens[bad];
    CONFIG_CHECK(!((v & 0xffffu) < uint32_t(vocab_size) && (v >> 16) < uint32_t(vocab_size)),
                 "data.path: token {} at position {} of '{}' is >= model.vocab_size {}; its two 16-bit halves ({}, {}) "
                 "are both valid ids: is it a uint16 token file? (set data.dtype=uint16)", v, bad, path, vocab_size,
                 v & 0xffffu, v >> 16);
  }
  CONFIG_CHECK(bad == n, "data.path: token {} at position {} of '{}' is >= model.vocab_size {}", tokens[bad], bad,
               path, vocab_size);
}

std::unique_ptr<TokenSource> make_token_source(const DataCfg& d, int vocab_size) {
  CONFIG_CHECK(vocab_size > 0, "model.vocab_size: {} must be positive", vocab_size);
  if (d.source == "random") return std::make_unique<RandomTokenSource>(d.seed, vocab_size);
  CONFIG_CHECK(d.source == "tokens", "data.source: unknown source '{}' (random | tokens)", d.source);
  CONFIG_CHECK(d.path.has_value() && !d.path->empty(), "data.path: required when data.source is 'tokens'");
  CONFIG_CHECK(d.sampling == "random" || d.sampling == "sequential",
               "data.sampling: unknown sampling '{}' (random | sequential)", d.sampling);
  return std::make_unique<FileTokenSource>(d, vocab_size);
}

}  // namespace trainer
