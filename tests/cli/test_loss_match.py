"""launch/loss_match.py on small synthetic result records: the table of per-step loss differences, and a failed record
(the reference or another) named by its path with its status and why, never "None" (a record of a run that is still
running, or was killed, has status "running" and error null); an interrupted record (or reference) compared on the
steps both have; a resumed record (steps.first) compared by step number (with the trainer: a resumed leg bitwise
equal to an uninterrupted run). A config that differs in a key that changes the numbers (the schedule's length among
them) is "not comparable", naming the key. Exit code 1 when a record failed; bad input (unreadable, not a JSON object
or not a trainer result record (its schema), a reference without per-step losses, a record without its config
section, losses that are not numbers, a steps.first that is not a step number) one line "loss_match: error: ..." on
stderr, exit 2, nothing on stdout, and too few arguments one usage line; a strategy a record lacks (config.parallel
missing or null) shows as "-"; records of the same file name are named with as many parent folders as make the names
unique.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import record_edit  # this folder

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
LOSS_MATCH = SRC / "launch" / "loss_match.py"
BIN = os.environ.get("TRAINER_BIN")


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
    # three records named r.json: each row names its folder too
    assert any(line.startswith("a/r.json ") and "ddp_flat" in line and "5.00e-02" in line for line in lines), r.stdout
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


def test_an_interrupted_record_is_compared_on_the_steps_both_have(tmp_path):
    """An interrupted run's losses are valid: compared on the steps both records have, the row saying how many;
    as the reference too. Two finished runs of different lengths are still a row that says so (and what in their
    configs differs), exit 1."""
    ref = record(tmp_path / "ref.json", "none", [5.0, 4.0, 3.0, 2.0])
    intr = record(tmp_path / "intr.json", "ddp_flat", [5.0, 4.4], status="interrupted",
                  error="interrupted by SIGINT after step 2 of 4")
    r = run(ref, intr)
    assert r.returncode == 0 and r.stderr == "", (r.stdout, r.stderr)
    row = r.stdout.splitlines()[2]
    assert row.split()[:5] == ["intr.json", "ddp_flat", "4.40000", "1.00e-01", "2"], row
    assert row.endswith("(interrupted: compared steps 1-2; it has steps 1-2, the reference steps 1-4)"), row
    r = run(intr, ref)  # the interrupted record as the reference
    assert r.returncode == 0 and r.stderr == "", (r.stdout, r.stderr)
    assert r.stdout.startswith(f"reference {intr}: 2 steps (interrupted), final loss 4.40000"), r.stdout
    row = r.stdout.splitlines()[2]
    assert row.split()[:5] == ["ref.json", "none", "2.00000", "9.09e-02", "2"], row
    assert row.endswith("(compared steps 1-2; it has steps 1-4, the reference steps 1-2)"), row
    same = record(tmp_path / "same.json", "ddp_flat", [5.0, 4.2, 3.0, 2.0], status="interrupted",
                  error="interrupted by SIGINT after step 4 of 9")
    r = run(ref, same)  # as many steps as the reference: no note
    assert r.returncode == 0 and r.stdout.splitlines()[2].split() == ["same.json", "ddp_flat", "2.00000",
                                                                      "5.00e-02", "2"], r.stdout
    short = record(tmp_path / "short.json", "ddp_flat", [5.0, 4.4])
    r = run(ref, short)
    assert r.returncode == 1 and r.stdout.splitlines()[2].split(None, 1)[1] == (
        "steps 1-2, the reference has steps 1-4 (finished runs of different lengths)")
    # a run of another setup says that too (it once said only the lengths)
    other = json.loads(short.read_text())
    other["config"]["precision"] = "bf16"
    short.write_text(json.dumps(other))
    r = run(ref, short)
    assert r.returncode == 1 and r.stdout.splitlines()[2].split(None, 1)[1] == (
        "steps 1-2, the reference has steps 1-4 (finished runs of different lengths)  (not comparable: different "
        "precision)"), r.stdout


def test_a_resumed_record_is_compared_by_step_number(tmp_path):
    """A resumed run's losses follow steps.first (its checkpoint's step): compared with the reference's steps of the
    same numbers, the row saying which; as the reference too. No step in common is a row, exit 1."""
    ref = record(tmp_path / "ref.json", "none", [5.0, 4.0, 3.0, 2.0, 1.0])
    leg = record(tmp_path / "leg.json", "none", [3.0, 2.2, 1.0], steps={"first": 2})
    r = run(ref, leg)
    assert r.returncode == 0 and r.stderr == "", (r.stdout, r.stderr)
    row = r.stdout.splitlines()[2]
    assert row.split()[:5] == ["leg.json", "none", "1.00000", "1.00e-01", "4"], row  # step 4: 2.2 against 2.0
    assert row.endswith("(compared steps 3-5; it has steps 3-5, the reference steps 1-5)"), row
    r = run(leg, ref)
    assert r.returncode == 0 and r.stdout.startswith(f"reference {leg}: 3 steps (steps 3-5), final loss"), r.stdout
    assert r.stdout.splitlines()[2].split()[:5] == ["ref.json", "none", "1.00000", "9.09e-02", "4"], r.stdout
    early = record(tmp_path / "early.json", "none", [5.0, 4.0], status="interrupted",
                   error="interrupted by SIGINT after step 2 of 5")
    r = run(early, leg)
    assert r.returncode == 1 and r.stdout.splitlines()[2].split(None, 1)[1] == (
        "no step in common: it has steps 3-5, the reference has steps 1-2"), r.stdout


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_a_resumed_leg_matches_an_uninterrupted_run(tmp_path):
    """The README's resume claim, checked with this tool: 45 steps in one run, and 25 + 20 in two legs; the second
    leg's steps 26-45 are bitwise equal to the uninterrupted run's."""
    def train(*sets):
        p = subprocess.run([BIN, str(SRC / "configs" / "tiny.json"), "--set", "device=cpu",
                            *[a for s in sets for a in ("--set", s)]], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path)
        assert p.returncode == 0, p.stderr[-2000:]
    train("bench.measure_steps=40", "output.results=ref45.json")
    train("bench.measure_steps=20", "output.checkpoint=ck", "output.results=leg1.json")
    train("bench.measure_steps=40", "output.checkpoint=ck", "init.resume=ck", "output.results=leg2.json")
    r = run(tmp_path / "ref45.json", tmp_path / "leg2.json")
    assert r.returncode == 0 and r.stderr == "", (r.stdout, r.stderr)
    row = r.stdout.splitlines()[2]
    assert row.split()[:4] == ["leg2.json", "none", row.split()[2], "0.00e+00"], row
    assert row.endswith("(compared steps 26-45; it has steps 26-45, the reference steps 1-45)"), row


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_runs_on_one_token_file_from_other_directories_are_comparable(tmp_path):
    """The trainer records the real path of its token file (inputs["data.path"]): the same file named from the
    directory above, from a subdirectory with ../ and through a symlinked directory gives comparable runs, bitwise
    equal; a copy of the file elsewhere is other data."""
    import struct
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "d", target_is_directory=True)
    (tmp_path / "d" / "t.u16").write_bytes(struct.pack("<4096H", *[(7 * i) % 256 for i in range(4096)]))
    (tmp_path / "copy.u16").write_bytes((tmp_path / "d" / "t.u16").read_bytes())

    def train(cwd, path, out):
        p = subprocess.run([BIN, str(SRC / "configs" / "tiny.json"), "--set", "device=cpu", "--set",
                            "data.source=tokens", "--set", f"data.path={path}", "--set", "bench.measure_steps=3",
                            "--set", f"output.results={tmp_path / out}"], capture_output=True, text=True,
                           timeout=300, cwd=cwd)
        assert p.returncode == 0, p.stderr[-2000:]
        return tmp_path / out
    ref = train(tmp_path / "d", "t.u16", "ref.json")
    assert json.loads(ref.read_text())["inputs"]["data.path"] == str((tmp_path / "d" / "t.u16").resolve())
    same = [train(tmp_path / "d" / "sub", "../t.u16", "dotdot.json"), train(tmp_path, "link/t.u16", "link.json")]
    other = train(tmp_path, "copy.u16", "copy.json")
    r = run(ref, *same, other)
    assert r.returncode == 0, (r.stdout, r.stderr)
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[2:]}
    for p in same:
        assert rows[p.name].split()[3] == "0.00e+00" and "not comparable" not in rows[p.name], rows[p.name]
    assert rows["copy.json"].endswith("(not comparable: different data)"), rows["copy.json"]


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_a_leg_whose_resume_warned_says_so(tmp_path):
    """A cosine schedule whose cycle is each leg's length (cosine_steps 0): the second leg's resume warns that the
    config differs from the checkpoint's (the record keeps the warning), and its row says so, though the leg's own
    config equals the reference's (a fresh user saw a 1.2e-3 difference with no note)."""
    def train(*sets):
        p = subprocess.run([BIN, str(SRC / "configs" / "tiny.json"), "--set", "device=cpu",
                            "--set", "optimizer.schedule=cosine", "--set", "optimizer.warmup_steps=2",
                            *[a for s in sets for a in ("--set", s)]], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path)
        assert p.returncode == 0, p.stderr[-2000:]
    train("bench.measure_steps=25", "output.results=ref.json")
    train("bench.measure_steps=10", "output.checkpoint=ck", "output.results=leg1.json")
    train("bench.measure_steps=25", "output.checkpoint=ck", "init.resume=ck", "output.results=leg2.json")
    leg2 = json.loads((tmp_path / "leg2.json").read_text())
    (w,) = [x for x in leg2["warnings"] if "differs from the checkpoint's" in x]
    assert "the cosine schedule's length" in w, w
    assert json.loads((tmp_path / "leg1.json").read_text())["warnings"] == []
    r = run(tmp_path / "ref.json", tmp_path / "leg2.json")
    assert r.returncode == 0, (r.stdout, r.stderr)
    row = r.stdout.splitlines()[2]
    assert "(its resume warned: the config differs from the checkpoint's in the cosine schedule's length" in row, row
    assert "not comparable" not in row, row


COSINE = {"schedule": "cosine", "lr": 0.001, "warmup_steps": 2, "cosine_steps": 0, "min_lr": 0.0001,
          "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01, "max_grad_norm": None}


@pytest.mark.parametrize("key, value, named", [
    ("optimizer.cosine_steps", 50, "cosine length"),
    ("bench.measure_steps", 20, "cosine length"),  # cosine_steps 0: the run's length is the cycle's
    ("optimizer.min_lr", 0.0, "min_lr"),
    ("optimizer.betas", [0.9, 0.95], "betas"),
    ("optimizer.eps", 1e-6, "eps"),
    ("optimizer.weight_decay", 0.1, "weight_decay"),
    ("optimizer.max_grad_norm", 1.0, "max_grad_norm"),
    ("optimizer.warmup_steps", 5, "warm-up"),
    ("data.seed", 3, "data"),
    ("init.weights", "w.safetensors", "init weights"),
    ("attention", "flash2", None),  # rounding only
])
def test_a_config_that_changes_the_numbers_is_not_comparable(tmp_path, key, value, named):
    """Every key of the resolved config that changes the numbers is compared; the row names those that differ. The
    cosine cycle's length is cosine_steps, or with cosine_steps 0 the run's (bench.warmup_steps + measure_steps)."""
    def rec(path, change):
        r = json.loads(record(path, "none", [5.0, 4.0]).read_text())
        r["config"].update(optimizer=dict(COSINE), bench={"warmup_steps": 1, "measure_steps": 1},
                           data={"seed": 0}, init={"seed": 0, "weights": None}, attention="naive")
        if change:
            *up, last = key.split(".")
            d = r["config"]
            for k in up:
                d = d[k]
            d[last] = value
        path.write_text(json.dumps(r))
        return path
    r = run(rec(tmp_path / "ref.json", False), rec(tmp_path / "a.json", True))
    assert r.returncode == 0 and r.stderr == "", (r.stdout, r.stderr)
    row = r.stdout.splitlines()[2]
    assert row.split()[:5] == ["a.json", "none", "4.00000", "0.00e+00", "1"], row
    assert row.endswith(f"  (not comparable: different {named})" if named else
                        f"  (rounding differs: different {key})"), row


def test_input_files_are_compared_by_the_real_paths_the_records_hold(tmp_path):
    """data.path and init.weights by the records' inputs section (the trainer's real paths): the same file typed from
    two directories, or through a symlink, is the same data (a fresh user's runs from the repository and from ck/ were
    "not comparable"); another file is not. A record without an inputs section compares the paths as typed, and
    data.path counts only where the data come from it (source tokens: the default config keeps a path it ignores
    under source random, which differed by directory in a review)."""
    def rec(name, typed, real, weights=("w.safetensors", "/w/w.safetensors"), source="tokens"):
        r = json.loads(record(tmp_path / name, "none", [5.0, 4.0]).read_text())
        r["config"]["data"] = {"source": source, "path": typed}
        r["config"]["init"] = {"weights": weights[0]}
        if real is not None:
            r["inputs"] = {"data.path": real if source == "tokens" else None, "init.weights": weights[1]}
        (tmp_path / name).write_text(json.dumps(r))
        return tmp_path / name
    ref = rec("ref.json", "gpl.u16", "/w/gpl.u16")
    same = [rec("abs.json", "/w/gpl.u16", "/w/gpl.u16", ("/w/w.safetensors", "/w/w.safetensors")),
            rec("dotdot.json", "../gpl.u16", "/w/gpl.u16", ("../w.safetensors", "/w/w.safetensors")),
            rec("link.json", "/l/gpl.u16", "/w/gpl.u16"),  # /l -> /w
            rec("no_inputs.json", "gpl.u16", None, ("w.safetensors", None))]  # both as typed
    other = [rec("other.json", "gpl.u16", "/v/gpl.u16"), rec("no_inputs_abs.json", "/w/gpl.u16", None)]
    r = run(ref, *same, *other)
    assert r.returncode == 0, (r.stdout, r.stderr)
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[2:]}
    for p in same:
        assert "not comparable" not in rows[p.name], rows[p.name]
    for p in other:
        assert rows[p.name].endswith("(not comparable: different data)"), rows[p.name]
    # source random: the path it ignores does not count
    r = run(rec("r_ref.json", "a/x.u16", "/a/x.u16", source="random"),
            rec("r_b.json", "b/x.u16", "/b/x.u16", source="random"))
    assert r.returncode == 0 and "not comparable" not in r.stdout, r.stdout


def test_a_resumed_leg_ignores_the_init_keys(tmp_path):
    """A leg resumed from a checkpoint took its weights from there: its init.seed and init.weights do not make it
    "not comparable" (a fresh user's resumed leg with another init.seed, bitwise equal, was marked so); a leg that
    did not resume still is."""
    ref = json.loads(record(tmp_path / "ref.json", "none", [5.0, 4.0, 3.0]).read_text())
    ref["config"]["init"] = {"seed": 0, "weights": None}
    (tmp_path / "ref.json").write_text(json.dumps(ref))
    for tag, resumed_from, note in [("leg", {"path": "ck/step-00000001", "step": 1}, False), ("fresh", None, True)]:
        a = json.loads(record(tmp_path / f"{tag}.json", "none", [4.0, 3.0], steps={"first": 1}).read_text())
        a["config"]["init"] = {"seed": 3, "weights": None}
        a["checkpoint"] = {"resumed_from": resumed_from}
        (tmp_path / f"{tag}.json").write_text(json.dumps(a))
        r = run(tmp_path / "ref.json", tmp_path / f"{tag}.json")
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert ("not comparable: different init seed" in r.stdout) == note, r.stdout
        r = run(tmp_path / f"{tag}.json", tmp_path / "ref.json")  # as the reference: the same
        assert ("not comparable: different init seed" in r.stdout) == note, r.stdout
    # under bf16_pure's stochastic rounding the seed seeds every step's rounding: it counts after a resume too
    for name in ("ref.json", "leg.json"):
        r = json.loads((tmp_path / name).read_text())
        r["config"]["precision"] = "bf16_pure"
        r["config"]["optimizer"]["stochastic_rounding"] = True
        (tmp_path / name).write_text(json.dumps(r))
    r = run(tmp_path / "ref.json", tmp_path / "leg.json")
    assert r.returncode == 0 and "not comparable: different init seed" in r.stdout, r.stdout


def test_a_constant_schedule_ignores_warm_up_and_the_cosine_keys(tmp_path):
    """schedule constant leaves warmup_steps, cosine_steps and min_lr unused: no note."""
    ref = record(tmp_path / "ref.json", "none", [5.0, 4.0])
    a = json.loads(record(tmp_path / "a.json", "none", [5.0, 4.0]).read_text())
    a["config"]["optimizer"].update(warmup_steps=9, cosine_steps=40, min_lr=0.5)
    (tmp_path / "a.json").write_text(json.dumps(a))
    r = run(ref, tmp_path / "a.json")
    assert r.returncode == 0 and r.stdout.splitlines()[2].split() == ["a.json", "none", "4.00000", "0.00e+00", "1"]


def test_too_few_arguments_is_one_usage_line(tmp_path):
    for args in ([], [record(tmp_path / "ref.json", "none", [5.0])]):
        r = run(*args)
        assert (r.returncode, r.stdout) == (2, ""), (r.stdout, r.stderr)
        assert r.stderr.splitlines() == ["usage: launch/loss_match.py REF.json A.json [B.json ...]  (--help: what "
                                         "it prints)"]


def test_records_of_the_same_file_name_are_named_by_their_folders(tmp_path):
    """Records sharing a file name get as many parent folders as make the names unique (they had the paths as given);
    the same file twice keeps its name."""
    ref = record(tmp_path / "ref.json", "none", [5.0, 4.0])
    a, b = record(tmp_path / "r1" / "run.json", "ddp_flat", [5.0, 4.0]), record(tmp_path / "r2" / "run.json", "fsdp",
                                                                                [5.0, 4.4])
    r = run(ref, a, b)
    assert r.returncode == 0, r.stderr
    assert [line.split()[:2] for line in r.stdout.splitlines()[2:]] == [["r1/run.json", "ddp_flat"],
                                                                         ["r2/run.json", "fsdp"]]
    # r1/x/run.json and r2/x/run.json differ two folders up: the fewest that tell them apart, not the whole path; a
    # file name that no other record has stays alone
    c, d = record(tmp_path / "r1" / "x" / "run.json", "zero1", [5.0, 4.0]), record(tmp_path / "r2" / "x" / "run.json",
                                                                                   "fsdp", [5.0, 4.0])
    r = run(ref, c, d, ref)
    assert r.returncode == 0, r.stderr
    assert [line.split()[0] for line in r.stdout.splitlines()[2:]] == ["r1/x/run.json", "r2/x/run.json", "ref.json"]
    r = run(ref, a, a)  # the same file twice: one name
    assert r.returncode == 0, r.stderr
    assert [line.split()[0] for line in r.stdout.splitlines()[2:]] == ["run.json", "run.json"]


def drop(path, dotted, null):
    """Rewrites the record at `path` with the key `dotted` (a.b.c) null or deleted."""
    path.write_text(json.dumps(record_edit.drop(json.loads(path.read_text()), dotted, null)))
    return path


@pytest.mark.parametrize("null", [True, False], ids=["null", "missing"])
@pytest.mark.parametrize("key", ["config.parallel", "config.parallel.strategy"])
def test_a_record_without_its_strategy_shows_a_dash(tmp_path, key, null):
    ref = record(tmp_path / "ref.json", "none", [5.0, 4.0])
    a = drop(record(tmp_path / "a.json", "ddp_flat", [5.0, 4.4]), key, null)
    r = run(ref, a)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.splitlines()[2].split() == ["a.json", "-", "4.40000", "1.00e-01", "2"]
    r = run(drop(record(tmp_path / "ref2.json", "none", [5.0, 4.0]), key, null), a)  # the reference's too
    assert r.returncode == 0 and r.stdout.splitlines()[0].endswith("warm-up 0, strategy -)"), (r.stdout, r.stderr)


BAD = [
    ("config_missing", lambda p: drop(p, "config", False),
     "'{bad}': 'config' is missing (a hand-edited or partial record?): cannot tell whether its run is comparable"),
    ("config_null", lambda p: drop(p, "config", True),
     "'{bad}': 'config' is null (a hand-edited or partial record?): cannot tell whether its run is comparable"),
    ("a_null_loss", lambda p: p.write_text(p.read_text().replace("4.4]", "null]")),
     "'{bad}': loss.per_step is not a list of numbers"),
    ("not_json", lambda p: p.write_text("{"), None),
    ("a_list", lambda p: p.write_text("[1, 2]"), "'{bad}' is not a JSON object (a trainer result record is)"),
    ("first_not_a_step", lambda p: p.write_text(p.read_text()[:-1] + ', "steps": {"first": -3}}'),
     "'{bad}': steps.first is -3, not a step number"),
    ("an_empty_object", lambda p: p.write_text("{}"),
     "'{bad}' is not a trainer result record (no schema; a record's is trainer.result/1)"),
    ("a_memory_timeline", lambda p: p.write_text('{"schema": "trainer.memory_timeline/1", "events": []}'),
     "'{bad}' is not a trainer result record (its schema is trainer.memory_timeline/1; a record's is "
     "trainer.result/1)"),
]


@pytest.mark.parametrize("as_reference", [False, True], ids=["record", "reference"])
@pytest.mark.parametrize("case, spoil, message", BAD, ids=[c for c, _, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, spoil, message, as_reference):
    """Found before anything is printed, also when the bad file comes after good ones."""
    ref = record(tmp_path / "ref.json", "none", [5.0, 4.0])
    ok = record(tmp_path / "ok.json", "ddp_flat", [5.0, 4.2])
    bad = record(tmp_path / "bad.json", "zero1", [5.0, 4.4])
    spoil(bad)
    r = run(bad, ok) if as_reference else run(ref, ok, bad)
    assert (r.returncode, r.stdout) == (2, ""), (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("loss_match: error: "), r.stderr
    if message:
        assert lines[0] == "loss_match: error: " + message.format(bad=bad)
    else:
        assert lines[0].startswith(f"loss_match: error: cannot read '{bad}': ")


def test_a_reference_without_losses_is_bad_input(tmp_path):
    ref = record(tmp_path / "ref.json", "none", None)
    r = run(ref, record(tmp_path / "a.json", "ddp_flat", [5.0]))
    assert (r.returncode, r.stdout) == (2, ""), (r.stdout, r.stderr)
    assert r.stderr.splitlines() == [f"loss_match: error: '{ref}' has no per-step losses (not a trainer train record?)"]
    missing = run(tmp_path / "missing.json", ref)
    assert missing.returncode == 2 and missing.stdout == "" and len(missing.stderr.splitlines()) == 1
    assert missing.stderr.startswith(f"loss_match: error: cannot read '{tmp_path / 'missing.json'}': ")
