"""The trainer binary under mpirun on the CPU (comm mpi), issue 4.

- Every strategy, 2 and 4 ranks: 5 train steps of `tiny` (global batch 4 split over the ranks, clipping active)
  give the losses, gradient norms and final weights (checkpoint) of one process on the whole batch, to 1e-5
  relative (fsdp: the checkpoint gathered from the shards); the record carries comm / comm_exposed timings, and
  zero1's and fsdp's optimizer-state bytes per rank are within 10% of 1/N of one process's.
- A global batch not divisible by the ranks, and one rank given a different config: every rank stops with one clear
  message, well within 30 s. Bad input that only rank 1 finds in the job (its own init.weights file): one line naming
  rank 1, exit code 2, and rank 0 puts back what output.results held. A run failure of rank 1 alone (out of memory
  under a data-segment limit only it has): rank 0's record says oom with rank 1's message, exit code 3. A failure of
  rank 1 after its job (its memory timeline file): rank 0's record says error with its message (the end-of-run
  agreement), and a rank 1 that never reports its end is waited for at most parallel.comm_timeout_s. Rank 1's failure
  after its job is recorded with rank 0's measurements also when rank 0 is still in its job, when rank 0's own end
  is slow (rank 1 waits for it), and when a third rank never ends (rank 0 does not wait for it): outputs that are
  links to a terminal read late make those writes slow, deterministically.
- collective_bench on 2 and 4 ranks writes its table and record (#wrong 0, bandwidths as nccl-tests defines them),
  launched through launch/mpirun.sh.

Environment (set by tests/mpi/CMakeLists.txt): TRAINER_BIN, TRAINER_SOURCE_DIR, MPIEXEC.
"""
import json
import os
import pathlib
import re
import select
import subprocess
import sys
import threading
import time
import tty
import zlib

import numpy as np
import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN = os.environ.get("TRAINER_BIN")
MPIEXEC = os.environ.get("MPIEXEC", "mpirun")
sys.path.insert(0, str(SRC / "tests" / "parity"))
import safetensors_io  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")

STRATEGIES = ["ddp_naive", "ddp_flat", "ddp_overlap", "ddp_bucketed", "zero1", "fsdp"]
ENV = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
MPIRUN = [MPIEXEC, "--allow-run-as-root", "--oversubscribe"]


def train_args(tmp, tag, *sets):
    """trainer arguments for 5 logged, untimed-warm-up-free steps of tiny on the CPU; outputs under tmp."""
    args = [BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "bench.warmup_steps=0",
            "--set", "bench.measure_steps=5", "--set", "optimizer.max_grad_norm=0.5",
            "--set", f"output.results={tmp / (tag + '.json')}",
            "--set", f"output.checkpoint={tmp / (tag + '.ck')}"]
    for s in sets:
        args += ["--set", s]
    return args


def run(cmd, timeout=120, env=None):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env or ENV, cwd=SRC)
    return p, time.time() - t0


def rel(a, b):
    return np.max(np.abs(np.asarray(a) - np.asarray(b)) / np.abs(np.asarray(b)))


def running_rank(p, record, rank=1, timeout=60):
    """The pid of `rank` (the child of mpirun `p` with OMPI_COMM_WORLD_RANK=rank) once rank 0 has marked `record`
    running; fails the test when it is not found within `timeout` seconds."""
    t0 = time.time()
    found = None
    while time.time() - t0 < timeout:
        for child in pathlib.Path("/proc").glob("[0-9]*"):
            try:
                if int(child.joinpath("stat").read_text().split(")")[1].split()[1]) != p.pid:
                    continue
                if f"OMPI_COMM_WORLD_RANK={rank}\0".encode() in child.joinpath("environ").read_bytes() + b"\0":
                    found = int(child.name)
            except (OSError, ValueError, IndexError):
                continue
        if found and record.exists() and json.loads(record.read_text())["status"] == "running":
            return found
        time.sleep(0.2)
    assert found, f"rank {rank} not found"
    return found


def start_two_ranks(tmp_path, name, *sets, stdout=subprocess.PIPE, rank=1):
    """mpirun -np 2 of a train run named `name` (train_args) with `sets`; returns (mpirun's Popen, the record's path,
    the pid of `rank` once the record says running)."""
    p = subprocess.Popen(MPIRUN + ["-np", "2"] + train_args(tmp_path, name, *sets), stdout=stdout,
                         stderr=subprocess.PIPE, text=True, env=ENV, cwd=SRC)
    record = tmp_path / f"{name}.json"
    return p, record, running_rank(p, record, rank=rank)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one")
    p, _ = run(train_args(tmp, "one"))
    assert p.returncode == 0, p.stderr[-3000:]
    record = json.loads((tmp / "one.json").read_text())
    weights, _ = safetensors_io.load(tmp / "one.ck" / "model.safetensors")
    return record, weights


@pytest.mark.parametrize("np_", [2, 4])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_strategy_matches_one_process(tmp_path, one_process, strategy, np_):
    ref, ref_w = one_process
    p, wall = run(MPIRUN + ["-np", str(np_)] + train_args(tmp_path, "dist", f"parallel.strategy={strategy}"))
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads((tmp_path / "dist.json").read_text())
    assert r["status"] == "ok" and r["world_size"] == np_
    assert r["config"]["parallel"]["strategy"] == strategy and r["config"]["parallel"]["comm"] == "mpi"
    loss_rel = rel(r["loss"]["per_step"], ref["loss"]["per_step"])
    gnorm_rel = rel(r["grad_norm"]["per_step"], ref["grad_norm"]["per_step"])
    assert ref["grad_norm"]["per_step"][0] > 0.5  # clipping at 0.5 is active
    w, _ = safetensors_io.load(tmp_path / "dist.ck" / "model.safetensors")
    assert set(w) == set(ref_w)
    w_rel = max(float((w[k] - ref_w[k]).abs().max() / ref_w[k].abs().max()) for k in ref_w)
    print(f"{strategy} np {np_}: loss rel {loss_rel:.2e} gnorm rel {gnorm_rel:.2e} weights rel {w_rel:.2e} "
          f"({wall:.1f} s)")
    assert loss_rel < 1e-5 and gnorm_rel < 1e-5 and w_rel < 1e-5
    # timings of the communication are in the record (measured steps: 5)
    for key in ("comm", "comm_exposed"):
        t = r["timing"][key]
        assert len(t["samples"]) == 5 and t["min_ms"] >= 0, t
    # exposed is the part of comm the compute stood still for: never more, step by step (zero1 at 4 ranks counted its
    # gradient norm's host-side sum as exposed but not as comm, and exceeded it in every step)
    comm, exposed = r["timing"]["comm"]["samples"], r["timing"]["comm_exposed"]["samples"]
    assert all(0 <= e <= c for e, c in zip(exposed, comm)) and sum(comm) > 0, (comm, exposed)
    # timing.step is per step the slowest rank's time: its mean is at least every rank's own mean
    per_rank = r["timing"]["per_rank"]
    assert [p["rank"] for p in per_rank] == list(range(np_)), per_rank
    assert all(0 < p["step_mean_ms"] <= r["timing"]["step"]["mean_ms"] * (1 + 1e-12) for p in per_rank), per_rank
    assert [p["rank"] for p in r["memory"]["per_rank"]] == list(range(np_))
    # optimizer state: DDP keeps all of it on every rank, zero1 and fsdp about 1/N
    one_bytes = ref["memory"]["optimizer_state_bytes"]
    mine = r["memory"]["optimizer_state_bytes"]
    if strategy in ("zero1", "fsdp"):
        assert abs(mine - one_bytes / np_) <= 0.10 * one_bytes / np_, (mine, one_bytes)
    else:
        assert mine >= one_bytes
    assert r["memory"]["peak_bytes"] > 0


def test_batch_not_divisible_is_a_clear_error(tmp_path):
    p, wall = run(MPIRUN + ["-np", "4"] + train_args(tmp_path, "bad", "parallel.strategy=ddp_flat",
                                                     "data.batch_size=6"), timeout=60)
    assert p.returncode != 0
    assert "data: batch_size 6 is not divisible by world_size 4" in p.stderr
    assert p.stderr.count("trainer: error:") == 1  # one message, from rank 0
    assert not (tmp_path / "bad.json").exists()
    assert wall < 30


def test_one_rank_with_a_different_config_stops_every_rank(tmp_path):
    a = train_args(tmp_path, "mix", "parallel.strategy=ddp_flat", "optimizer.lr=0.001")
    b = train_args(tmp_path, "mix", "parallel.strategy=ddp_flat", "optimizer.lr=0.002")
    p, wall = run(MPIRUN + ["-np", "1"] + a + [":", "-np", "1"] + b, timeout=60)
    assert p.returncode != 0
    assert ("the resolved config of rank 1 differs from rank 0's at optimizer.lr (rank 0 has 0.001, rank 1 has "
            "0.002) (same file and --set on every rank?)") in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "mix.json").exists()
    assert wall < 30, f"took {wall:.1f} s"


def run_with_per_rank_weights(tmp_path, strategy, edit):
    """The tiny model on 2 ranks from init.weights=w.safetensors, a relative path, each rank in its own directory
    (mpirun -wdir) whose file is the tiny model's checkpoint after edit(weights, rank); output.results holds an earlier
    record and output.checkpoint is a new directory. Returns (the finished mpirun, its wall seconds, each rank's file's
    bytes, the output.results path)."""
    p, _ = run(train_args(tmp_path, "w", "bench.measure_steps=1"))
    assert p.returncode == 0, p.stderr[-3000:]
    files = []
    for rank in (0, 1):
        weights, _ = safetensors_io.load(tmp_path / "w.ck" / "model.safetensors")
        edit(weights, rank)
        (tmp_path / f"r{rank}").mkdir()
        safetensors_io.save(tmp_path / f"r{rank}" / "w.safetensors", weights)
        files.append((tmp_path / f"r{rank}" / "w.safetensors").read_bytes())
    record = tmp_path / "earlier.json"
    record.write_text('{"earlier": "record"}\n')
    args = [BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", f"parallel.strategy={strategy}",
            "--set", "init.weights=w.safetensors", "--set", f"output.results={record}",
            "--set", f"output.checkpoint={tmp_path / 'new' / 'ck'}"]
    p, wall = run(MPIRUN + ["-np", "1", "-wdir", str(tmp_path / "r0")] + args +
                  [":", "-np", "1", "-wdir", str(tmp_path / "r1")] + args, timeout=60)
    return p, wall, files, record


def test_bad_input_only_rank_1_finds_is_one_line_before_the_run(tmp_path):
    """A per-rank file problem: init.weights is a relative path and each rank runs in its own directory (mpirun
    -wdir), where only rank 1's file has another shape. Rank 1 finds it in the file's header before the run starts
    (the ranks' start-up agreement): one line naming rank 1, exit code 2, output.results as it was and no checkpoint
    directory. (A problem only the job finds on one rank, with rank 0 already in a collective, is
    test_mpi_resume.py's damaged block.)"""
    def d_model(weights, rank):
        weights["token_embeddings.weight"] = np.zeros((256, 64 if rank == 0 else 128), np.float32)

    p, wall, _, record = run_with_per_rank_weights(tmp_path, "ddp_flat", d_model)
    assert p.returncode == 2, p.stderr[-3000:]
    errors = [line for line in p.stderr.splitlines() if "error:" in line or "[error]" in line]
    assert errors == ["trainer: error: [rank 1] init.weights: 'w.safetensors': tensor 'token_embeddings.weight' has "
                      "shape [256, 128], the model needs [256, 64]"], p.stderr[-3000:]
    assert record.read_text() == '{"earlier": "record"}\n'
    assert not (tmp_path / "new").exists()
    assert wall < 30, f"took {wall:.1f} s"


@pytest.mark.parametrize("strategy", ["fsdp", "ddp_flat"])
def test_init_weights_that_differ_between_ranks_are_refused(tmp_path, strategy):
    """Two valid weight files of the model under one relative path, one per rank's directory (nodes without shared
    storage whose copies differ): fsdp would train a mix (each rank's shard of its own file), ddp rank 0's weights.
    Every rank compares the size and CRC-32 of its read: exit code 2, one line naming both ranks' reads (rank 0's; rank
    1's own copy of it where rank 0's abort reaches it late), the earlier record left as it was, no checkpoint
    directory."""
    def gain(weights, rank):
        weights["ln_final.weight"] = np.full(weights["ln_final.weight"].shape, 0.5 * rank, np.float32)

    p, _, files, record = run_with_per_rank_weights(tmp_path, strategy, gain)
    reads = [f"{len(raw)} bytes, CRC-32 {zlib.crc32(raw):08x}" for raw in files]
    assert p.returncode == 2, p.stderr[-3000:]
    errors = [line for line in p.stderr.splitlines() if "error:" in line or "[error]" in line]
    line = (f"trainer: error: init.weights: 'w.safetensors' differs between ranks: rank 0 read {reads[0]}, rank 1 "
            f"{reads[1]} (each rank reads the path itself: every node needs the same file)")
    assert errors and set(errors) <= {line, line.replace("error: ", "error: rank 1: ", 1)}, p.stderr[-3000:]
    assert errors[0] == line, p.stderr[-3000:]
    assert record.read_text() == '{"earlier": "record"}\n'
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("failing", [1, 0])
def test_one_rank_out_of_memory_reading_init_weights_ends_every_rank(tmp_path, failing):
    """One rank runs out of host memory while it reads init.weights (TRAINER_TEST_WEIGHTS_OOM_RANK: a bad_alloc there):
    the ranks compare their reads before any other collective, so the job ends at once with exit code 3 and an oom
    record naming the rank and the file, whichever rank it was."""
    p, _ = run(train_args(tmp_path, "w", "bench.measure_steps=1"))
    assert p.returncode == 0, p.stderr[-3000:]
    weights = tmp_path / "w.ck" / "model.safetensors"
    record = tmp_path / "r.json"
    args = [BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "parallel.strategy=fsdp",
            "--set", f"init.weights={weights}", "--set", f"output.results={record}"]
    env = dict(ENV, TRAINER_TEST_WEIGHTS_OOM_RANK=str(failing))
    p, wall = run(MPIRUN + ["-np", "2", "-x", "TRAINER_TEST_WEIGHTS_OOM_RANK"] + args, timeout=60, env=env)
    assert p.returncode == 3, p.stderr[-3000:]
    r = json.loads(record.read_text())
    why = re.escape(f"host memory: reading init.weights '{weights}' (") + r"[0-9.]+ KiB" + re.escape(
        "), which each rank holds whole while it loads")
    assert r["status"] == "oom" and re.fullmatch(why if failing == 0 else "rank 1: " + why, r["error"]), r
    assert wall < 30, f"took {wall:.1f} s"


def mem_available():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))


def test_a_run_error_of_rank_1_alone_is_recorded_by_rank_0(tmp_path):
    """Rank 1 alone runs out of memory in the job: it is started under a data-segment limit (ulimit -d, RLIMIT_DATA:
    its private writable mappings, 390 MiB) below the model's flat parameter buffer (vocab 2^20 x d_model 64 x 2
    matrices, 512.4 MiB, one allocation), so its first parameter allocation fails while rank 0, unlimited, goes on
    to its first collective, which rank 1 never joins. Rank 1 ends its job as a run failure (OutOfMemory, exit code
    3: the same end of main() as any run error) and sends its message to rank 0; rank 0 writes the record, status
    oom with rank 1's message prefixed 'rank 1:', says that the trace asked for is not written, and aborts the job
    with that exit code."""
    if mem_available() < 6 * 2 ** 30:  # rank 0's plan (2.50 GiB a rank, x 2 on this host) must fit MemAvailable
        pytest.skip("needs 6 GiB of MemAvailable")
    args = train_args(tmp_path, "oom1", "parallel.strategy=ddp_flat", "model.vocab_size=1048576",
                      f"profile.trace={tmp_path / 'trace.json'}")
    record = tmp_path / "oom1.json"
    p, wall = run(MPIRUN + ["-np", "1"] + args + [":", "-np", "1", "sh", "-c", 'ulimit -d 400000 && exec "$0" "$@"']
                  + args, timeout=90)
    assert p.returncode == 3, p.stderr[-3000:]
    r = json.loads(record.read_text())
    assert r["status"] == "oom", (r["status"], p.stderr[-3000:])
    assert r["error"] == "rank 1: out of memory on cpu: asked for 512.4 MiB (parameters) with 0 B in use (nothing)", \
        r["error"]
    assert r["world_size"] == 2 and r["config"]["model"]["vocab_size"] == 1048576
    # Rank 0 says so in its log, naming rank 1 and the record.
    assert (f"[r0] [error] rank 1 failed: out of memory on cpu: asked for 512.4 MiB (parameters) with 0 B in use "
            f"(nothing); result record: {record} (status oom)") in p.stderr, p.stderr[-3000:]
    # and that the trace asked for is not written (its gather is a collective rank 1 never joins)
    assert "[r0] [warning] profile.trace: no trace written: rank 1 failed before the run's end" in p.stderr, \
        p.stderr[-3000:]
    assert not (tmp_path / "trace.json").exists()
    assert not list(tmp_path.glob(".oom1.json*")), list(tmp_path.iterdir())  # no temporary record left behind
    assert wall < 30, f"took {wall:.1f} s"


RANK1_TIMELINE_FAILED = "[r1] [error] the memory timeline could not be written"


def break_rank1_timeline(tmp_path):
    """Makes rank 1's memory timeline (mem.rank1.json beside mem.json) fail only when it is written, at the end of
    its job: a link to a file under a regular file, so that creating the target's directory fails. (A directory of
    that name is refused before the run, as every output that cannot be written.)"""
    (tmp_path / "blocker").write_text("")
    (tmp_path / "mem.rank1.json").symlink_to(tmp_path / "blocker" / "mem.json")


def rank1_timeline_error(tmp_path):
    return (f"rank 1: the memory timeline could not be written: cannot write '{tmp_path / 'blocker' / 'mem.json'}': "
            f"creating its directory failed: Not a directory")


def test_a_directory_at_rank_1s_memory_timeline_is_refused_before_the_run(tmp_path):
    """2 ranks: mem.rank1.json (rank 1's memory timeline beside mem.json) is a directory: one line, exit 2, and no
    output written (it had run the whole job and failed at its end)."""
    (tmp_path / "mem.rank1.json").mkdir()
    args = train_args(tmp_path, "dir", "parallel.strategy=ddp_flat", "bench.measure_steps=2",
                      f"profile.memory_timeline={tmp_path / 'mem.json'}")
    p, _ = run(MPIRUN + ["-np", "2"] + args, timeout=60)
    assert p.returncode == 2, p.stderr[-3000:]
    errors = [line for line in p.stderr.splitlines() if "trainer: error:" in line]
    assert errors and all(e == errors[0] for e in errors), p.stderr[-3000:]  # the same line (once a rank at most)
    assert "rank 1's file" in errors[0] and "mem.rank1.json" in errors[0] and "directory" in errors[0], errors[0]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["mem.rank1.json"]  # no record, timeline or checkpoint


def test_a_failure_of_rank_1_after_its_job_is_in_rank_0s_record(tmp_path):
    """Rank 1 fails after its job, once rank 0 has ended its own: its memory timeline file cannot be written
    (break_rank1_timeline; rank 0's mem.json is written). The end-of-run agreement makes rank 0
    wait for every rank's end before it writes the record: status error with rank 1's message, exit code 1 (the
    record had said ok while the job exited with 1)."""
    break_rank1_timeline(tmp_path)
    args = train_args(tmp_path, "late", "parallel.strategy=ddp_flat", "bench.measure_steps=2",
                      f"profile.memory_timeline={tmp_path / 'mem.json'}")
    p, wall = run(MPIRUN + ["-np", "2"] + args, timeout=60)
    assert p.returncode == 1, p.stderr[-3000:]
    r = json.loads((tmp_path / "late.json").read_text())
    assert r["status"] == "error", (r["status"], p.stderr[-3000:])
    assert r["error"] == rank1_timeline_error(tmp_path), r["error"]
    assert len(r["loss"]["per_step"]) == 2  # rank 0's measurements are kept
    assert json.loads((tmp_path / "mem.json").read_text())["rank"] == 0
    assert wall < 30, f"took {wall:.1f} s"


def test_a_rank_that_never_reports_its_end_is_waited_for_at_most_comm_timeout_s(tmp_path):
    """Rank 1 hangs after its job: the temporary file of its memory timeline is a FIFO nobody reads, so its open()
    blocks. Rank 0 waits for rank 1's end at most parallel.comm_timeout_s (3 s), then writes the record, status
    error naming rank 1 and the timeout, and aborts the job: no hang."""
    p, record, rank1 = start_two_ranks(tmp_path, "hang", "parallel.strategy=ddp_flat", "bench.measure_steps=300",
                                       "parallel.comm_timeout_s=3", "output.checkpoint=null",
                                       f"profile.memory_timeline={tmp_path / 'mem.json'}", stdout=subprocess.DEVNULL)
    t0 = time.time()
    os.mkfifo(tmp_path / f"mem.rank1.json.tmp.{rank1}.0")  # rank 1's first write_file_atomic (no checkpoint)
    try:
        _, err = p.communicate(timeout=60)
    finally:
        for pid in (rank1, p.pid):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
    wall = time.time() - t0
    assert p.returncode == 1, err[-3000:]
    r = json.loads(record.read_text())
    assert r["status"] == "error", (r["status"], err[-3000:])
    assert r["error"] == "rank 1 did not report the end of its run within parallel.comm_timeout_s = 3 s", r["error"]
    assert len(r["loss"]["per_step"]) == 300
    assert 3 <= wall < 30, f"took {wall:.1f} s"


def test_sigterm_to_every_rank_after_a_periodic_checkpoint_still_stops_after_the_step(tmp_path):
    """Slurm's pre-emption (SIGTERM to every task) of zero1 with output.checkpoint_every: each rank > 0 writes its
    first file (its optimizer shard) only at the first periodic checkpoint, after the interrupt handlers are in place.
    That first write must not take the signals over (it once did: rank 1 then died of the SIGTERM, mpirun exited 143
    and the record stayed running); every rank stops after the same step and mpirun exits with code 4."""
    import signal
    p, record, rank1 = start_two_ranks(tmp_path, "pre", "parallel.strategy=zero1", "bench.measure_steps=100000",
                                       "bench.log_every=1", "output.checkpoint_every=2")
    rank0 = running_rank(p, record, rank=0)
    t0 = time.time()
    while not (tmp_path / "pre.ck" / "latest").exists() and time.time() - t0 < 60:  # the first periodic checkpoint
        time.sleep(0.1)
    assert (tmp_path / "pre.ck" / "latest").exists(), "no periodic checkpoint in 60 s"
    for pid in (rank0, rank1):
        os.kill(pid, signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 4, err[-3000:]
    r = json.loads(record.read_text())
    assert r["status"] == "interrupted" and r["interrupted"]["signal"] == "SIGTERM"
    latest = (tmp_path / "pre.ck" / "latest").read_text().strip()
    assert json.loads((tmp_path / "pre.ck" / latest / "manifest.json").read_text())["step"] == \
        r["interrupted"]["steps_done"]


@pytest.mark.parametrize("sets", [
    # the checkpoint's gather of fsdp's largest unit (the 50000-token embedding) above the step's peak
    ["model.vocab_size=50000", "model.context_length=1", "data.batch_size=2"],
    # one step with microbatches: fsdp's gradient temporaries of later steps never made
    ["model.vocab_size=20000", "model.context_length=64", "data.microbatch_size=1", "bench.measure_steps=1"],
    # without clipping optimizer.in_backward resolves on: each unit updated from its reduce_scatter's output, no
    # gradient accumulator with one microbatch; with two, the accumulator made at the first step
    ["model.vocab_size=20000", "model.context_length=64", "optimizer.max_grad_norm=null"],
    ["model.vocab_size=20000", "model.context_length=64", "optimizer.max_grad_norm=null", "data.microbatch_size=1"],
])
def test_fsdp_peak_is_the_plans_with_a_checkpoint_and_in_a_one_step_run(tmp_path, sets):
    """Found by a fresh user: the plan missed fsdp's checkpoint gather buffer (10.8% low) and counted, in a run of one
    step, buffers only later steps make (3.4% high). On the cpu the plan is the measured peak to the byte."""
    p, _ = run(MPIRUN + ["-np", "2"] + train_args(tmp_path, "pk", "parallel.strategy=fsdp", *sets))
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads((tmp_path / "pk.json").read_text())
    assert r["config"]["optimizer"]["in_backward"] == ("optimizer.max_grad_norm=null" in sets)
    m = r["memory"]
    assert m["peak_bytes"] == m["predicted"]["peak_bytes"], (m["peak_bytes"], m["predicted"]["peak_bytes"])


def test_fsdp_forward_only_run_holds_only_what_its_schedule_uses(tmp_path):
    """A run of bench.phase forward makes no gradient buffer (accumulator, staging) and sizes its gather buffers from
    the forward-only schedule (e b_1 b_2 h: at most 4 gathers ahead on tiny), where it had taken the training one's
    (6 gathers: at prefetch 1000, 4 block buffers where 2 are used). Each peak is its plan's."""
    comm = {}
    for tag, sets in [("fwd_p1000", ["bench.phase=forward", "parallel.prefetch_layers=1000"]),
                      ("fwd_p3", ["bench.phase=forward", "parallel.prefetch_layers=3"]),
                      ("train_p1000", ["parallel.prefetch_layers=1000"])]:
        p, _ = run(MPIRUN + ["-np", "2"] + train_args(tmp_path, tag, "parallel.strategy=fsdp", "output.checkpoint=null",
                                                      *sets))
        assert p.returncode == 0, p.stderr[-3000:]
        m = json.loads((tmp_path / (tag + ".json")).read_text())["memory"]
        assert m["peak_bytes"] == m["predicted"]["peak_bytes"], (tag, m["peak_bytes"], m["predicted"]["peak_bytes"])
        if tag.startswith("fwd"):
            assert m["category_peaks"]["gradients"] == 0, (tag, m["category_peaks"])
        comm[tag] = m["category_peaks"]["communication"]
    # prefetch 1000 and 3 both keep the whole forward schedule in flight (D = 4 gathers); training holds more
    assert comm["fwd_p1000"] == comm["fwd_p3"] < comm["train_p1000"], comm


class SlowTerminal:
    """A pseudo-terminal whose slave side (a character device, which write_file_atomic writes directly: no temporary
    file, no fsync) stands in for an output file: a write larger than what the terminal buffers (some 10s of KiB; the
    files written through it here, of 100 steps of tiny, are 150 KiB and more) blocks until `drain()` starts reading,
    after which the write succeeds. `text()`: everything read, once closed."""

    def __init__(self):
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)  # bytes pass unchanged ("\n" stays "\n")
        self.path = os.ttyname(self.slave)
        self.data = bytearray()
        self.done = threading.Event()
        self.reader = None

    def drain(self):
        def read():
            while not self.done.is_set():
                if select.select([self.master], [], [], 0.1)[0]:
                    self.data += os.read(self.master, 1 << 20)
        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()

    def close(self):
        self.done.set()
        if self.reader:
            self.reader.join()
            while select.select([self.master], [], [], 0)[0]:  # what the writer left after `done`
                try:
                    chunk = os.read(self.master, 1 << 20)
                except OSError:  # EIO: the writer has closed its side
                    break
                if not chunk:
                    break
                self.data += chunk
        os.close(self.master)
        os.close(self.slave)

    def text(self):
        return self.data.decode()


def run_until(cmd, marker, then, timeout=90):
    """Runs `cmd` (mpirun), collecting its stderr; calls `then()` on a thread once a line contains `marker`.
    Returns (returncode, stderr, wall seconds)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV, cwd=SRC)
    lines = []
    seen = threading.Event()

    def collect():
        for line in p.stderr:
            lines.append(line)
            if marker in line and not seen.is_set():
                seen.set()
                threading.Thread(target=then, daemon=True).start()
    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    try:
        p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        reader.join(5)
    return p.returncode, "".join(lines), time.time() - t0


def test_a_failure_after_the_job_is_recorded_while_another_rank_is_still_busy(tmp_path):
    """3 ranks: rank 1 fails after its job (break_rank1_timeline) while rank 2 never ends its own: its
    timeline file, mem.rank2.json, is a link to a terminal nobody reads, so its write blocks. Rank 0 records rank 1's
    failure at once, keeping its measurements, and aborts the job (which ends rank 2). Before, rank 0 waited for
    every rank's end and rank 1 aborted the job after 3 s: the record stayed 'running'."""
    break_rank1_timeline(tmp_path)
    term = SlowTerminal()
    (tmp_path / "mem.rank2.json").symlink_to(term.path)
    args = train_args(tmp_path, "three", "parallel.strategy=ddp_flat", "data.batch_size=6",
                      "bench.measure_steps=100", "parallel.comm_timeout_s=60", "output.checkpoint=null",
                      f"profile.memory_timeline={tmp_path / 'mem.json'}")
    try:
        p, wall = run(MPIRUN + ["-np", "3"] + args, timeout=120)
    finally:
        term.drain()  # what rank 2 got into the terminal's buffer before the abort
        term.close()
    assert p.returncode == 1, p.stderr[-3000:]
    # rank 2 was still in its write when the job ended: its timeline began but never ended
    partial = term.text()
    assert partial.startswith("{"), partial[:200]
    with pytest.raises(json.JSONDecodeError):
        json.loads(partial)
    r = json.loads((tmp_path / "three.json").read_text())
    assert r["status"] == "error", (r["status"], p.stderr[-3000:])
    assert r["error"] == rank1_timeline_error(tmp_path), r["error"]
    assert len(r["loss"]["per_step"]) == 100 and r["timing"]["step"]["mean_ms"] > 0  # rank 0's measurements
    assert json.loads((tmp_path / "mem.json").read_text())["rank"] == 0
    assert wall < 40, f"took {wall:.1f} s"  # not parallel.comm_timeout_s (60 s): rank 2 is not waited for


def run_rank1_failing_after_its_job(tmp_path, name, slow_file, delay_s, extra=()):
    """2 ranks of tiny (ddp_flat, 100 steps): rank 1's memory timeline cannot be written (break_rank1_timeline),
    and rank 0's output `slow_file` (under tmp_path) is a link to a SlowTerminal read only `delay_s`
    after rank 1 logged that failure. Returns (exit code, stderr, wall seconds, the terminal, closed)."""
    break_rank1_timeline(tmp_path)
    term = SlowTerminal()
    (tmp_path / slow_file).symlink_to(term.path)
    args = train_args(tmp_path, name, "parallel.strategy=ddp_flat", "bench.measure_steps=100",
                      "parallel.comm_timeout_s=60", "output.checkpoint=null",
                      f"profile.memory_timeline={tmp_path / 'mem.json'}", *extra)
    try:
        code, err, wall = run_until(MPIRUN + ["-np", "2"] + args, RANK1_TIMELINE_FAILED,
                                    lambda: (time.sleep(delay_s), term.drain()))
    finally:
        term.close()
    return code, err, wall, term


def test_a_failure_after_the_job_waits_for_a_slow_rank_0(tmp_path):
    """2 ranks: rank 1 fails after its job (break_rank1_timeline) while rank 0's own end is slow: its memory
    timeline, mem.json, is a link to a terminal that is read only 6 s after rank 1 logged its failure. Rank 1 waits
    for rank 0 (up to parallel.comm_timeout_s and a margin), so rank 0 writes its timeline, then the record with its
    measurements, status error and rank 1's message, and aborts the job. Before, rank 1 aborted the job 3 s after
    its failure, killing rank 0 in its write: the record stayed 'running'."""
    code, err, wall, term = run_rank1_failing_after_its_job(tmp_path, "slow0", "mem.json", delay_s=6)
    assert code == 1, err[-3000:]
    r = json.loads((tmp_path / "slow0.json").read_text())
    assert r["status"] == "error", (r["status"], err[-3000:])
    assert r["error"] == rank1_timeline_error(tmp_path), r["error"]
    assert len(r["loss"]["per_step"]) == 100 and r["timing"]["step"]["mean_ms"] > 0
    assert json.loads(term.text())["rank"] == 0  # rank 0's whole timeline went through the terminal
    assert 6 <= wall < 40, f"took {wall:.1f} s"


def test_a_failure_after_the_job_while_rank_0_is_still_in_its_job_keeps_its_measurements(tmp_path):
    """2 ranks: rank 1 fails after its job (break_rank1_timeline) while rank 0 is still in its own: it
    writes the trace of both ranks (profile.trace, after the job's last collective) to a link to a terminal that is
    read only 3 s after rank 1 logged its failure. Rank 1's failure is its end report, which rank 0 reads once its
    job has ended: the record has rank 0's measurements, status error and rank 1's message. Before, rank 0's
    failure-notice listener took it after 1 s and wrote the record as it was before the job: no loss, no timings."""
    code, err, wall, term = run_rank1_failing_after_its_job(tmp_path, "intrace", "trace.json", delay_s=3,
                                                            extra=[f"profile.trace={tmp_path / 'trace.json'}"])
    assert code == 1, err[-3000:]
    r = json.loads((tmp_path / "intrace.json").read_text())
    assert r["status"] == "error", (r["status"], err[-3000:])
    assert r["error"] == rank1_timeline_error(tmp_path), r["error"]
    assert len(r["loss"]["per_step"]) == 100 and r["timing"]["step"]["mean_ms"] > 0, sorted(r)
    assert r["profile"]["trace"] == str(tmp_path / "trace.json")
    events = json.loads(term.text())["traceEvents"]
    assert {e["pid"] for e in events} == {0, 1}, "the trace has both ranks"
    assert 3 <= wall < 40, f"took {wall:.1f} s"  # rank 0's trace waited for the terminal


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_record_that_cannot_be_marked_running_stops_every_rank_before_the_job(tmp_path):
    """output.results on a full disk under 2 ranks: rank 0's running marker fails, so the job does not start; every
    rank ends within seconds with exit code 1 and one cause, and no second try at writing the record."""
    p, wall = run(MPIRUN + ["-np", "2", BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu",
                            "--set", "bench.measure_steps=50", "--set", "parallel.strategy=ddp_flat",
                            "--set", "output.results=/dev/full"])
    assert p.returncode == 1 and wall < 60, (p.returncode, wall, p.stderr[-3000:])
    assert p.stderr.count("the result record could not be marked running, so the job did not start") == 1
    assert "step    1/" not in p.stderr and "the result record could not be written" not in p.stderr, p.stderr[-3000:]


def test_nccl_on_cpu_is_a_config_error(tmp_path):
    p, _ = run(MPIRUN + ["-np", "2"] + train_args(tmp_path, "nccl", "parallel.strategy=ddp_flat",
                                                  "parallel.comm=nccl"), timeout=60)
    assert p.returncode != 0
    assert "comm 'nccl' needs device 'cuda'" in p.stderr


def test_plan_under_mpirun_takes_its_ranks_and_refuses_another_world_size(tmp_path):
    plan = [BIN, "--plan", "--json", str(SRC / "configs/tiny.json"), "--set", "device=cpu",
            "--set", "parallel.strategy=zero1"]
    p, _ = run(MPIRUN + ["-np", "2"] + plan, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["world_size"] == 2
    p, _ = run(MPIRUN + ["-np", "2"] + plan + ["--world-size", "2"], timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)["world_size"] == 2, p.stderr
    p, wall = run(MPIRUN + ["-np", "2"] + plan + ["--world-size", "4"], timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("trainer: error:") == 1 and "--world-size 4 but mpirun started 2 ranks" in p.stderr, p.stderr
    assert wall < 30


@pytest.mark.parametrize("np_", [2, 4])
def test_collective_bench_writes_its_table(tmp_path, np_):
    rec = tmp_path / "cb.json"
    cmd = [str(SRC / "launch/mpirun.sh"), str(np_), BIN, str(SRC / "configs/collective_bench.json"),
           "--set", "parallel.comm=mpi", "--set", "device=cpu", "--set", "collective.sizes_mb=[1,4]",
           "--set", "collective.warmup=2", "--set", "collective.iters=5", "--set", f"output.results={rec}"]
    p, wall = run(cmd, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        assert f"# collective_bench  op {op}  dtype f32  comm mpi  nranks {np_}" in p.stdout
    assert p.stdout.count("#wrong") == 3 and "FAILED" not in p.stdout
    r = json.loads(rec.read_text())
    cb = r["collective_bench"]
    assert r["status"] == "ok" and cb["nranks"] == np_ and cb["comm"] == "mpi"
    assert len(cb["results"]) == 6
    n = np_
    for x, mb in zip(cb["results"], [1, 4] * 3):
        assert x["wrong"] == 0
        elements = mb * (1 << 20) // 4
        assert x["count"] == (elements if x["op"] == "all_reduce" else elements // n * n)  # whole array, n | count
        assert x["size_bytes"] == 4 * x["count"]
        assert x["time_us_max"] >= x["time_us"] > 0
        # nccl-tests doc/PERFORMANCE.md: algbw = S / t (GB/s = 1e9 B/s), busbw = algbw * factor(op, n)
        assert x["algbw_gbs"] == pytest.approx(x["size_bytes"] / (x["time_us_max"] * 1e-6) / 1e9, rel=1e-9)
        factor = 2 * (n - 1) / n if x["op"] == "all_reduce" else (n - 1) / n
        assert x["busbw_gbs"] == pytest.approx(x["algbw_gbs"] * factor, rel=1e-9)
        # the table line for this row is printed on rank 0
        assert f"{x['size_bytes']:>12} {x['count']:>12}" in p.stdout
    print(f"collective_bench np {np_}: {wall:.1f} s")


def test_a_loss_that_is_not_finite_on_two_ranks_keeps_the_trace_and_the_loss_curve(tmp_path):
    """lr 1e30 makes the loss NaN at step 2 on both ranks (it is all-reduced): rank 0 merges and writes the trace of
    both (held up 3 s by a test hook, as a large trace's merge), and rank 1 waits for it before it fails, so rank 0's
    listener does not end the job first with rank 1's notice (a review: the trace and the record's losses were lost)."""
    trace = tmp_path / "nan_trace.json"
    p, _ = run(MPIRUN + ["-np", "2"] + train_args(tmp_path, "nan", "parallel.strategy=ddp_flat", "optimizer.lr=1e30",
                                                  "optimizer.weight_decay=0", "bench.warmup_steps=0",
                                                  "bench.measure_steps=4", f"profile.trace={trace}"),
               env=dict(ENV, TRAINER_TEST_TRACE_PAUSE_S="3"))
    assert p.returncode == 1, p.stderr[-3000:]
    rec = json.loads((tmp_path / "nan.json").read_text())
    assert rec["status"] == "error" and rec["error"].startswith("loss is "), rec.get("error")
    assert rec["profile"]["trace"] == str(trace) and rec["loss"]["per_step"][-1] is None, rec.get("profile")
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["pid"] for e in events if e.get("ph") == "X"} == {0, 1}


def test_trace_shows_phases_blocks_and_collectives_of_every_rank(tmp_path):
    """profile.trace: one Chrome trace for both ranks; every measured step has its phases and each block forward and
    backward on the compute track, the step's collectives on the comm track, and the record's summary agrees with
    the events in the file."""
    trace = tmp_path / "sub" / "trace.json"
    p, _ = run(MPIRUN + ["-np", "2"] + train_args(tmp_path, "tr", "parallel.strategy=ddp_overlap",
                                                  "bench.warmup_steps=1", "bench.measure_steps=2",
                                                  f"profile.trace={trace}"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(trace.read_text())
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    rec = json.loads((tmp_path / "tr.json").read_text())
    layers = rec["config"]["model"]["num_layers"]
    for rank in (0, 1):
        mine = [e for e in events if e["pid"] == rank]
        assert {e["args"]["step"] for e in mine} == {2, 3}  # the measured steps only (numbered as in the log)
        for step in (2, 3):
            names = [e["name"] for e in mine if e["args"]["step"] == step and e["tid"] == 0]
            for phase in ("forward 0", "backward 0", "finish_backward", "optimizer"):
                assert names.count(phase) == 1, (rank, step, phase)
            assert sum(n.startswith("block ") for n in names) == 2 * layers   # each block forward and backward
            # the CPU backend's ops too (host clock), nested in their blocks: attention and the products
            assert names.count("attention_fwd naive") == layers and names.count("attention_bwd naive") == layers
            assert names.count("matmul") >= 4 * layers and names.count("adamw") >= 1
            comm = [e for e in mine if e["args"]["step"] == step and e["tid"] >= 1]
            assert comm and all("all_reduce" in e["name"] for e in comm)
        for e in mine:
            assert e["dur"] >= 0 and e["ts"] >= 0
        # phases do not overlap on the compute track: forward ends before backward starts
        fwd = next(e for e in mine if e["name"] == "forward 0" and e["args"]["step"] == 2)
        bwd = next(e for e in mine if e["name"] == "backward 0" and e["args"]["step"] == 2)
        assert fwd["ts"] + fwd["dur"] <= bwd["ts"] + 1e-3
        # every track nests: events on one (pid, tid) never partly overlap (overlapping collectives get own lanes)
        for tid in {e["tid"] for e in mine}:
            track = sorted((e["ts"], e["ts"] + e["dur"]) for e in mine if e["tid"] == tid)
            stack = []
            for a, b in track:
                while stack and stack[-1] <= a + 1e-3:
                    stack.pop()
                assert not stack or b <= stack[-1] + 1e-3, (rank, tid, a, b)
                stack.append(b)
    s = rec["profile"]
    assert s["steps"] == 2 and s["trace"] == str(trace)
    # comm time is the union of the collectives' intervals, per step
    iv = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["pid"] == 0 and e["tid"] >= 1)
    union, end = 0.0, float("-inf")
    for a, b in iv:
        a = max(a, end)
        if b > a:
            union += b - a
            end = b
    comm0 = union / 1e3 / 2
    assert abs(s["comm_ms_per_step"] - comm0) <= 1e-6 * max(1.0, comm0)
    assert 0 <= s["comm_during_backward_ms_per_step"] <= s["comm_ms_per_step"] + 1e-9
    assert s["backward_ms_per_step"] > 0
    blocks = next(r for r in s["ranges"] if r["cat"] == "block" and r["name"] == "block")
    assert blocks["calls_per_step"] == 2 * layers


def test_an_interrupt_of_one_rank_stops_every_rank_after_the_same_step(tmp_path):
    """SIGTERM to rank 1 only (as Slurm signals each task): both ranks leave the loop after the same step (they agree
    through the step's loss all_reduce), rank 0 writes the checkpoint and the record with status interrupted, and
    mpirun exits with the ranks' code 4."""
    import signal
    p, record, rank1 = start_two_ranks(tmp_path, "int", "parallel.strategy=ddp_flat", "bench.measure_steps=100000",
                                       "bench.log_every=1")
    time.sleep(2)  # a few steps
    os.kill(rank1, signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 4, err[-3000:]
    r = json.loads(record.read_text())
    assert r["status"] == "interrupted" and r["interrupted"]["signal"] == "SIGTERM"
    done = r["interrupted"]["steps_done"]
    assert 1 <= done < 100000 and len(r["loss"]["per_step"]) == done
    # Both ranks warn, naming the same step and the same signal (rank 0 received none itself).
    assert err.count(f"interrupted (SIGTERM): stopping after step {done} of 100000") == 2, err[-3000:]
    # the handler's immediate acknowledgement is rank 0's alone (mpirun forwards a signal to every rank: one line)
    assert "SIGTERM received: stopping after the current step" not in err, err[-3000:]
    w, _ = safetensors_io.load(tmp_path / "int.ck" / "model.safetensors")
    assert "lm_head.weight" in w
    latest = (tmp_path / "int.ck" / "latest").read_text().strip()
    assert json.loads((tmp_path / "int.ck" / latest / "manifest.json").read_text())["step"] == done


def test_a_collective_timeout_leaves_an_error_record(tmp_path):
    """Rank 1 stopped (SIGSTOP) mid-run: rank 0's all_reduce passes parallel.comm_timeout_s, the job aborts, and the
    record says status error with the timeout's message instead of staying "running"."""
    import signal
    p, record, rank1 = start_two_ranks(tmp_path, "to", "parallel.strategy=ddp_flat", "bench.measure_steps=100000",
                                       "parallel.comm_timeout_s=3")
    time.sleep(1)
    try:
        os.kill(rank1, signal.SIGSTOP)
    except ProcessLookupError:
        p.kill()
        pytest.fail(f"rank 1 ended before it could be stopped: {p.communicate()[1][-3000:]}")
    try:
        _, err = p.communicate(timeout=90)
    finally:
        try:
            os.kill(rank1, signal.SIGKILL)
        except OSError:
            pass
        p.kill()
    assert p.returncode != 0, err[-3000:]
    r = json.loads(record.read_text())
    assert r["status"] == "error", r["status"]
    assert "collective not complete" in r["error"] and "parallel.comm_timeout_s = 3 s" in r["error"], r["error"]
    assert not list(tmp_path.glob(".to.json*")), list(tmp_path.iterdir())  # nothing kept aside is left behind


def test_a_collective_timeout_of_rank_1_alone_is_recorded_by_rank_0(tmp_path):
    """Rank 0 stopped (SIGSTOP) mid-run: rank 1's all_reduce passes parallel.comm_timeout_s (a fatal error, as a CUDA
    or NCCL failure would be), and rank 1 sends its message to rank 0 before the job is aborted. Rank 0, let go on
    once rank 1 has said so, writes the record: status error, rank 1's message prefixed 'rank 1:' or, as rank 0's
    watchdog may see its own all_reduce past the timeout first when it resumes, its own (it had stayed
    "running": rank 1 aborted the job at once)."""
    import signal
    p, record, rank0 = start_two_ranks(tmp_path, "to1", "parallel.strategy=ddp_flat", "bench.measure_steps=100000",
                                       "parallel.comm_timeout_s=3", stdout=subprocess.DEVNULL, rank=0)
    time.sleep(1)
    lines = []
    try:
        os.kill(rank0, signal.SIGSTOP)
        for line in p.stderr:  # rank 1's fatal line: it has sent its notice and waits for rank 0
            lines.append(line)
            if "[MPI error] rank 1" in line:
                break
        os.kill(rank0, signal.SIGCONT)
        lines.append(p.stderr.read())
        p.wait(timeout=90)
    finally:
        try:
            os.kill(rank0, signal.SIGCONT)
        except OSError:
            pass
        p.kill()
    err = "".join(lines)
    assert p.returncode == 1, err[-3000:]
    r = json.loads(record.read_text())
    assert r["status"] == "error", (r["status"], err[-3000:])
    # Rank 1's notice, or rank 0's own all_reduce timing out as it resumes (its watchdog and its listener race; both
    # end the run with rank 0's record saying error, where before rank 1's abort killed the stopped rank 0 first).
    assert r["error"].startswith(("rank 1: MPI error: ", "MPI error: ")) and "collective not complete" in r["error"], \
        r["error"]


@pytest.mark.parametrize("failing", [0, 1])
def test_an_mpi_error_is_recorded_not_aborted_inside_mpi(tmp_path, failing):
    """An MPI call that fails (TRAINER_TEST_MPI_ERROR on one rank: its first collective an invalid MPI call on the
    communicator, count -1) returns its error (MPI_ERRORS_RETURN) instead of aborting the job inside MPI with the
    record left "running": fatal() names it, and rank 0 writes the record, status error, with the failing rank's
    message (a rank > 0's prefixed 'rank N:'); exit code 1."""
    args = train_args(tmp_path, "mpierr", "parallel.strategy=ddp_flat")
    bad = ["env", "TRAINER_TEST_MPI_ERROR=1"] + args
    apps = (bad + [":", "-np", "1"] + args) if failing == 0 else (args + [":", "-np", "1"] + bad)
    p, wall = run(MPIRUN + ["-np", "1"] + apps, timeout=60)
    assert p.returncode == 1, p.stderr[-3000:]
    assert f"[MPI error] rank {failing} " in p.stderr, p.stderr[-3000:]
    assert "MPI_ERRORS_ARE_FATAL" not in p.stderr, p.stderr[-3000:]
    r = json.loads((tmp_path / "mpierr.json").read_text())
    assert r["status"] == "error", (r["status"], p.stderr[-3000:])
    assert r["error"].startswith("rank 1: MPI error: " if failing else "MPI error: "), r["error"]
    assert wall < 30, f"took {wall:.1f} s"


def test_a_config_error_only_rank_1_finds_is_one_line_from_rank_0(tmp_path):
    """Rank 1 alone cannot load its config (here its own --set): rank 0 prints the one line, with rank 1's message,
    exit code 2, nothing written (before: rank 0 said 'see its message' and rank 1 printed it, two lines)."""
    good = train_args(tmp_path, "cfg1", "parallel.strategy=ddp_flat")
    bad = train_args(tmp_path, "cfg1", "parallel.strategy=ddp_flat", "optimizer.lr=-1")
    p, wall = run(MPIRUN + ["-np", "1"] + good + [":", "-np", "1"] + bad, timeout=60)
    assert p.returncode == 2, p.stderr[-3000:]
    lines = [line for line in p.stderr.splitlines() if line.startswith("trainer:") or "[rank 1]" in line]
    assert lines == ["trainer: error: [rank 1] config: 'optimizer.lr' must be >= 0, got -1"], p.stderr[-3000:]
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())
    assert wall < 30, f"took {wall:.1f} s"


def test_a_rank_stuck_before_the_start_up_check_ends_the_job_with_a_message(tmp_path):
    """Rank 1 never reaches the start-up check (its config is a FIFO nobody writes: it blocks opening it): rank 0
    waits at most its parallel.startup_timeout_s, then ends the job naming the check, instead of waiting silently.
    (mpirun runs in a session of its own, killed whole if the job outlives the test's limit.)"""
    import signal
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    a = train_args(tmp_path, "stuck", "parallel.strategy=ddp_flat", "parallel.startup_timeout_s=3")
    t0 = time.time()
    p = subprocess.Popen(MPIRUN + ["-np", "1"] + a + [":", "-np", "1", BIN, str(fifo)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ENV, cwd=SRC, start_new_session=True)
    try:
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    wall = time.time() - t0
    assert p.returncode != 0, err[-3000:]
    assert ("not every rank reached the start-up check (which ranks loaded their config) within 3 s "
            "(parallel.startup_timeout_s)") in err, err[-3000:]
    assert not (tmp_path / "stuck.json").exists()
    assert wall < 30, f"took {wall:.1f} s"
