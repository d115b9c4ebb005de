"""Command-line behaviour of `trainer` for bad and good configs.

Every broken config must make the binary exit with code 2, print exactly one non-empty line on stderr
("trainer: error: <message>") that names the problem, and create no file (no result record, no temp file).
`--help`, `--version` and `--print-config` must succeed.

Run: TRAINER_BIN=build/trainer TRAINER_SOURCE_DIR=. /usr/bin/python3 -m pytest tests/cli   (ctest sets both)
"""

import json
import os
import pathlib
import re
import struct
import subprocess

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
CONFIGS = SOURCE_DIR / "configs"

TOP_LEVEL_KEYS = {
    "job", "name", "model", "device", "precision", "fp32_matmul", "gemm_autotune", "deterministic", "attention",
    "cuda_graph",
    "checkpointing", "parallel", "optimizer", "data", "bench", "init", "output", "profile", "collective",
    "attention_bench",
}

# Handout Table 1 (vocab 10000, context 512), tiny and leaderboard_8b (DESIGN.md):
# vocab_size, context_length, d_model, d_ff, num_layers, num_heads.
PRESET_DIMS = {
    "tiny": (256, 64, 64, 172, 2, 4),
    "small": (10000, 512, 768, 3072, 12, 12),
    "medium": (10000, 512, 1024, 4096, 24, 16),
    "large": (10000, 512, 1280, 5120, 36, 20),
    "xl": (10000, 512, 2560, 10240, 32, 32),
    "10B": (10000, 512, 4608, 12288, 50, 36),
    "leaderboard_8b": (151936, 32768, 4096, 11008, 34, 32),
}
DIM_KEYS = ("vocab_size", "context_length", "d_model", "d_ff", "num_layers", "num_heads")


@pytest.fixture(scope="session")
def trainer_bin():
    path = os.environ.get("TRAINER_BIN")
    assert path, "set TRAINER_BIN to the trainer binary (ctest sets it)"
    assert os.access(path, os.X_OK), f"TRAINER_BIN={path} is not an executable file"
    return path


def run(trainer_bin, args, cwd, timeout=300):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run([trainer_bin, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def snapshot(root):
    """Every path under root (files and directories), relative."""
    return {str(p.relative_to(root)) for p in pathlib.Path(root).rglob("*")}


def tiny_config(tmp_path, **sections):
    """The tiny model on random tokens, result record under tmp_path/out/; sections update the config."""
    cfg = {
        "job": "train",
        "model": {"preset": "tiny"},
        "data": {"source": "random", "batch_size": 4},
        "bench": {"warmup_steps": 0, "measure_steps": 1},
        "output": {"results": str(tmp_path / "out" / "result.json")},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key].update(value)
        else:
            cfg[key] = value
    return cfg


def write_json(path, obj):
    path.write_text(json.dumps(obj))
    return path


def write_u16(path, ids):
    path.write_bytes(struct.pack(f"<{len(ids)}H", *ids))
    return path


# Each case builds its files under tmp_path and returns (argv, substrings the error line must contain).
def case_missing_file(tmp):
    return [tmp / "nope.json"], ["nope.json", "No such file or directory"]


def case_invalid_json(tmp):
    (tmp / "bad.json").write_text('{\n  "job": "train",\n  "model": {"preset": "tiny",,}\n}\n')
    return [tmp / "bad.json"], ["bad.json", "not valid JSON", "line 3"]


def case_not_an_object(tmp):
    return [write_json(tmp / "c.json", [1, 2])], ["JSON object"]


def case_unknown_top_key(tmp):
    cfg = tiny_config(tmp)
    cfg["devicee"] = "cpu"
    return [write_json(tmp / "c.json", cfg)], ["unknown key 'devicee'"]


def case_renamed_allow_tf32(tmp):
    cfg = tiny_config(tmp)
    cfg["allow_tf32"] = True
    return [write_json(tmp / "c.json", cfg)], ["'allow_tf32' was replaced by 'fp32_matmul'", '"tf32" for true']


def case_renamed_allow_tf32_set(tmp):
    return [write_json(tmp / "c.json", tiny_config(tmp)), "--set", "allow_tf32=true"], [
        "'allow_tf32' was replaced by 'fp32_matmul'", "(in --set allow_tf32=true)"]


def case_unknown_fp32_matmul(tmp):
    cfg = tiny_config(tmp)
    cfg["fp32_matmul"] = "tf16"
    return [write_json(tmp / "c.json", cfg)], ["fp32_matmul", "tf16", "3xtf32"]


def case_unknown_nested_key(tmp):
    return [write_json(tmp / "c.json", tiny_config(tmp, optimizer={"lrr": 1e-3}))], ["unknown key 'optimizer.lrr'"]


def case_wrong_type(tmp):
    cfg = tiny_config(tmp, data={"batch_size": "4"})
    return [write_json(tmp / "c.json", cfg)], ["'data.batch_size' must be an integer, got string"]


def case_negative_batch(tmp):
    return [write_json(tmp / "c.json", tiny_config(tmp, data={"batch_size": -4}))], ["data.batch_size", "-4"]


def case_negative_layers(tmp):
    cfg = tiny_config(tmp, model={"preset": "tiny", "num_layers": -1})
    return [write_json(tmp / "c.json", cfg)], ["model.num_layers"]


def case_heads_not_dividing(tmp):
    cfg = tiny_config(tmp, model={"preset": "tiny", "d_model": 100, "num_heads": 3})
    return [write_json(tmp / "c.json", cfg)], ["d_model 100 is not divisible by num_heads 3"]


def case_unknown_preset(tmp):
    return [write_json(tmp / "c.json", tiny_config(tmp, model={"preset": "xxl"}))], ["model.preset", "xxl"]


def case_missing_token_file(tmp):
    cfg = tiny_config(tmp, data={"source": "tokens", "path": str(tmp / "missing.u16")})
    return [write_json(tmp / "c.json", cfg)], ["data.path", "missing.u16"]


def case_token_file_is_a_fifo(tmp):  # opening it for reading would wait for a writer forever
    os.mkfifo(tmp / "tokens.u16")
    cfg = tiny_config(tmp, data={"source": "tokens", "path": str(tmp / "tokens.u16")})
    return [write_json(tmp / "c.json", cfg)], ["data.path", "not a regular file"]


def case_checkpoint_over_token_file(tmp):
    path = write_u16(tmp / "tokens.u16", [i % 256 for i in range(500)])
    cfg = tiny_config(tmp, data={"source": "tokens", "path": str(path)}, output={"checkpoint": str(path)})
    return [write_json(tmp / "c.json", cfg)], ["output.checkpoint", "is also the input data.path"]


def case_token_id_over_vocab(tmp):
    ids = [i % 256 for i in range(500)]
    ids[321] = 300  # tiny has vocab 256
    path = write_u16(tmp / "tokens.u16", ids)
    cfg = tiny_config(tmp, data={"source": "tokens", "path": str(path)})
    return [write_json(tmp / "c.json", cfg)], ["data.path", "300"]


def case_token_file_too_short(tmp):
    path = write_u16(tmp / "short.u16", [1] * 64)  # tiny needs context_length + 1 = 65 tokens
    cfg = tiny_config(tmp, data={"source": "tokens", "path": str(path)})
    return [write_json(tmp / "c.json", cfg)], ["data.path", "short.u16"]


def case_token_file_odd_size(tmp):
    path = tmp / "odd.u16"
    path.write_bytes(b"\x01" * 201)
    cfg = tiny_config(tmp, data={"source": "tokens", "path": str(path)})
    return [write_json(tmp / "c.json", cfg)], ["data.path", "odd.u16"]


def case_tokens_without_path(tmp):
    return [write_json(tmp / "c.json", tiny_config(tmp, data={"source": "tokens"}))], ["data.path"]


def case_output_under_proc(tmp):
    cfg = tiny_config(tmp, output={"results": "/proc/trainer_cli_test/result.json"})
    return [write_json(tmp / "c.json", cfg)], ["output.results"]


def case_output_parent_is_a_file(tmp):
    (tmp / "plain.txt").write_text("x")
    cfg = tiny_config(tmp, output={"results": str(tmp / "plain.txt" / "result.json")})
    return [write_json(tmp / "c.json", cfg)], ["output.results"]


def case_trace_parent_is_a_file(tmp):
    (tmp / "plain.txt").write_text("x")
    cfg = tiny_config(tmp, profile={"trace": str(tmp / "plain.txt" / "trace.json")})
    return [write_json(tmp / "c.json", cfg)], ["profile.trace"]


def case_bad_set_syntax(tmp):
    return [write_json(tmp / "c.json", tiny_config(tmp)), "--set", "precision"], ["--set", "precision"]


def case_set_unknown_key(tmp):
    return [write_json(tmp / "c.json", tiny_config(tmp)), "--set", "optimizer.lrr=1"], ["optimizer.lrr"]


def case_set_wrong_type(tmp):
    args = [write_json(tmp / "c.json", tiny_config(tmp)), "--set", "bench.measure_steps=many"]
    return args, ["'bench.measure_steps' must be an integer"]


def case_bf16_on_cpu(tmp):
    args = [write_json(tmp / "c.json", tiny_config(tmp)), "--set", "device=cpu", "--set", "precision=bf16"]
    return args, ["bf16", "cuda"]


def case_microbatch_not_dividing(tmp):
    cfg = tiny_config(tmp, data={"batch_size": 4, "microbatch_size": 3})
    return [write_json(tmp / "c.json", cfg)], ["microbatch_size 3"]


def case_beta_out_of_range(tmp):
    cfg = tiny_config(tmp, optimizer={"betas": [0.9, 1.0]})
    return [write_json(tmp / "c.json", cfg)], ["optimizer.betas[1]"]


def case_eps_zero_in_fp32(tmp):  # > 0, but 0 as the kernels' fp32: 0/0 where a gradient is 0 (a fresh user)
    cfg = tiny_config(tmp, optimizer={"eps": 1e-46})
    return [write_json(tmp / "c.json", cfg)], ["optimizer.eps", "fp32"]


def case_lr_beyond_fp32(tmp):
    cfg = tiny_config(tmp, optimizer={"lr": 1e39})
    return [write_json(tmp / "c.json", cfg)], ["optimizer.lr", "fp32"]


def case_rope_theta_zero_in_fp32(tmp):
    cfg = tiny_config(tmp, model={"rope_theta": 1e-300})
    return [write_json(tmp / "c.json", cfg)], ["rope_theta", "fp32"]


def case_no_steps(tmp):
    cfg = tiny_config(tmp, bench={"warmup_steps": 0, "measure_steps": 0})
    return [write_json(tmp / "c.json", cfg)], ["warmup_steps", "measure_steps"]


def case_bad_enum(tmp):
    return [write_json(tmp / "c.json", tiny_config(tmp, device="gpu"))], ["'device'", "gpu"]


def case_missing_init_weights(tmp):
    cfg = tiny_config(tmp, init={"weights": str(tmp / "w.safetensors")})
    return [write_json(tmp / "c.json", cfg)], ["init.weights", "w.safetensors"]


def case_cuda_without_gpu(tmp):
    # Only a bad input where there is no GPU (CI); on a GPU machine this config is valid and the case is skipped.
    if pathlib.Path("/dev/nvidia0").exists():
        return None
    return [write_json(tmp / "c.json", tiny_config(tmp, device="cuda"))], ["device", "cuda"]


def case_unknown_option(tmp):
    return [write_json(tmp / "c.json", tiny_config(tmp)), "--bogus"], ["--bogus"]


def case_bf16_pure_with_zero1(tmp):
    cfg = tiny_config(tmp, device="cpu", precision="bf16_pure", parallel={"strategy": "zero1"})
    return [write_json(tmp / "c.json", cfg)], ["bf16_pure", "strategy 'none'", "zero1"]


def case_in_backward_with_clipping(tmp):
    cfg = tiny_config(tmp, optimizer={"in_backward": True, "max_grad_norm": 1.0})
    return [write_json(tmp / "c.json", cfg)], ["in_backward", "max_grad_norm"]


def case_in_gemm_with_clipping(tmp):  # in_backward null resolves off here: the line names clipping, the cause
    cfg = tiny_config(tmp, optimizer={"in_gemm": True, "max_grad_norm": 1.0})
    return [write_json(tmp / "c.json", cfg)], ["in_gemm", "cannot clip", "max_grad_norm 1"]


def case_in_gemm_without_in_backward(tmp):
    cfg = tiny_config(tmp, optimizer={"in_gemm": True, "in_backward": False, "max_grad_norm": None})
    return [write_json(tmp / "c.json", cfg)], ["in_gemm", "needs in_backward"]


def case_in_backward_without_an_update(tmp):  # bench.phase forward_backward: no optimizer step to move
    cfg = tiny_config(tmp, optimizer={"in_backward": True, "max_grad_norm": None})
    cfg.setdefault("bench", {})["phase"] = "forward_backward"
    return [write_json(tmp / "c.json", cfg)], ["in_backward", "bench.phase 'forward_backward'", "no update"]


def case_in_gemm_with_fsdp(tmp):
    cfg = tiny_config(tmp, optimizer={"in_gemm": True, "max_grad_norm": None}, parallel={"strategy": "fsdp"})
    return [write_json(tmp / "c.json", cfg)], ["in_gemm", "strategy 'none'", "fsdp"]


def case_stochastic_rounding_without_bf16_pure(tmp):
    cfg = tiny_config(tmp, device="cpu", optimizer={"stochastic_rounding": True})
    return [write_json(tmp / "c.json", cfg)], ["stochastic_rounding", "bf16_pure"]


def case_keep_attention_not_bool(tmp):
    cfg = tiny_config(tmp, checkpointing={"keep_attention": 1.5})
    return [write_json(tmp / "c.json", cfg)], ["checkpointing.keep_attention"]


def case_d_model_beyond_64_bit_sizes_in_the_plan(tmp):  # the dry run's byte counts had overflowed (an abort)
    cfg = tiny_config(tmp, model={"preset": "tiny", "d_model": 2000000000})
    return [write_json(tmp / "c.json", cfg), "--plan"], ["model.d_model = 2000000000", "parameters", "2^56"]


def case_context_beyond_64_bit_sizes_in_the_plan(tmp):  # std::bad_alloc in the dry run
    cfg = tiny_config(tmp, model={"preset": "tiny", "context_length": 2000000000})
    return [write_json(tmp / "c.json", cfg), "--plan"], ["model.context_length = 2000000000", "attention scores"]


def case_d_ff_beyond_64_bit_sums_in_the_plan(tmp):  # each tensor within 2^56 elements, the plan's sum had wrapped
    cfg = tiny_config(tmp, model={"preset": "tiny", "context_length": 65536, "num_layers": 64, "d_ff": 2 ** 27},
                      data={"source": "random", "batch_size": 4096})
    return [write_json(tmp / "c.json", cfg), "--plan"], ["model.d_ff = 134217728", "activations on every layer",
                                                         "num_layers 64", "2^56"]


def case_collective_size_beyond_64_bit_sizes(tmp):  # had been an out-of-memory record (exit 3) after the marker
    cfg = tiny_config(tmp, job="collective_bench", device="cpu", collective={"sizes_mb": [1e12]})
    return [write_json(tmp / "c.json", cfg)], ["collective.sizes_mb[0] = 1000000000000", "2^56",
                                               "at most 2^36 = 68719476736 MiB"]


def mem_available():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))


def huge_batch(tmp, *extra):  # 1.28e11 tokens: 477 GiB of token ids in the dry run, more in a run
    if mem_available() > 4 * 2000000000 * 64:
        return None
    cfg = tiny_config(tmp, data={"source": "random", "batch_size": 2000000000})
    return [write_json(tmp / "c.json", cfg), *extra], ["data.batch_size = 2000000000", "one step's token ids",
                                                       "MemAvailable"]


def case_huge_batch_in_the_plan(tmp):  # std::bad_alloc in the dry run (exit 134)
    return huge_batch(tmp, "--plan")


def case_huge_batch_in_a_run(tmp):  # had been an out-of-memory record (exit 3) after the running marker
    return huge_batch(tmp)


def case_collective_size_below_one_element(tmp):  # had timed an empty all_reduce
    cfg = tiny_config(tmp, job="collective_bench", device="cpu", collective={"sizes_mb": [1e-9]})
    return [write_json(tmp / "c.json", cfg)], ["collective.sizes_mb[0] = 1e-09", "0 fp32 element(s)"]


def case_collective_size_beyond_host_memory(tmp):  # 1e9 MiB: within 2^56 bytes, but an oom record (exit 3) had said so
    if mem_available() > 1e9 * 2 ** 20:
        return None
    cfg = tiny_config(tmp, job="collective_bench", device="cpu", collective={"sizes_mb": [1, 1e9]})
    return [write_json(tmp / "c.json", cfg)], ["collective.sizes_mb[1] = 1000000000", "of host memory",
                                               "MemAvailable"]


def case_attention_bench_without_a_point(tmp):  # had run and written an empty table, status ok
    return ([CONFIGS / "attention_bench.json", "--set", "device=cpu", "--set", "precision=fp32",
             "--set", "attention_bench.max_seq=128", "--set", 'attention_bench.grids=["a"]',
             "--set", f"output.results={tmp / 'r.json'}"],
            ["attention_bench: max_seq 128 leaves grid a no point"])


BAD_CASES = {name[len("case_"):]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")}


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_bad_config_exits_2_with_one_line(trainer_bin, tmp_path, name):
    work = tmp_path / "work"
    work.mkdir()
    case = BAD_CASES[name](work)
    if case is None:
        pytest.skip("not a bad input on this machine")
    args, needles = case
    before = snapshot(tmp_path)
    proc = run(trainer_bin, args, cwd=work)
    report = f"argv {args}\nexit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 2, report
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, report
    assert lines[0].startswith("trainer: error: "), report
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in the error line\n{report}"
    assert not (work / "out" / "result.json").exists(), report
    assert snapshot(tmp_path) == before, f"files were created: {snapshot(tmp_path) - before}\n{report}"


def test_help_lists_every_top_level_key(trainer_bin, tmp_path):
    proc = run(trainer_bin, ["--help"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for word in ("--set", "--print-config", "--version", "--log-all-ranks", "trainer [CONFIG.json]"):
        assert word in proc.stdout
    for key in TOP_LEVEL_KEYS:
        assert re.search(rf"^  {re.escape(key)}[ .]", proc.stdout, re.M), f"--help does not list {key}"
    for preset in PRESET_DIMS:
        assert preset in proc.stdout


def test_version(trainer_bin, tmp_path):
    proc = run(trainer_bin, ["--version"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"\d+\.\d+\.\d+", proc.stdout), proc.stdout


def test_print_config_small_is_resolved_json(trainer_bin, tmp_path):
    proc = run(trainer_bin, ["--print-config", CONFIGS / "small.json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(proc.stdout)
    assert set(cfg) == TOP_LEVEL_KEYS
    assert tuple(cfg["model"][k] for k in DIM_KEYS) == PRESET_DIMS["small"]
    assert cfg["name"] == "small"
    assert cfg["device"] in ("cpu", "cuda")
    assert cfg["attention"] == "naive"  # fp32
    assert cfg["parallel"]["comm"] == ("nccl" if cfg["device"] == "cuda" else "mpi")
    assert cfg["data"]["microbatch_size"] == cfg["data"]["batch_size"] == 4
    assert cfg["optimizer"]["max_grad_norm"] is None


def test_print_config_applies_overrides(trainer_bin, tmp_path):
    args = ["--print-config", CONFIGS / "small.json", "--set", "model.num_layers=3", "--set",
            "optimizer.betas=[0.8,0.95]", "--set", "name=run 7", "--set", "optimizer.max_grad_norm=1",
            "--set", f"output.results={tmp_path / 'r.json'}"]
    proc = run(trainer_bin, args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(proc.stdout)
    assert cfg["model"]["num_layers"] == 3
    assert cfg["model"]["d_model"] == 768
    assert cfg["optimizer"]["betas"] == [0.8, 0.95]
    assert cfg["optimizer"]["max_grad_norm"] == 1
    assert cfg["name"] == "run 7"
    assert not (tmp_path / "r.json").exists()


def test_print_config_checks_only_the_files_that_exist_here(trainer_bin, tmp_path):
    """--print-config, as --plan, may be shown a config whose files are on another machine: the embedded default's
    token file (build/data/fortunes.u16, relative) is not under tmp_path, so a run stops on it, while --print-config
    prints the config; an input that exists here is still checked (a token file too short for the context)."""
    proc = run(trainer_bin, [], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == (
        "trainer: error: data.path: cannot read 'build/data/fortunes.u16': No such file or directory (a relative "
        f"path, read from the current directory '{os.path.realpath(tmp_path)}')"), proc.stderr
    proc = run(trainer_bin, ["--print-config"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["data"]["path"] == "build/data/fortunes.u16"
    resume = ["--set", "init.resume=/nonexistent/ck"]  # a requeued job's checkpoint on the cluster's storage
    assert run(trainer_bin, resume, cwd=tmp_path).returncode == 2
    proc = run(trainer_bin, ["--print-config", *resume], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["init"]["resume"] == "/nonexistent/ck"
    # the rules that need no file still hold
    for more, needle in ((["--set", "bench.phase=forward"], "init.resume: only bench.phase 'train_step' trains"),
                         (["--set", "init.weights=w.safetensors"], "init: set init.weights or init.resume, not both")):
        proc = run(trainer_bin, ["--print-config", *resume, *more], cwd=tmp_path)
        assert proc.returncode == 2 and needle in proc.stderr and not proc.stdout, proc.stderr
    short = write_u16(tmp_path / "short.u16", [1, 2, 3])
    proc = run(trainer_bin, ["--print-config", "--set", f"data.path={short}"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("trainer: error: data.path") and not proc.stdout, \
        (proc.stderr, proc.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["short.u16"]  # nothing written


def test_print_config_resolves_for_the_world_size_given(trainer_bin, tmp_path):
    """What depends on the world size (data.microbatch_size: the rank's share of the batch) is resolved for 1 rank,
    or for --world-size N (as --plan), so the printed config runs under mpirun -np N as the original would."""
    base = ["--print-config", CONFIGS / "xl_fsdp.json", "--set", "device=cuda"]
    one = json.loads(run(trainer_bin, base, cwd=tmp_path).stdout)
    proc = run(trainer_bin, base + ["--world-size", "2"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    two = json.loads(proc.stdout)
    batch = one["data"]["batch_size"]
    assert one["data"]["microbatch_size"] == batch and two["data"]["microbatch_size"] == batch // 2
    proc = run(trainer_bin, base + ["--world-size", "3"], cwd=tmp_path)  # a batch of 8 rows splits over 1, 2, 4, 8
    assert proc.returncode == 2 and proc.stderr.startswith("trainer: error:") and "world" in proc.stderr, proc.stderr


def read_config_file(path):
    """A config file as JSON; the trainer allows whole-line // comments in them (configs/README.md), json does not."""
    return json.loads("\n".join(l for l in path.read_text().splitlines() if not l.strip().startswith("//")))


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.name)
def test_every_config_file_resolves(trainer_bin, tmp_path, path):
    args = ["--print-config", path, "--set", f"output.results={tmp_path / 'r.json'}"]
    if path.stem == "default":  # needs its token file: give it one
        args += ["--set", f"data.path={write_u16(tmp_path / 'fortunes.u16', [i % 256 for i in range(5000)])}"]
    if read_config_file(path).get("precision") == "bf16":
        args += ["--set", "device=cuda"]  # bf16 needs cuda; --print-config does not need a GPU
    proc = run(trainer_bin, args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(proc.stdout)
    assert cfg["name"] == path.stem
    assert cfg["job"] == read_config_file(path).get("job", "train")
    if cfg["job"] == "train":  # the benchmark jobs build no model
        assert all(cfg["model"][k] > 0 for k in DIM_KEYS)
    if path.stem in PRESET_DIMS:
        assert tuple(cfg["model"][k] for k in DIM_KEYS) == PRESET_DIMS[path.stem]
        assert cfg["data"]["source"] == "random"
