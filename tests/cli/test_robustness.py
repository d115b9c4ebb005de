"""Issue 18, items 2 and 3: interrupts, the running marker, outputs that name an input, sizes beyond host memory,
parallel.comm auto without NCCL, and GPU suites that skip showing as skipped.

- SIGINT after a few steps: the run stops after the current step, writes the checkpoint (output.checkpoint) and the
  record with status "interrupted", and exits with code 4 (README "Exit codes"). While it runs the record says
  "running", so an earlier record of the same name never looks current. A second signal stops it at once.
- An output naming an input (the config file, init.weights, data.path; through a symlink, ./ or a hard link): one
  line, exit code 2, nothing written.
- model.num_layers=30000000: one line naming the key and the bytes needed vs MemAvailable, exit code 2, in well under
  a second.
- Without NCCL in the build (CI), parallel.comm auto resolves to mpi on cuda; --version says how to get NCCL in a CUDA
  build only, and so does launch/setup.sh (a build without CUDA has no use for it).
- ctest reports a GPU-only unit file as Skipped without a GPU.

Run: TRAINER_BIN=build/trainer TRAINER_SOURCE_DIR=. /usr/bin/python3 -m pytest tests/cli/test_robustness.py
"""

import json
import os
import pathlib
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest

# The trainer_bin fixture, run(), snapshot() and tiny_config() of the bad-config tests (pytest puts this folder on
# sys.path).
from test_bad_configs import run, snapshot, tiny_config, trainer_bin, write_json  # noqa: E402,F401

EXIT_INTERRUPTED = 4


def version_text(trainer_bin):
    r = run(trainer_bin, ["--version"], cwd=None)
    assert r.returncode == 0, r.stderr
    return r.stdout


def start(trainer_bin, args, cwd):
    """The trainer as from a terminal: SIGHUP at its default disposition, also where this suite runs under nohup
    (which would hand SIG_IGN on, and an ignored SIGHUP stays ignored: test_an_ignored_sighup_stays_ignored)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.Popen([trainer_bin, *map(str, args)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))


def wait_for_line(proc, needle, timeout=120):
    """Reads proc's stderr until a line contains needle; returns the lines read."""
    lines, t0 = [], time.monotonic()
    while time.monotonic() - t0 < timeout:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    proc.kill()
    pytest.fail(f"no line with {needle!r} in {timeout} s; stderr:\n{''.join(lines)}")


def safetensors_names(path):
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return {k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"}


def long_run(tmp_path, **sections):
    """A tiny run of many steps (it is interrupted long before the end), logging every step."""
    return tiny_config(tmp_path, bench={"warmup_steps": 1, "measure_steps": 100000, "log_every": 1}, **sections)


# ---- interrupts --------------------------------------------------------------------------------------------------
def test_sigint_stops_after_the_step_with_checkpoint_and_record(trainer_bin, tmp_path):
    ckpt = tmp_path / "out" / "ckpt"
    cfg = write_json(tmp_path / "c.json", long_run(tmp_path, output={"checkpoint": str(ckpt)}))
    record = tmp_path / "out" / "result.json"
    record.parent.mkdir()
    # An earlier run of the same name left a record with status ok: it must not look like this run's.
    record.write_text(json.dumps({"schema": "trainer.result/1", "status": "ok", "started": "earlier"}))
    proc = start(trainer_bin, [cfg], tmp_path)
    wait_for_line(proc, "step    3/")
    marker = json.loads(record.read_text())
    assert marker["status"] == "running" and marker["pid"] == proc.pid
    assert marker["config"]["bench"]["measure_steps"] == 100000
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, err
    r = json.loads(record.read_text())
    assert r["status"] == "interrupted"
    done = r["interrupted"]["steps_done"]
    assert r["interrupted"]["signal"] == "SIGINT" and r["interrupted"]["steps_planned"] == 100001
    assert 3 <= done < 100001 and r["steps"]["done"] == done
    assert len(r["loss"]["per_step"]) == done and all(x is not None for x in r["loss"]["per_step"])
    assert len(r["timing"]["step"]["samples"]) == done - 1  # one warm-up step
    assert f"after step {done} of 100001" in r["error"]
    assert "interrupted (SIGINT): stopping after step" in err
    # acknowledged at once by the handler, before the step ends (a second press would end the run without a record)
    ack = ("trainer: SIGINT received: stopping after the current step (the record, and the checkpoint where one is "
           "configured, follow); a second interrupt stops at once, without them")
    assert err.count(ack) == 1 and err.index(ack) < err.index("interrupted (SIGINT): stopping after step"), err
    # The checkpoint of the end-of-run path: every parameter of the tiny model (2 layers).
    names = safetensors_names(ckpt / "model.safetensors")
    latest = (ckpt / "latest").read_text().strip()
    assert json.loads((ckpt / latest / "manifest.json").read_text())["step"] == done  # the steps done, not planned
    assert "token_embeddings.weight" in names and "layers.1.ffn.w2.weight" in names and "lm_head.weight" in names
    assert not [p for p in snapshot(tmp_path) if p.endswith(".tmp")]


def test_sigterm_sighup_and_sigusr1_also_interrupt(trainer_bin, tmp_path):
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        out = tmp_path / sig.name
        out.mkdir()
        cfg = write_json(out / "c.json", long_run(out))
        proc = start(trainer_bin, [cfg], out)
        wait_for_line(proc, "step    2/")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == EXIT_INTERRUPTED, err
        r = json.loads((out / "out" / "result.json").read_text())
        assert r["status"] == "interrupted" and r["interrupted"]["signal"] == sig.name


def test_an_ignored_sighup_stays_ignored(trainer_bin, tmp_path):
    """A run started under nohup (SIGHUP ignored) outlives its terminal: a SIGHUP neither stops it nor counts as the
    first interrupt (a later SIGTERM still stops it after the step, with its record)."""
    cfg = write_json(tmp_path / "c.json", long_run(tmp_path))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen([trainer_bin, str(cfg)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    wait_for_line(proc, "step    2/")
    proc.send_signal(signal.SIGHUP)
    wait_for_line(proc, "step    6/")  # still going, four steps later
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, err[-3000:]
    assert "SIGHUP" not in err, err[-3000:]
    r = json.loads((tmp_path / "out" / "result.json").read_text())
    assert r["status"] == "interrupted" and r["interrupted"]["signal"] == "SIGTERM"
    assert r["interrupted"]["steps_done"] >= 6, r["interrupted"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_after_the_first_file_written_late_still_stops_after_the_step(trainer_bin, tmp_path, sig):
    """With output.results /dev/null (written through, no temporary file) the run's first atomic write is its first
    periodic checkpoint, after the interrupt handlers are in place: that write once put its own handler (remove the
    temporary file, then die) in their place, so the interrupt killed the run. It must stop after the step, exit 4."""
    ckpt = tmp_path / "ck"
    cfg = write_json(tmp_path / "c.json", long_run(tmp_path, output={"results": "/dev/null", "checkpoint": str(ckpt),
                                                                     "checkpoint_every": 2}))
    proc = start(trainer_bin, [cfg], tmp_path)
    wait_for_line(proc, "checkpoint after step 2 written")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, (proc.returncode, err[-3000:])
    assert f"interrupted ({sig.name}): stopping after step" in err
    latest = (ckpt / "latest").read_text().strip()
    assert json.loads((ckpt / latest / "manifest.json").read_text())["step"] >= 2
    assert not [p for p in snapshot(tmp_path) if ".tmp" in p]


def test_an_interrupt_while_starting_is_held_until_the_job_is_known(trainer_bin, tmp_path):
    """A signal while MPI, CUDA and the config start (a test hook holds the start-up; before, SIGTERM there ended the
    process with no record, and mpirun.sh's SIGUSR1 too): a train run stops after its first step with its record; a
    --plan (no handler of its own) takes the signal's default action once its job is known."""
    cfg = write_json(tmp_path / "c.json", long_run(tmp_path))
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", TRAINER_TEST_STARTUP_PAUSE_S="2")
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        proc = subprocess.Popen([trainer_bin, str(cfg)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        wait_for_line(proc, "pausing 2 s while starting")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == EXIT_INTERRUPTED, (proc.returncode, err[-3000:])
        r = json.loads((tmp_path / "out" / "result.json").read_text())
        assert r["status"] == "interrupted" and r["interrupted"]["signal"] == sig.name, r.get("error")
        assert r["interrupted"]["steps_done"] == 1, r["interrupted"]
    proc = subprocess.Popen([trainer_bin, "--plan", str(cfg)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_for_line(proc, "pausing 2 s while starting")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM and "predicted step" not in out, (proc.returncode, out, err)


def test_a_second_signal_stops_at_once(trainer_bin, tmp_path):
    cfg = write_json(tmp_path / "c.json", long_run(tmp_path))
    proc = start(trainer_bin, [cfg], tmp_path)
    wait_for_line(proc, "step    2/")
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)  # a different signal, so the two cannot merge while pending
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (-signal.SIGINT, -signal.SIGTERM), (proc.returncode, err)
    assert "second interrupt: stopping now" in err
    assert "trainer: SIGINT received: stopping after the current step" in err or "SIGTERM received" in err, err
    assert json.loads((tmp_path / "out" / "result.json").read_text())["status"] == "running"


def test_a_closed_output_pipe_does_not_end_the_run(trainer_bin, tmp_path):
    """`trainer ... | head -1`: the reader goes after the first line. SIGPIPE once killed the run at its next log line,
    its record left "running"; now the writes to the closed pipes fail quietly and the run ends with its record."""
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, bench={"warmup_steps": 1, "measure_steps": 8,
                                                                      "log_every": 1}))
    proc = start(trainer_bin, [cfg], tmp_path)
    proc.stderr.readline()  # the first log line, then both pipes close
    proc.stderr.close()
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0
    rec = json.loads((tmp_path / "out" / "result.json").read_text())
    assert rec["status"] == "ok" and rec["steps"]["done"] == 9


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_record_that_cannot_be_marked_running_stops_the_run_before_its_job(trainer_bin, tmp_path):
    """output.results on a full disk (/dev/full: writable, every write fails with ENOSPC): the running marker's write
    fails, so the job does not start (it once trained to the end and then failed to write its record), exit 1."""
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, output={"results": "/dev/full"},
                                                      bench={"measure_steps": 3}))
    r = run(trainer_bin, [cfg], tmp_path)
    assert r.returncode == 1, r.stderr
    assert "the result record could not be marked running, so the job did not start" in r.stderr, r.stderr
    assert "step " not in r.stderr and "No space left on device" in r.stderr, r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_trace_that_cannot_be_written_is_named_and_the_record_keeps_the_measurements(trainer_bin, tmp_path):
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, profile={"trace": "/dev/full"},
                                                      bench={"measure_steps": 2}))
    r = run(trainer_bin, [cfg], tmp_path)
    assert r.returncode == 1, r.stderr
    rec = json.loads((tmp_path / "out" / "result.json").read_text())
    assert rec["status"] == "error" and rec["error"].startswith("profile.trace: the trace could not be written: ")
    assert len(rec["timing"]["step"]["samples"]) == 2 and len(rec["loss"]["per_step"]) == 2, rec


def test_a_run_whose_loss_is_not_finite_writes_the_trace_of_its_steps(trainer_bin, tmp_path, monkeypatch):
    """lr 1e30 makes the loss NaN at step 2: the run fails (exit 1) with the trace of the steps up to it written and
    named in the record (a fresh user's trace was silently missing, when it is wanted most)."""
    trace = tmp_path / "tr" / "t.json"
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, profile={"trace": str(trace)},
                                                      optimizer={"lr": 1e30, "weight_decay": 0.0},
                                                      bench={"warmup_steps": 0, "measure_steps": 4}))
    r = run(trainer_bin, [cfg], tmp_path)
    assert r.returncode == 1 and "loss is " in r.stderr, r.stderr
    rec = json.loads((tmp_path / "out" / "result.json").read_text())
    assert rec["status"] == "error" and rec["profile"]["trace"] == str(trace), rec.get("profile")
    events = json.loads(trace.read_text())["traceEvents"]
    steps = {e["args"]["step"] for e in events if e.get("cat") == "phase"}  # every step's phases, the failed one's too
    assert steps == set(range(1, len(rec["loss"]["per_step"]) + 1)) and len(steps) >= 2, (steps, rec["loss"])
    assert "no trace written" not in r.stderr, r.stderr
    # a run that fails otherwise (its checkpoint's write: a test hook) ends without the trace's gather, and says so
    cfg = write_json(tmp_path / "c2.json", tiny_config(tmp_path, profile={"trace": str(tmp_path / "t2.json")},
                                                       output={"results": str(tmp_path / "r2.json"),
                                                               "checkpoint": str(tmp_path / "ck")}))
    monkeypatch.setenv("TRAINER_TEST_WEIGHT_READ_FAIL", "ln_final.weight")
    r = run(trainer_bin, [cfg], tmp_path)
    assert r.returncode == 1 and "profile.trace: no trace written: the run failed before its end" in r.stderr, r.stderr
    assert not (tmp_path / "t2.json").exists()


def test_a_finished_run_replaces_the_running_marker(trainer_bin, tmp_path):
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path))
    r = run(trainer_bin, [cfg], tmp_path)
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / "out" / "result.json").read_text())
    assert rec["status"] == "ok" and rec["interrupted"] is None and "pid" not in rec


def test_a_live_runs_record_is_not_taken_over(trainer_bin, tmp_path):
    """A second run naming the record a live run is writing (status running, its pid alive, this program) is refused
    before it writes anything; once the first has ended, the path is free."""
    cfg = write_json(tmp_path / "c.json", long_run(tmp_path))
    first = start(trainer_bin, [cfg], tmp_path)
    try:
        wait_for_line(first, "step    2/")
        second = tmp_path / "second.json"
        write_json(second, tiny_config(tmp_path))
        r = run(trainer_bin, [second], tmp_path)
        assert r.returncode == 2, r.stderr
        assert f"is the record of a run still going (pid {first.pid} on this host" in r.stderr, r.stderr
        assert json.loads((tmp_path / "out" / "result.json").read_text())["pid"] == first.pid  # untouched
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
    assert first.returncode == 4
    r = run(trainer_bin, [second], tmp_path)
    assert r.returncode == 0, r.stderr


def record_lock(results):
    """The lock file of a record path (io/result_record.h record_lock_path): $TMPDIR or /tmp, trainer-locks-UID,
    NAME.HASH.lock with HASH the FNV-1a 64 of the canonical path."""
    canonical = os.path.realpath(results)
    h = 14695981039346656037  # FNV-1a 64 offset basis (the trainer had lost a digit of it before v44)
    for b in canonical.encode():
        h = ((h ^ b) * 1099511628211) % 2 ** 64
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return pathlib.Path(tmp) / f"trainer-locks-{os.getuid()}" / f"{os.path.basename(canonical)}.{h:016x}.lock"


def test_a_record_path_locked_by_a_starting_run_is_refused(trainer_bin, tmp_path):
    """Two runs started together both find no "running" record; the first to start holds a lock (flock) on its
    record's lock file until it exits, so the second is refused with one line naming the holder's pid. Here this test
    holds that lock as a run would; released, the path is free, and the run's own lock file is gone once it ends
    (the lock files live outside the record's directory, so an aborted run leaves nothing beside its record)."""
    import fcntl
    cfg = tiny_config(tmp_path)
    results = pathlib.Path(cfg["output"]["results"])
    results.parent.mkdir(parents=True, exist_ok=True)
    c = write_json(tmp_path / "c.json", cfg)
    lock = record_lock(results)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as f:
        f.write("4242\n")
        f.flush()
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        before = snapshot(tmp_path)
        r = run(trainer_bin, [c], tmp_path)
        assert r.returncode == 2, r.stderr
        assert "is the record of a run still starting or going (the run of pid 4242; lock" in r.stderr, r.stderr
        assert str(lock) in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert snapshot(tmp_path) == before  # nothing written
    lock.unlink()
    r = run(trainer_bin, [c], tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(results.read_text())["status"] == "ok"
    assert sorted(x.name for x in results.parent.iterdir()) == [results.name]
    assert not lock.exists()  # removed at exit


def test_a_running_record_is_judged_by_its_process_start_time(trainer_bin, tmp_path):
    """The guard asks whether the record's pid started shortly before the record's "started": any program counts (a
    copy or a rebuild of the trainer), and a pid whose process started long before the record (reused) does not."""
    import socket
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        cfg = tiny_config(tmp_path)
        results = pathlib.Path(cfg["output"]["results"])
        results.parent.mkdir(parents=True, exist_ok=True)
        record = {"schema": "trainer.result/1", "status": "running", "pid": sleeper.pid,
                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "machine": {"host": socket.gethostname()}}
        write_json(results, record)
        c = write_json(tmp_path / "c.json", cfg)
        r = run(trainer_bin, [c], tmp_path)
        assert r.returncode == 2 and f"(pid {sleeper.pid} on this host" in r.stderr, r.stderr
        record["started"] = "2099-01-01T00:00:00Z"  # the process began long before: not that run
        write_json(results, record)
        r = run(trainer_bin, [c], tmp_path)
        assert r.returncode == 0, r.stderr
    finally:
        sleeper.kill()
        sleeper.wait()


# ---- outputs naming an input -------------------------------------------------------------------------------------
def expect_refused(trainer_bin, tmp_path, args, *needles):
    before = snapshot(tmp_path)
    contents = {p: (tmp_path / p).read_bytes() for p in before if (tmp_path / p).is_file()}
    r = run(trainer_bin, args, tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainer: error: "), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert snapshot(tmp_path) == before
    assert {p: (tmp_path / p).read_bytes() for p in contents} == contents  # nothing overwritten
    return lines[0]


def test_results_naming_the_config_file(trainer_bin, tmp_path):
    cfg = write_json(tmp_path / "x.json", tiny_config(tmp_path))
    expect_refused(trainer_bin, tmp_path, [cfg, "--set", f"output.results={cfg}"], "output.results",
                   "the config file")
    expect_refused(trainer_bin, tmp_path, ["x.json", "--set", "output.results=./x.json"], "the config file")
    (tmp_path / "link.json").symlink_to(cfg)
    expect_refused(trainer_bin, tmp_path, [cfg, "--set", "output.results=link.json"], "the config file")
    os.link(cfg, tmp_path / "hard.json")
    expect_refused(trainer_bin, tmp_path, [cfg, "--set", "output.results=hard.json"], "the config file")
    (tmp_path / "dir").symlink_to(tmp_path, target_is_directory=True)
    expect_refused(trainer_bin, tmp_path, [cfg, "--set", "profile.trace=dir/sub/../x.json"], "profile.trace",
                   "the config file")


def tiny_weights(trainer_bin, tmp_path, name):
    """tmp_path/name: the tiny model's weights (a run's checkpoint, under tmp_path/made/), as init.weights needs."""
    made = tmp_path / "made"
    made.mkdir(exist_ok=True)
    cfg = write_json(made / "c.json", tiny_config(made, output={"results": str(made / "r.json"),
                                                                "checkpoint": str(made / "ck")}))
    r = run(trainer_bin, [cfg], tmp_path)
    assert r.returncode == 0, r.stderr
    shutil.copyfile(made / "ck" / "model.safetensors", tmp_path / name)
    return tmp_path / name


def test_outputs_naming_init_weights_or_the_token_file(trainer_bin, tmp_path):
    weights = tiny_weights(trainer_bin, tmp_path, "w.safetensors")  # its header is checked with the config
    tokens = tmp_path / "t.u16"
    tokens.write_bytes(struct.pack("<4096H", *([1] * 4096)))
    (tmp_path / "d").symlink_to(tmp_path, target_is_directory=True)
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, init={"weights": str(weights)},
                                                      data={"source": "tokens", "path": str(tokens)}))
    expect_refused(trainer_bin, tmp_path, [cfg, "--set", "profile.trace=d/w.safetensors"], "profile.trace",
                   "init.weights")
    expect_refused(trainer_bin, tmp_path, [cfg, "--set", "profile.memory_timeline=./t.u16"],
                   "profile.memory_timeline", "data.path")
    expect_refused(trainer_bin, tmp_path, [cfg, "--set", "profile.trace=d/t.u16"], "profile.trace", "data.path")


# ---- sizes against host memory -----------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--plan"], ["--set", "device=cuda", "--plan"]])
def test_huge_num_layers_is_one_line_at_once(trainer_bin, tmp_path, extra):
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path))
    t0 = time.monotonic()
    version_text(trainer_bin)  # the start-up alone (MPI_Init: ~0.6 s on a loaded 2-core machine)
    startup = time.monotonic() - t0
    t0 = time.monotonic()
    line = expect_refused(trainer_bin, tmp_path, [cfg, "--set", "model.num_layers=30000000", *extra],
                          "model.num_layers = 30000000", "of host memory", "is available (MemAvailable")
    elapsed = time.monotonic() - t0
    assert elapsed - startup < 0.5, f"{elapsed:.2f} s, of which start-up {startup:.2f} s"
    assert ("the plan's dry run" in line) == ("--plan" in extra)


# ---- NCCL absent -------------------------------------------------------------------------------------------------
def test_comm_auto_without_nccl(trainer_bin, tmp_path):
    v = version_text(trainer_bin)
    nccl_line = next(line for line in v.splitlines() if line.startswith("NCCL: "))
    tiny = write_json(tmp_path / "c.json", tiny_config(tmp_path))
    r = run(trainer_bin, ["--print-config", tiny, "--set", "device=cuda", "--set", "parallel.strategy=ddp_flat"],
            tmp_path)
    assert r.returncode == 0, r.stderr
    comm = json.loads(r.stdout)["parallel"]["comm"]
    if nccl_line.startswith("NCCL: built in"):
        assert comm == "nccl"
        pytest.skip("this trainer has NCCL: the without-NCCL half does not apply")
    if "CUDA: built in" in v:  # how to get NCCL, where it would be used
        assert "absent" in nccl_line and "libnccl-dev" in nccl_line and "NCCL_HOME" in nccl_line
    else:  # a build without CUDA has no use for NCCL: no advice
        assert "absent (not used: no CUDA in this build" in nccl_line and "libnccl-dev" not in nccl_line, nccl_line
    assert comm == "mpi"
    expect_refused(trainer_bin, tmp_path, ["--print-config", tiny, "--set", "device=cuda", "--set", "parallel.comm=nccl"],
                   "parallel.comm: 'nccl' is not available", "libnccl-dev", "parallel.comm=mpi")


def test_setup_script_says_nccl_plainly():
    text = (pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", ".")) / "launch" / "setup.sh").read_text()
    assert "libnccl-dev" in text and "NCCL_HOME" in text


@pytest.mark.parametrize("cuda, nccl, advice", [
    ("absent (built without nvcc, or with -DTRAINER_CUDA=OFF)", "absent (not used: no CUDA in this build)", False),
    ("built in", "absent: this trainer was built without NCCL (install NVIDIA's libnccl-dev ...)", True),
    ("built in", "built in (parallel.comm auto is nccl on cuda with a GPU per rank)", False)])
def test_setup_gives_nccl_advice_only_to_a_cuda_build(tmp_path, cuda, nccl, advice):
    """launch/setup.sh after its build (install skipped, cmake a no-op, a stand-in trainer saying what it was built
    with): the NCCL advice shows for a CUDA build without NCCL only."""
    build = tmp_path / "build"
    (build / "data").mkdir(parents=True)
    (build / "CMakeCache.txt").write_text("")
    (build / "data" / "fortunes.u16").write_bytes(b"")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for path, text in [(build / "trainer", f"echo 'trainer 0.1.0'; echo 'CUDA: {cuda}'; echo \"NCCL: {nccl}\""),
                       (stubs / "cmake", "exit 0")]:
        path.write_text(f"#!/bin/sh\n{text}\n")
        path.chmod(0o755)
    env = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}", TRAINER_SKIP_INSTALL="1", TRAINER_BUILD_DIR=str(build))
    r = subprocess.run(["bash", str(SRC / "launch" / "setup.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "setup: ok" in r.stdout
    assert ("NCCL absent" in r.stdout and "libnccl-dev" in r.stdout) == advice, r.stdout


# ---- skipped GPU tests -------------------------------------------------------------------------------------------
def test_gpu_only_unit_file_is_reported_skipped(trainer_bin):
    build = pathlib.Path(trainer_bin).resolve().parent
    ctest = shutil.which("ctest")
    if not ctest or not (build / "CTestTestfile.cmake").exists() or not (build / "tests" / "unit_tests").exists():
        pytest.skip("no ctest build tree beside TRAINER_BIN")
    cuda = "CUDA: built in" in version_text(trainer_bin)
    r = subprocess.run([ctest, "--test-dir", str(build), "-R", r"^unit\.test_cuda_model$"], capture_output=True,
                       text=True, timeout=600)
    if cuda and r.returncode == 0 and "Skipped" not in r.stdout:
        pytest.skip("a CUDA build with a GPU: the suite ran")
    assert r.returncode == 0, r.stdout
    assert "***Skipped" in r.stdout and "1 tests passed" not in r.stdout.replace("100% tests passed", ""), r.stdout


# ---- peer scripts without PyTorch --------------------------------------------------------------------------------
SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
# Runs a script as __main__ with torch made unimportable (a None entry in sys.modules raises ImportError).
NO_TORCH = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = [{path!r}] + sys.argv[1:]; "
            "sys.path.insert(0, {dir!r}); runpy.run_path({path!r}, run_name='__main__')")
PEERS = ["launch/torch_bench.py", "launch/torch_allreduce_bench.py", "launch/flash_bench/bench.py",
         "launch/flash_bench/sm90_check.py"]


def run_without_torch(script, *args):
    path = SRC / script
    return subprocess.run([sys.executable, "-c", NO_TORCH.format(path=str(path), dir=str(path.parent)), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("script", PEERS)
def test_peer_script_without_torch(script):
    h = run_without_torch(script, "--help")
    assert h.returncode == 0 and "usage:" in h.stdout, h.stderr
    r = run_without_torch(script)
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    name = pathlib.Path(script).name
    assert last.startswith(f"{name}: error: ") and "PyTorch" in last and "Traceback" not in r.stderr, r.stderr


def test_init_weights_of_another_model_is_one_line_before_the_run(trainer_bin, tmp_path):
    """init.weights of another model (a tensor of another shape) is refused from the file's header before the run
    starts: exit code 2, the one line and nothing else (no log line, no plan line), and nothing written."""
    (tmp_path / "w").mkdir()
    make = write_json(tmp_path / "w" / "c.json", tiny_config(tmp_path / "w", output={
        "results": str(tmp_path / "w" / "r.json"), "checkpoint": str(tmp_path / "w" / "ck")}))
    r = run(trainer_bin, [make], tmp_path)
    assert r.returncode == 0, r.stderr
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, model={"preset": "tiny", "d_model": 128},
                                                      init={"weights": str(tmp_path / "w" / "ck" / "model.safetensors")}))
    before = snapshot(tmp_path)
    r = run(trainer_bin, [cfg], tmp_path)
    assert r.returncode == 2, r.stderr
    weights = tmp_path / "w" / "ck" / "model.safetensors"
    assert r.stderr.splitlines() == [f"trainer: error: init.weights: '{weights}': tensor 'token_embeddings.weight' "
                                     "has shape [256, 64], the model needs [256, 128]"], r.stderr
    assert r.stdout == ""
    assert snapshot(tmp_path) == before  # no out/result.json, no out/
    p = run(trainer_bin, [cfg, "--plan"], tmp_path)  # the plan of a run that would be refused: the same line
    assert (p.returncode, p.stdout, p.stderr) == (2, "", r.stderr), p.stderr


def test_init_weights_with_tensors_the_model_lacks_or_not_finite_are_refused(trainer_bin, tmp_path):
    """init.weights holding more than the model (a 2-layer checkpoint for a 1-layer model) is refused from the header
    before the run (and by --plan), as PyTorch's strict load_state_dict; weights that are not finite once in fp32 (a
    NaN, an F64 beyond fp32's range) are refused by the job when it reads them: exit code 2, one line, the earlier
    record left as it was; so is an fp32 value that bf16_pure's bf16 parameters would round to inf."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "parity"))
    import safetensors_io
    import torch
    (tmp_path / "w").mkdir()
    make = write_json(tmp_path / "w" / "c.json", tiny_config(tmp_path / "w", output={
        "results": str(tmp_path / "w" / "r.json"), "checkpoint": str(tmp_path / "w" / "ck")}))
    r = run(trainer_bin, [make], tmp_path)
    assert r.returncode == 0, r.stderr
    ck = tmp_path / "w" / "ck" / "model.safetensors"
    record = tmp_path / "r.json"
    record.write_text('{"earlier": "record"}\n')

    def refused(weights, *sets):
        cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, init={"weights": str(weights)},
                                                          output={"results": str(record)}))
        args = [cfg] + [a for kv in sets for a in ("--set", kv)]
        p = run(trainer_bin, args, tmp_path)
        assert p.returncode == 2, p.stderr
        lines = [line for line in p.stderr.splitlines() if "error" in line]
        assert len(lines) == 1 and lines[0] == p.stderr.strip().splitlines()[-1], p.stderr
        assert record.read_text() == '{"earlier": "record"}\n'
        return lines[0], p.stderr, args

    line, err, args = refused(ck, "model.num_layers=1")
    extra = sorted(n for n in safetensors_io.load(ck)[0] if n.startswith("layers.1."))
    assert line == (f"trainer: error: init.weights: '{ck}' holds {len(extra)} tensors the model does not have ('"
                    f"{extra[0]}', '{extra[1]}', '{extra[2]}' and {len(extra) - 3} more): weights of another model?")
    assert err.splitlines() == [line]  # found before the run: no log line before it
    p = run(trainer_bin, args + ["--plan"], tmp_path)
    assert (p.returncode, p.stdout, p.stderr.strip()) == (2, "", line)

    weights, _ = safetensors_io.load(ck)
    bad = dict(weights)
    w = bad["layers.0.ffn.w2.weight"].clone()
    w.view(-1)[7] = float("nan")
    bad["layers.0.ffn.w2.weight"] = w
    safetensors_io.save(tmp_path / "nan.safetensors", bad)
    line, err, _ = refused(tmp_path / "nan.safetensors", f"profile.trace={tmp_path / 'nan_trace.json'}")
    assert line == (f"trainer: error: init.weights: '{tmp_path / 'nan.safetensors'}': tensor 'layers.0.ffn.w2.weight' "
                    "element 7 is inf or nan: the weights must be finite"), line
    assert "no trace written" not in err, err  # bad input found at set-up: no run that failed
    big = {k: v.to(torch.float64) for k, v in weights.items()}
    big["ln_final.weight"][3] = 1e300  # finite in F64, inf in fp32
    safetensors_io.save(tmp_path / "f64.safetensors", big)
    line, _, _ = refused(tmp_path / "f64.safetensors")
    assert line == (f"trainer: error: init.weights: '{tmp_path / 'f64.safetensors'}': tensor 'ln_final.weight' element "
                    "3 is inf or nan in fp32 (or beyond its range): the weights must be finite"), line
    edge = {k: v.clone() for k, v in weights.items()}
    edge["ln_final.weight"][3] = 3.4e38  # finite in fp32, inf once rounded to bf16 (above 3.3962e38)
    safetensors_io.save(tmp_path / "edge.safetensors", edge)
    line, _, _ = refused(tmp_path / "edge.safetensors", "precision=bf16_pure")
    assert line == (f"trainer: error: init.weights: '{tmp_path / 'edge.safetensors'}': tensor 'ln_final.weight' "
                    "element 3 is beyond bf16's range (bf16_pure's parameter dtype) or inf or nan: the weights must "
                    "be finite"), line


@pytest.mark.parametrize("shared_parent", [False, True])
def test_bad_input_found_after_the_checkpoint_lock_leaves_no_new_directory(trainer_bin, tmp_path, shared_parent):
    """init.resume with a truncated optimizer shard is found once rank 0 holds output.checkpoint's .lock: exit code
    2, the error as the last line, and the checkpoint directory the run made (two levels of it) is gone with its
    .lock, as is the record's (shared_parent: the record in the same new directory, new/r.json, which had stayed:
    it was removed before the .lock)."""
    (tmp_path / "w").mkdir()
    ck = tmp_path / "w" / "ck"
    make = write_json(tmp_path / "w" / "c.json", tiny_config(tmp_path / "w", output={
        "results": str(tmp_path / "w" / "r.json"), "checkpoint": str(ck)}))
    assert run(trainer_bin, [make], tmp_path).returncode == 0
    shard = next((ck / (ck / "latest").read_text().strip()).glob("optim-rank*.safetensors"))
    with open(shard, "r+b") as f:
        f.truncate(1000)
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, bench={"warmup_steps": 0, "measure_steps": 3},
                                                      init={"resume": str(ck)},
                                                      output={"checkpoint": str(tmp_path / "new" / "ck")}))
    if shared_parent:
        cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, bench={"warmup_steps": 0, "measure_steps": 3},
                                                          init={"resume": str(ck)},
                                                          output={"checkpoint": str(tmp_path / "new" / "ck"),
                                                                  "results": str(tmp_path / "new" / "r.json")}))
    before = snapshot(tmp_path)
    r = run(trainer_bin, [cfg], tmp_path)
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("trainer: error: init.resume") and "truncated" in last, r.stderr
    assert snapshot(tmp_path) == before  # no new/ck/.lock, no new/, no out/


def test_a_run_refused_a_new_checkpoint_directory_leaves_its_lock_alone(trainer_bin, tmp_path):
    """Two runs name one new output.checkpoint: the one that finds the other's .lock taken (here the test's own
    flock, taken while the run is stopped between its running marker and its checkpointer) stops with exit code 2
    and leaves the .lock and the directory alone: it did not take the lock, so neither is its to remove (a refused
    run had unlinked the live run's .lock and removed its directory, and a third run could then take it)."""
    import fcntl
    ck, results = tmp_path / "new" / "ck", tmp_path / "r.json"
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, output={"checkpoint": str(ck),
                                                                         "results": str(results)}))
    for _ in range(5):  # the run may take the lock before it is stopped: then again, in a fresh directory
        proc = start(trainer_bin, [cfg], tmp_path)
        while not results.exists() and proc.poll() is None:  # the marker: the run has looked at output.checkpoint
            time.sleep(0.0005)
        os.kill(proc.pid, signal.SIGSTOP)
        ck.mkdir(parents=True, exist_ok=True)
        lock = open(ck / ".lock", "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # the run was quicker
            lock.close()
            os.kill(proc.pid, signal.SIGCONT)
            proc.communicate(timeout=120)
            shutil.rmtree(tmp_path / "new")
            continue
        try:
            lock.truncate(0)
            lock.write(f"{os.getpid()}\n")
            lock.flush()
            os.kill(proc.pid, signal.SIGCONT)
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 2, err
            last = err.strip().splitlines()[-1]
            assert last.startswith("trainer: error: output.checkpoint") and f"pid {os.getpid()}" in last, err
            assert (ck / ".lock").exists() and os.stat(ck / ".lock").st_ino == os.fstat(lock.fileno()).st_ino
            assert sorted(p.name for p in ck.iterdir()) == [".lock"]
            assert not results.exists()
        finally:
            lock.close()
        return
    pytest.skip("the run took output.checkpoint's lock before the test could, five times")


def test_bad_input_found_late_puts_back_what_output_results_held(trainer_bin, tmp_path):
    """The job finds init.weights of another shape after the running marker was written: exit code 2, and what the
    results path held before is there again, byte for byte: an earlier record, the same through a symbolic link, and
    (as root, where a character device can be made) a device that must never be removed (as /dev/null once was)."""
    (tmp_path / "w").mkdir()
    make = write_json(tmp_path / "w" / "c.json", tiny_config(tmp_path / "w", output={
        "results": str(tmp_path / "w" / "r.json"), "checkpoint": str(tmp_path / "w" / "ck")}))
    assert run(trainer_bin, [make], tmp_path).returncode == 0
    prev = tmp_path / "prev.json"
    prev.write_text('{"earlier": "record"}\n')
    (tmp_path / "link.json").symlink_to("prev.json")
    targets = [prev, tmp_path / "link.json"]
    if os.geteuid() == 0:
        os.mknod(tmp_path / "dev", 0o666 | 0o020000, os.makedev(1, 3))  # a character device like /dev/null
        targets.append(tmp_path / "dev")
    for out in targets:
        cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, model={"preset": "tiny", "d_model": 128},
                                                          init={"weights": str(tmp_path / "w" / "ck" /
                                                                                "model.safetensors")},
                                                          output={"results": str(out)}))
        before = snapshot(tmp_path)
        r = run(trainer_bin, [cfg], tmp_path)
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("trainer: error: init.weights"), r.stderr
        assert snapshot(tmp_path) == before, out  # no marker, no kept-aside copy left
        assert prev.read_text() == '{"earlier": "record"}\n' and (tmp_path / "link.json").is_symlink()
    if os.geteuid() == 0:
        import stat
        assert stat.S_ISCHR(os.stat(tmp_path / "dev").st_mode)


def test_checkpoint_directory_holding_an_input_or_other_files_is_refused(trainer_bin, tmp_path):
    """output.checkpoint may not hold init.weights among the files the checkpointer replaces or prunes, nor be a
    directory with other things in it and no `latest` (what a run stopped before its first `latest` leaves is
    accepted): one line, exit code 2, nothing touched. A step-*/ without a manifest is never pruned."""
    (tmp_path / "w").mkdir()
    ck = tmp_path / "w" / "ck"
    make = write_json(tmp_path / "w" / "c.json", tiny_config(tmp_path / "w", bench={"warmup_steps": 0,
                                                                                     "measure_steps": 2},
                                                             output={"results": str(tmp_path / "w" / "r.json"),
                                                                     "checkpoint": str(ck)}))
    assert run(trainer_bin, [make], tmp_path).returncode == 0
    step = (ck / "latest").read_text().strip()
    mine = tmp_path / "mine"
    (mine / "step-00000002").mkdir(parents=True)
    (mine / "step-00000002" / "mine.txt").write_text("keep")
    cases = [({"weights": str(ck / "model.safetensors")}, ck, "holds the input init.weights"),
             ({"weights": str(ck / step / "model.safetensors")}, ck, "holds the input init.weights"),
             ({}, mine, "no checkpoint (no 'latest')")]
    for init, out_ck, needle in cases:
        cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, init=init, output={"checkpoint": str(out_ck)}))
        before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        r = run(trainer_bin, [cfg], tmp_path)
        assert r.returncode == 2, r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("trainer: error: output.checkpoint") and needle in last, r.stderr
        assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    # A run stopped after its first step directory and before `latest` (a requeue continues there), also once it had
    # placed DIR/model.safetensors (a hard link to the step's weights, made just before `latest`): accepted. A
    # model.safetensors that is not the step's file is someone else's: refused, as above.
    import shutil as sh
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    sh.copytree(ck / step, crashed / step)
    (crashed / "latest.tmp.123").write_text(step + "\n")
    sh.copy(crashed / step / "model.safetensors", crashed / "model.safetensors")
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, output={"checkpoint": str(crashed)}))
    r = run(trainer_bin, [cfg], tmp_path)
    assert r.returncode == 2 and "no checkpoint (no 'latest')" in r.stderr and "'model.safetensors'" in r.stderr, \
        r.stderr
    (crashed / "model.safetensors").unlink()
    os.link(crashed / step / "model.safetensors", crashed / "model.safetensors")
    r = run(trainer_bin, [cfg], tmp_path)
    assert r.returncode == 0, r.stderr
    # A checkpoint directory with a foreign step-*/ in it (no manifest): written to, and the foreign one stays.
    (ck / "step-00000000").mkdir()
    (ck / "step-00000000" / "mine.txt").write_text("keep")
    cfg = write_json(tmp_path / "c.json", tiny_config(tmp_path, bench={"warmup_steps": 0, "measure_steps": 1},
                                                      output={"checkpoint": str(ck), "checkpoint_every": 1}))
    for _ in range(3):
        assert run(trainer_bin, [cfg], tmp_path).returncode == 0
    assert (ck / "step-00000000" / "mine.txt").read_text() == "keep"


def test_a_second_run_on_a_checkpoint_directory_in_use_is_refused(trainer_bin, tmp_path):
    """Rank 0 holds output.checkpoint's .lock while it runs: a second run naming the same directory stops with one
    line and exit code 2 (its results path untouched), before its start-up log (it once came after five info lines),
    and once the first has ended the directory is free again."""
    ckpt = tmp_path / "ck"
    first = start(trainer_bin, [write_json(tmp_path / "c1.json", long_run(tmp_path, output={
        "checkpoint": str(ckpt), "results": str(tmp_path / "r1.json")}))], tmp_path)
    try:
        wait_for_line(first, "step    2/")
        second = write_json(tmp_path / "c2.json", tiny_config(tmp_path, output={
            "checkpoint": str(ckpt), "results": str(tmp_path / "r2.json")}))
        r = run(trainer_bin, [second], tmp_path)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("trainer: error: output.checkpoint") and f"the run of pid {first.pid}" in lines[0]
        assert not (tmp_path / "r2.json").exists()
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
    assert first.returncode == EXIT_INTERRUPTED
    r = run(trainer_bin, [second], tmp_path)
    assert r.returncode == 0, r.stderr
