"""launch/bench_sweep.py: the benchmark sweep (CS336 a2 section 2.1.3) against real trainer runs on the CPU.

- --handout sets the handout's model (naive attention, no recompute, AdamW after the backward, no CUDA graph), so the
  table's forward / backward / optimizer columns hold the record's numbers (the optimizer's > 0);
- OUT/*.json are the records only (the summary is OUT/.sweep.json), and a record an earlier sweep left is never
  reported as this one's: a refused run is an ERROR row and the exit status is 1;
- a run killed by a signal (its record left running) is a row saying how it ended; an error's whole line is shown;
- Ctrl-C: the run in flight ends its record (interrupted), the rest are skipped, the rows so far are printed and
  written to OUT/.sweep.json, exit status 130 (no traceback); the signal reaches a trainer under a wrapper script;
- a hangup (SIGHUP: the terminal closed) ends the run in flight too, though it runs in a process group of its own;
  Ctrl-Z (SIGTSTP) stops it with the sweep, and SIGCONT (fg, bg) continues both;
- bad arguments: exit 2 before anything runs, one line `bench_sweep.py: error: ...` (as argparse's).

Run: TRAINER_BIN=build/trainer TRAINER_SOURCE_DIR=. /usr/bin/python3 -m pytest tests/cli/test_bench_sweep.py
"""
import glob
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN = os.environ.get("TRAINER_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
CPU = ["--set", "device=cpu", "--set", "model.num_layers=1", "--set", "data.batch_size=2"]


def sweep_cmd(tmp_path, *args, trainer=None):
    return [sys.executable, str(SRC / "launch" / "bench_sweep.py"), "--trainer", trainer or BIN, "--configs",
            str(SRC / "configs"), "--sizes", "tiny", "--precisions", "fp32", "--steps", "2", "--warmups", "0",
            "--out", str(tmp_path / "out"), *args]


ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def sweep(tmp_path, *args, trainer=None):
    return subprocess.run(sweep_cmd(tmp_path, *args, trainer=trainer), capture_output=True, text=True, timeout=300,
                          env=ENV)


def test_handout_setting_and_phase_columns(tmp_path):
    p = sweep(tmp_path, "--handout", "--phases", "forward", "train_step", *CPU)
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / "out"
    # what a shell's OUT/*.json names (glob.glob skips dot files as the shell does): the records, not the summary
    records = sorted(pathlib.Path(x).name for x in glob.glob(str(out / "*.json")))
    assert records == ["tiny_fp32_forward_w0.json", "tiny_fp32_train_step_w0.json"]
    summary = json.loads((out / ".sweep.json").read_text())
    assert [s["status"] for s in summary] == ["ok", "ok"]
    r = json.loads((out / "tiny_fp32_train_step_w0.json").read_text())
    c = r["config"]
    assert c["attention"] == "naive" and c["checkpointing"]["policy"] == "none"
    assert c["optimizer"]["in_backward"] is False and c["cuda_graph"] is False
    t = r["timing"]
    assert t["optimizer"]["mean_ms"] > 0
    row = [line for line in p.stdout.splitlines() if line.startswith("tiny    fp32      train_step")][-1]
    cols = row.split("|")[2].split()  # forward, backward, optimizer means
    assert [float(x) for x in cols] == pytest.approx(
        [t["forward"]["mean_ms"], t["backward"]["mean_ms"], t["optimizer"]["mean_ms"]], abs=0.006)


def test_default_precisions_without_a_gpu_and_the_header_over_the_rows(tmp_path):
    """Where nvidia-smi lists no GPU (a fake one that fails, first on PATH) the default precisions are fp32 alone,
    said on stderr (bf16 runs on cuda only: every bf16 row was an error on a CPU machine). The header comes before the
    rows as they run, and a bf16_pure row lines up with it."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")
    (fake / "nvidia-smi").chmod(0o755)
    cmd = sweep_cmd(tmp_path, "--phases", "forward", *CPU)
    i = cmd.index("--precisions")
    del cmd[i:i + 2]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env=dict(ENV, PATH=f"{fake}:{os.environ['PATH']}"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "bench_sweep.py: no GPU visible (nvidia-smi -L): --precisions fp32" in p.stderr, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("# size  prec      phase") and lines[1].startswith("tiny    fp32      forward"), lines
    assert len(lines) == 6 and lines[4] == lines[0] and lines[5] == lines[1], lines  # and again in the table
    p = sweep(tmp_path, "--phases", "forward", *CPU, "--precisions", "bf16_pure")
    assert p.returncode == 0, p.stdout + p.stderr
    header, row = p.stdout.splitlines()[:2]
    bars = [i for i, c in enumerate(header) if c == "|"]
    assert row.startswith("tiny    bf16_pure forward") and len(bars) == 6, (header, row)
    assert [i for i, c in enumerate(row) if c == "|"] == bars, (header, row)  # every column under its name


def test_a_refused_run_is_an_error_row_not_an_earlier_record(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    stale = {"schema": "trainer.result/1", "status": "ok", "timing": {"step": {"mean_ms": 1.0}}}
    (out / "tiny_fp32_train_step_w0.json").write_text(json.dumps(stale))
    p = sweep(tmp_path, "--phases", "train_step", *CPU, "--set", "data.batch_size=-1")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "ERROR: exit 2" in p.stdout and "batch_size" in p.stdout, p.stdout


def test_the_trainers_error_line_is_shown_when_a_wrapper_prints_after_it(tmp_path):
    """A wrapper (mpirun) that prints a banner after the trainer's error line: the row keeps the trainer's line."""
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text(f"""#!/bin/bash
'{BIN}' "$@"; rc=$?
echo '--------------------------------------------------------------------------' >&2
echo 'mpirun detected that one or more processes exited with non-zero status' >&2
exit $rc
""")
    wrapper.chmod(0o755)
    p = sweep(tmp_path, "--phases", "train_step", *CPU, "--set", "data.batch_size=-1", trainer=str(wrapper))
    assert p.returncode == 1, p.stdout + p.stderr
    row = [line for line in p.stdout.splitlines() if line.startswith("tiny ")][-1]
    assert "ERROR: exit 2: trainer: error: " in row and "batch_size" in row, row


def test_an_error_line_is_shown_whole(tmp_path):
    key = "bench.an_unknown_key_whose_name_is_long_enough_to_push_the_error_line_past_any_cut"
    p = sweep(tmp_path, "--phases", "train_step", *CPU, "--set", f"{key}=1")
    assert p.returncode == 1, p.stdout + p.stderr
    row = [line for line in p.stdout.splitlines() if line.startswith("tiny ")][-1]
    assert row.endswith(f"ERROR: exit 2: trainer: error: config: unknown key '{key}' (in --set {key}=1)"), row


@pytest.mark.parametrize("end, how", [("kill -KILL $$", "killed by signal 9 (SIGKILL)"),
                                      ("exit 137", "exit 137 (128 + SIGKILL)")])
def test_a_killed_run_says_how_it_ended(tmp_path, end, how):
    # the trainer killed mid-run (SIGKILL: no record written at its end, it stays "running"), then the wrapper ends
    killer = tmp_path / "killer.sh"
    killer.write_text(f"""#!/bin/bash
for a in "$@"; do [[ $a == output.results=* ]] && rec=${{a#output.results=}}; done
'{BIN}' "$@" & pid=$!
for i in $(seq 300); do grep -q '"running"' "$rec" 2> /dev/null && break; sleep 0.1; done
kill -KILL $pid
wait $pid
{end}
""")
    killer.chmod(0o755)
    p = sweep(tmp_path, "--phases", "train_step", "--steps", "100000", *CPU, trainer=str(killer))
    assert p.returncode == 1, p.stdout + p.stderr
    record = json.loads((tmp_path / "out" / "tiny_fp32_train_step_w0.json").read_text())
    assert record["status"] == "running"
    row = [line for line in p.stdout.splitlines() if line.startswith("tiny ")][-1]
    assert row.endswith(f"ERROR: {how}; record left running"), row


@pytest.mark.parametrize("group, sig, wrapped", [(True, signal.SIGINT, False), (False, signal.SIGINT, False),
                                                 (False, signal.SIGTERM, False), (False, signal.SIGINT, True)],
                         ids=["terminal", "sweep_only", "sigterm", "sweep_only_wrapper"])
def test_ctrl_c_keeps_the_finished_rows(tmp_path, group, sig, wrapped):
    # runs: forward w0 (finishes), forward w100000 (interrupted in its warm-up), train_step w0 and w100000 (skipped).
    # group: SIGINT to the sweep's process group, as a terminal's Ctrl-C; else to bench_sweep only (SIGTERM too:
    # kill, Slurm). Either way the sweep passes it on to the run's own process group, so a trainer under a wrapper
    # script (wrapped: bash running it as a child, which waits) gets it too.
    trainer = None
    if wrapped:
        trainer = tmp_path / "wrapper.sh"
        trainer.write_text(f"#!/bin/bash\n'{BIN}' \"$@\"\n")
        trainer.chmod(0o755)
    out = tmp_path / "out"
    proc = subprocess.Popen(sweep_cmd(tmp_path, "--phases", "forward", "train_step", "--warmups", "0", "100000", *CPU,
                                      trainer=str(trainer) if trainer else None),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True)
    try:
        second = out / "tiny_fp32_forward_w100000.json"
        deadline = time.time() + 120
        while not (second.exists() and '"running"' in second.read_text()):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.1)
        time.sleep(0.5)  # into its warm-up steps
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 128 + sig, stdout + stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert [line for line in stderr.splitlines() if "bench_sweep" in line] == [
        f"bench_sweep.py: interrupted ({sig.name}): 2 of 4 runs started, the rest skipped; the table below and "
        f"{out}/.sweep.json hold those"], stderr
    assert json.loads(second.read_text())["status"] == "interrupted"
    summary = json.loads((out / ".sweep.json").read_text())
    assert [(s["_row"][2], s["_row"][3], s["status"]) for s in summary] == [("forward", 0, "ok"),
                                                                           ("forward", 100000, "interrupted")]
    table = stdout.split("# size")[-1].splitlines()[1:]
    assert len(table) == 2 and f"INTERRUPTED: interrupted by {sig.name}" in table[1], stdout
    assert not list(out.glob("tiny_fp32_train_step_*.json"))


def test_an_interrupted_row_that_measured_steps_shows_them():
    # the table's row for an interrupted run: its measured steps' numbers, then the interruption (one that measured
    # none is the INTERRUPTED row of the test above)
    sys.path.insert(0, str(SRC / "launch"))
    import bench_sweep
    r = {"_row": ("tiny", "fp32", "train_step", 0), "status": "interrupted",
         "error": "interrupted by SIGINT after step 7 of 100", "timing": {"step": {"mean_ms": 12.5, "std_ms": 0.5,
                                                                                   "samples": [13.0, 12.0]}}}
    row = bench_sweep.cell(r)
    assert "12.50 ±    0.50 ms" in row and row.endswith("| INTERRUPTED: interrupted by SIGINT after step 7 of 100"), row
    r["timing"] = {"step": {"mean_ms": None}}
    assert bench_sweep.cell(r).endswith("| INTERRUPTED: interrupted by SIGINT after step 7 of 100"), bench_sweep.cell(r)
    assert "ms |" not in bench_sweep.cell(r)


@pytest.mark.parametrize("args, needle", [(["--steps", "0"], "--steps"), (["--phases", "fwd"], "--phases"),
                                          (["--sizes", "huge"], "--sizes"), (["--precisions", "fp16"], "--precisions"),
                                          (["--steps", "x"], "--steps"),
                                          # keys the sweep sets, and labels its rows and files by (a fresh user's
                                          # --set bench.warmup_steps=0 ran under a 'w5' label)
                                          (["--set", "bench.warmup_steps=0"], "use --warmups"),
                                          (["--set", "precision=bf16"], "use --precisions"),
                                          (["--set", "output.results=x.json"], "output.results"),
                                          (["--set", 'bench={"warmup_steps": 0}'], "its keys"),
                                          (["--set", "model.preset=small"], "use --sizes")])
def test_bad_arguments(tmp_path, args, needle):
    p = sweep(tmp_path, *args)
    assert p.returncode == 2 and needle in p.stderr and not (tmp_path / "out").exists(), p.stderr
    # one line, as argparse's own errors end (they print the usage before it)
    assert p.stderr.splitlines()[-1].startswith("bench_sweep.py: error: "), p.stderr
    if args[1] != "x":
        assert len(p.stderr.splitlines()) == 1, p.stderr


def run_in_flight(proc, tmp_path):
    """(record, pid) of the sweep `proc`'s one run (tiny forward, warm-up 100000) once its record says running."""
    record = tmp_path / "out" / "tiny_fp32_forward_w100000.json"
    deadline = time.time() + 120
    while not (record.exists() and '"running"' in record.read_text()):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.1)
    run = [int(q) for q in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                          text=True).stdout.split()]
    assert len(run) == 1, run
    return record, run[0]


def test_a_hangup_ends_the_run_in_flight_too(tmp_path):
    """SIGHUP to the sweep (its terminal closed): the run in flight, in a process group of its own that a shell would
    not signal, is ended by it too, and the sweep ends by SIGHUP."""
    # SIGHUP at its default in the sweep, as from a terminal (a test run under nohup would pass on its SIG_IGN, which
    # the sweep keeps)
    proc = subprocess.Popen(sweep_cmd(tmp_path, "--phases", "forward", "--warmups", "100000", *CPU),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        _, run = run_in_flight(proc, tmp_path)
        proc.send_signal(signal.SIGHUP)
        proc.communicate(timeout=60)
        deadline = time.time() + 30
        while os.path.exists(f"/proc/{run}") and time.time() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{run}"), "the run outlived the sweep"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == -signal.SIGHUP


def proc_state(pid):
    """The one-letter state of /proc/PID/stat (R running, S sleeping, T stopped, ...); '' once it is gone."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except (OSError, IndexError):
        return ""


def wait_state(pid, states, timeout=30):
    deadline = time.time() + timeout
    while proc_state(pid) not in states:
        assert time.time() < deadline, f"pid {pid} state {proc_state(pid)!r}, wanted one of {states}"
        time.sleep(0.05)


def test_ctrl_z_stops_the_run_in_flight_too_and_fg_continues_both(tmp_path):
    """SIGTSTP to the sweep (a terminal's Ctrl-Z reaches the foreground group, not the run's own): the run in flight is
    stopped with it; SIGCONT to the sweep (fg / bg) continues both, and the run then ends normally on Ctrl-C. The sweep
    is in a process group of its own within this session, as a shell's job (an orphaned group is never stopped)."""
    out = tmp_path / "out"
    proc = subprocess.Popen(sweep_cmd(tmp_path, "--phases", "forward", "--warmups", "100000", *CPU),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, process_group=0,
                            preexec_fn=lambda: signal.signal(signal.SIGTSTP, signal.SIG_DFL))
    try:
        record, run = run_in_flight(proc, tmp_path)
        proc.send_signal(signal.SIGTSTP)
        wait_state(proc.pid, "T")
        wait_state(run, "T")
        time.sleep(0.5)
        assert proc_state(run) == "T" and proc_state(proc.pid) == "T"
        proc.send_signal(signal.SIGCONT)
        wait_state(run, "RS")
        wait_state(proc.pid, "RS")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            for pid in subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split():
                os.kill(int(pid), signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, stdout + stderr
    assert json.loads(record.read_text())["status"] == "interrupted"


def test_time_stopped_by_ctrl_z_does_not_count_towards_timeout(tmp_path):
    """A run stopped 10 s under --timeout 8 (a wrapper that sleeps 3 s, then the trainer's short run) still ends ok,
    and its row says it was stopped (its step times include the pause); without the stop's time taken out, the 13 s
    it took would be a TIMEOUT row."""
    wrapper = tmp_path / "slow_start.sh"
    wrapper.write_text(f"#!/bin/bash\nsleep 3\nexec '{BIN}' \"$@\"\n")
    wrapper.chmod(0o755)
    proc = subprocess.Popen(sweep_cmd(tmp_path, "--phases", "forward", "--timeout", "8", *CPU, trainer=str(wrapper)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, process_group=0,
                            preexec_fn=lambda: signal.signal(signal.SIGTSTP, signal.SIG_DFL))
    try:
        deadline = time.time() + 30
        while not subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True).stdout.split():
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTSTP)
        wait_state(proc.pid, "T")
        time.sleep(10)
        proc.send_signal(signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, stdout + stderr
    row = [line for line in stdout.splitlines() if line.startswith("tiny ")][-1]
    assert "TIMEOUT" not in row and "| STOPPED 1" in row and "by Ctrl-Z: its times include the pause" in row, row
