"""launch/loss_match.py on small synthetic result records: the table of per-step loss differences, and a failed
record (the reference or another) named by its path with its status and why, never "None" (a record of a run that
is still running, or was killed, has status "running" and error null). Exit code 1 when a record failed.
"""
import json
import os
import pathlib
import subprocess
import sys

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
LOSS_MATCH = SRC / "launch" / "loss_match.py"


def record(path, strategy, losses, status="ok", error=None, **extra):
    r = {"schema": "trainer.result/1", "status": status, "error": error, "loss": {"per_step": losses},
         "config": {"parallel": {"strategy": strategy}, "precision": "fp32",
                    "optimizer": {"schedule": "constant", "lr": 0.001, "warmup_steps": 0}}, **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(r))
    return path


def run(*paths):
    return subprocess.run([sys.executable, str(LOSS_MATCH), *map(str, paths)], capture_output=True, text=True,
                          timeout=60)


def test_a_running_or_failed_record_is_named_with_its_status(tmp_path):
    ref = record(tmp_path / "ref.json", "none", [5.0, 4.0])
    ok = record(tmp_path / "a" / "r.json", "ddp_flat", [5.0, 4.2])
    running = record(tmp_path / "b" / "r.json", "fsdp", None, status="running", pid=4242,
                     started="2026-12-03T11:30:18Z")
    oom = record(tmp_path / "c" / "r.json", "zero1", None, status="oom", error="out of memory on cpu: asked for 1 GiB")
    r = run(ref, ok, running, oom)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert "None" not in r.stdout, r.stdout
    assert any(line.startswith("r.json") and "ddp_flat" in line and "5.00e-02" in line for line in lines), r.stdout
    assert any(f"'{running}' is not a finished run (status running: the run has not ended, or was killed" in line and
               "pid 4242" in line for line in lines), r.stdout
    assert any(f"'{oom}' is a failed run (status oom: out of memory on cpu: asked for 1 GiB)" in line
               for line in lines), r.stdout


def test_a_failed_reference_is_one_line_naming_it(tmp_path):
    ref = record(tmp_path / "ref.json", "none", None, status="running", pid=7)
    r = run(ref, record(tmp_path / "a.json", "ddp_flat", [5.0]))
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.strip() == (f"loss_match: error: the reference '{ref}' is not a finished run (status running: "
                                "the run has not ended, or was killed before it wrote its record; pid 7, started ?)")
