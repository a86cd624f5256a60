"""Issue 34's structure tests: the GPU profiles (``paper``, ``gpu``) run every registered
method end to end on the isolated path (method process and client worker in their
sandboxes) on a CPU, with tiny stand-in models in a fake hub cache (``fake_hub``), a fake
CUDA whose 'cuda' tensors live on the CPU, and a fake ``vllm`` that records its calls
(``tests/fakes/site-packages``: on the children's import path, so the sandboxed processes
load them too; its ``sitecustomize`` installs the fakes in every child).

What is asserted is what the papers' configurations ask of a GPU run: vLLM samples (never
transformers), the engine is the coordinator's (vLLM cannot start in a sandbox: the fake
binds a TCP port and reads /proc/meminfo, as vLLM does), fine-tuned policies reach vLLM as
LoRA requests, the engine sleeps while training, training updates fp32 weights, only the
method's own models load, the papers' batch sizes are kept (counts are shrunk, batch sizes
are not), and the sandbox of a GPU run admits the GPU device files and keeps the CUDA
variables.
"""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from doubles import SEEDED
from model_methods_support import make_preference_split, make_split

from benchmark.runner import run
from benchmark.spec import spec_from_dict

pytestmark = pytest.mark.end_to_end

FAKES = Path(__file__).parent / "fakes" / "site-packages"
ISOLATED = __import__("os").environ.get("STRUCTURE_INPROCESS") is None

# Every count shrunk to the least that runs the method's code paths; batch sizes untouched.
PE = {"iterations": 1, "population_size": 4, "lookahead": 1, "variation_steps": 1}
SHRINK: dict[str, dict[str, Any]] = {
    "public_only": {"public_epochs": 1},
    "nonprivate": {"public_epochs": 1, "epochs": 1},
    "oracle": {"num_texts": 4},
    "generator_only": {"num_synthetic": 4, "max_new_tokens": 8},
    "base_model": {},
    "dp_fedavg": {"public_epochs": 1, "rounds": 1},
    "dp_ftrl": {"public_epochs": 1, "rounds": 1},
    "pre_text": {
        **PE, "expand_size": 4, "expand_max_new_tokens": 8, "variation_max_new_tokens": 8,
        "min_words": 1,
    },
    "pe_sft": {
        **PE, "min_words": 1, "variation_max_new_tokens": 8, "sft_top_k": 2,
        "sft_epochs": 1, "generate_size": 4, "generate_max_new_tokens": 8,
    },
    "popri": {
        "rounds": 1, "num_prompts": 2, "samples_per_prompt": 2, "rejected_rank": 2,
        "epochs": 1, "fid_samples": 2, "num_synthetic": 4, "max_new_tokens": 8,
    },
    "fed_ctg": {"rounds": 1, "local_steps": 1, "num_synthetic": 4, "codes": ["a", "b"]},
    "dp_ftrl_dm": {
        "rounds": 1, "cohort_size": 2, "pretrain_steps": 1, "midtrain_round": 0,
        "midtrain_steps": 1,
    },
    "dpprefsyn": {
        "components": 2, "nonprivate_epochs": 1, "max_new_tokens": 8, "public_prompts": 4,
    },
    "dp_ft": {"max_completion_tokens": 8},
}  # fmt: skip
BATCH_SIZES = {  # the papers' batch sizes, as the paper configs hold them
    "popri": {"batch_size": 24, "grad_accum_steps": 6},
    "pe_sft": {"sft_batch_size": 24},
    "dp_ft": {"batch": 16},
    "dpprefsyn": {"nonprivate_batch": 64},
}
# Methods that sample the generator (or the preference writer), and those that fine-tune it.
# (fed_ctg samples its own federated conditional LM, a small model paper 001 trains itself)
SAMPLERS = {"generator_only", "pre_text", "pe_sft", "popri", "dpprefsyn"}
POLICY_TRAINERS = {"popri": 4, "pe_sft": 4}  # LoRA rank of the adapter vLLM must receive
PREFERENCE = {"dpprefsyn", "dp_ft"}
DELTA = {"fed_ctg": 1 / (2 * math.log(2))}  # paper 001's rule, 1/(N ln N), at N = 2 clients
NONPRIVATE = {"oracle": float("inf"), "nonprivate": float("inf")}  # they read clients' data


def _paper_models() -> dict[str, str]:
    from dataclasses import asdict

    from benchmark.profiles.paper import PaperModels

    return {k: v for k, v in asdict(PaperModels()).items() if isinstance(v, str) and "/" in v}


def expected_models(method: str, config: dict[str, Any]) -> set[str]:
    """The hub ids a method may load under ``paper``: its declared roles' and its own ids."""
    from benchmark.registry import METHODS

    method_cls, ids = METHODS.get(method), _paper_models()
    return {ids[r] for r in method_cls.models if r in ids} | set(method_cls.hub_ids(config))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The fake GPU machine: stand-in models, fake vLLM and CUDA, here and in children."""
    import huggingface_hub.constants
    from fake_hub import build_hub, build_packaged

    root = tmp_path_factory.mktemp("gpu-world")
    packages = root / "generated" / "site-packages"  # named so the sandboxes may read it
    packages.mkdir(parents=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HOME", str(root / "hf"))
    mp.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root / "hf" / "hub"))
    mp.setenv("FEDSYNTH_CACHE", str(root / "cache"))
    mp.setenv("CUDA_VISIBLE_DEVICES", "0")
    mp.setenv("FEDSYNTH_FAKE_EVENTS", str(root / "coordinator-events.jsonl"))
    mp.syspath_prepend(str(packages))
    mp.syspath_prepend(str(FAKES))
    importlib.invalidate_caches()
    build_hub(root / "hf" / "hub")
    build_packaged(root / "cache", packages)
    import fedsynth_fakes

    from benchmark import profiles
    from benchmark.isolation import client_process, coordinator, template

    fedsynth_fakes.install_here(mp.setattr)
    mp.setattr(coordinator, "_WARM_ROLES", set())
    mp.setattr(profiles, "_instances", {})
    policies: list[Any] = []
    real = coordinator.sandbox_environment

    def recording(policy, tmp_dir):
        policies.append(policy)
        return real(policy, tmp_dir)

    mp.setattr(coordinator, "sandbox_environment", recording)
    spawned: list[tuple[str, bool]] = []  # (role, gpu) of each untrusted child started

    def spawn(role, *args, **kwargs):
        spawned.append((role, kwargs.get("gpu", False)))
        return template.spawn(role, *args, **kwargs)

    for module in (coordinator, client_process):
        mp.setattr(module, "spawn", spawn)
    yield {"root": root, "policies": policies, "spawned": spawned}
    fedsynth_fakes.uninstall_here()
    mp.undo()
    sys_modules = importlib.import_module("sys").modules
    for name in [n for n in sys_modules if n == "vllm" or n.startswith("vllm.")]:
        del sys_modules[name]


def events(world: dict[str, Any], runs: Path) -> list[dict[str, Any]]:
    files = [world["root"] / "coordinator-events.jsonl", *sorted(runs.rglob("fake-events-*.jsonl"))]
    return [json.loads(line) for f in files if f.exists() for line in f.read_text().splitlines()]


def run_isolated(world: dict[str, Any], tmp_path: Path, method: str, profile: str) -> Any:
    preference = method in PREFERENCE
    split = make_preference_split(24) if preference else make_split(2, 2)
    unit = {"fed_ctg": "client_sample"}.get(method, "sample" if preference else "user")
    spec = spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": method, "params": SHRINK[method]},
            "privacy": {
                "epsilon": NONPRIVATE.get(method, 4.0), "delta": DELTA.get(method, 1e-2),
                "allow_large_delta": True, "unit": unit, **SEEDED,
            },
            "evaluation": {"metrics": []},
            "seed": 3,
            "profile": profile,
        }
    )  # fmt: skip
    from benchmark.isolation import coordinator

    (world["root"] / "coordinator-events.jsonl").unlink(missing_ok=True)
    world["policies"].clear()
    world["spawned"].clear()
    coordinator._WARM_ROLES.clear()  # each run's coordinator is observed from its start
    return run(spec, runs_root=tmp_path, split=split, isolated=ISOLATED)


METHODS = list(SHRINK)


def violations(
    world: dict[str, Any], runs: Path, result: Any, method: str, profile: str
) -> list[str]:
    """Everything a run did that a GPU run of the papers must not do, each tagged with the
    part of issue 34 it belongs to (the fix that makes it pass)."""
    seen, found = events(world, runs), []
    kinds = {e["event"] for e in seen}
    # [item 5] the papers sample with vLLM: never with transformers, never a fallback
    if "hf_generate" in kinds:
        names = {e["name"] for e in seen if e["event"] == "hf_generate"}
        found.append(f"[item 5] transformers sampled {sorted(names)}")
    if method in SAMPLERS and "vllm_generate" not in kinds:
        found.append("[item 5] vLLM never sampled")
    for engine in (e for e in seen if e["event"] == "vllm_llm"):
        if ISOLATED and engine["where"] != "coordinator":  # vLLM cannot start in a sandbox
            found.append("[engine] a vLLM engine was built in a sandboxed process")
        kw = engine["kwargs"]
        if not (
            kw.get("dtype") == "bfloat16" and kw.get("enable_lora") and kw.get("enable_sleep_mode")
        ):
            found.append(f"[item 5] engine without bf16/LoRA/sleep mode: {kw}")
    # [item 5] a fine-tuned policy reaches vLLM as a LoRA adapter of the paper's rank
    if method in POLICY_TRAINERS:
        adapters = [e["lora"] for e in seen if e["event"] == "vllm_generate" and e["lora"]]
        if not adapters or {a["r"] for a in adapters} != {POLICY_TRAINERS[method]}:
            found.append(f"[item 5] the policy reached vLLM as {adapters}")
    # [item 3] the engine sleeps while training, in every process that has one, and an
    # engine of the coordinator (public candidates) sleeps while the sandboxed children act
    state: dict[tuple[int, str], str] = {}  # by process (pid 1 in each child's namespace)
    for e in sorted(seen, key=lambda e: e["t"]):  # stable: each file is in order already
        process = (e["pid"], e["where"])
        if e["event"] in ("vllm_sleep", "vllm_wake", "vllm_llm"):
            state[process] = "asleep" if e["event"] == "vllm_sleep" else "awake"
        if e["event"] == "optimiser_step" and state.get(process) == "awake":
            found.append(f"[item 3] {e['optimiser']} stepped while the vLLM engine held the GPU")
        held = [p for p, s in state.items() if s == "awake" and p[1] == "coordinator"]
        if ISOLATED and e["where"] != "coordinator" and held:
            found.append(f"[item 3] the coordinator's engine was awake at a child's {e['event']}")
    if any(s == "awake" for s in state.values()):  # the evaluation has the GPU
        found.append("[item 3] a vLLM engine was left awake when the method had finished")
    # [item 4] training updates fp32 master weights, [ondevice] on the GPU
    for e in seen:
        if e["event"] == "optimiser_step" and e["dtypes"] != ["torch.float32"]:
            found.append(f"[item 4] {e['optimiser']} updated {e['dtypes']} weights ({e['where']})")
        if e["event"] == "optimiser_step" and not e["on_gpu"]:
            found.append(f"[ondevice] {e['optimiser']} trained weights on the CPU ({e['where']})")
    # [item 3] only the method's own models load (paper: by hub id), in any process
    config = result.record["method"]["config"]
    if profile == "paper":
        hub = {*_paper_models().values(), "sentence-transformers/stsb-roberta-base-v2"}
        loaded = {e["model"] for e in seen if e["event"] in ("load", "vllm_llm")} & hub
        extra = loaded - expected_models(method, config)
        if extra:
            found.append(f"[item 3] models the method does not use were loaded: {sorted(extra)}")
    # the papers' batch sizes are kept (counts are shrunk, batch sizes are not)
    for key, value in BATCH_SIZES.get(method, {}).items():
        if config[key] != value:
            found.append(f"[batch] {key} = {config[key]}, the paper's is {value}")
    # [item 1] the sandbox of a GPU run admits the GPU, the children keep the CUDA variables
    from benchmark.isolation.client_process import child_env

    if child_env(gpu=True).get("CUDA_VISIBLE_DEVICES") != "0":
        found.append("[item 1] the children lose CUDA_VISIBLE_DEVICES")
    # the method process and the client worker (and the zygote) open the GPU; only the
    # short-lived describe process stays closed. The policy's nodes: test_gpu_sandbox.py.
    if ISOLATED and sum(policy.gpu for policy in world["policies"]) < 2:
        found.append("[item 1] the method process's and client worker's policies are a CPU run's")
    # ...and each is started as a GPU child (forked only from a template that left CUDA
    # alone); only the describe process, a method process, is a CPU run's
    as_gpu = {role for role, gpu in world["spawned"] if gpu}
    as_cpu = {role for role, gpu in world["spawned"] if not gpu} - {"method"}
    if ISOLATED and (as_cpu or not {"method", "client"} <= as_gpu):
        found.append(f"[item 1] children started as a CPU run's: {world['spawned']}")
    return found


# The whole matrix runs in `make test`: 2 profiles x 14 methods, ~3 min on one core here,
# since a GPU run's children fork from the launch template (its imports leave CUDA alone).
MATRIX = [(m, p) for p in ("paper", "gpu") for m in METHODS]


@pytest.mark.parametrize(("method", "profile"), MATRIX)
def test_a_gpu_run_is_shaped_as_the_papers(world, tmp_path, method, profile):
    result = run_isolated(world, tmp_path, method, profile)
    assert violations(world, tmp_path, result, method, profile) == []


def test_the_gpu_profile_refuses_a_machine_without_cuda(monkeypatch):
    import torch

    from benchmark.profiles import ModelUnavailableError, new_profile

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ModelUnavailableError, match="profile 'gpu' needs a CUDA GPU"):
        new_profile("gpu")
