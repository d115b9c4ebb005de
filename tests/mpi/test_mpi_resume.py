"""Exact resume under mpirun on the CPU (issue 18, item 1).

- zero1, ddp_bucketed and fsdp on 2 ranks: 4 steps straight == 2 steps + checkpoint + init.resume + 2 steps,
  bitwise (losses, gradient norms, final weights, every rank's AdamW m and v), with a cosine schedule and random
  sampling from a token file.
- Resharding: a world-1 checkpoint resumed on 2 ranks (zero1, fsdp) and a 2-rank zero1 checkpoint resumed on one
  process continue the one-process run within fp32 tolerance (1e-5 relative; summation order differs).
- A damaged block of rank 1's optimizer file stops a 2-rank resume with rank 1's line naming the file and bytes.
- 'latest' is read once, with the config: rewritten after the weights were loaded, the optimizer state still comes
  from their step; rewritten between two ranks' reads, the job stops naming both.
- A checkpoint write that holds rank 0 past parallel.comm_timeout_s, or a resume's read that holds rank 1, is waited
  for up to parallel.checkpoint_timeout_s (or comm_timeout_s, where longer); past that, the job ends with a message
  naming the key.
- A weight rank 0 fails to read in the middle of an fsdp checkpoint's gathers ends the job at once, naming it.

Environment (set by tests/mpi/CMakeLists.txt): TRAINER_BIN, TRAINER_SOURCE_DIR, MPIEXEC.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN = os.environ.get("TRAINER_BIN")
MPIEXEC = os.environ.get("MPIEXEC", "mpirun")
sys.path.insert(0, str(SRC / "tests" / "parity"))
import safetensors_io  # noqa: E402
sys.path.insert(0, str(SRC / "tests" / "cli"))
from checkpoint_edit import run_moving_latest  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
ENV = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
MPIRUN = [MPIEXEC, "--allow-run-as-root", "--oversubscribe"]


def run_trainer(tmp, tag, steps, np_, *sets, env=None):
    """The tiny model on np_ ranks (a cosine schedule, clipping, random sampling from a token file), record
    tmp/<tag>.json: the finished process."""
    return subprocess.run(trainer_cmd(tmp, tag, steps, np_, *sets), capture_output=True, text=True, timeout=180,
                          env=env or ENV, cwd=SRC)


def trainer_cmd(tmp, tag, steps, np_, *sets):
    """run_trainer's command line."""
    tokens = tmp / "tokens.bin"
    if not tokens.exists():
        np.random.default_rng(11).integers(0, 256, size=20000, dtype=np.uint16).tofile(tokens)
    a = [BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "bench.warmup_steps=0",
         "--set", f"bench.measure_steps={steps}", "--set", "optimizer.schedule=cosine",
         "--set", "optimizer.warmup_steps=1", "--set", "optimizer.cosine_steps=4", "--set", "optimizer.min_lr=1e-4",
         "--set", "optimizer.max_grad_norm=0.5", "--set", "data.source=tokens", "--set", f"data.path={tokens}",
         "--set", "data.sampling=random", "--set", f"output.results={tmp / (tag + '.json')}"]
    for s in sets:
        a += ["--set", s]
    return (MPIRUN + ["-np", str(np_)] + a) if np_ > 1 else a


def trainer(tmp, tag, steps, np_, *sets, env=None):
    """run_trainer, which must succeed: its record, with its stderr as "_stderr"."""
    p = run_trainer(tmp, tag, steps, np_, *sets, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads((tmp / (tag + ".json")).read_text())
    r["_stderr"] = p.stderr
    return r


def newest(ck):
    d = ck / (ck / "latest").read_text().strip()
    m = json.loads((d / "manifest.json").read_text())
    w, _ = safetensors_io.load(d / "model.safetensors")
    shards = {s["rank"]: safetensors_io.load(d / s["file"])[0] for s in m["optimizer"]["shards"]}
    return w, shards, m


def same(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and bool((a[k] == b[k]).all()), k


@pytest.mark.parametrize("strategy,sets", [
    ("zero1", []), ("ddp_bucketed", []), ("fsdp", []),
    # without clipping fsdp resolves optimizer.in_backward on (each unit updated as its reduce_scatter lands; with one
    # microbatch no gradient accumulator), with two microbatches the accumulator is kept
    ("fsdp", ["optimizer.max_grad_norm=null"]), ("fsdp", ["optimizer.max_grad_norm=null", "data.microbatch_size=1"]),
])
def test_two_ranks_resume_bitwise(tmp_path, strategy, sets):
    ps = [f"parallel.strategy={strategy}", *sets]
    ref = trainer(tmp_path, "s", 4, 2, *ps, f"output.checkpoint={tmp_path / 's'}")
    assert ref["config"]["optimizer"]["in_backward"] == ("optimizer.max_grad_norm=null" in sets)
    ck = tmp_path / "ck"
    a = trainer(tmp_path, "a", 2, 2, *ps, f"output.checkpoint={ck}")
    b = trainer(tmp_path, "b", 4, 2, *ps, f"output.checkpoint={ck}", f"init.resume={ck}")
    assert a["loss"]["per_step"] + b["loss"]["per_step"] == ref["loss"]["per_step"]
    assert a["grad_norm"]["per_step"] + b["grad_norm"]["per_step"] == ref["grad_norm"]["per_step"]
    w, shards, m = newest(ck)
    rw, rshards, rm = newest(tmp_path / "s")
    same(w, rw)
    assert set(shards) == set(rshards) == ({0} if strategy == "ddp_bucketed" else {0, 1})
    for r in shards:
        same(shards[r], rshards[r])
    assert m["world_size"] == 2 and m["strategy"] == strategy and m["optimizer"]["steps_taken"] == 4
    assert m["optimizer"]["shards"] == rm["optimizer"]["shards"]
    assert b["checkpoint"]["resumed_from"]["step"] == 2 and b["timing"]["resume_read_s"] > 0


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / np.abs(np.asarray(b))))


def wrel(w, ref):
    return max(float((w[k] - ref[k]).abs().max() / ref[k].abs().max()) for k in ref)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """One process: 4 steps straight, and a checkpoint after 2."""
    tmp = tmp_path_factory.mktemp("one")
    ref = trainer(tmp, "s", 4, 1, f"output.checkpoint={tmp / 's'}")
    trainer(tmp, "a", 2, 1, f"output.checkpoint={tmp / 'ck'}")
    return tmp, ref, newest(tmp / "s")


@pytest.mark.parametrize("strategy", ["zero1", "fsdp"])
def test_world_one_checkpoint_resumes_on_two_ranks(one_process, tmp_path, strategy):
    tmp, ref, (rw, _, _) = one_process
    b = trainer(tmp_path, "b", 4, 2, f"parallel.strategy={strategy}", f"init.resume={tmp / 'ck'}",
                f"output.checkpoint={tmp_path / 'ck'}")
    assert rel(b["loss"]["per_step"], ref["loss"]["per_step"][2:]) < 1e-5
    assert rel(b["grad_norm"]["per_step"], ref["grad_norm"]["per_step"][2:]) < 1e-5
    w, shards, m = newest(tmp_path / "ck")
    assert wrel(w, rw) < 1e-5
    assert m["world_size"] == 2 and set(shards) == {0, 1}
    assert b["checkpoint"]["resumed_from"]["world_size"] == 1
    # the warning calls the new world size and strategy a re-layout, not a change of numbers; the per-rank batch
    # (each run's default, batch / world size) is not named
    (w,) = [line for line in b["_stderr"].splitlines() if "laid out differently" in line]
    assert "world_size (1 -> 2)" in w and f'parallel.strategy ("none" -> "{strategy}")' in w, w
    assert "data.microbatch_size" not in b["_stderr"], b["_stderr"][-3000:]
    for line in b["_stderr"].splitlines():  # (data.path differs here: another test directory's copy of the tokens)
        assert "may not match" not in line or ("world_size" not in line and "strategy" not in line), line


def test_two_rank_checkpoint_resumes_on_one_process(one_process, tmp_path):
    tmp, ref, (rw, rshards, _) = one_process
    trainer(tmp_path, "a", 2, 2, "parallel.strategy=zero1", f"output.checkpoint={tmp_path / 'ck'}")
    b = trainer(tmp_path, "b", 4, 1, f"init.resume={tmp_path / 'ck'}", f"output.checkpoint={tmp_path / 'ck'}")
    assert rel(b["loss"]["per_step"], ref["loss"]["per_step"][2:]) < 1e-5
    w, shards, m = newest(tmp_path / "ck")
    assert wrel(w, rw) < 1e-5
    assert m["world_size"] == 1 and set(shards) == {0}
    # the AdamW state, gathered from the two shards and continued, matches the one-process state
    for k in ("m", "v"):
        a, r = shards[0][k], rshards[0][k]
        assert a.shape == r.shape
        assert float((a - r).abs().max() / r.abs().max()) < 1e-4


def test_a_damaged_block_of_another_ranks_file_is_refused_by_the_rank_that_reads_it(tmp_path):
    """A 2-rank zero1 checkpoint with one bit flipped in rank 1's optimizer file: the 2-rank resume stops before any
    step, rank 1 naming the file and the damaged block's bytes. (Each rank reads only the blocks around its share:
    rank 0 never reads rank 1's file here.) Only the job finds it, on rank 1, while rank 0 goes on to a collective:
    rank 0 hears of it, puts back what output.results held (it had stayed "running") and removes the new checkpoint
    directory it had made for its .lock."""
    trainer(tmp_path, "a", 2, 2, "parallel.strategy=zero1", f"output.checkpoint={tmp_path / 'ck'}")
    d = tmp_path / "ck" / (tmp_path / "ck" / "latest").read_text().strip()
    f = d / "optim-rank00001.safetensors"
    bad = bytearray(f.read_bytes())
    bad[len(bad) // 2] ^= 0x01
    f.write_bytes(bytes(bad))
    m = json.loads((d / "manifest.json").read_text())
    bb = m["files"][f.name]["block_bytes"]
    k = (len(bad) // 2) // bb
    (tmp_path / "b.json").write_text('{"earlier": "record"}\n')
    p = run_trainer(tmp_path, "b", 4, 2, "parallel.strategy=zero1", f"init.resume={tmp_path / 'ck'}",
                    f"output.checkpoint={tmp_path / 'new' / 'ck'}")
    assert p.returncode == 2, p.stderr[-3000:]
    assert (f"trainer: error: rank 1: init.resume: '{f}' does not match its checksum in bytes [{k * bb}, "
            f"{min(len(bad), (k + 1) * bb)}) (CRC-32 {zlib.crc32(bytes(bad[k * bb:(k + 1) * bb])):08x}, the manifest "
            f"records {m['files'][f.name]['block_crc32'][k]})") in p.stderr, p.stderr[-3000:]
    assert (tmp_path / "b.json").read_text() == '{"earlier": "record"}\n'
    assert not (tmp_path / "new").exists()


def two_steps_in_one_directory(tmp_path):
    """zero1 on 2 ranks: the straight 4-step run (its record), and ck holding step 2 (named by latest) beside a copy
    of the straight run's step 4: (ref record, ck, step 2's name, step 4's name)."""
    ps = "parallel.strategy=zero1"
    ref = trainer(tmp_path, "s", 4, 2, ps, f"output.checkpoint={tmp_path / 's'}")
    ck = tmp_path / "ck"
    trainer(tmp_path, "a", 2, 2, ps, f"output.checkpoint={ck}")
    step2 = (ck / "latest").read_text().strip()
    step4 = (tmp_path / "s" / "latest").read_text().strip()
    assert step2 != step4
    shutil.copytree(tmp_path / "s" / step4, ck / step4)
    return ref, ck, step2, step4


def resume_moving_latest(tmp_path, ck, step4, env, *needles, steps=4):
    """Resumes ck on 2 ranks (`steps` in all; record b.json) and, once a line with each of `needles` has come on
    stderr, points ck/latest at step4: (return code, stderr)."""
    return run_moving_latest(trainer_cmd(tmp_path, "b", steps, 2, "parallel.strategy=zero1", f"init.resume={ck}"),
                             dict(ENV, **env), SRC, ck, step4, *needles)


def test_a_latest_rewritten_during_a_resume_does_not_mix_two_steps(tmp_path):
    """init.resume names a directory: its 'latest' is read once, with the config, and the weights and the optimizer
    state come from that step. Here 'latest' is rewritten to name another step (as a run writing there would) while
    the last rank's read of the weights is held (the pause hook) and rank 0 waits for it: the run still continues
    step 2, bitwise as the straight run. (Read again after the weights, it resumed step 4's AdamW state onto step
    2's weights.)"""
    ref, ck, step2, step4 = two_steps_in_one_directory(tmp_path)
    rc, err = resume_moving_latest(tmp_path, ck, step4, {"TRAINER_TEST_IO_PAUSE_S": "5"},
                                   "pausing 5 s after reading the weights")
    assert rc == 0, err[-3000:]
    b = json.loads((tmp_path / "b.json").read_text())
    assert b["checkpoint"]["resumed_from"]["step"] == 2 and b["steps"]["first"] == 2
    assert b["checkpoint"]["resumed_from"]["path"] == str(ck / step2)
    assert b["loss"]["per_step"] == ref["loss"]["per_step"][2:]
    assert b["grad_norm"]["per_step"] == ref["grad_norm"]["per_step"][2:]


def test_ranks_that_resolve_latest_to_different_steps_stop(tmp_path):
    """Each rank reads 'latest' itself, with its config; rewritten between rank 0's read and the last rank's (a hook
    holds the last rank before it reads the config; rank 0 says when it has), the ranks would resume different steps:
    the job stops before any read of the weights, with one line naming both (rank 0's). The same for another
    checkpoint of the same step (step-N.1, as a run restarted from scratch writes it): the directories differ."""
    _, ck, step2, step4 = two_steps_in_one_directory(tmp_path)
    hook = {"TRAINER_TEST_RESOLVE_PAUSE_S": "3"}
    seen = ("pausing 3 s before reading the config", "rank 0 has read the config")  # (rank 1 pauses)
    rc, err = resume_moving_latest(tmp_path, ck, step4, hook, *seen, steps=6)
    assert rc != 0, err[-3000:]
    assert (f"trainer: error: init.resume: rank 0 resolved it to '{ck / step2}' (step 2) and rank 1 to another "
            "checkpoint (step 4): its 'latest' changed while the ranks started (is another run writing there?)"
            ) in err, err[-3000:]
    assert not (tmp_path / "b.json").exists()
    (ck / "latest").write_text(step2 + "\n")
    shutil.copytree(ck / step2, ck / (step2 + ".1"))
    rc, err = resume_moving_latest(tmp_path, ck, step2 + ".1", hook, *seen, steps=6)
    assert rc != 0 and "and rank 1 to another checkpoint (step 2)" in err, err[-3000:]


def test_ranks_wait_for_a_slow_checkpoint_write_up_to_checkpoint_timeout_s(tmp_path):
    """Rank 0's write of the weights takes 5 s longer (a test hook, as a slow disk would) while rank 1, its own file
    written, waits in a host collective: past parallel.comm_timeout_s (3 s) but within parallel.checkpoint_timeout_s,
    the run ends ok with its checkpoint. A checkpoint_timeout_s below comm_timeout_s does not shorten the wait."""
    slow = dict(ENV, TRAINER_TEST_IO_PAUSE_S="5")
    for tag, sets in [("slow", ["parallel.comm_timeout_s=3"]),
                      ("slow2", ["parallel.comm_timeout_s=8", "parallel.checkpoint_timeout_s=1"])]:
        r = trainer(tmp_path, tag, 2, 2, "parallel.strategy=zero1", *sets, f"output.checkpoint={tmp_path / tag}",
                    env=slow)
        assert r["status"] == "ok", r.get("error")
        assert [w["step"] for w in r["checkpoint"]["writes"]] == [2] and r["checkpoint"]["writes"][0]["write_s"] > 5
        _, _, m = newest(tmp_path / tag)
        assert m["step"] == 2


def test_a_checkpoint_write_past_checkpoint_timeout_s_ends_the_job_naming_the_key(tmp_path):
    """The same hook (7 s) past parallel.checkpoint_timeout_s (3 s): rank 1's wait ends the job with one message that
    names the key, and the record says error."""
    p = run_trainer(tmp_path, "b", 2, 2, "parallel.strategy=zero1", "parallel.comm_timeout_s=3",
                    "parallel.checkpoint_timeout_s=3", f"output.checkpoint={tmp_path / 'ck'}",
                    env=dict(ENV, TRAINER_TEST_IO_PAUSE_S="7"))
    assert p.returncode != 0, p.stderr[-3000:]
    assert "(parallel.checkpoint_timeout_s = 3 s)" in p.stderr, p.stderr[-3000:]
    r = json.loads((tmp_path / "b.json").read_text())
    assert r["status"] == "error" and "parallel.checkpoint_timeout_s = 3 s" in r["error"], r


@pytest.mark.parametrize("weight", ["token_embeddings.weight", "layers.0.attn.output_proj.weight"])
def test_a_weight_rank_0_fails_to_read_mid_checkpoint_ends_the_job_at_once_with_its_cause(tmp_path, weight):
    """fsdp on 2 ranks: rank 0 fails to hold one weight halfway through a checkpoint's gathers (a test hook, as
    std::bad_alloc would), the first of its unit (the embedding, alone in its unit: the gather is this weight's) or
    a later one. It goes on joining every gather, so rank 1 is not left waiting for comm_timeout_s (60 s here) nor
    paired with the wrong gather: the job ends within seconds, its message names the weight (rank 1's too), and no
    checkpoint is committed."""
    t0 = time.monotonic()
    p = run_trainer(tmp_path, "f", 2, 2, "parallel.strategy=fsdp", "parallel.comm_timeout_s=60",
                    "parallel.checkpoint_timeout_s=60", f"output.checkpoint={tmp_path / 'ck'}",
                    env=dict(ENV, TRAINER_TEST_WEIGHT_READ_FAIL=weight))
    wall = time.monotonic() - t0
    assert p.returncode == 1, p.stderr[-3000:]
    assert f"reading weight {weight}: test hook" in p.stderr, p.stderr[-3000:]
    # rank 1 names the rank that failed and its cause (first_failure), not "see its log"
    assert f"writing the files failed on rank 0: reading weight {weight}: test hook" in p.stderr, p.stderr[-3000:]
    assert "timeout" not in p.stderr and "MPI error" not in p.stderr, p.stderr[-3000:]
    r = json.loads((tmp_path / "f.json").read_text())
    assert r["status"] == "error" and weight in r["error"], r
    assert wall < 40, wall
    assert not (tmp_path / "ck" / "latest").exists()


def test_a_slow_read_of_one_rank_is_waited_for_up_to_checkpoint_timeout_s(tmp_path):
    """Rank 1's read of the weights at a resume takes 5 s longer (the same hook, as shared storage would): past
    parallel.comm_timeout_s (3 s) but within parallel.checkpoint_timeout_s, the resumed run ends ok; with
    checkpoint_timeout_s 3 the job ends with the key's message."""
    trainer(tmp_path, "a", 2, 2, "parallel.strategy=zero1", f"output.checkpoint={tmp_path / 'ck'}")
    r = trainer(tmp_path, "b", 4, 2, "parallel.strategy=zero1", "parallel.comm_timeout_s=3",
                f"init.resume={tmp_path / 'ck'}", env=dict(ENV, TRAINER_TEST_IO_PAUSE_S="5"))
    assert r["status"] == "ok" and r["steps"]["first"] == 2, r.get("error")
    p = run_trainer(tmp_path, "c", 4, 2, "parallel.strategy=zero1", "parallel.comm_timeout_s=3",
                    "parallel.checkpoint_timeout_s=3", f"init.resume={tmp_path / 'ck'}",
                    env=dict(ENV, TRAINER_TEST_IO_PAUSE_S="7"))
    assert p.returncode != 0 and "(parallel.checkpoint_timeout_s = 3 s)" in p.stderr, p.stderr[-3000:]
