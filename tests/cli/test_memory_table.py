"""launch/memory_table.py on synthetic records: measured and planned peaks in GiB (MiB when every size is below
1 GiB), an out-of-memory record's planned peak from the plan it carries, records of the benchmark jobs and memory
timelines skipped with a note, records of the same file name named with as many parent folders as make the names
unique, bad input (a value of another type
in a hand-edited record too) one line naming the file (and the key) and exit 2. The --help example's files exist.
"""
import glob
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
SCRIPT = SRC / "launch" / "memory_table.py"
GIB, MIB = 2 ** 30, 2 ** 20


def record(tmp, name, peak, pred, status="ok", job="train", plan=None, **extra):
    r = {"schema": "trainer.result/1", "job": job, "status": status,
         "config": {"model": {"context_length": 512}, "checkpointing": {"policy": "selective"}},
         "timing": {"step": {"mean_ms": 12.5}} if status == "ok" else {},
         "memory": {"peak_bytes": peak, "predicted": {"peak_bytes": pred} if pred else None,
                    "by_category": {"activations": peak // 2, "head": peak // 8} if peak else None}}
    if plan:
        r["plan"] = plan
    r.update(extra)
    p = tmp / f"{name}.json"
    p.write_text(json.dumps(r))
    return p


def table(*paths):
    p = subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)], capture_output=True, text=True, timeout=60)
    return p, [line.split() for line in p.stdout.splitlines()]


def test_units_oom_plan_and_skipped_jobs(tmp_path):
    small = record(tmp_path, "small", 3 * MIB + MIB // 2, 3 * MIB + MIB // 2)
    p, rows = table(small)
    assert p.returncode == 0, p.stderr
    assert "peak MiB" in p.stdout and rows[1][:2] == ["small", "ok"]
    assert rows[1][5] == "3.50" and rows[1][6] == "3.50" and rows[1][7] == "1.000"
    big = record(tmp_path, "big", 50 * GIB, 49 * GIB)
    oom = record(tmp_path, "oom", None, None, status="oom", plan={"memory": {"peak_bytes": 150 * GIB}})
    bench = record(tmp_path, "bench", 1, 1, job="collective_bench")
    p, rows = table(small, big, oom, bench)
    assert p.returncode == 0, p.stderr
    assert "peak GiB" in p.stdout
    by_name = {r[0]: r for r in rows[1:]}
    assert set(by_name) == {"small", "big", "oom"}
    assert by_name["big"][5:8] == ["50.00", "49.00", "0.980"]
    assert by_name["oom"][1] == "oom" and by_name["oom"][6] == "150.00"  # planned, from the plan it carries
    assert "bench.json: a record of job 'collective_bench', skipped" in p.stderr


def test_a_memory_timeline_is_skipped_with_a_note(tmp_path):
    small = record(tmp_path, "small", 3 * MIB, 3 * MIB)
    timeline = tmp_path / "m1.json"
    timeline.write_text(json.dumps({"schema": "trainer.memory_timeline/1", "rank": 0, "events": []}))
    p, rows = table(small, timeline)
    assert p.returncode == 0, p.stderr
    assert [r[0] for r in rows[1:]] == ["small"]
    assert p.stderr == f"memory_table.py: {timeline}: a memory timeline, skipped\n"
    p, _ = table(timeline)  # only a timeline: the note, then the error
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [f"memory_table.py: {timeline}: a memory timeline, skipped",
                                     "memory_table.py: error: no result records among the files (memory timelines "
                                     "are skipped)"]


def test_bad_input(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{")
    p, _ = table(bad)
    assert p.returncode == 2 and p.stderr.startswith("memory_table.py: error:") and len(p.stderr.splitlines()) == 1


@pytest.mark.parametrize("change, message", [
    ({"timing": {"step": "fast"}}, 'timing.step is "fast", not an object'),
    ({"timing": {"step": {"mean_ms": "12"}}}, 'timing.step.mean_ms is "12", not a number'),
    ({"memory": {"peak_bytes": [1]}}, "memory.peak_bytes is [1], not a number"),
    ({"config": "tiny"}, 'config is "tiny", not an object'),
])
def test_a_value_of_another_type_is_one_line_naming_the_file_and_key(tmp_path, change, message):
    bad = record(tmp_path, "bad", 3 * MIB, 3 * MIB, **change)
    p, _ = table(record(tmp_path, "ok", 3 * MIB, 3 * MIB), bad)
    assert (p.returncode, p.stdout) == (2, ""), (p.stdout, p.stderr)
    assert p.stderr.splitlines() == [f"memory_table.py: error: {bad}: {message}"]


def test_records_of_the_same_file_name_are_named_by_their_folders(tmp_path):
    """Two run.json: each row named with the fewest parent folders that tell them apart (they had the paths as given),
    a file name no other record has alone; the same file twice keeps its name."""
    for d in ("r1/x", "r2/x"):
        (tmp_path / d).mkdir(parents=True)
    a, b = record(tmp_path / "r1", "run", 3 * MIB, 3 * MIB), record(tmp_path / "r2", "run", 4 * MIB, 4 * MIB)
    p, rows = table(a, b)
    assert p.returncode == 0, p.stderr
    assert [(r[0], r[5]) for r in rows[1:]] == [("r1/run", "3.00"), ("r2/run", "4.00")]
    c, d = record(tmp_path / "r1/x", "run", 5 * MIB, 5 * MIB), record(tmp_path / "r2/x", "run", 6 * MIB, 6 * MIB)
    other = record(tmp_path, "other", 7 * MIB, 7 * MIB)
    p, rows = table(c, d, other)
    assert p.returncode == 0, p.stderr
    assert [(r[0], r[5]) for r in rows[1:]] == [("r1/x/run", "5.00"), ("r2/x/run", "6.00"), ("other", "7.00")]
    p, rows = table(a, a)
    assert p.returncode == 0, p.stderr
    assert [r[0] for r in rows[1:]] == ["run", "run"]


def test_the_help_example_names_kept_records():
    p = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    paths = re.findall(r"results/\S+\.json", p.stdout)
    assert paths and all(glob.glob(str(SRC / path)) for path in paths), paths
