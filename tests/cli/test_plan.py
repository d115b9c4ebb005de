"""`trainer --plan`: the planner from the command line (plan/planner.h).

It runs nothing (no GPU: a cuda config is planned in a CPU-only build), prints a table or, with --json, one JSON object
with the documented shape, writes no result record, and refuses bad input with one line and exit code 2. A train run's
record carries the prediction next to the measurement (memory.predicted).

Run: TRAINER_BIN=build/trainer TRAINER_SOURCE_DIR=. /usr/bin/python3 -m pytest tests/cli/test_plan.py
"""

import json
import os
import pathlib

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
TINY = str(SOURCE_DIR / "configs" / "tiny.json")
XL = str(SOURCE_DIR / "configs" / "xl.json")
CATEGORIES = {"parameters", "gradients", "optimizer", "activations", "head", "workspace", "communication"}


# The trainer_bin fixture and run() of the bad-config tests (pytest puts this folder on sys.path).
from test_bad_configs import run, trainer_bin  # noqa: E402,F401


def plan_json(trainer_bin, tmp_path, *args):
    r = run(trainer_bin, ["--plan", "--json", *args], tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_plan_json_shape(trainer_bin, tmp_path):
    # optimizer.in_backward false: the flat gradient buffer (its default, auto, drops it; checked below)
    p = plan_json(trainer_bin, tmp_path, TINY, "--set", "device=cpu", "--set", "optimizer.in_backward=false")
    mem = p["memory"]
    assert set(mem["by_category"]) == CATEGORIES
    assert mem["peak_bytes"] == sum(mem["by_category"].values())
    assert mem["peak_phase"] in {"setup", "forward", "backward", "finish_backward", "optimizer"}
    assert p["flops"] > 0 and p["time_s"] > 0
    t = p["time"]
    assert p["time_s"] == pytest.approx(t["compute_s"] + t["memory_s"] + t["comm_exposed_s"] + t["overlap_slowdown_s"])
    assert p["assumptions"]["memory_bandwidth_bytes_per_s"] > 0
    assert p["device"] == "cpu" and p["world_size"] == 1 and p["ranks_identical"] is True
    assert "device_note" not in p  # device given
    auto = plan_json(trainer_bin, tmp_path, TINY)
    assert auto["device"] == "cpu" and "device auto: planned for cpu" in auto["device_note"]
    # parameters, gradients (fp32) and AdamW m, v: 4 bytes per element each, all alive at the optimizer's peak; the
    # optimizer's also holds AdamW's step values on the device (16 bytes), the norm's fp64 slot and the clip factor (16)
    n = mem["by_category"]["parameters"] // 4
    assert mem["category_peaks"]["gradients"] == 4 * n and mem["category_peaks"]["optimizer"] == 8 * n + 16 + 16
    # in_backward (auto here: strategy none, no clipping) keeps one unit's gradient at a time, not all of them
    per_unit = plan_json(trainer_bin, tmp_path, TINY, "--set", "device=cpu")["memory"]
    assert 0 < per_unit["category_peaks"]["gradients"] < 4 * n
    assert per_unit["peak_bytes"] < mem["peak_bytes"]
    assert not list(tmp_path.iterdir()), "--plan wrote files"


def test_plan_of_a_config_whose_files_are_elsewhere(trainer_bin, tmp_path):
    """--plan reads and writes none of the config's files: a cluster's config (its data, weights and checkpoint
    there, its outputs in directories that do not exist here) plans on another machine (a fresh user's default config
    outside the repository was refused for its data.path); an input that exists here is still checked."""
    elsewhere = ["--set", "data.source=tokens", "--set", "data.path=/nowhere/data.u16",
                 "--set", "init.weights=/nowhere/w.safetensors", "--set", "output.results=/proc/nope/r.json",
                 "--set", "output.checkpoint=/proc/nope/ck", "--set", "profile.trace=/proc/nope/t.json"]
    p = plan_json(trainer_bin, tmp_path, TINY, *elsewhere)
    assert p["memory"]["peak_bytes"] > 0
    r = run(trainer_bin, ["--plan", TINY, "--set", "init.resume=/nowhere/ck"], tmp_path)
    assert r.returncode == 0, r.stderr
    r = run(trainer_bin, [TINY, *elsewhere], tmp_path)  # the run needs them
    assert r.returncode == 2 and "/nowhere/data.u16" in r.stderr, r.stderr
    (tmp_path / "odd.u16").write_bytes(b"\0" * 201)  # here, and not a token file
    r = run(trainer_bin, ["--plan", TINY, "--set", "data.source=tokens", "--set", f"data.path={tmp_path / 'odd.u16'}"],
            tmp_path)
    assert r.returncode == 2 and "data.path" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_plan_table_and_cuda_without_gpu(trainer_bin, tmp_path):
    # A bf16 config plans for cuda with device auto, in any build.
    r = run(trainer_bin, ["--plan", XL, "--set", "precision=bf16"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "device auto: planned for cuda" in r.stdout  # configs/xl.json leaves device auto
    assert "peak" in r.stdout and "predicted step" in r.stdout and "H200" in r.stdout
    p = plan_json(trainer_bin, tmp_path, XL, "--set", "precision=bf16", "--device", "cuda")
    assert p["device"] == "cuda" and p["comm"] == "nccl"
    assert p["memory"]["by_category"]["workspace"] >= 32 << 20  # the cuBLASLt workspace at least
    assert p["memory"]["fits"] is True
    # xl at context 16384 without checkpointing asks for more than an H200 has
    big = plan_json(trainer_bin, tmp_path, XL, "--set", "precision=bf16", "--device", "cuda",
                    "--set", "model.context_length=16384")
    assert big["memory"]["fits"] is False
    assert big["memory"]["by_category"]["activations"] > p["memory"]["by_category"]["activations"] * 16


def test_cpu_plan_says_whether_it_fits_the_host(trainer_bin, tmp_path):
    """On the cpu the host is the device: the plan compares its peak times the ranks with MemAvailable (a fresh user
    saw a 171 GiB plan on a 24 GB host shown with no warning)."""
    p = plan_json(trainer_bin, tmp_path, TINY, "--set", "device=cpu")
    assert p["fits_host"] is True and p["host_memory_available_bytes"] > 0 and p["memory"]["fits"] is None
    r = run(trainer_bin, ["--plan", TINY, "--set", "device=cpu", "--set", "model.num_layers=4000",
                          "--set", "model.d_model=4096", "--set", "model.d_ff=11008"], tmp_path)
    assert r.returncode == 0, r.stderr
    (host,) = [line for line in r.stdout.splitlines() if line.startswith("host memory available ")]
    assert host.endswith("x 1 rank(s) on this host DOES NOT FIT"), host
    # the state alone exceeds the host: no checkpointing search, and the line says why
    assert "the weights, gradients and optimizer state alone take" in r.stdout, r.stdout


def test_plan_fsdp_prefetch_beyond_the_units(trainer_bin, tmp_path):
    # prefetch_layers at the int32 maximum: no more gathers ahead than a microbatch has, as any value past its length
    # (prefetch_layers + 1 had overflowed: a divide-by-zero crash)
    base = [TINY, "--set", "device=cpu", "--set", "parallel.strategy=fsdp", "--world-size", "2"]
    most = plan_json(trainer_bin, tmp_path, *base, "--set", "parallel.prefetch_layers=2147483647")
    some = plan_json(trainer_bin, tmp_path, *base, "--set", "parallel.prefetch_layers=100")
    assert most["memory"]["peak_bytes"] == some["memory"]["peak_bytes"] > 0
    # and no more gathers ahead than a training microbatch has: tiny's 2 layers make 2 x 2 + 2 = 6 (embedding, 2
    # blocks, the head with its backward, 2 blocks' backward: nothing recomputed). fsdp's buffers (fp32 on the cpu,
    # src/parallel/fsdp_buffers.h) by hand, units padded to multiples of 2 x 64 elements: a block B = 4 x 64^2 +
    # 3 x 64 x 172 + 2 x 64 = 49536, the head V = 64 + 256 x 64 = 16448 -> 16512 (the embedding, 16384, shares its
    # class). One class of B-sized buffers: D gather (D = prefetch + 1 ahead) and 2 staging buffers; two classes: as
    # many B and V gather buffers as D gathers in a row hold of each (e b b h b b), 2 B and 1 V staging buffers.
    B, V = 49536, 16512

    def buffers(k):
        p = plan_json(trainer_bin, tmp_path, *base, "--set", f"parallel.prefetch_layers={k}")["memory"]
        return p["category_peaks"]["communication"]

    assert buffers(0) == 1 * B * 4                # one class: B + 2 B against two classes' B + V + 2 B + V
    assert buffers(4) == 5 * B * 4                # D 5: 7 B in one class, (4 B + 2 V) + (2 B + V) = 7 B in two: a tie
    assert buffers(5) == (4 * B + 2 * V) * 4      # D 6: 8 B in one class against 7 B in two
    assert most["memory"]["category_peaks"]["communication"] == buffers(5)
    # a segment of 2 blocks recomputed (every_k 2): its recompute and each block's backward are apart, 7 gathers
    # (e b1 b2 h b1 b2 b1), D 7: 5 B and 2 V gather buffers
    k2 = plan_json(trainer_bin, tmp_path, *base, "--set", "parallel.prefetch_layers=100", "--set",
                   "checkpointing.policy=every_k", "--set", "checkpointing.k=2")
    assert k2["memory"]["category_peaks"]["communication"] == (5 * B + 2 * V) * 4


def test_plan_world_size_zero1(trainer_bin, tmp_path):
    base = [TINY, "--set", "device=cuda", "--set", "precision=bf16",
            "--set", "parallel.strategy=zero1", "--world-size", "4"]
    nccl = plan_json(trainer_bin, tmp_path, *base, "--set", "parallel.comm=nccl")
    mpi = plan_json(trainer_bin, tmp_path, *base, "--set", "parallel.comm=mpi")
    one = plan_json(trainer_bin, tmp_path, TINY, "--set", "device=cuda",
                    "--set", "precision=bf16")
    assert nccl["world_size"] == 4 and nccl["comm_bytes"] > 0 and nccl["time"]["comm_s"] > 0
    # the work is one rank's: a quarter of the global batch's tokens and of one process's FLOPs
    assert nccl["rank_tokens_per_step"] * 4 == nccl["tokens_per_step"] == one["tokens_per_step"]
    assert one["rank_tokens_per_step"] == one["tokens_per_step"]
    assert nccl["flops"] * 4 == pytest.approx(one["flops"], rel=1e-9)
    r = run(trainer_bin, ["--plan", *base, "--set", "parallel.comm=nccl"], tmp_path)
    n = one["tokens_per_step"]
    assert f"work per step of this rank ({n // 4} of the {n} tokens): " in r.stdout, r.stdout
    # a quarter of the AdamW state per rank (up to the padding to kAlign * 4 elements)
    assert nccl["memory"]["category_peaks"]["optimizer"] * 4 == pytest.approx(
        one["memory"]["category_peaks"]["optimizer"], rel=0.01)
    # MPI's reduce-scatter is not in place: zero1 keeps a gradient shard (a quarter of the fp32 gradient)
    extra = mpi["memory"]["category_peaks"]["gradients"] - nccl["memory"]["category_peaks"]["gradients"]
    assert extra == nccl["memory"]["category_peaks"]["gradients"] // 4


def test_plan_of_many_ranks_plans_three(trainer_bin, tmp_path):
    """Ranks 0, 1 and the last stand for all when they agree (main.cpp run_plan): zero1 over 8192 ranks used to plan
    every rank (8192 dry runs, each gathering 8192 layout hashes). The padding to kAlign x 8192 elements is real."""
    one = plan_json(trainer_bin, tmp_path, TINY, "--set", "device=cpu", "--set", "optimizer.in_backward=false")
    n = one["memory"]["category_peaks"]["parameters"] // 4  # fp32 elements, a multiple of kAlign (64)
    padded = -(-n // (64 * 8192)) * (64 * 8192)
    p = plan_json(trainer_bin, tmp_path, TINY, "--set", "device=cpu", "--set", "parallel.strategy=zero1",
                  "--set", "data.batch_size=8192", "--world-size", "8192")
    assert p["ranks_identical"] is True and "per_rank" not in p and p["world_size"] == 8192
    assert p["ranks_planned"] == 3  # was 8192
    assert one["ranks_planned"] == 1
    assert p["memory"]["category_peaks"]["parameters"] == 4 * padded
    # m, v of the rank's chunk and AdamW's step values (zero1 sums the norm on the host: no device slot for it)
    assert p["memory"]["category_peaks"]["optimizer"] == 8 * (padded // 8192) + 16


def test_plan_overlap_of_the_ddp_strategies(trainer_bin, tmp_path):
    """Collectives on a stream of their own (dist/meta_communicator.h): the synchronous strategies expose all of their
    communication, the overlapped ones hide it under the backward and pay overlap_slowdown of what they hid; with mpi
    nothing overlaps. One all_reduce per tensor (ddp_naive) costs the same bytes as one flat all_reduce plus a
    latency per collective."""
    # xl: its backward is long enough to hide its all_reduces (tiny's ops take microseconds, and at small's batch of
    # 2 a rank the latencies of the 14 overlapped collectives cost more than they hide, as measured in v1)
    base = [XL, "--set", "device=cuda", "--set", "precision=bf16", "--world-size", "2"]

    def plan(strategy, comm="nccl"):
        p = plan_json(trainer_bin, tmp_path, *base, "--set", f"parallel.strategy={strategy}",
                      "--set", f"parallel.comm={comm}")
        t = p["time"]
        assert p["time_s"] == pytest.approx(t["compute_s"] + t["memory_s"] + t["comm_exposed_s"]
                                            + t["overlap_slowdown_s"])
        assert 0 <= t["comm_exposed_s"] <= t["comm_s"] * (1 + 1e-9) and t["comm_s"] > 0
        slowdown = p["assumptions"]["comm_overlap_slowdown"]
        assert t["overlap_slowdown_s"] == pytest.approx(slowdown * (t["comm_s"] - t["comm_exposed_s"]), abs=1e-12)
        return p

    flat, naive, overlap, bucketed = (plan(s) for s in ("ddp_flat", "ddp_naive", "ddp_overlap", "ddp_bucketed"))
    for sync in (flat, naive):
        assert sync["time"]["comm_exposed_s"] == pytest.approx(sync["time"]["comm_s"])
        assert sync["time"]["overlap_slowdown_s"] == pytest.approx(0, abs=1e-12)
    for over in (overlap, bucketed):  # same bytes as flat, most of them hidden
        assert over["comm_bytes"] == pytest.approx(flat["comm_bytes"], rel=1e-3)  # flat: with its alignment padding
        assert over["time"]["comm_exposed_s"] < 0.5 * over["time"]["comm_s"]
        assert over["time_s"] < flat["time_s"]
    assert flat["collectives"] == 1 and naive["collectives"] > 10
    latency = flat["assumptions"]["comm_latency_s"]
    assert naive["comm_bytes"] == pytest.approx(flat["comm_bytes"], rel=1e-3)
    assert naive["time"]["comm_s"] - flat["time"]["comm_s"] == pytest.approx(
        (naive["collectives"] - 1) * latency, rel=1e-6)
    mpi = plan("ddp_overlap", "mpi")
    assert mpi["time"]["comm_exposed_s"] == pytest.approx(mpi["time"]["comm_s"])
    fsdp = plan("fsdp")  # prefetched all_gathers and asynchronous reduce_scatters
    assert fsdp["time"]["comm_exposed_s"] < fsdp["time"]["comm_s"]
    r = run(trainer_bin, ["--plan", *base, "--set", "parallel.strategy=ddp_overlap"], tmp_path)
    assert r.returncode == 0 and "of it under the ops" in r.stdout and "running under the ops slow them" in r.stdout
    # synchronous collectives: exactly nothing hidden (no rounding shown as overlap)
    assert flat["time"]["overlap_slowdown_s"] == 0 and flat["time"]["comm_exposed_s"] == flat["time"]["comm_s"]
    r = run(trainer_bin, ["--plan", *base, "--set", "parallel.strategy=ddp_flat"], tmp_path)
    assert r.returncode == 0 and "slow them" not in r.stdout and "asynchronous" not in r.stdout, r.stdout
    # bf16 on the wire: half the bytes, but its casts cost the compute stream their time (v4: slower than f32)
    bf16 = plan_json(trainer_bin, tmp_path, *base, "--set", "parallel.strategy=ddp_bucketed",
                     "--set", "parallel.reduce_dtype=bf16")
    assert bf16["comm_bytes"] == pytest.approx(bucketed["comm_bytes"] / 2, rel=1e-3)
    assert bf16["time"]["memory_s"] > bucketed["time"]["memory_s"]
    # one rank: no collectives, nothing exposed or slowed, and the text says nothing of them
    one = plan_json(trainer_bin, tmp_path, XL, "--set", "device=cuda", "--set", "precision=bf16")
    assert one["collectives"] == 0 and one["time"]["comm_exposed_s"] == 0 == one["time"]["overlap_slowdown_s"]
    r = run(trainer_bin, ["--plan", XL, "--set", "device=cuda", "--set", "precision=bf16"], tmp_path)
    assert r.returncode == 0 and "communication exposed" not in r.stdout and "collectives:" not in r.stdout, r.stdout


def test_plan_fit_search(trainer_bin, tmp_path):
    """xl at context 32768 without checkpointing does not fit an H200: the plan carries what fits (fastest first),
    and each option's --set arguments, planned again, give its peak within the budget."""
    base = [XL, "--set", "device=cuda", "--set", "precision=bf16", "--set", "model.context_length=32768",
            "--set", "checkpointing.policy=none"]
    p = plan_json(trainer_bin, tmp_path, *base)
    assert p["memory"]["fits"] is False
    fit = p["fit"]
    assert fit["budget_bytes"] == int(0.93 * p["memory"]["device_memory_bytes"])
    times = [o["time_s"] for o in fit["options"]]
    assert times and times == sorted(times)
    assert any("blocks recomputed" in o["what"] for o in fit["options"])
    for o in fit["options"]:
        again = plan_json(trainer_bin, tmp_path, *base, *[a for kv in o["sets"] for a in ("--set", kv)])
        assert again["memory"]["peak_bytes"] == o["peak_bytes"] <= fit["budget_bytes"], o
    # none is beaten in both time and peak by another (that one would be listed instead)
    for o in fit["options"]:
        assert not [b for b in fit["options"] if b is not o and b["time_s"] <= o["time_s"] and
                    b["peak_bytes"] <= o["peak_bytes"]], o
    # a plan that fits has no search unless --fit asks; the text form lists the options as --set arguments
    assert "fit" not in plan_json(trainer_bin, tmp_path, TINY)
    assert "fit" in plan_json(trainer_bin, tmp_path, TINY, "--set", "device=cuda", "--fit")
    r = run(trainer_bin, ["--plan", *base], tmp_path)
    assert r.returncode == 0 and "what fits in" in r.stdout and "--set 'checkpointing.policy=full'" in r.stdout


def test_plan_fit_takes_a_larger_lm_head_chunk_where_it_fits(trainer_bin, tmp_path):
    """Each LM-head chunk after the first re-reads and re-writes the head's fp32 dW (the 8B proxy: +10.5 ms for 10
    chunks, v11), so --fit proposes the largest chunk that fits: small's 2048 tokens a microbatch in chunks of 128
    become one, faster by at least the 15 accumulations' traffic; the sets reproduce the option's plan."""
    base = [str(SOURCE_DIR / "configs" / "small.json"), "--set", "device=cuda", "--set", "precision=bf16",
            "--set", "checkpointing.lm_head_chunk_tokens=128"]
    p = plan_json(trainer_bin, tmp_path, *base, "--fit")
    as_is = next(o for o in p["fit"]["options"] if o["what"].startswith("as configured"))
    assert as_is["what"] == "as configured, LM head whole", as_is
    assert as_is["sets"] == ["checkpointing.lm_head_chunk_tokens=2048"], as_is
    dw = 10000 * 768 * 4  # the head's fp32 weight gradient, bytes
    rate = p["assumptions"]["memory_bandwidth_bytes_per_s"]
    assert p["time_s"] - as_is["time_s"] >= 15 * 2 * dw / rate  # at least the 15 accumulations' read and write
    again = plan_json(trainer_bin, tmp_path, *base, *[a for kv in as_is["sets"] for a in ("--set", kv)])
    assert again["memory"]["peak_bytes"] == as_is["peak_bytes"] and again["time_s"] == as_is["time_s"]


@pytest.mark.parametrize("strategy, hint", [
    ("none", "several ranks with fsdp, precision bf16_pure, or a smaller model (zero1 saves at most 4 bytes"),
    ("none_clipped", "several ranks with fsdp (or zero1, which shards the AdamW moments alone), precision bf16_pure"),
    ("zero1", "fsdp over several ranks (zero1 keeps the weights and gradients whole), or a smaller model"),
    ("ddp_bucketed", "fsdp over several ranks (ddp_bucketed keeps every weight, gradient and AdamW moment whole)"),
    ("fsdp", "more ranks, or a smaller model"),
    ("none_pure", "a smaller model, or precision bf16 over several ranks with fsdp (bf16_pure runs on strategy none")])
def test_plan_fit_state_too_large_names_what_shards_it(trainer_bin, tmp_path, strategy, hint):
    """10B in fp32 on H100s: the state alone is over the budget; the hint names only what lowers it under the
    strategy (a fresh user was told "more ranks" under zero1 and ddp, which keep the weights whole). Strategy none
    runs optimizer.in_backward (one unit's gradient at a time), unless clipping rules it out: then zero1 shards more.
    Precision bf16_pure runs on strategy none only: more ranks help only in precision bf16."""
    # fsdp: 64 shards fit, 2 do not
    world = {"none": "1", "none_clipped": "1", "none_pure": "1", "fsdp": "2"}.get(strategy, "64")
    extra = ["--set", "optimizer.max_grad_norm=1.0"] if strategy == "none_clipped" else []
    precision = "bf16_pure" if strategy == "none_pure" else "fp32"
    if strategy == "none_pure":  # 8 bytes a parameter (72 GiB of state) fit an H100's budget, not a 40 GiB card's
        extra = ["--device-memory", "40"]
    strategy = strategy.removesuffix("_clipped").removesuffix("_pure")
    r = run(trainer_bin, ["--plan", str(SOURCE_DIR / "configs" / "10B.json"), "--world-size", world, "--gpu", "h100",
                          "--set", f"precision={precision}", "--set", f"data.batch_size={world}",
                          "--set", f"parallel.strategy={strategy}", "--fit", *extra], tmp_path)
    assert r.returncode == 0, r.stderr
    line = [x for x in r.stdout.splitlines() if "nothing: the weights" in x]
    assert len(line) == 1 and hint in line[0], r.stdout
    # --json says the same: no option, and why
    j = run(trainer_bin, ["--plan", str(SOURCE_DIR / "configs" / "10B.json"), "--world-size", world, "--gpu", "h100",
                          "--set", f"precision={precision}", "--set", f"data.batch_size={world}",
                          "--set", f"parallel.strategy={strategy}", "--fit", "--json", *extra], tmp_path)
    fit = json.loads(j.stdout)["fit"]
    assert fit["options"] == [] and "  nothing: " + fit["nothing"] == line[0], fit


def test_plan_of_a_parallel_config_on_one_rank_says_so(trainer_bin, tmp_path):
    """The 8B fsdp config without --world-size plans one rank (it does not fit an H200): a note says how to plan the
    ranks it is meant for; the 2-rank plan has no note."""
    cfg = str(SOURCE_DIR / "configs" / "leaderboard_8b.json")
    one = plan_json(trainer_bin, tmp_path, cfg)
    assert one["world_note"] == ("planned for 1 rank (parallel.strategy fsdp shares the work over several: "
                                 "--world-size N, or mpirun -np N, plans N)"), one.get("world_note")
    assert "world_note" not in plan_json(trainer_bin, tmp_path, cfg, "--world-size", "2")
    assert "world_note" not in plan_json(trainer_bin, tmp_path, TINY)


def test_plan_comm_note_in_a_build_without_nccl(trainer_bin, tmp_path):
    """A cuda plan over ranks is for a cluster's build (nccl); a build without NCCL says its own run would use mpi."""
    version = run(trainer_bin, ["--version"], tmp_path).stdout
    p = plan_json(trainer_bin, tmp_path, str(SOURCE_DIR / "configs" / "xl_fsdp.json"), "--world-size", "2",
                  "--device", "cuda")
    if "NCCL: absent" in version:
        assert "would run these ranks over mpi (--set parallel.comm=mpi plans that)" in p["comm_note"]
    else:
        assert "comm_note" not in p
    one = plan_json(trainer_bin, tmp_path, TINY, "--device", "cuda")  # one rank: no communication, no note
    assert "comm_note" not in one


def test_plan_fit_tries_smaller_microbatches_for_every_family(trainer_bin, tmp_path):
    """xl at context 16384, batch 128 in one microbatch: the set-up alone (a workspace that grows with the microbatch)
    is above the budget, but a smaller microbatch fits; each family keeps its fastest microbatch, and a fitting run
    is listed as it is."""
    base = [XL, "--set", "device=cuda", "--set", "precision=bf16", "--set", "model.context_length=16384",
            "--set", "data.batch_size=128"]
    fit = plan_json(trainer_bin, tmp_path, *base)["fit"]
    assert fit["options"] and fit["state_bytes"] < fit["budget_bytes"], fit
    assert all(any(kv.startswith("data.microbatch_size=") for kv in o["sets"]) for o in fit["options"]), fit
    small = plan_json(trainer_bin, tmp_path, TINY, "--set", "device=cuda", "--fit")["fit"]
    assert any(o["what"] == "as configured" and o["sets"] == [] for o in small["options"]), small
    assert small["options"][0]["what"] == "nothing recomputed (policy none)", small  # the fastest, where it fits


def test_plan_fit_tries_the_whole_batch_where_accumulators_do_not_fit(trainer_bin, tmp_path):
    """xl bf16 in microbatches of 1 keeps a flat gradient buffer for the accumulation (57 GiB of state with the
    weights and AdamW's) over a 52 GiB budget; one microbatch of the batch's 4 rows needs none and fits: the search
    lists it instead of saying that nothing fits. Options beaten in time and peak by another are left out, except
    the run as configured."""
    base = [XL, "--set", "device=cuda", "--set", "precision=bf16", "--set", "data.microbatch_size=1",
            "--device-memory", "56"]
    fit = plan_json(trainer_bin, tmp_path, *base, "--fit")["fit"]
    assert "nothing" not in fit and fit["options"], fit
    assert fit["state_bytes"] <= fit["budget_bytes"], fit
    assert all("data.microbatch_size=4" in o["sets"] for o in fit["options"]), fit
    assert fit["options"][0]["what"] == "nothing recomputed (policy none), microbatch 4 (1 per step)", fit
    c16 = plan_json(trainer_bin, tmp_path, str(SOURCE_DIR / "configs" / "xl_c16384.json"), "--fit")["fit"]["options"]
    assert any(o["what"] == "as configured" for o in c16), c16
    for o in c16:
        beaten = [b for b in c16 if b is not o and b["time_s"] <= o["time_s"] and b["peak_bytes"] <= o["peak_bytes"]]
        assert not beaten or o["what"] == "as configured", (o, beaten)


def test_plan_fit_keep_attention_with_naive_attention(trainer_bin, tmp_path):
    """Naive attention with keep_attention: recomputing every block keeps every block's probabilities, a larger peak
    than recomputing all but one; the search still finds the kept-attention family (it had dropped it)."""
    fit = plan_json(trainer_bin, tmp_path, XL, "--set", "device=cuda", "--set", "precision=bf16", "--set",
                    "attention=naive", "--set", "model.context_length=6528", "--set", "data.batch_size=1", "--fit")["fit"]
    # (beaten in time and peak by policy nested here, so in "beaten", the JSON's list of what is not shown)
    kept = [o for o in fit["options"] + fit["beaten"] if "attention kept" in o["what"]]
    assert kept and kept[0]["peak_bytes"] <= fit["budget_bytes"], fit


def test_plan_device_memory(trainer_bin, tmp_path):
    """--device-memory sets the memory the plan and the search fit in (an H100 80GB: 79.1 GiB)."""
    one_gpu = str(SOURCE_DIR / "configs" / "leaderboard_8b_1gpu.json")
    h200 = plan_json(trainer_bin, tmp_path, one_gpu)
    h100 = plan_json(trainer_bin, tmp_path, one_gpu, "--device-memory", "79.1")
    assert h200["memory"]["fits"] is True and "fit" not in h200
    # 128.7 GiB of the H200's 139.8: within the 93% --fit keeps; at 135 GiB of memory it fits without the headroom
    assert h200["memory"]["fits_with_headroom"] is True
    tight = plan_json(trainer_bin, tmp_path, one_gpu, "--device-memory", "135")
    assert tight["memory"]["fits"] is True and tight["memory"]["fits_with_headroom"] is False, tight["memory"]
    assert h100["memory"]["device_memory_bytes"] == int(79.1 * 2**30) and h100["memory"]["fits"] is False
    assert h100["fit"]["budget_bytes"] == int(0.93 * int(79.1 * 2**30))
    assert h100["fit"]["options"] and all(o["peak_bytes"] <= h100["fit"]["budget_bytes"] for o in h100["fit"]["options"])


def test_plan_gpu(trainer_bin, tmp_path):
    """--gpu h100 plans a cuda run for an H100 80GB: the same peak, its memory, slower memory-bound ops; the 8B
    one-GPU config does not fit there and the search says what does; --device-memory still overrides the memory."""
    one_gpu = str(SOURCE_DIR / "configs" / "leaderboard_8b_1gpu.json")
    h200 = plan_json(trainer_bin, tmp_path, one_gpu)
    h100 = plan_json(trainer_bin, tmp_path, one_gpu, "--gpu", "h100")
    assert h100["memory"]["peak_bytes"] == h200["memory"]["peak_bytes"]
    assert h100["memory"]["device_memory_bytes"] == 85017493504 and h100["memory"]["fits"] is False
    assert h100["assumptions"]["device"] == "cuda (H100 80GB)" and h200["assumptions"]["device"] == "cuda (H200)"
    assert h100["time"]["memory_s"] == pytest.approx(h200["time"]["memory_s"] * 4.8 / 3.35, rel=1e-9)
    assert h100["time"]["compute_s"] == pytest.approx(h200["time"]["compute_s"], rel=1e-12)
    assert h100["fit"]["options"] and all(o["peak_bytes"] <= h100["fit"]["budget_bytes"] for o in h100["fit"]["options"])
    nvl = plan_json(trainer_bin, tmp_path, one_gpu, "--gpu", "h100", "--device-memory", "94")
    assert nvl["memory"]["device_memory_bytes"] == 94 * 2**30
    assert nvl["time"]["memory_s"] == pytest.approx(h100["time"]["memory_s"], rel=1e-12)
    # a GPU named is a cuda plan, whatever the config's device
    tiny = plan_json(trainer_bin, tmp_path, TINY, "--gpu", "h100")
    assert tiny["device"] == "cuda" and tiny["assumptions"]["device"] == "cuda (H100 80GB)"


def test_help_names_plan(trainer_bin, tmp_path):
    r = run(trainer_bin, ["--help"], tmp_path)
    assert r.returncode == 0
    for opt in ("--plan", "--world-size N", "--device cpu|cuda", "--gpu h200|h100", "--json", "--fit",
                "--device-memory GIB"):
        assert opt in r.stdout


@pytest.mark.parametrize("args, needle", [
    (["--plan", "--world-size", "0"], "--world-size"),
    (["--plan", "--world-size", "two"], "--world-size"),
    (["--plan", "--device", "tpu"], "--device"),
    (["--json"], "--plan only"),
    (["--fit"], "--plan only"),
    (["--device-memory", "80"], "--plan only"),
    (["--plan", TINY, "--device", "cuda", "--device-memory", "zero"], "--device-memory"),
    (["--plan", TINY, "--device", "cuda", "--device-memory", "-1"], "--device-memory"),
    (["--plan", TINY, "--device", "cuda", "--device-memory", "1e-300"], "a number from 1/1024 (1 MiB) to below 1e6"),
    (["--plan", TINY, "--device", "cuda", "--device-memory", "1e6"], "a number from 1/1024 (1 MiB) to below 1e6"),
    (["--plan", TINY, "--device", "cpu", "--device-memory", "80"], "applies to a cuda plan"),
    (["--gpu", "h100"], "--plan only"),
    (["--world-size", "2"], "--world-size applies to --plan and --print-config only"),
    (["--plan", TINY, "--gpu", "a100"], "--gpu: unknown GPU 'a100' (known: h200, h100)"),
    (["--plan", TINY, "--device", "cpu", "--gpu", "h100"], "--gpu applies to a cuda plan"),
    (["--plan", TINY, "--world-size", "3"], "world_size"),  # batch 4 does not split over 3 ranks
    (["--plan", TINY, "--world-size", "2"], "'none' runs one process, but the world size is 2 (use ddp_naive"),
    (["--plan", TINY, "--world-size", "2", "--set", "precision=bf16_pure"],
     "world size is 2 (precision bf16_pure runs on strategy none only"),
    (["--plan", TINY, "--print-config"], "choose one"),
])
def test_plan_bad_input(trainer_bin, tmp_path, args, needle):
    r = run(trainer_bin, args, tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainer: error: ") and needle in lines[0], r.stderr
    assert r.stdout == ""


def test_train_record_has_prediction(trainer_bin, tmp_path):
    out = tmp_path / "r.json"
    r = run(trainer_bin, [TINY, "--set", "device=cpu", "--set", "bench.warmup_steps=0",
                          "--set", "bench.measure_steps=2", "--set", f"output.results={out}"], tmp_path)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    pred = rec["memory"]["predicted"]
    assert set(pred["by_category"]) == CATEGORIES
    assert pred["peak_bytes"] == pytest.approx(rec["memory"]["peak_bytes"], rel=0.05)
    assert "plan (rank 0 of 1" in r.stderr
    assert "predicted" not in rec["timing"]  # the cpu's rates are nominal: no step time beside the measured one


def test_gpu_record_has_predicted_step_time(trainer_bin, tmp_path):
    """On a GPU the record carries the planner's step time at that GPU's rates (timing.predicted) beside the measured
    timing.step (a cpu record has none: test_train_record_has_prediction). Skipped without an NVIDIA GPU."""
    import shutil
    import subprocess
    if not shutil.which("nvidia-smi") or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0:
        pytest.skip("no NVIDIA GPU here")
    out = tmp_path / "g.json"
    r = run(trainer_bin, [TINY, "--set", "device=cuda", "--set", "bench.warmup_steps=1",
                          "--set", "bench.measure_steps=2", "--set", f"output.results={out}"], tmp_path)
    assert r.returncode == 0, r.stderr
    t = json.loads(out.read_text())["timing"]
    assert t["predicted"]["gpu"] in ("h200", "h100") and t["predicted"]["step_ms"] > 0, t.get("predicted")

