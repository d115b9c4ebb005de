"""launch/plot_memory.py and the trainer's profile.memory_timeline.

A synthetic timeline (random allocations and frees whose peak and live set this test finds by brute force) must give
a PNG and name the right largest allocation alive at the peak; bad files give one error line and exit 2. With the
trainer binary (TRAINER_BIN), a tiny CPU run writes a timeline whose replay peaks at the record's memory.peak_bytes,
ends with nothing in use (every buffer's free is logged), and a batch too large for memory ends as an "oom" record
whose timeline holds the failed allocation after the ones that succeeded. The --help text names every category the
trainer writes (the ones drawn).
"""
import json
import os
import pathlib
import random
import re
import subprocess
import sys

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN = os.environ.get("TRAINER_BIN")
PLOT = SRC / "launch" / "plot_memory.py"
CATS = ["parameters", "gradients", "optimizer", "activations", "head", "workspace", "communication"]
PHASES = ["setup", "forward", "backward", "optimizer"]


def run_plot(*args, cwd=None):
    return subprocess.run([sys.executable, str(PLOT), *map(str, args)], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def synthetic(seed=3, n=300):
    """A random valid timeline: allocations of distinct sizes, frees of random live ones, a few phases/blocks."""
    rng = random.Random(seed)
    events, live, next_id, t = [], {}, 1, 0.0
    sizes = rng.sample(range(1000, 10 ** 7), n)   # distinct, so "the largest" is unambiguous
    for k in range(n):
        t += rng.random()
        phase = PHASES[min(3, k * 4 // n)]
        block = rng.randrange(-1, 6)
        place = {"phase": phase, "block_name": "block" if block >= 0 else None, "block": block}
        if live and rng.random() < 0.45:
            i = rng.choice(sorted(live))
            b, cat = live.pop(i)
            events.append({"t_ms": t, "bytes": -b, "id": i, "category": cat, **place})
        else:
            cat = rng.choice(CATS)
            live[next_id] = (sizes[k], cat)
            events.append({"t_ms": t, "bytes": sizes[k], "id": next_id, "category": cat, **place})
            next_id += 1
    return {"schema": "trainer.memory_timeline/1", "rank": 0, "world_size": 1, "device": "synthetic",
            "categories": CATS, "events": events, "peak": {"bytes": None}}


def brute_force_peak(doc):
    """(peak bytes, index, the allocation events alive right after that index), recomputed from each prefix."""
    ev = doc["events"]
    best, best_k = 0, None
    for k in range(len(ev)):
        s = sum(e["bytes"] for e in ev[:k + 1] if not e.get("failed"))
        if s > best:
            best, best_k = s, k
    freed = {e["id"] for e in ev[:best_k + 1] if e["bytes"] < 0}
    alive = [e for e in ev[:best_k + 1] if e["bytes"] > 0 and not e.get("failed") and e["id"] not in freed]
    return best, best_k, alive


def table_rows(stdout):
    return [line.split() for line in stdout.splitlines() if line and not line.startswith("#")]


def test_synthetic_timeline_png_and_largest_alive(tmp_path):
    doc = synthetic()
    path = tmp_path / "mem.json"
    path.write_text(json.dumps(doc))
    peak, k, alive = brute_force_peak(doc)
    biggest = max(alive, key=lambda e: e["bytes"])
    p = run_plot(path, "--top", "5", "--title", "synthetic")
    assert p.returncode == 0, p.stderr
    png = tmp_path / "mem.png"   # default output: PATH with .png for .json
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert f"peak " in p.stdout and f"({peak} B) at event {k} " in p.stdout
    rows = table_rows(p.stdout)
    assert len(rows) == 5
    # rank, size (2 fields), bytes, category, phase, block (1 or 2 fields), id, event
    first = rows[0]
    assert first[0] == "1" and int(first[3]) == biggest["bytes"] and first[4] == biggest["category"]
    assert first[5] == biggest["phase"] and int(first[-2]) == biggest["id"]
    sizes = [int(r[3]) for r in rows]
    assert sizes == sorted((e["bytes"] for e in alive), reverse=True)[:5]
    # The time axis and an explicit output path work too.
    out = tmp_path / "t.png"
    p = run_plot(path, "--x", "time", "-o", out)
    assert p.returncode == 0, p.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("{not json", "is not JSON"),
    ('{"schema": "trainer.result/1"}', "is not a memory timeline"),
    ('{"schema": "trainer.memory_timeline/1", "categories": ["a"], "events": [{"bytes": 1}]}', "event 0 is malformed"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, message):
    path = tmp_path / "m.json"
    if content is not None:
        path.write_text(content)
    p = run_plot(path)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("plot_memory.py: error: ") and message in lines[0], p.stderr
    assert not (tmp_path / "m.png").exists()


def test_the_help_names_every_category():
    p = run_plot("--help")
    assert p.returncode == 0, p.stderr
    listed = re.search(r"category \(([^)]*)\)", " ".join(p.stdout.split()))
    assert listed and listed.group(1).split(", ") == CATS, p.stdout


def replay(doc):
    total, peak, ids = 0, 0, {}
    for e in doc["events"]:
        if e.get("failed"):
            continue
        if e["bytes"] > 0:
            assert e["id"] not in ids
            ids[e["id"]] = e["bytes"]
        else:
            assert ids.pop(e["id"]) == -e["bytes"]   # every free matches a live allocation of its size
        total += e["bytes"]
        peak = max(peak, total)
    return total, peak


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_trainer_writes_a_timeline_whose_replay_peaks_at_the_record(tmp_path):
    mem, rec = tmp_path / "mem.json", tmp_path / "r.json"
    p = subprocess.run([BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "bench.warmup_steps=1",
                        "--set", "bench.measure_steps=1", "--set", "data.microbatch_size=2",
                        "--set", f"profile.memory_timeline={mem}", "--set", f"output.results={rec}"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r, doc = json.loads(rec.read_text()), json.loads(mem.read_text())
    assert r["status"] == "ok" and r["profile"]["memory_timeline"] == str(mem)
    assert doc["schema"] == "trainer.memory_timeline/1" and doc["categories"] == CATS
    end, peak = replay(doc)
    assert peak == r["memory"]["peak_bytes"] == doc["peak"]["bytes"]
    assert end == 0   # the teardown frees are logged too
    # Each event carries a place; activations are allocated as the forward runs and freed in the backward.
    assert all(e["phase"] and "block_name" in e and isinstance(e["block"], int) for e in doc["events"])
    assert any(e["phase"] == "forward" and e["category"] == "activations" and e["bytes"] > 0 for e in doc["events"])
    assert any(e["phase"] == "backward" and e["category"] == "activations" and e["bytes"] < 0 for e in doc["events"])
    assert r["memory"]["reserved_peak_bytes"] is None   # the cpu backend has no caching allocator
    p = run_plot(mem, "-o", tmp_path / "mem.png")
    assert p.returncode == 0, p.stderr
    assert f"({peak} B)" in p.stdout


def mem_available():
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_a_plan_beyond_host_memory_is_bad_input(tmp_path):
    """2^20 rows of the tiny model: the plan's peak (~740 GiB, mostly activations) is beyond the host's memory, which
    on the cpu is bad input: one line, exit code 2, nothing written."""
    if mem_available() > 700 << 30:
        pytest.skip("this host has more than 700 GiB available: the plan would fit")
    mem, rec = tmp_path / "mem.json", tmp_path / "r.json"
    p = subprocess.run([BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "data.batch_size=1048576",
                        "--set", f"profile.memory_timeline={mem}", "--set", f"output.results={rec}"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "of host memory at its peak" in p.stderr.strip().splitlines()[-1] and not rec.exists() and not mem.exists()


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_out_of_memory_run_still_writes_its_timeline(tmp_path):
    """4096 rows (a plan of ~3 GiB, which the host must have) in a process limited to 2 GiB of address space: the
    parameters and optimizer state fit, the step's buffers do not, so an allocation fails and the run ends as oom,
    timeline written. optimizer.in_backward false: the flat gradient buffer is allocated at setup (with the default,
    auto, gradients are per unit and made during the backward)."""
    if mem_available() < 4 << 30:
        pytest.skip("less than 4 GiB available: the plan itself would be refused")
    mem, rec = tmp_path / "mem.json", tmp_path / "r.json"
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MALLOC_ARENA_MAX="2")
    p = subprocess.run([BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "data.batch_size=4096",
                        "--set", "optimizer.in_backward=false", "--set", f"profile.memory_timeline={mem}",
                        "--set", f"output.results={rec}"], capture_output=True, text=True, timeout=300,
                       preexec_fn=limit, env=env)
    assert p.returncode == 3, p.stderr[-2000:]
    r, doc = json.loads(rec.read_text()), json.loads(mem.read_text())
    assert r["status"] == "oom"
    failed = [e for e in doc["events"] if e.get("failed")]
    assert len(failed) == 1 and failed[0]["bytes"] >= 2 ** 20
    assert failed[0]["category"] in ("activations", "workspace")
    b = failed[0]["bytes"]
    size = f"{b / 2 ** 30:.2f} GiB" if b >= 2 ** 30 else f"{b / 2 ** 20:.1f} MiB"  # the trainer's format_bytes
    assert f"asked for {size} ({failed[0]['category']})" in r["error"], r["error"]
    before = doc["events"][:doc["events"].index(failed[0])]
    assert {e["category"] for e in before} >= {"parameters", "gradients", "optimizer"}
    end, peak = replay(doc)
    assert end == 0 and peak == sum(e["bytes"] for e in before)
    p = run_plot(mem, "-o", tmp_path / "mem.png")
    assert p.returncode == 0, p.stderr
    assert "out of memory: " in p.stdout and f"({peak} B)" in p.stdout
