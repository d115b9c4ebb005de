"""launch/ddp_table.py on synthetic trainer result records (and the kept H200 records of v1): the table's values,
sizes in GiB or MiB when every size is below 1 GiB, failed runs as a row with their status (and error only when there
is one, clipped when long), an interrupted run that measured steps with its numbers (marked interrupted; as --one
too, with a note), no efficiency against a --one record of another model or precision (a note says why), one
measured step without "± std", rows of the same file name named with as many parent folders as make the names unique
(the same file twice keeps its name), a memory timeline skipped as one, a
section a hand-edited or partial record lacks (missing or null) shown as "-", and bad input (an unreadable file, a
--torch file that is not a torch_bench record, a record without its status or job, a failed --one record) one line
"ddp_table: error: ..." on stderr, exit 2, nothing on stdout. The --help example's files exist.
"""
import glob
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from record_edit import drop  # this folder

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
SCRIPT = SRC / "launch" / "ddp_table.py"
V1 = SRC / "results" / "h200x2" / "2026-11-30" / "v1"
GIB, MIB = 2 ** 30, 2 ** 20


def trainer_record(strategy="ddp_flat", world=2, batch=8, step=50.0, peak=6 * MIB, opt=MIB, status="ok",
                   error=None, **parallel):
    r = {"schema": "trainer.result/1", "job": "train", "status": status, "error": error, "world_size": world,
         "config": {"parallel": {"strategy": strategy, "reduce_dtype": "fp32", **parallel},
                    "data": {"batch_size": batch}}}
    if status == "ok":
        r["timing"] = {"step": {"mean_ms": step, "std_ms": 0.5, "samples": [step] * 3},
                       "forward": {"mean_ms": 10.0}, "backward": {"mean_ms": 20.0}, "optimizer": {"mean_ms": 5.0},
                       "comm": {"mean_ms": 8.0}, "comm_exposed": {"mean_ms": 2.0}}
        r["memory"] = {"peak_bytes": peak, "optimizer_state_bytes": opt,
                       "per_rank": [{"rank": i, "peak_bytes": peak - i * MIB, "optimizer_state_bytes": opt}
                                    for i in range(world)]}
    return r


def torch_record(step=60.0, peak=3 * GIB, status="ok", world=2):
    r = {"schema": "torch_bench.result/1", "status": status, "error": None if status == "ok" else "out of memory",
         "config": {"mode": "compiled", "world_size": world, "bucket_cap_mb": 25.0}}
    if status == "ok":
        r["timing"] = {"step": {"mean_ms": step, "std_ms": 1.5}}
        r["memory"] = {"peak_bytes": peak}
    return r


def write(tmp, name, rec):
    p = tmp / f"{name}.json"
    p.write_text(rec if isinstance(rec, str) else json.dumps(rec))
    return p


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def rows(out):
    """(header, {record: [strategy, ranks, cells...]}): a full row's cells are step ('mean ± std' or '-'), plan, fwd,
    bwd, opt, comm, exposed, eff, peak, opt state (a peer's: step, peak); a text row's its text."""
    header, *lines = out.splitlines()
    at = header.index("strategy")
    ranks_at = at + 28  # the strategy column is 27 wide
    table = {}
    for line in lines:
        rest = line[ranks_at + 6:]
        cells = rest.split()
        if cells[1:2] == ["±"]:
            cells = [" ".join(cells[:3])] + cells[3:]
        elif not rest.lstrip().startswith("- ") and rest.strip() != "-" and not re.match(r"\s*[0-9.]+ ", rest):
            cells = [rest.strip()]
        table[line.split()[0]] = [line[at:ranks_at].strip(), line[ranks_at:ranks_at + 5].strip()] + cells
    return header, table


def test_values_and_mib_for_small_runs(tmp_path):
    one = write(tmp_path, "one", trainer_record("none", world=1, batch=4, step=80.0, peak=5 * MIB))
    flat = write(tmp_path, "flat", trainer_record("ddp_flat", step=50.0))
    bucketed = write(tmp_path, "bucketed", trainer_record("ddp_bucketed", step=40.0, bucket_mb=1, reduce_dtype="bf16"))
    out = run("--one", one, flat, bucketed)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    header, table = rows(out.stdout)
    assert header.split()[-4:] == ["peak", "MiB", "opt", "MiB"]  # every size below 1 GiB: MiB, not 0.00 GiB
    assert table["one"] == ["none", "1", "80.0 ± 0.5", "-", "10.0", "20.0", "5.0", "8.0", "2.0", "-", "5.00",
                            "1.00"]  # no planned step (records before 2026-12-06, or cpu runs)
    assert table["flat"] == ["ddp_flat", "2", "50.0 ± 0.5", "-", "10.0", "20.0", "5.0", "8.0", "2.0", "1.600", "6.00",
                             "1.00"]  # the largest rank's peak
    assert table["bucketed"][:3] == ["ddp_bucketed 1 MiB (bf16)", "2", "40.0 ± 0.5"]
    assert table["bucketed"][9] == "2.000"  # 80 ms / 40 ms
    # one size of 1 GiB or more (the peer's peak): GiB for every size
    peer = write(tmp_path, "peer", torch_record(peak=3 * GIB))
    out = run("--one", one, flat, "--torch", peer)
    assert out.returncode == 0, out.stderr
    header, table = rows(out.stdout)
    assert header.split()[-4:] == ["peak", "GiB", "opt", "GiB"]
    assert table["flat"][-2:] == [f"{6 * MIB / GIB:.2f}", f"{MIB / GIB:.2f}"]
    assert table["peer"] == ["torch compiled DDP 25.0 MB", "2", "60.0 ± 1.5", "3.00"]


def test_the_one_record_matched_by_the_glob_too_is_one_row(tmp_path):
    one = write(tmp_path, "one", trainer_record("none", world=1, batch=4, step=80.0))
    flat = write(tmp_path, "flat", trainer_record("ddp_flat", step=50.0))
    out = run("--one", one, one, flat)  # as `--one d/one.json d/*.json` passes it twice
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()[1:] if line.strip()] == ["one", "flat"]


def test_kept_h200_records():
    """The v1 records of 2 H200s: values read back from the files (GiB: the xl sizes are tens of GiB)."""
    files = [V1 / "xl_2gpu_zero1.json", V1 / "xl_2gpu_ddp_bucketed_25.json"]
    out = run("--one", V1 / "xl_1gpu.json", *files, "--torch", V1 / "torch_ddp_xl_bf16.json")
    assert out.returncode == 0, out.stderr
    header, table = rows(out.stdout)
    assert "peak GiB" in header
    one = json.loads((V1 / "xl_1gpu.json").read_text())
    for f in files:
        r = json.loads(f.read_text())
        step = r["timing"]["step"]
        peak = max(p["peak_bytes"] for p in r["memory"]["per_rank"])
        assert table[f.stem][1:3] == ["2", f"{step['mean_ms']:.1f} ± {step['std_ms']:.1f}"]
        assert table[f.stem][-3:] == [f"{one['timing']['step']['mean_ms'] / step['mean_ms']:.3f}",
                                      f"{peak / GIB:.2f}", f"{r['memory']['optimizer_state_bytes'] / GIB:.2f}"]
    assert table["xl_2gpu_ddp_bucketed_25"][0] == "ddp_bucketed 25 MiB"
    t = json.loads((V1 / "torch_ddp_xl_bf16.json").read_text())
    assert table["torch_ddp_xl_bf16"][-1] == f"{t['memory']['peak_bytes'] / GIB:.2f}"


def test_failed_runs_are_rows(tmp_path):
    """A running record (error null) says just "running"; an oom record its error."""
    running = write(tmp_path, "running", trainer_record(status="running"))
    oom = write(tmp_path, "oom", trainer_record(status="oom", error="out of memory on cuda:0: asked for 2 GiB"))
    peer_oom = write(tmp_path, "peer_oom", torch_record(status="oom"))
    out = run(running, oom, "--torch", peer_oom)
    assert out.returncode == 0, out.stderr
    assert "None" not in out.stdout, out.stdout
    _, table = rows(out.stdout)
    assert table["running"] == ["ddp_flat", "2", "running"]
    assert table["oom"] == ["ddp_flat", "2", "oom (out of memory on cuda:0: asked for 2 GiB)"]
    assert table["peer_oom"] == ["torch compiled DDP 25.0 MB", "2", "oom (out of memory)"]


ALL = ["10.0", "20.0", "5.0", "8.0", "2.0"]

def test_an_interrupted_run_shows_its_numbers(tmp_path):
    """An interrupted run that measured steps is a full row (its numbers), marked with its status at the end; one
    interrupted before its first measured step is a row with its status. Sizes in MiB: its own are small (the header
    had said GiB, with no number below it)."""
    rec = trainer_record(step=50.0)
    rec.update(status="interrupted", error="interrupted by SIGINT after step 7 of 100",
               interrupted={"signal": "SIGINT", "steps_done": 7, "steps_planned": 100})
    early = trainer_record()
    early.update(status="interrupted", error="interrupted by SIGINT after step 2 of 100")
    early["timing"]["step"] = {"mean_ms": None, "std_ms": None, "samples": []}
    out = run(write(tmp_path, "rec", rec), write(tmp_path, "early", early))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    header, table = rows(out.stdout)
    assert header.split()[-4:] == ["peak", "MiB", "opt", "MiB"]
    assert table["rec"][:12] == ["ddp_flat", "2", "50.0 ± 0.5", "-", *ALL, "-", "6.00", "1.00"]
    assert " ".join(table["rec"][12:]) == "interrupted (interrupted by SIGINT after step 7 of 100)"
    assert table["early"] == ["ddp_flat", "2", "interrupted (interrupted by SIGINT after step 2 of 100)"]



@pytest.mark.parametrize("null", [True, False], ids=["null", "missing"])
@pytest.mark.parametrize("key, expected", [
    # the cells after the ranks: step, plan, fwd, bwd, opt, comm, exposed, eff, peak MiB, opt MiB
    ("memory", ["50.0 ± 0.5", "45.0", *ALL, "1.600", "-", "-"]),
    ("memory.per_rank", ["50.0 ± 0.5", "45.0", *ALL, "1.600", "6.00", "1.00"]),  # memory.peak_bytes then
    ("memory.optimizer_state_bytes", ["50.0 ± 0.5", "45.0", *ALL, "1.600", "6.00", "-"]),
    ("timing", ["-", "-", "-", "-", "-", "-", "-", "-", "6.00", "1.00"]),
    ("timing.comm", ["50.0 ± 0.5", "45.0", "10.0", "20.0", "5.0", "-", "2.0", "1.600", "6.00", "1.00"]),
    ("timing.predicted", ["50.0 ± 0.5", "-", *ALL, "1.600", "6.00", "1.00"]),
    ("config", ["50.0 ± 0.5", "45.0", *ALL, "-", "6.00", "1.00"]),  # per-GPU batch unknown: no efficiency
    ("config.parallel", ["50.0 ± 0.5", "45.0", *ALL, "1.600", "6.00", "1.00"]),
    ("config.data", ["50.0 ± 0.5", "45.0", *ALL, "-", "6.00", "1.00"]),
    ("world_size", ["50.0 ± 0.5", "45.0", *ALL, "-", "6.00", "1.00"]),  # one rank then: no efficiency
])
def test_a_missing_or_null_section_shows_as_dash(tmp_path, key, expected, null):
    one = write(tmp_path, "one", trainer_record("none", world=1, batch=4, step=80.0, peak=5 * MIB))
    planned = trainer_record("ddp_flat")
    planned["timing"]["predicted"] = {"step_ms": 45.0, "gpu": "h200"}  # the planner's step (GPU records)
    rec = write(tmp_path, "rec", drop(planned, key, null))
    out = run("--one", one, rec)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    _, table = rows(out.stdout)
    strategy = "-" if key.startswith("config") and key != "config.data" else "ddp_flat"
    assert table["rec"] == [strategy, "1" if key == "world_size" else "2", *expected]
    if key in ("config", "config.data"):
        assert out.stderr.strip() == ("# rec: config.data.batch_size missing in " + str(rec) +
                                      ": per-GPU batch unknown, no efficiency")


def test_no_measured_steps_and_a_partial_peer_record(tmp_path):
    rec = trainer_record()
    rec["timing"]["step"]["mean_ms"] = None
    peer = drop(drop(torch_record(), "memory", True), "config", False)
    out = run(write(tmp_path, "rec", rec), "--torch", write(tmp_path, "peer", peer))
    assert out.returncode == 0, out.stderr
    _, table = rows(out.stdout)
    assert table["rec"] == ["ddp_flat", "2", "(no measured steps)"]
    assert table["peer"] == ["torch -", "1", "60.0 ± 1.5", "-"]


def test_the_one_record_of_another_model_gives_no_efficiency(tmp_path):
    """Efficiency compares step times of the same model and precision: a row whose dims, context length or
    precision differ from the --one record's gets "-" and a note saying what differs."""
    dims = {"d_model": 64, "d_ff": 172, "num_layers": 2, "num_heads": 4, "vocab_size": 256, "context_length": 64}
    one = trainer_record("none", world=1, batch=4, step=80.0)
    one.update(model={"dims": dims})
    one["config"]["precision"] = "fp32"
    rec = trainer_record("ddp_flat", step=50.0)
    rec.update(model={"dims": {**dims, "d_model": 1600, "context_length": 1024}})
    rec["config"]["precision"] = "bf16"
    same = trainer_record("ddp_flat", step=40.0)
    same.update(model={"dims": dims})
    same["config"]["precision"] = "fp32"
    out = run("--one", write(tmp_path, "one", one), write(tmp_path, "rec", rec), write(tmp_path, "same", same))
    assert out.returncode == 0, out.stderr
    _, table = rows(out.stdout)
    assert table["rec"][9] == "-" and table["same"][9] == "2.000", out.stdout
    assert out.stderr.splitlines() == ["# rec: d_model 1600, the --one record 64; context_length 1024, the --one "
                                       "record 64; precision bf16, the --one record fp32: another model, no "
                                       "efficiency"]


def test_an_interrupted_one_record_that_measured_steps_is_the_base(tmp_path):
    one = trainer_record("none", world=1, batch=4, step=80.0)
    one.update(status="interrupted", error="interrupted by SIGINT after step 9 of 50")
    one_path = write(tmp_path, "one", one)
    out = run("--one", one_path, write(tmp_path, "flat", trainer_record("ddp_flat", step=50.0)))
    assert out.returncode == 0, out.stderr
    _, table = rows(out.stdout)
    assert table["flat"][9] == "1.600"
    assert " ".join(table["one"][12:]) == "interrupted (interrupted by SIGINT after step 9 of 50)"
    assert out.stderr.splitlines() == [f"# --one record '{one_path}' is an interrupted run: the steps it measured "
                                       "give the 1-GPU step time"]


def test_a_long_error_is_clipped_and_one_sample_has_no_std(tmp_path):
    error = "out of memory on cuda:0: asked for 47.81 GiB (optimizer) with 12.50 GiB free " + "x" * 200
    oom = write(tmp_path, "oom", trainer_record(status="oom", error=error))
    single = trainer_record(step=50.0)
    single["timing"]["step"] = {"mean_ms": 50.0, "std_ms": 0.0, "samples": [50.0]}
    out = run(oom, write(tmp_path, "single", single))
    assert out.returncode == 0, out.stderr
    _, table = rows(out.stdout)
    assert table["oom"][2] == "oom (out of memory on cuda:0: asked for 47.81 GiB (optimizer) with 12.50 GiB free…)"
    assert table["single"][2:5] == ["50.0", "-", "10.0"] and "±" not in out.stdout.splitlines()[2], out.stdout


def test_records_of_the_same_file_name_and_a_memory_timeline(tmp_path):
    """Two run.json in different folders: each row named with the fewest parent folders that tell them apart (they had
    the paths as given). A memory timeline is skipped as what it is."""
    a, b = tmp_path / "r1", tmp_path / "r2"
    (a / "x").mkdir(parents=True), (b / "x").mkdir(parents=True)
    timeline = write(tmp_path, "mem", {"schema": "trainer.memory_timeline/1", "events": []})
    out = run(write(a, "run", trainer_record(step=50.0)), write(b, "run", trainer_record(step=40.0)), timeline)
    assert out.returncode == 0, out.stderr
    _, table = rows(out.stdout)
    assert table["r1/run"][2] == "50.0 ± 0.5" and table["r2/run"][2] == "40.0 ± 0.5", out.stdout
    assert out.stderr.splitlines() == [f"# skipped {timeline}: a memory timeline (profile.memory_timeline), not a "
                                       "result record"]
    # two folders up; a file name no other record has (a --torch one too) stays alone
    out = run(write(a / "x", "run", trainer_record(step=30.0)), write(b / "x", "run", trainer_record(step=20.0)),
              write(tmp_path, "flat", trainer_record(step=10.0)), "--torch", write(a / "x", "peer", torch_record()))
    assert out.returncode == 0, out.stderr
    _, table = rows(out.stdout)
    assert list(table) == ["r1/x/run", "r2/x/run", "flat", "peer"], out.stdout
    assert [table[k][2] for k in ("r1/x/run", "r2/x/run", "flat")] == ["30.0 ± 0.5", "20.0 ± 0.5", "10.0 ± 0.5"]


def test_the_same_file_twice_keeps_its_name(tmp_path):
    """a/run.json given twice had switched every row to its path: the same path is one name."""
    (tmp_path / "a").mkdir()
    rec, other = write(tmp_path / "a", "run", trainer_record(step=50.0)), write(tmp_path, "flat", trainer_record())
    out = run(rec, rec, other)
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()[1:]] == ["run", "run", "flat"], out.stdout
    # given as another spelling of the same path, too
    out = subprocess.run([sys.executable, str(SCRIPT), "a/run.json", "./a/run.json", "a/../a/run.json"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines()[1:]] == ["run", "run", "run"], out.stdout


def test_the_help_example_names_kept_records():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    paths = re.findall(r"results/\S+\.json", out.stdout)
    assert paths and all(glob.glob(str(SRC / p)) for p in paths), paths


BAD = [
    ("torch_empty", "--torch '{torch_empty}' is not a torch_bench.py record (schema torch_bench.result/1)"),
    ("torch_trainer", "--torch '{torch_trainer}' is not a torch_bench.py record (schema torch_bench.result/1): "
                      "pass a trainer record without --torch"),
    ("status_null", "record '{status_null}': 'status' is null (a hand-edited or partial record?)"),
    ("status_missing", "record '{status_missing}': 'status' is missing (a hand-edited or partial record?)"),
    ("job_missing", "record '{job_missing}': 'job' is missing (a hand-edited or partial record?)"),
    ("torch_status_null", "--torch record '{torch_status_null}': 'status' is null (a hand-edited or partial "
                          "record?)"),
    ("one_running", "--one '{one_running}' is not a finished run (status running)"),
    ("one_oom", "--one '{one_oom}' is not a finished run (status oom: out of memory)"),
    ("one_interrupted_early", "--one '{one_interrupted_early}' is not a finished run (status interrupted)"),
    ("one_two_ranks", "--one '{one_two_ranks}' must be a 1-rank trainer train record"),
    ("not_json", "cannot read record '{not_json}': Expecting value: line 1 column 1 (char 0)"),
    ("a_list", "record '{a_list}' is not a JSON object (a result record is)"),
    ("only_config", "no trainer train record among the inputs (skipped {only_config}: not a trainer result record "
                    "(no trainer.result schema; a config file?))"),
]


@pytest.mark.parametrize("case, message", BAD, ids=[case for case, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, message):
    ok = write(tmp_path, "ok", trainer_record())
    files = {
        "torch_empty": write(tmp_path, "torch_empty", {}),
        "torch_trainer": write(tmp_path, "torch_trainer", trainer_record()),
        "status_null": write(tmp_path, "status_null", trainer_record(status=None)),
        "status_missing": write(tmp_path, "status_missing", drop(trainer_record(), "status", False)),
        "job_missing": write(tmp_path, "job_missing", drop(trainer_record(), "job", False)),
        "torch_status_null": write(tmp_path, "torch_status_null", drop(torch_record(), "status", True)),
        "one_running": write(tmp_path, "one_running", trainer_record(world=1, status="running")),
        "one_oom": write(tmp_path, "one_oom", trainer_record(world=1, status="oom", error="out of memory")),
        "one_interrupted_early": write(tmp_path, "one_interrupted_early", trainer_record(world=1,
                                                                                         status="interrupted")),
        "one_two_ranks": write(tmp_path, "one_two_ranks", trainer_record(world=2)),
        "not_json": write(tmp_path, "not_json", "not json"),
        "a_list": write(tmp_path, "a_list", "[]"),
        "only_config": write(tmp_path, "only_config", {"job": "train", "model": {"preset": "tiny"}}),
    }
    args = {"torch_empty": [ok, "--torch", files[case]], "torch_trainer": [ok, "--torch", files[case]],
            "torch_status_null": [ok, "--torch", files[case]], "only_config": [files[case]]}.get(
        case, ["--one", files[case], ok] if case.startswith("one_") else [ok, files[case]])
    out = run(*args)
    assert (out.returncode, out.stdout) == (2, ""), (out.stdout, out.stderr)
    assert out.stderr.splitlines() == ["ddp_table: error: " + message.format(**files)]
