// safetensors: our own small reader and writer of Hugging Face's tensor file format.
//
// File layout (huggingface/safetensors README, "Format"):
//   [8 bytes]  N, the header length in bytes, unsigned 64-bit little-endian
//   [N bytes]  UTF-8 JSON object {name: {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]},
//              "__metadata__": {str: str}}, possibly padded at the end with spaces (0x20)
//   [rest]     the byte buffer: raw little-endian row-major tensor data; offsets are relative to its start
// The spec requires the byte buffer to be entirely indexed without holes (no polyglot files), and the reference
// implementation refuses headers above 100 MB; the reader enforces both.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace trainer {

/// One tensor read from a file, on the host. `dtype` is the safetensors name ("F32", "BF16", "F64", "I32", "F16",
/// "I64", "U8", ...); `bytes` holds numel * element size bytes, little-endian, row-major.
struct HostTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

/// One tensor to write: `data` points at numel(shape) * dtype_size(dtype) bytes of host memory, row-major.
struct NamedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};

/// The safetensors dtype name of a DType: f32 -> "F32", bf16 -> "BF16", f64 -> "F64", i32 -> "I32".
const char* safetensors_dtype_name(DType t);

/// Element size in bytes of a safetensors dtype name; 0 when the name is unknown (or a sub-byte type such as F4,
/// which this reader does not support).
size_t safetensors_dtype_size(const std::string& name);

/// A file's size and CRC-32s (io/checksum.h) as written or read: what a checkpoint's manifest records of each file.
struct FileDigest {
  uint64_t bytes = 0;
  std::string crc32;  // the whole file's, 8 lower-case hex digits; empty where only some blocks were read
  uint64_t block_bytes = 0;  // the block size of `blocks` (0: none)
  std::vector<std::pair<uint64_t, std::string>> blocks;  // (block index, its CRC-32) of each block written or read
};

/// Reads every tensor of the safetensors file `path` into host memory. When `metadata` is not null it receives the
/// "__metadata__" strings (empty when the file has none); when `digest` is not null, the size and CRC-32 of the
/// whole file as read (header and data: the bytes write_safetensors' digest covers).
/// Raises ConfigError naming the file on any problem: unreadable or truncated file, header length beyond the file
/// or above 100 MB, malformed JSON, unknown dtype, negative dims, a data range whose size does not match
/// dtype x shape, ranges that overlap, leave holes or run past the end of the file, non-string metadata.
std::map<std::string, HostTensor> read_safetensors(const std::string& path,
                                                   std::map<std::string, std::string>* metadata = nullptr,
                                                   FileDigest* digest = nullptr);

/// The tensors' names, dtypes and shapes of the safetensors file `path`, each with empty `bytes`: the header only,
/// checked as read_safetensors checks it (the same errors, except for reading the data), so a run can refuse a file
/// that does not fit its model before it starts (main.cpp).
std::map<std::string, HostTensor> read_safetensors_header(const std::string& path);

/// Writes `tensors` (in the given order, packed without gaps) and `metadata` to `path`. The header is padded with
/// spaces to a multiple of 8 bytes so every tensor starts 8-byte aligned (as the reference writer does).
/// Atomic: writes `path.tmp.<pid>.<n>`, fsyncs, then renames over `path`; on failure the temp file is removed and
/// RuntimeError is raised. Duplicate or empty names, a null data pointer with nonzero size, or negative dims raise
/// RuntimeError (they are programming errors, not user input). Returns the file's size and CRC-32s (the whole
/// file's and each kChecksumBlockBytes block's).
FileDigest write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace trainer
