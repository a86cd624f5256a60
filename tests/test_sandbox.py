"""The Landlock sandbox (benchmark.isolation.sandbox): a restricted child reads only what its
policy names, writes only beneath its read-write paths, opens no TCP connection and signals no
process outside its domain, yet still imports numpy and torch.

Every restriction runs in a fresh child interpreter, so the test process itself stays free.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchmark.isolation.sandbox import interpreter_paths, landlock_abi, loader_directories

REPO = Path(__file__).resolve().parent.parent
ABI = landlock_abi()
needs_landlock = pytest.mark.skipif(ABI < 1, reason="Landlock unavailable on this kernel")
needs_net = pytest.mark.skipif(ABI < 4, reason=f"TCP rules need Landlock ABI 4 (have {ABI})")
needs_scope = pytest.mark.skipif(
    ABI < 6, reason=f"signal scoping needs Landlock ABI 6 (have {ABI})"
)

PRELUDE = """
import json, os, signal, socket, sys
from pathlib import Path
from benchmark.isolation.sandbox import Policy, interpreter_paths, restrict
args = json.loads(sys.argv[1])
code_dirs = (Path(args["repo"]) / "benchmark",)
ro = interpreter_paths() + code_dirs + tuple(Path(p) for p in args.get("ro", ()))
rw = tuple(Path(p) for p in args.get("rw", ()))
assert restrict(Policy(read_only=ro, read_write=rw)), "restrict() applied nothing"
"""


def run_sandboxed(
    body: str, cwd: Path, tmpdir: Path | None = None, **args: object
) -> subprocess.CompletedProcess[str]:
    """Runs PRELUDE (which restricts the child) then ``body`` in a fresh interpreter."""
    code = PRELUDE + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    payload = json.dumps({"repo": str(REPO), **args}, default=str)
    return subprocess.run(
        [sys.executable, "-c", code, payload],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``code`` (dedented) in a fresh interpreter that imports the harness, no sandbox."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip().endswith("ok"), result.stdout


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """An allowed data dir, a private dir outside the policy, a read-write and a read-only dir."""
    names = ("allowed", "private", "rw", "ro", "cwd")
    dirs = {name: tmp_path / name for name in names}
    for d in dirs.values():
        d.mkdir()
    (dirs["allowed"] / "data.txt").write_text("public")
    (dirs["private"] / "secret.txt").write_text("secret")
    (dirs["private"] / "single.txt").write_text("single file rule")
    (dirs["ro"] / "existing.txt").write_text("keep")
    return dirs


def test_landlock_abi_is_a_non_negative_int() -> None:
    assert isinstance(landlock_abi(), int)
    assert landlock_abi() >= 0


def test_interpreter_paths_leave_out_cwd_tmp_and_checkouts() -> None:
    paths = interpreter_paths()
    assert all(p.exists() for p in paths)
    for excluded in (Path.cwd(), REPO, Path("/tmp"), Path("/dev/shm"), Path("")):
        assert excluded not in paths
    assert Path(sys.prefix) in paths


def test_of_the_system_only_the_loaders_directories_and_data_are_read() -> None:
    """Not /usr, /lib or /bin whole: on a merged /usr they hold compilers, JDKs, browsers."""
    paths = interpreter_paths()
    for whole in ("/usr", "/lib", "/bin", "/usr/lib", "/usr/share"):
        assert Path(whole) not in paths
    assert Path("/etc") in paths
    libc = next(p for p in Path("/proc/self/maps").read_text().split() if "/libc.so" in p)
    assert any(Path(libc).is_relative_to(p) for p in paths)  # the loader finds it there


def test_loader_directories_follow_the_configurations_includes(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "a.conf").write_text("/opt/a/lib  # a comment\n\n")
    (tmp_path / "conf.d" / "b.conf").write_text("include ../main.conf\n/opt/b/lib\n")
    (tmp_path / "main.conf").write_text("# top\ninclude conf.d/*.conf\n/usr/local/lib\n")
    found = loader_directories(tmp_path / "main.conf")
    assert found[:3] == (Path("/opt/a/lib"), Path("/opt/b/lib"), Path("/usr/local/lib"))


@needs_landlock
def test_reads_allowed_file_and_single_file_rule(tree: dict[str, Path]) -> None:
    body = """
    assert Path(args["data"]).read_text() == "public"
    assert Path(args["single"]).read_text() == "single file rule"
    print("ok")
    """
    single = tree["private"] / "single.txt"
    result = run_sandboxed(
        body,
        tree["cwd"],
        ro=[tree["allowed"], single],
        data=tree["allowed"] / "data.txt",
        single=single,
    )
    assert_ok(result)


@needs_landlock
def test_reading_outside_the_policy_is_denied(tree: dict[str, Path]) -> None:
    body = """
    for attempt in (lambda: Path(args["secret"]).read_text(), lambda: os.listdir(args["dir"])):
        try:
            attempt()
        except PermissionError:
            continue
        raise AssertionError("read outside the policy succeeded")
    print("ok")
    """
    secret = tree["private"] / "secret.txt"
    assert_ok(
        run_sandboxed(body, tree["cwd"], ro=[tree["allowed"]], secret=secret, dir=secret.parent)
    )


@needs_landlock
def test_writes_only_beneath_read_write_paths(tree: dict[str, Path]) -> None:
    body = """
    (Path(args["rw"][0]) / "out.txt").write_text("written")
    ro = Path(args["ro"][0])
    for attempt in (
        lambda: (ro / "new.txt").write_text("x"),
        lambda: (ro / "existing.txt").write_text("x"),
        lambda: (ro / "existing.txt").unlink(),
        lambda: (ro / "sub").mkdir(),
    ):
        try:
            attempt()
        except PermissionError:
            continue
        raise AssertionError("write beneath a read-only path succeeded")
    print("ok")
    """
    result = run_sandboxed(body, tree["cwd"], ro=[tree["ro"]], rw=[tree["rw"]])
    assert_ok(result)
    assert (tree["rw"] / "out.txt").read_text() == "written"
    assert (tree["ro"] / "existing.txt").read_text() == "keep"
    assert sorted(p.name for p in tree["ro"].iterdir()) == ["existing.txt"]


@needs_net
def test_tcp_connect_is_denied(tree: dict[str, Path]) -> None:
    body = """
    try:
        socket.create_connection(("127.0.0.1", args["port"]), timeout=5)
    except PermissionError:
        print("ok")
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        assert_ok(run_sandboxed(body, tree["cwd"], port=listener.getsockname()[1]))


@needs_scope
def test_signals_outside_the_domain_are_denied(tree: dict[str, Path]) -> None:
    body = """
    try:
        os.kill(args["pid"], signal.SIGTERM)
    except PermissionError:
        print("ok")
    """
    target = subprocess.Popen(["sleep", "60"])
    try:
        assert_ok(run_sandboxed(body, tree["cwd"], pid=target.pid))
        assert target.poll() is None, "the signal reached the process outside the sandbox"
    finally:
        target.kill()
        target.wait()


@needs_landlock
def test_other_processes_proc_entries_are_unreadable(tree: dict[str, Path]) -> None:
    body = """
    for name in ("environ", "cmdline", "maps"):
        try:
            data = Path(f"/proc/{args['pid']}/{name}").read_bytes()
        except PermissionError:
            continue
        raise AssertionError(f"read /proc/<pid>/{name} of another process: {data[:80]!r}")
    assert Path("/proc/self/status").read_text().startswith("Name:")
    print("ok")
    """
    env = {**os.environ, "FEDSYNTH_TEST_SECRET": "hunter2"}
    target = subprocess.Popen(["sleep", "60"], env=env)
    try:
        assert_ok(run_sandboxed(body, tree["cwd"], pid=target.pid))
    finally:
        target.kill()
        target.wait()


@needs_landlock
def test_restrict_refuses_a_threaded_process(tmp_path: Path) -> None:
    code = """
    import threading, time
    from benchmark.isolation.sandbox import Policy, restrict
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
    try:
        restrict(Policy(read_only=()))
    except RuntimeError:
        print("ok")
    """
    assert_ok(run_python(code, tmp_path))


@needs_landlock
def test_numpy_and_torch_import_inside_the_sandbox(tree: dict[str, Path]) -> None:
    body = """
    import numpy, torch
    assert float(torch.ones(2).sum()) == 2.0
    assert float(numpy.ones(3).sum()) == 3.0
    print("ok")
    """
    # torch imports dill, which asks tempfile for a directory it can write: the domain's own
    scratch = tree["rw"]
    assert_ok(run_sandboxed(body, tree["cwd"], tmpdir=scratch, rw=[scratch]))


def test_an_untrusted_child_dies_with_its_parent(tmp_path: Path) -> None:
    """A parent (a coordinator) that ends without closing its children leaves none running:
    the launched child is killed by the kernel, not left to compute on, unwatched."""
    parent = """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", (
        "import time; from benchmark.isolation.containment import die_with_parent; "
        "die_with_parent(); print('tied', flush=True); time.sleep(60)"
    )], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "tied"
    print(child.pid, "ok", flush=True)
    """
    result = run_python(parent, tmp_path)
    assert_ok(result)
    status = Path(f"/proc/{int(result.stdout.split()[-2])}/status")
    for _ in range(100):  # gone, or a zombie waiting for a reaper
        if not status.exists() or "\tZ" in status.read_text():
            return
        time.sleep(0.05)
    raise AssertionError("the child outlived its parent")


def test_readable_except_grants_the_siblings_of_what_it_denies(tmp_path: Path) -> None:
    from benchmark.isolation.sandbox import readable_except

    for name in ("pkgs/corpus/data.json", "pkgs/other/x.py", "pkgs/mod.py", "cache/m.pt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    kept, listed = readable_except(
        (tmp_path / "pkgs", tmp_path / "cache", tmp_path / "pkgs" / "corpus" / "data.json"),
        (tmp_path / "pkgs" / "corpus",),
    )
    assert kept == (tmp_path / "pkgs" / "mod.py", tmp_path / "pkgs" / "other", tmp_path / "cache")
    assert listed == (tmp_path / "pkgs",)


def test_a_splits_manifest_names_the_corpus_to_deny(tmp_path: Path) -> None:
    """The source revision pins the corpus's distribution; its package directories and
    the raw source caches are denied, an unknown or absent distribution adds nothing."""
    import importlib.util

    from benchmark.isolation.corpus import denied_paths

    manifest = {"source": {"revision": "chitchat-dataset==0.9.0 nothing-installed==1"}}
    denied = denied_paths(manifest, tmp_path)
    assert denied[-1] == tmp_path / "sources"
    found = importlib.util.find_spec("chitchat_dataset")
    if found is not None:
        assert Path(found.submodule_search_locations[0]).resolve() in denied
    assert denied_paths({"source": {"revision": "api 2024-01"}}, tmp_path) == (
        tmp_path / "sources",
    )
