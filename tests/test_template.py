"""Untrusted children forked from the launch template (benchmark/isolation/template.py) start
as a fresh interpreter would: the same environment, working directory, import path,
descriptors and threads; a request the template's environment does not match gets a
fresh interpreter, and so does a GPU run's child where the template loaded the CUDA driver;
and a child does not outlive the template."""

import hashlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import cloudpickle
import numpy as np
import pytest

from benchmark.isolation import template
from benchmark.isolation.client_process import ClientProcess, child_env
from benchmark.isolation.coordinator import harness_code, policy_for
from benchmark.protocol.jobs import snapshot

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd here")


@pytest.fixture(autouse=True)
def own_templates(monkeypatch):
    """Templates of this test's own, ended after it."""
    monkeypatch.setattr(template, "_templates", {})
    yield template._templates
    for started in template._templates.values():
        started.control.close()


def digest(value: object) -> float:
    return float(int(hashlib.sha256(repr(value).encode()).hexdigest()[:12], 16))


def what_a_child_sees(client, payload):
    """Client side: its descriptors, environment, directory, import path and threads."""
    fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    return np.array(
        [
            digest(fds),
            digest(sorted(os.environ.items())),
            digest(os.getcwd()),
            digest(sys.path),
            float(threading.active_count()),
            float(len(os.listdir("/proc/self/task"))),
        ]
    )


def seen(tmp_path, name):
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    worker = ClientProcess([[{"text": "a"}]], None, 1, tmp_path / name)
    try:
        [row] = list(worker.rows(snapshot(what_a_child_sees, None), [0], [1], False))
        return worker.proc, row
    finally:
        worker.close()


def test_a_forked_child_sees_what_a_fresh_interpreter_sees(tmp_path, monkeypatch):
    forked, from_template = seen(tmp_path, "forked")
    monkeypatch.setattr(template, "_template_for", lambda base: None)
    fresh, from_interpreter = seen(tmp_path, "fresh")
    assert isinstance(forked, template.ForkedChild) and not isinstance(fresh, template.ForkedChild)
    np.testing.assert_array_equal(from_template, from_interpreter)


def where_a_child_writes(client, payload):
    import tempfile

    return np.array([digest(tempfile.gettempdir())])


def test_a_forked_child_writes_its_temporary_files_where_its_sandbox_says(tmp_path):
    """Not where the template's imports first asked (they cache the temporary directory)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    policy = policy_for(harness_code(), [scratch], client_code=True)
    worker = ClientProcess([[{"text": "a"}]], policy, 1, scratch)
    try:
        [row] = list(worker.rows(snapshot(where_a_child_writes, None), [0], [1], False))
    finally:
        worker.close()
    assert isinstance(worker.proc, template.ForkedChild)
    assert row[0] == digest(str(scratch))


def test_another_environment_gets_a_template_of_its_own_up_to_a_bound(
    tmp_path, monkeypatch, own_templates
):
    """Past the bound, the least recently used template whose children have all ended
    makes way; while every template has a child alive, a fresh interpreter starts."""
    monkeypatch.setattr(template, "MAX_TEMPLATES", 2)
    first = ClientProcess([[{"text": "a"}]], None, 1, tmp_path / "first")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # read when torch is imported
    second = ClientProcess([[{"text": "a"}]], None, 1, tmp_path / "second")
    assert isinstance(second.proc, template.ForkedChild) and len(own_templates) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    proc, _ = seen(tmp_path, "third")
    assert not isinstance(proc, template.ForkedChild) and len(own_templates) == 2
    oldest = next(iter(own_templates.values()))
    first.close()
    proc, _ = seen(tmp_path, "fourth")
    assert isinstance(proc, template.ForkedChild) and len(own_templates) == 2
    assert oldest.proc.wait(timeout=30) is not None and second.proc.poll() is None
    second.close()


def test_a_forked_child_ends_with_its_template(tmp_path, own_templates):
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    worker = ClientProcess([[{"text": "a"}]], None, 1, tmp_path)
    assert isinstance(worker.proc, template.ForkedChild)
    [started] = own_templates.values()
    started.control.close()  # as when the coordinator ends
    worker.proc.wait(timeout=30)
    started.proc.wait(timeout=30)


def test_a_child_asked_fresh_starts_from_a_fresh_interpreter(monkeypatch):
    started = []
    monkeypatch.setattr(template.subprocess, "Popen", lambda *a, **k: started.append(a[0]))
    monkeypatch.setattr(template, "_template_for", lambda base: pytest.fail("forked"))
    template.spawn("client", (), {"PATH": "/usr/bin"}, fresh=True)
    assert started == [[sys.executable, "-m", template.LAUNCH, "client"]]


def test_a_gpu_child_forks_only_from_a_template_that_left_the_cuda_driver_unloaded(monkeypatch):
    forked, started = [], []
    monkeypatch.setattr(template.subprocess, "Popen", lambda *a, **k: started.append(a[0]))
    monkeypatch.setattr(template, "_fork", lambda t, *a: forked.append(t) or t)
    for driver in (False, True):
        found = SimpleNamespace(cuda_driver=driver)
        monkeypatch.setattr(template, "_template_for", lambda base, found=found: found)
        template.spawn("client", (), {"PATH": "/usr/bin"}, gpu=True)
        template.spawn("client", (), {"PATH": "/usr/bin"})  # a CPU child: the driver is idle
    assert [t.cuda_driver for t in forked] == [False, False, True] and len(started) == 1


def test_a_template_reports_whether_its_imports_loaded_the_cuda_driver(tmp_path):
    """Read from its own memory map: here nothing loads it, unless a library named as the
    driver is loaded at start (a copy of the C math library, through ``sitecustomize``)."""
    with open("/proc/self/maps") as maps:
        libm = next(Path(line.split()[-1]) for line in maps if line.endswith("/libm.so.6\n"))
    driver = tmp_path / "libcuda.so.1"
    driver.write_bytes(libm.read_bytes())
    (tmp_path / "sitecustomize.py").write_text(f"import ctypes\nctypes.CDLL({str(driver)!r})\n")
    with_driver = child_env()
    with_driver["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{with_driver['PYTHONPATH']}"
    for env, loaded in ((child_env(), False), (with_driver, True)):
        started = template._Template(env)
        try:
            assert started.cuda_driver is loaded
        finally:
            started.end()


def test_the_cuda_driver_is_told_from_a_memory_map(tmp_path):
    maps = tmp_path / "maps"
    line = "7f00-7f10 r-xp 00000000 08:01 42    {}\n"
    maps.write_text(line.format("/usr/lib/libcudart.so.12") + "7f10-7f20 rw-p 0 00:00 0\n")
    assert not template.cuda_driver_loaded(str(maps))
    maps.write_text(maps.read_text() + line.format("/usr/lib/x86_64-linux-gnu/libcuda.so.1"))
    assert template.cuda_driver_loaded(str(maps))


def state_of(pid: int) -> str | None:
    """A process's state letter ('Z': ended, its pid still reserved), None once reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def until(check, seconds=20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_an_ended_childs_pid_stays_reserved_until_the_coordinator_sees_it_end(
    tmp_path, own_templates
):
    """As with Popen: a pid the coordinator may still signal (by pid, `signal_tree`) is
    not reused, because the template reaps a child only when asked. A terminal's ^C is
    the coordinator's: the template and its children run on."""
    worker = ClientProcess([[{"text": "a"}]], None, 1, tmp_path)
    proc = worker.proc
    [started] = own_templates.values()
    os.kill(started.proc.pid, signal.SIGINT)
    proc.kill()
    assert until(lambda: state_of(proc.pid) == "Z")
    assert isinstance(seen(tmp_path, "another")[0], template.ForkedChild)
    assert state_of(proc.pid) == "Z"  # the template forked again and did not reap it
    proc.wait(timeout=10)
    assert until(lambda: state_of(proc.pid) is None)


def test_a_template_that_cannot_start_leaves_a_fresh_interpreter(tmp_path, monkeypatch):
    def refused(env):
        raise OSError("the launch template did not start")

    monkeypatch.setattr(template, "_Template", refused)
    proc, _ = seen(tmp_path, "fresh")
    assert not isinstance(proc, template.ForkedChild)
