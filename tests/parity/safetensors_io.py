"""Read and write safetensors files with numpy and torch only (Debian has no `safetensors` package).

Format (https://github.com/huggingface/safetensors, README "Format"):
  8 bytes      N, the header size in bytes, unsigned little-endian 64-bit
  N bytes      UTF-8 JSON: {"<name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...,
               "__metadata__": {"<key>": "<string value>"}}; offsets are bytes into the data buffer, end exclusive.
               Writers pad the header with spaces to a multiple of 8 bytes so that the buffer stays aligned.
  rest         the data buffer: each tensor's elements, row-major, little-endian. The tensors must cover the buffer
               exactly (no holes, no overlap); read() checks that, so it also validates files the trainer writes.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple, Union

import numpy as np
import torch

# safetensors dtype name -> (torch dtype, bytes per element)
_DTYPES = {
    "F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8), "I32": (torch.int32, 4), "I16": (torch.int16, 2), "I8": (torch.int8, 1),
    "U8": (torch.uint8, 1), "BOOL": (torch.bool, 1),
}
_NAME_OF = {tdtype: name for name, (tdtype, _) in _DTYPES.items()}
# numpy cannot hold bf16: its bytes travel as int16 and are reinterpreted by torch.
_NUMPY_OF = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<i2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
             "I8": "i1", "U8": "u1", "BOOL": "?"}

MAX_HEADER_BYTES = 100_000_000   # the reference implementation's limit


class SafetensorsError(ValueError):
    """A file that is not valid safetensors; the message names the file and the problem."""


def _to_tensor(value: Union[torch.Tensor, np.ndarray]) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    return value.detach().cpu().contiguous()


def _tensor_bytes(t: torch.Tensor) -> bytes:
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()


def save(path: Union[str, Path], tensors: Mapping[str, Union[torch.Tensor, np.ndarray]],
         metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes `tensors` (name -> tensor, in the mapping's order) to `path`; metadata values must be strings.
    Raises SafetensorsError for an unsupported dtype, a non-string metadata value or the reserved name __metadata__."""
    header: Dict[str, object] = {}
    if metadata:
        bad = {k: v for k, v in metadata.items() if not isinstance(v, str)}
        if bad:
            raise SafetensorsError(f"{path}: __metadata__ values must be strings, got {bad}")
        header["__metadata__"] = dict(metadata)
    blobs, offset = [], 0
    for name, value in tensors.items():
        if name == "__metadata__":
            raise SafetensorsError(f"{path}: '__metadata__' is reserved and cannot name a tensor")
        t = _to_tensor(value)
        if t.dtype not in _NAME_OF:
            raise SafetensorsError(f"{path}: tensor '{name}' has unsupported dtype {t.dtype}")
        blob = _tensor_bytes(t)
        header[name] = {"dtype": _NAME_OF[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def load(path: Union[str, Path]) -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    """Reads `path`; returns (name -> CPU tensor in the file's dtype and order, metadata).
    Raises SafetensorsError naming the problem: short file, bad header size or JSON, unknown dtype, a tensor whose
    byte range disagrees with its shape and dtype, or ranges that leave holes, overlap or miss the end of the file."""
    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise SafetensorsError(f"{path}: {len(raw)} bytes, too short for the 8-byte header size")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER_BYTES or 8 + n > len(raw):
        raise SafetensorsError(f"{path}: header size {n} B does not fit in a file of {len(raw)} B")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(f"{path}: __metadata__ must map strings to strings, got {metadata!r}")
    data = memoryview(raw)[8 + n:]
    tensors: Dict[str, torch.Tensor] = {}
    spans = []
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], [int(d) for d in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: tensor '{name}' has a malformed entry {info!r}") from None
        if dtype not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor '{name}' has unsupported dtype {dtype!r}")
        numel = int(np.prod(shape, dtype=np.int64))
        if not (0 <= begin <= end <= len(data)) or end - begin != numel * _DTYPES[dtype][1]:
            raise SafetensorsError(f"{path}: tensor '{name}' ({dtype}, shape {shape}) has byte range [{begin}, {end}) "
                                   f"but needs {numel * _DTYPES[dtype][1]} B inside a {len(data)} B buffer")
        arr = np.frombuffer(data[begin:end], dtype=_NUMPY_OF[dtype]).reshape(shape).copy()
        t = torch.from_numpy(arr)
        tensors[name] = t.view(torch.bfloat16) if dtype == "BF16" else t
        spans.append((begin, end, name))
    covered = 0
    for begin, end, name in sorted(spans):
        if begin != covered:
            raise SafetensorsError(f"{path}: tensor '{name}' starts at byte {begin}, expected {covered} "
                                   f"({'overlap' if begin < covered else 'hole'} in the data buffer)")
        covered = end
    if covered != len(data):
        raise SafetensorsError(f"{path}: tensors cover {covered} B of a {len(data)} B data buffer")
    return tensors, metadata


def load_header(path: Union[str, Path]) -> dict:
    """The raw JSON header of `path` (dtype, shape, data_offsets per tensor, and __metadata__ if present)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n).decode("utf-8"))
