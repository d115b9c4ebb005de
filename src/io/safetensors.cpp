// safetensors reader/writer; format and checks as described in safetensors.h (huggingface/safetensors README).
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "core/errors.h"
#include "io/checksum.h"
#include "io/result_record.h"

namespace trainer {
namespace {

using json = nlohmann::json;

// The reference implementation (safetensors/src/tensor.rs, MAX_HEADER_SIZE) refuses larger headers.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

/// Reads exactly n bytes at `offset`; false (errno set, or 0 for a short file) when it cannot.
bool pread_exact(int fd, uint64_t offset, char* buf, uint64_t n) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, buf, size_t(std::min<uint64_t>(n, 1ull << 30)), off_t(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (got == 0) {
      errno = 0;
      return false;
    }
    buf += got;
    offset += uint64_t(got);
    n -= uint64_t(got);
  }
  return true;
}

/// n1 * n2 * ... * elem_size in bytes, or false on overflow of uint64.
bool checked_nbytes(const std::vector<int64_t>& shape, uint64_t elem_size, uint64_t* out) {
  unsigned __int128 n = elem_size;
  for (int64_t d : shape) {
    n *= uint64_t(d);
    if (n > std::numeric_limits<uint64_t>::max()) return false;
  }
  *out = uint64_t(n);
  return true;
}

struct Entry {
  std::string name;
  uint64_t begin, end;
};

}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f64: return "F64";
    case DType::i32: return "I32";
  }
  return "?";
}

size_t safetensors_dtype_size(const std::string& name) {
  // The dtypes of the safetensors spec with a whole number of bytes per element (Dtype in safetensors/src/tensor.rs).
  static const std::map<std::string, size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8}};
  auto it = kSizes.find(name);
  return it == kSizes.end() ? 0 : it->second;
}

namespace {

// s with bytes outside printable ASCII as \xNN: the parser's message quotes the bytes it last read (a header length
// that runs into the data quotes binary), and the error is one line on a terminal.
std::string printable(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += u >= 0x20 && u < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  return out;
}

// read_safetensors and read_safetensors_header: with_data false stops after the header's checks.
std::map<std::string, HostTensor> read_file(const std::string& path, std::map<std::string, std::string>* metadata,
                                            FileDigest* digest, bool with_data) {
  auto fail = [&](const std::string& why) -> ConfigError {
    return ConfigError(fmt::format("safetensors file '{}': {}", path, why));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(fmt::format("cannot open: {}", std::strerror(errno)));
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw fail(fmt::format("cannot stat: {}", std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw fail("is a directory");
  const uint64_t file_size = uint64_t(st.st_size);

  // ---- header length and JSON header ----
  if (file_size < 8) throw fail(fmt::format("truncated: {} bytes, less than the 8-byte header length", file_size));
  unsigned char len_le[8];
  if (!pread_exact(fd, 0, reinterpret_cast<char*>(len_le), 8))
    throw fail(fmt::format("cannot read the header length: {}", errno ? std::strerror(errno) : "short read"));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_le[i];
  if (header_len > kMaxHeaderBytes)
    throw fail(fmt::format("header length {} bytes is above the 100 MB limit (corrupt file?)", header_len));
  if (header_len > file_size - 8)
    throw fail(fmt::format("truncated: header length {} bytes runs past the end of the file ({} bytes)", header_len,
                           file_size));
  std::string header(header_len, '\0');
  if (!pread_exact(fd, 8, header.data(), header_len))
    throw fail(fmt::format("cannot read the header: {}", errno ? std::strerror(errno) : "short read"));
  json h;
  std::vector<std::set<std::string>> keys;  // each open object's keys (JSON would keep the last of two: ambiguous)
  const json::parser_callback_t unique_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second) {
      const std::string key = printable(parsed.get<std::string>());
      throw fail(depth != 1                ? fmt::format("a header entry gives the key '{}' twice", key)
                 : key == "__metadata__" ? std::string("the header gives __metadata__ twice")
                                         : fmt::format("tensor '{}' is in the header twice", key));
    }
    return true;
  };
  try {
    h = json::parse(header, unique_keys);
  } catch (const json::parse_error& e) {
    throw fail(fmt::format("header is not valid JSON: {}", printable(e.what())));
  }
  if (!h.is_object()) throw fail("header is not a JSON object");

  // ---- entries ----
  const uint64_t data_begin = 8 + header_len, data_len = file_size - data_begin;
  std::map<std::string, HostTensor> out;
  std::vector<Entry> entries;
  if (metadata) metadata->clear();
  for (auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      if (v.is_null()) continue;
      if (!v.is_object()) throw fail("__metadata__ is not an object");
      for (auto& [k, s] : v.items()) {
        if (!s.is_string()) throw fail(fmt::format("__metadata__ value of '{}' is not a string", k));
        if (metadata) (*metadata)[k] = s.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) throw fail(fmt::format("tensor '{}': entry is not an object", name));
    if (!v.contains("dtype") || !v["dtype"].is_string())
      throw fail(fmt::format("tensor '{}': missing string 'dtype'", name));
    const std::string dtype = v["dtype"].get<std::string>();
    const size_t elem = safetensors_dtype_size(dtype);
    if (elem == 0) throw fail(fmt::format("tensor '{}': unknown or unsupported dtype '{}'", name, dtype));
    if (!v.contains("shape") || !v["shape"].is_array())
      throw fail(fmt::format("tensor '{}': missing array 'shape'", name));
    std::vector<int64_t> shape;
    for (auto& d : v["shape"]) {
      const bool ok = d.is_number_unsigned() ? d.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())
                                             : d.is_number_integer() && d.get<int64_t>() >= 0;
      if (!ok)
        throw fail(fmt::format("tensor '{}': shape {} has an entry that is not a non-negative integer", name,
                               v["shape"].dump()));
      shape.push_back(d.get<int64_t>());
    }
    const json& off = v.contains("data_offsets") ? v["data_offsets"] : json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw fail(fmt::format("tensor '{}': 'data_offsets' must be two non-negative integers [begin, end]", name));
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (end < begin) throw fail(fmt::format("tensor '{}': data_offsets [{}, {}] end before begin", name, begin, end));
    if (end > data_len)
      throw fail(fmt::format("tensor '{}': data_offsets [{}, {}] run past the end of the data ({} bytes; truncated "
                             "file?)",
                             name, begin, end, data_len));
    uint64_t nbytes = 0;
    if (!checked_nbytes(shape, elem, &nbytes) || nbytes != end - begin)
      throw fail(fmt::format("tensor '{}': data_offsets [{}, {}] hold {} bytes but dtype {} x shape {} needs {}", name,
                             begin, end, end - begin, dtype, v["shape"].dump(),
                             checked_nbytes(shape, elem, &nbytes) ? std::to_string(nbytes) : "overflow"));
    entries.push_back({name, begin, end});
    out[name] = HostTensor{dtype, std::move(shape), {}};
  }

  // ---- the ranges must tile the byte buffer: sorted, no overlap, no hole, ending at the end of the file ----
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t pos = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < pos)
      throw fail(fmt::format("tensor '{}': data_offsets [{}, {}] overlap tensor '{}' (ends at {})", e.name, e.begin,
                             e.end, entries[i - 1].name, pos));
    if (e.begin > pos)
      throw fail(fmt::format("bytes [{}, {}) of the data are not part of any tensor (hole before '{}')", pos, e.begin,
                             e.name));
    pos = e.end;
  }
  if (pos != data_len)
    throw fail(fmt::format("{} bytes of data follow the last tensor (data is {} bytes, tensors end at {})",
                           data_len - pos, data_len, pos));

  if (!with_data) return out;

  // ---- data ----
  for (const Entry& e : entries) {
    auto& bytes = out[e.name].bytes;
    bytes.resize(e.end - e.begin);
    if (!pread_exact(fd, data_begin + e.begin, bytes.data(), bytes.size()))
      throw fail(fmt::format("cannot read tensor '{}': {}", e.name, errno ? std::strerror(errno) : "short read"));
  }
  if (digest) {  // the file in order: the ranges tile the data (checked above), so sorted they are its bytes
    std::vector<Crc32::Piece> pieces = {{len_le, 8}, {header.data(), header.size()}};
    for (const Entry& e : entries) pieces.push_back({out[e.name].bytes.data(), out[e.name].bytes.size()});
    Crc32 crc;
    crc.update(pieces);  // every tensor at once: xl's 13.6 GB are ~450 tensors, most below one thread's share
    *digest = {file_size, crc.hex(), 0, {}};
  }
  return out;
}

}  // namespace

std::map<std::string, HostTensor> read_safetensors(const std::string& path,
                                                   std::map<std::string, std::string>* metadata,
                                                   FileDigest* digest) {
  return read_file(path, metadata, digest, /*with_data=*/true);
}

std::map<std::string, HostTensor> read_safetensors_header(const std::string& path) {
  return read_file(path, nullptr, nullptr, /*with_data=*/false);
}

FileDigest write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  std::set<std::string> names;
  std::vector<FilePart> parts;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    TRAINER_CHECK(!t.name.empty() && t.name != "__metadata__", "write_safetensors: invalid tensor name '{}'", t.name);
    TRAINER_CHECK(names.insert(t.name).second, "write_safetensors: duplicate tensor name '{}'", t.name);
    for (int64_t d : t.shape) TRAINER_CHECK(d >= 0, "write_safetensors: tensor '{}' has negative dim {}", t.name, d);
    uint64_t nbytes = 0;
    TRAINER_CHECK(checked_nbytes(t.shape, dtype_size(t.dtype), &nbytes), "write_safetensors: '{}' too large", t.name);
    TRAINER_CHECK(nbytes == 0 || t.data != nullptr, "write_safetensors: tensor '{}' has no data", t.name);
    h[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape},
                 {"data_offsets", {offset, offset + nbytes}}};
    parts.push_back({t.data, nbytes});
    offset += nbytes;
  }
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // 8 + N is a multiple of 8: aligned tensor data
  unsigned char len_le[8];
  for (int i = 0; i < 8; ++i) len_le[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
  parts.insert(parts.begin(), {{len_le, 8}, {header.data(), header.size()}});
  std::vector<Crc32::Piece> pieces;
  uint64_t bytes = 0;
  for (const FilePart& f : parts) {
    pieces.push_back({f.data, size_t(f.bytes)});
    bytes += f.bytes;
  }
  Crc32 crc(kCrcPartBytes, 0, kChecksumBlockBytes);
  crc.update(pieces);
  write_file_atomic(path, parts);
  FileDigest d{bytes, crc.hex(), kChecksumBlockBytes, {}};
  const std::vector<uint32_t> blocks = crc.blocks();
  for (size_t i = 0; i < blocks.size(); ++i) d.blocks.emplace_back(i, crc32_hex(blocks[i]));
  return d;
}

}  // namespace trainer
