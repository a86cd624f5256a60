"""A GPU run's sandbox admits the accelerator and nothing more; a CPU run's stays closed.

No GPU here: the device nodes are files in a fake /dev, CUDA's availability is faked, and
the private /dev/shm is checked in a child where namespaces can be made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from benchmark.isolation import sandbox
from benchmark.isolation.client_process import child_env
from benchmark.isolation.coordinator import policy_for, runs_on_gpu
from benchmark.isolation.sandbox import (
    SANDBOX_ENV,
    SHM,
    Policy,
    gpu_access,
    gpu_devices,
    gpu_library_paths,
    landlock_abi,
    sandbox_environment,
)
from benchmark.profiles import new_profile

REPO = Path(__file__).resolve().parent.parent
CUDA_VARS = {
    "CUDA_VISIBLE_DEVICES": "3",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
    "CUDA_HOME": "/usr/local/cuda",
    "NVIDIA_VISIBLE_DEVICES": "GPU-1234",
}
SECRETS = {"HF_TOKEN": "hf_secret", "NVIDIA_API_KEY": "nvapi-secret", "AWS_SECRET": "x"}


@pytest.fixture
def fake_dev(tmp_path: Path) -> Path:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "null"):
        (dev / name).touch()
    for name in ("nvidia-caps", "dri", "shm"):
        (dev / name).mkdir()
    (dev / "nvidia-modeset").touch()  # display, not compute
    return dev


def test_gpu_devices_are_the_nvidia_compute_nodes(fake_dev: Path) -> None:
    names = [p.name for p in gpu_devices(fake_dev)]
    driver = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps"]
    assert names == ["nvidia0", "nvidia1", *driver]


def test_loader_paths_are_readable_but_never_root_home_or_checkout(tmp_path: Path) -> None:
    lib, checkout = tmp_path / "cuda" / "lib64", tmp_path / "checkout"
    for d in (lib, checkout):
        d.mkdir(parents=True)
    environ = {
        "LD_LIBRARY_PATH": os.pathsep.join([str(lib), "relative/lib", "/", str(tmp_path), ""]),
        "CUDA_HOME": str(tmp_path / "cuda"),
    }
    kept = gpu_library_paths(environ, exposed=(checkout,))
    assert kept == (tmp_path / "cuda", lib)  # tmp_path holds the checkout: refused


def test_cpu_run_policy_and_environment_stay_closed(monkeypatch, tmp_path: Path) -> None:
    for key, value in {**CUDA_VARS, **SECRETS}.items():
        monkeypatch.setenv(key, value)
    policy = policy_for([REPO / "benchmark"], [tmp_path])
    assert not policy.gpu
    assert policy == policy_for([REPO / "benchmark"], [tmp_path], gpu=False)
    assert policy.read_write == (tmp_path,) and policy.devices == ()
    everything = (*policy.read_only, *policy.read_write, *policy.list_only)
    assert not [p for p in everything if "nvidia" in str(p) or p == SHM]
    assert not [p for p in everything if p == Path("/sys") or p.parts[1:2] == ("proc",)
                and p not in (Path("/proc/self"), Path("/proc/cpuinfo"))]  # fmt: skip
    assert Path("/sys/devices/system/cpu/online") in policy.read_only  # the CPU lists only
    env = child_env()
    assert not set(env) & set(CUDA_VARS) and not set(env) & set(SECRETS)
    assert json.loads(sandbox_environment(policy, tmp_path)[SANDBOX_ENV])["gpu"] is False


def test_gpu_run_policy_admits_the_devices_driver_and_libraries(
    monkeypatch, tmp_path: Path, fake_dev: Path
) -> None:
    for key, value in {**CUDA_VARS, **SECRETS}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("benchmark.isolation.sandbox.DEV", fake_dev)
    import benchmark.isolation.coordinator as coordinator

    monkeypatch.setattr(coordinator, "gpu_access", lambda: gpu_access(dev=fake_dev))
    policy = policy_for([REPO / "benchmark"], [tmp_path], gpu=True)
    assert policy.gpu
    assert policy.read_write == (tmp_path,)
    assert policy.devices == gpu_devices(fake_dev)
    assert fake_dev / "dri" not in policy.devices and fake_dev / "shm" not in policy.devices
    assert Path("/proc/driver/nvidia") in policy.read_only
    assert Path("/usr/local/nvidia/lib64") in policy.read_only
    assert Path("/usr/local/cuda") in policy.read_only
    assert Path("/sys") in policy.read_only  # NVML reads the PCI devices there
    assert Policy.from_json(policy.to_json()) == policy
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # a GPU run's coordinator fetches models
    env = child_env(gpu=True)
    assert {k: env[k] for k in CUDA_VARS} == CUDA_VARS
    assert not set(env) & set(SECRETS)
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"  # no socket to try


def test_gpu_policy_keeps_denied_paths_denied(monkeypatch, tmp_path: Path) -> None:
    corpus = tmp_path / "lib" / "corpus"
    corpus.mkdir(parents=True)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path / "lib"))
    policy = policy_for([REPO / "benchmark"], [], denied=(corpus,), gpu=True)
    assert corpus not in policy.read_only and tmp_path / "lib" not in policy.read_only


def test_a_run_is_a_gpu_run_when_its_profile_puts_models_on_cuda(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not runs_on_gpu(new_profile("paper"))
    assert not runs_on_gpu(new_profile("tiny"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runs_on_gpu(new_profile("paper"))
    assert not runs_on_gpu(new_profile("tiny"))  # a CPU profile on a GPU host stays closed
    assert not runs_on_gpu(new_profile("cpu"))


def test_a_gpu_runs_method_process_that_cannot_reach_cuda_stops(monkeypatch):
    """In a GPU run's sandbox, ``paper`` finding no CUDA would load an 8 B model on the CPU
    and sample with transformers under the run's name: the method process stops instead."""
    from benchmark.untrusted.method_process import check_gpu_reached

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    check_gpu_reached(new_profile("paper"), gpu_run=False)  # a CPU run of paper's models
    with pytest.raises(RuntimeError, match="cannot reach CUDA inside its sandbox"):
        check_gpu_reached(new_profile("paper"), gpu_run=True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    check_gpu_reached(new_profile("paper"), gpu_run=True)


def test_a_recomputation_keeps_the_gpu_but_not_the_domains_dev_shm(monkeypatch, tmp_path):
    """The independence check's per-call domain (restrict_further) runs client code on the
    GPU as the worker did, but writes only its own scratch: not the /dev/shm every call
    of its zygote would share."""
    applied = []
    gpu = Policy((REPO,), (tmp_path / "checks", SHM), (), gpu=True, devices=(Path("/dev/nvidia0"),))
    monkeypatch.setattr(sandbox, "applied_policy", gpu)
    monkeypatch.setattr(sandbox, "restrict", lambda policy: applied.append(policy) or True)
    assert sandbox.restrict_further((tmp_path / "call",))
    assert applied[0].devices == gpu.devices and applied[0].read_write == (tmp_path / "call",)
    assert applied[0].read_only == gpu.read_only


# --- in a sandboxed child: a private /dev/shm for GPU runs, none for CPU runs ---------------

CHILD = """
import os, sys
from pathlib import Path
from benchmark.isolation.containment import contain
from benchmark.isolation.sandbox import enter_sandbox_from_environment
contain()
assert enter_sandbox_from_environment(), "no sandbox applied"
name = Path("/dev/shm") / sys.argv[1]
try:
    name.write_text("from the sandbox")
except PermissionError:
    print("denied")
else:
    print("wrote", sorted(os.listdir("/dev/shm")))
"""


def run_child(policy: Policy, scratch: Path, name: str) -> str:
    env = {**child_env(policy.gpu), **sandbox_environment(policy, scratch)}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), name],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def namespaces_allowed() -> bool:
    probe = "from benchmark.isolation.containment import private_tmpfs as p; print(p('/dev/shm'))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    return done.stdout.strip() == "True"


@pytest.mark.skipif(landlock_abi() < 1, reason="Landlock unavailable on this kernel")
def test_gpu_run_gets_a_private_dev_shm_and_a_cpu_run_none(tmp_path: Path) -> None:
    if not namespaces_allowed():
        pytest.skip("no mount namespaces here: a GPU run's child gets no /dev/shm")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    host_file = SHM / f"fedsynth-host-{os.getpid()}"
    host_file.write_text("the host's")
    name = f"fedsynth-child-{os.getpid()}"
    try:
        closed = policy_for([REPO / "benchmark"], [scratch])
        assert run_child(closed, scratch, name) == "denied"
        opened = policy_for([REPO / "benchmark"], [scratch], gpu=True)
        out = run_child(opened, scratch, name)
        assert out == f"wrote {[name]!r}"  # the host's file is not in its /dev/shm
        assert not (SHM / name).exists()  # and its file is not in the host's
    finally:
        host_file.unlink()
