"""launch/device_call.sh, the part every device-call script shares, run here in bash as the device would run it.

A script sources it with OUT set: its copy lands in the record as run.sh, binaries come out of .dev (xz or gzip)
executable, each step's output goes to its log and its exit status (124 past its time limit) to progress.log, and
r.tgz holds the record after every step. Without OUT it refuses with one line.
"""
import gzip
import lzma
import os
import pathlib
import shutil
import subprocess
import tarfile

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
LIB = SRC / "launch" / "device_call.sh"

pytestmark = pytest.mark.skipif(not (shutil.which("bash") and shutil.which("xz") and shutil.which("timeout")),
                                reason="needs bash, xz and timeout")


def run_script(tmp_path, body, out=True):
    """Writes callN.sh sourcing the library into a scratch repository root and runs it there."""
    (tmp_path / "launch").mkdir(exist_ok=True)
    shutil.copy(LIB, tmp_path / "launch" / "device_call.sh")
    script = tmp_path / ".dev" / "call1.sh"
    script.parent.mkdir(exist_ok=True)
    script.write_text("#!/bin/bash\n# a test call\nsource launch/device_call.sh \"$0\"\n" + body)
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    if out:
        env["OUT"] = str(tmp_path / "out")
        (tmp_path / "out").mkdir(exist_ok=True)
    return subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def test_record_steps_and_archive(tmp_path):
    dev = tmp_path / ".dev"
    dev.mkdir()
    tool = b"#!/bin/bash\necho tool says $1\n"
    (dev / "tool.xz").write_bytes(lzma.compress(tool))
    (dev / "other.gz").write_bytes(gzip.compress(b"#!/bin/bash\nexit 3\n"))
    lib = tmp_path / "libdir"
    lib.mkdir()
    (lib / "lib.so").write_text("not really a library")
    with tarfile.open(dev / "lib.tar.xz", "w:xz") as t:
        t.add(lib, arcname="flash_x")
    shutil.rmtree(lib)
    r = run_script(tmp_path, """unpack_bins tool other
unpack_tar .dev/lib.tar.xz
step hello 10 .dev/bin/tool world
step fails 10 .dev/bin/other
echo "fails returned $?"
step slow 1 sleep 5
echo "slow returned $?"
echo "left $(left 100)"
""")
    assert r.returncode == 0, r.stderr
    rec = tmp_path / "out" / "r"
    assert (rec / "run.sh").read_text().startswith("#!/bin/bash\n# a test call")
    assert (rec / "hello.log").read_text() == "tool says world\n"
    assert "fails returned 3" in r.stdout and "slow returned 124" in r.stdout
    left = int(r.stdout.split("left ")[1].split()[0])
    assert 90 <= left <= 100
    assert (tmp_path / "flash_x" / "lib.so").read_text() == "not really a library"
    assert os.access(tmp_path / ".dev" / "bin" / "tool", os.X_OK)
    progress = (rec / "progress.log").read_text().splitlines()
    names = [line.split("] ", 1)[1] for line in progress]
    assert names == ["unpacked tool other", "unpacked .dev/lib.tar.xz", "hello rc 0", "fails rc 3", "slow rc 124"]
    assert all(line.startswith("[") and line.split("]")[0][1:-1].isdigit() for line in progress)
    with tarfile.open(tmp_path / "out" / "r.tgz") as t:
        members = set(t.getnames())
    assert {"r/run.sh", "r/hello.log", "r/slow.log", "r/progress.log"} <= members


def test_missing_binary_and_missing_out(tmp_path):
    r = run_script(tmp_path, "unpack_bins nothing || echo \"unpack failed $?\"\n")
    assert "unpack failed 1" in r.stdout
    assert "neither .dev/nothing.xz nor .dev/nothing.gz" in (tmp_path / "out" / "r" / "progress.log").read_text()
    r = run_script(tmp_path, "echo never\n", out=False)
    assert r.returncode == 2 and "never" not in r.stdout
    assert r.stderr.strip().splitlines() == ["device_call.sh: OUT is not set (the run tool's output folder)"]


def test_summary_helpers(tmp_path):
    """record_lines, smi_lines and trace_top read the records a call wrote; a missing one is skipped, not an error."""
    import json
    r = run_script(tmp_path, """cat > $R/a.json <<'J'
{"status": "ok", "timing": {"step": {"median_ms": 1.5, "mean_ms": 1.75}},
 "memory": {"peak_bytes": 3221225472, "predicted": {"peak_bytes": 2147483648}}}
J
cat > $R/peer.json <<'J'
{"status": "ok", "timing": {"step": {"median_ms": 2.0, "mean_ms": 2.5}}, "memory": {"peak_bytes": 1073741824}}
J
printf '2026/12/06 05:00:00.000, 1980, 650.5\\n2026/12/06 05:00:00.100, 1500, 700.0\\n' > $R/smi_a.log
printf 'garbage\\n2026/12/06 05:00:00.200, 1755, 690.0\\n' >> $R/smi_a.log
echo '""" + json.dumps({"profile": {"ranges": [
        {"cat": "op", "name": "small", "ms_per_step": 1.0, "calls_per_step": 3.0},
        {"cat": "phase", "name": "backward", "ms_per_step": 9.5, "calls_per_step": 1.0},
        {"cat": "op", "name": "matmul", "ms_per_step": 4.25, "calls_per_step": 290.0}]}}) + """' > $R/tr.json
record_lines a missing peer
smi_lines a missing
trace_top tr 2
trace_top absent
echo done
""")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "a ok 1.5 1.75 3.0 planned 2.0" in lines
    assert "peer ok 2.0 2.5 1.0 planned 0.0" in lines
    assert not any(line.startswith("missing") for line in lines)
    # three samples (the garbage line skipped): median 1755, minimum 1500, power maximum 700
    assert "a SM clock median 1755 / min 1500 MHz, power max 700 W" in lines
    i = lines.index("tr (ms per traced step, largest first):")
    assert lines[i + 1].split() == ["phase", "backward", "9.500", "ms", "1.0", "calls"]
    assert lines[i + 2].split() == ["op", "matmul", "4.250", "ms", "290.0", "calls"]
    assert lines[i + 3] == "done"  # only the 2 largest; an absent trace prints nothing
