#!/usr/bin/env python3
"""torch.distributed all_reduce bandwidth, nccl-tests style: the PyTorch peer of the trainer's collective_bench.

    # one process per GPU (nccl); default sizes 1M 4M 16M 64M 256M 1G
    torchrun --nproc_per_node 2 launch/torch_allreduce_bench.py --json results/torch_allreduce_2gpu.json
    torchrun --nproc_per_node 2 launch/torch_allreduce_bench.py --sizes 8M 128M --warmup 10 --iters 50
    # CPU (gloo) smoke test; Debian's torch 1.13 under Python 3.11 needs the two dummy stream maps
    /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 --redirects 9:1 --tee 9:1 \
        launch/torch_allreduce_bench.py --device cpu --sizes 4096 65536

Without torchrun it runs as one rank (busbw is 0 by definition). Each size: a float32 tensor of `size` bytes on every
rank, --warmup untimed all_reduce(SUM) calls (in place), a barrier, then --iters calls timed together on every rank
(CUDA events around the loop and one synchronize; time.perf_counter on the CPU, where gloo's calls block).

Definitions (nccl-tests doc/PERFORMANCE.md, as in the trainer's collective_bench):
  size     bytes of the whole array (one rank's tensor); --sizes takes bytes, with an optional K, M or G
           (binary: 1M = 2^20 B, like nccl-tests and collective.sizes_mb), or a number with MB / GB (also binary)
  count    float32 elements, size / 4
  time_us  per all_reduce: rank 0's time of the loop / iters (time_us_max in the JSON: the slowest rank's)
  algbw    size / time_us, GB/s (1e9 B/s)
  busbw    algbw x 2(n-1)/n for n ranks
  #wrong   after the timing, every rank fills its tensor with rank+1 and runs one more all_reduce; elements
           different from n(n+1)/2, summed over ranks. Any wrong element makes the exit code 1.
The values grow during the timed calls (in place, x n each call); that does not change the time.

NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are forced (not defaulted) before torch loads: NVLink
multicast stays off on the multi-GPU machines this runs on. Only rank 0 prints and writes --json.
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import List

# The forced environment (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1) is set by torch_bench on import,
# before torch (and NCCL) load; the helpers shared with it come from there.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_bench  # noqa: E402  (sets FORCED_ENV first; imports without torch, so --help works without it)
from torch_bench import FORCED_ENV, nccl_version, write_json  # noqa: E402

torch, dist = torch_bench.torch, torch_bench.dist  # None without PyTorch: parse_args stops with one line

SCHEMA = "torch_allreduce_bench/1"
DEFAULT_SIZES = ["1M", "4M", "16M", "64M", "256M", "1G"]
UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GB": 1 << 30}


def parse_size(text: str) -> int:
    """'4096' -> 4096, '64K' / '1M' / '16MB' / '1G' / '0.5G' -> bytes (binary units); a multiple of 4 (float32)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in UNITS:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: bytes, or a number with K, M, G (KB, MB, GB)")
    size = int(float(m.group(1)) * UNITS[m.group(2).upper()])
    if size < 4 or size % 4:
        raise argparse.ArgumentTypeError(f"size {text!r} = {size} B is not a positive multiple of 4 (float32)")
    return size


def machine_info(device: str, backend: str) -> dict:
    """torch_bench's machine description plus the process-group backend, the forced environment and the GPUs."""
    info = torch_bench.machine_info(device)
    info.update(backend=backend, env={k: os.environ.get(k) for k in FORCED_ENV})
    if device == "cuda":
        info.update(gpu_count=torch.cuda.device_count(), nccl=nccl_version())
    return info


def init_distributed(device: str):
    """Joins the torchrun job, or makes a one-rank group when started without torchrun. Returns (rank, world)."""
    if "WORLD_SIZE" not in os.environ:   # plain python: a group of one on a free local port
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPU(s) visible")
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl" if device == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size()


def count_wrong(buf: torch.Tensor, n: int) -> int:
    """Elements of the all_reduce(SUM) of rank+1 over n ranks that differ from n(n+1)/2."""
    return int((buf != n * (n + 1) / 2).sum().item())


def bench_one(size: int, device: str, warmup: int, iters: int) -> dict:
    """One size: warm-up, barrier, timed loop, closed-form check. The same row on every rank."""
    rank, n = dist.get_rank(), dist.get_world_size()
    count = size // 4
    buf = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    if device == "cuda":
        torch.cuda.synchronize()
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()
    if device == "cuda":
        torch.cuda.synchronize()   # the barrier is itself a device-side all_reduce under nccl
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        end.record()
        end.synchronize()
        us = start.elapsed_time(end) * 1e3 / iters
    else:
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        us = (time.perf_counter() - t0) * 1e6 / iters

    # rank 0's time for the table; the slowest rank's for the record
    times = torch.tensor([us], dtype=torch.float64, device=device)
    dist.broadcast(times, src=0)
    time_us = float(times.item())
    times.fill_(us)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    time_us_max = float(times.item())

    buf.fill_(float(rank + 1))
    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    wrong = torch.tensor([count_wrong(buf, n)], dtype=torch.int64, device=device)
    dist.all_reduce(wrong, op=dist.ReduceOp.SUM)
    del buf
    algbw = size / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
    return {"size_bytes": size, "count": count, "time_us": time_us, "time_us_max": time_us_max,
            "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (n - 1) / n, "wrong": int(wrong.item())}


COLUMNS = "  {:>12} {:>12} {:>10} {:>9} {:>9} {:>7}"   # a header line replaces the first blank by #


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--sizes", nargs="+", type=parse_size, default=[parse_size(s) for s in DEFAULT_SIZES],
                    help="bytes per rank, e.g. 4096 64K 1M 16MB 1G (default: 1M 4M 16M 64M 256M 1G)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed all_reduce calls per size (default 5)")
    ap.add_argument("--iters", type=int, default=20, help="timed all_reduce calls per size (default 20)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None,
                    help="cuda: nccl, cpu: gloo (default: cuda when a GPU is visible)")
    ap.add_argument("--json", help="write the record here (rank 0)")
    args = ap.parse_args(argv)
    if torch is None:
        ap.error(f"PyTorch is not available to {sys.executable} ({torch_bench.TORCH_IMPORT_ERROR})")
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but no CUDA device is visible (use --device cpu)")
    if args.warmup < 0 or args.iters < 1:
        ap.error("need --warmup >= 0 and --iters >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    rank, n = init_distributed(args.device)
    try:
        backend = dist.get_backend()
        machine = machine_info(args.device, backend)
        if rank == 0:
            where = f"{machine.get('gpu')}, nccl {machine.get('nccl')}" if args.device == "cuda" else "cpu"
            print(f"# torch_allreduce_bench  op all_reduce(sum)  dtype float32  backend {backend}  nranks {n}  "
                  f"warmup {args.warmup}  iters {args.iters}  ({where}, torch {torch.__version__})")
            print("#" + COLUMNS.format("size", "count", "time", "algbw", "busbw", "#wrong")[1:])
            print("#" + COLUMNS.format("(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "")[1:], flush=True)
        rows: List[dict] = []
        for size in args.sizes:
            row = bench_one(size, args.device, args.warmup, args.iters)
            rows.append(row)
            if rank == 0:
                print(COLUMNS.format(row["size_bytes"], row["count"], f"{row['time_us']:.1f}",
                                     f"{row['algbw_gbs']:.2f}", f"{row['busbw_gbs']:.2f}", row["wrong"]), flush=True)
        wrong = sum(r["wrong"] for r in rows)
        big = [r["busbw_gbs"] for r in rows if r["size_bytes"] >= 64 << 20]
        if rank == 0:
            avg = f"avg busbw (size >= 64 MiB): {sum(big) / len(big):.2f} GB/s   " if big else ""
            print(f"# {avg}wrong: {wrong}  {'FAILED' if wrong else 'OK'}")
            if args.json:
                write_json(args.json, {
                    "schema": SCHEMA, "status": "ok" if wrong == 0 else "wrong",
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine,
                    "world_size": n, "device": args.device, "backend": backend, "op": "all_reduce", "reduce": "sum",
                    "dtype": "float32", "warmup": args.warmup, "iters": args.iters, "results": rows,
                    "definitions": "size: bytes of the whole array, one rank's tensor (nccl-tests); time_us: per "
                                   "all_reduce, rank 0's timed loop / iters (time_us_max: slowest rank); algbw = "
                                   "size / time_us in GB/s (1e9); busbw = algbw * 2(n-1)/n (nccl-tests "
                                   "PERFORMANCE.md); wrong: elements != n(n+1)/2 after filling rank+1, all ranks"})
                print(f"# wrote {args.json}")
    finally:
        dist.destroy_process_group()
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
