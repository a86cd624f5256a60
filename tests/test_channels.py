"""Issue 33: a client function's only way out is its clipped, noised output. Adversaries
(``tests/adversaries.py``) run through the real isolated path and try: a socket to a
listener outside the run (class 1); an abstract unix socket, SysV shared memory, a POSIX
message queue and a lock on a file both sandboxes read, between the client worker and the
method process (class 2); state a recomputation leaves for a later one (class 3); the
corpus the split was cut from and the builders' raw source caches (class 6); daemons that
outlive the run (class 8); the access time of a file every sandbox reads (a class found
here); the host's counters client code moves (found here); the page cache of files both
read (found here, closed on the public schedule) and the directory cache's entries for
names that do not exist (found here, shown open)."""

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import adversaries  # noqa: F401  (registers the adversarial adapters)
import numpy as np
import pytest
from doubles import StubProfile, make_split
from host_facts import cpu_and_caches

from benchmark.isolation import coordinator, page_cache
from benchmark.isolation.containment import signal_tree
from benchmark.isolation.sandbox import landlock_abi, seccomp_available
from benchmark.privacy.errors import PrivacyError
from benchmark.runner import run
from benchmark.spec import spec_from_dict

pytestmark = pytest.mark.end_to_end

REPO = Path(__file__).resolve().parent.parent
needs_seccomp = pytest.mark.skipif(not seccomp_available(), reason="needs seccomp (x86_64)")
needs_landlock = pytest.mark.skipif(landlock_abi() < 6, reason="needs Landlock ABI >= 6")


def _can_contain() -> bool:
    probe = "from benchmark.isolation.containment import new_namespaces as n; print(n())"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    return out.stdout.strip() == "True"


needs_namespaces = pytest.mark.skipif(
    not _can_contain(), reason="this kernel allows no new namespaces to this user"
)
TRAIN_TEXTS = [r["text"] for r in make_split().records("train")]


def spec(method, params=None):
    return spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": method, "params": params or {}},
            "privacy": {"epsilon": 2.0, "delta": 1e-5},
            "seed": 5,
        }
    )


def scheduled(method, params, call_seconds=30):
    """``spec`` on the public schedule (``privacy.call_seconds``). 30 s: a call's work
    (the residency pass over the read set, then client code) overran 12 s once in a
    fresh-clone CI run on 2 cores beside the other test worker (2026-11-30); the schedule
    only has to exceed the work, so a longer one weakens nothing."""
    data = spec(method, params).to_dict()
    data["privacy"]["call_seconds"] = call_seconds
    return spec_from_dict(data)


def go(tmp_path, s, split=None):
    split = split or make_split()
    return run(s, runs_root=tmp_path, profile=StubProfile(), split=split, isolated=True)


def leaks(result):
    released = json.dumps(result.artifact.texts)
    return [t for t in TRAIN_TEXTS if t.strip() in released]


# --- classes 1 and 2: no socket, no IPC object, no lock -----------------------------------


CHANNELS = [*adversaries.HEARD, "kmsg", "abstract", "shm", "sem", "mq", "flock"]
COUNTERS = ["sysinfo", "statfs", *adversaries.COUNTERS]  # the host's, moved by client code


@needs_seccomp
def test_no_channel_out_of_the_client_worker(tmp_path):
    """The client function sends its texts to listeners on the host (inet and inet6 udp and
    tcp, netlink between processes, raw frames on the loopback device: each shown to work
    from outside the sandbox first) and, through each channel, to the method process, which
    listens (the kernel's log too, shown to carry text between two host processes where
    this one may write it): nothing arrives anywhere, and every endpoint is refused in the
    method process."""
    log = None
    if os.access("/dev/kmsg", os.W_OK):
        log = adversaries.open_channel("kmsg")
        adversaries.send("kmsg", "fedsynth probe", 0)
        assert "fedsynth probe" in adversaries.receive("kmsg", log)
    with contextlib.ExitStack() as stack:
        port, listeners = adversaries.host_listeners(stack)
        result = go(tmp_path, spec("adv_channel", {"channels": CHANNELS, "port": port}))
        assert {
            kind: adversaries.heard(kind, got) for kind, got in listeners.items()
        } == dict.fromkeys(listeners)
    if log is not None:  # the operator's kernel log got none of it either
        logged = adversaries.receive("kmsg", log)
        os.close(log)
        assert not [t for t in TRAIN_TEXTS if t.strip() in logged]
    assert not leaks(result)
    assert result.artifact.texts == [f"{c}: refused: PermissionError" for c in CHANNELS]


@needs_seccomp
@needs_landlock
def test_the_method_process_reads_none_of_the_hosts_counters(tmp_path):
    """Client code moves the host's counters during a call (memory it holds, a file it
    writes, CPU it spins) and the method process would read them after it, past any
    schedule: every such counter is refused to it (the same policy holds for the worker)."""
    for kind in COUNTERS:  # here, outside a sandbox, each reads
        assert adversaries.read_counter(kind) is not None, kind
    result = go(tmp_path, spec("adv_channel", {"channels": COUNTERS, "port": 9}))
    assert result.artifact.texts == [f"{c}: refused: PermissionError" for c in COUNTERS]


@needs_namespaces
def test_a_client_functions_reads_leave_no_access_time_the_method_can_see(tmp_path):
    """A file's access time moves when it is read (``relatime``: once its atime is older
    than its mtime) and any process may stat it: the client function reads a file every
    sandbox may read, the method process compares its atime before and after the call.
    Every untrusted process reads through ``noatime`` mounts of its own, so it stays."""
    target = Path(adversaries.atime_target())
    mtime = target.stat().st_mtime_ns

    def make_stale():
        os.utime(target, ns=(mtime - 10**10, mtime))
        return target.stat().st_atime_ns

    stale = make_stale()
    target.read_bytes()  # here (no sandbox) a read moves it: the channel is real
    assert target.stat().st_atime_ns != stale
    make_stale()
    result = go(tmp_path, spec("adv_channel", {"channels": ["atime"], "port": 9}))
    assert result.artifact.texts == ["atime: bit 0"]


def _cold_files() -> list[str]:
    """16 files every sandbox may read and nothing imports, dropped from the page cache."""
    package = Path(np.__file__).parent
    tests = (str(p) for p in package.glob("*/tests/test_*.py"))  # never imported
    files = sorted(tests, key=os.path.getsize)[-16:]  # large: a cold read takes ~5x here
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return files


def left_open(result) -> str:
    """What the run's record says stayed open on the schedule: a failure's message, which
    tells a leak through a locked read set from one the host could not lock (``"page cache
    order"``: see the note above the scheduled tests)."""
    return f"open on the schedule: {result.record['privacy']['open_on_schedule']}"


def _halves(files: list[str]) -> tuple[list[str], list[str]]:
    """One file of each pair of neighbours in size (by a seeded coin) for client code to
    read, and the rest: each half spans the sizes, and neither is every other file in the
    order the method process times them."""
    rng = random.Random(len(files))
    read = [files[i + rng.randrange(2)] for i in range(0, len(files), 2)]
    return read, [f for f in files if f not in read]


@pytest.mark.slow  # the channel the next test closes, shown open
def test_without_a_schedule_the_page_cache_tells_which_files_client_code_read(tmp_path):
    """Client code reads half of the cold files; the method process's own first reads
    are fast exactly for that half. Run it alone: a scheduled run beside it makes the
    whole read set resident, these files included."""
    files = _cold_files()
    read, _ = _halves(files)
    result = go(tmp_path, spec("adv_page_cache", {"files": files, "read": read}))
    assert sorted(result.artifact.texts) == sorted(read)


# The page cache is the machine's: beside another test worker this failed in 2 of 3 fresh-clone
# CI runs of session 40 (all 8 read files in the fastest half), and passed alone. The read set
# is locked only where its 7.1 GB leave 6 GB available (``page_cache.pin_margin``): with 7 GB
# held by another process the run here recorded "page cache order" open (2026-11-30). Unlocked,
# the pages client code did not read are the first a neighbour's memory pressure evicts: the
# likeliest cause, not reproduced (5 of 8 under a 4 GB churn). ``left_open`` says which.
@pytest.mark.alone
def test_on_the_schedule_the_page_cache_tells_nothing(tmp_path):
    """On the public schedule every file the method process may read is resident before
    it starts and again after each call (``page_cache.keep_resident``): its first reads
    are all fast, and the fastest half holds 7 or 8 of the 8 client code read by chance only
    (65 in 12,870; without the schedule, a slow test, it holds all 8)."""
    files = _cold_files()
    read, _ = _halves(files)
    result = go(tmp_path, scheduled("adv_page_cache", {"files": files, "read": read}))
    told = len(set(result.artifact.texts) & set(read))
    assert told <= 6, left_open(result)  # 7 or 8 by chance: 1 in 198


@pytest.mark.alone  # the page cache is the machine's (see above)
def test_on_the_schedule_what_client_code_evicts_is_resident_again(tmp_path):
    """The read set is resident when the call starts; client code evicts half of 16 files
    (any reader may): after the call, before the method process runs, the pass brings
    them back, so its fastest half is not the half client code left alone (without the
    pass it holds 7 or 8 of them; with it, about 4: the smaller files are read faster)."""
    files = _cold_files()
    evicted, kept = _halves(files)
    result = go(tmp_path, scheduled("adv_evictions", {"files": files, "read": evicted}))
    assert len(result.artifact.texts) == 8
    assert len(set(result.artifact.texts) & set(kept)) <= 6, left_open(result)


def lookups_told(runs, names=None) -> int:
    """How many of the names client code looked up (half of ``names``) are among the half
    the method process found fastest to look up itself, on the schedule. By default 128
    missing names in /etc (chance: 32 +- 3 of 64). The half is drawn at random (seeded):
    with every other name, a difference that follows their order (directories made one
    after another, every other one faster) passed for the channel (24 of 32 with no lookup
    at all)."""
    names = names or [f"/etc/fedsynth-probe-{os.urandom(8).hex()}" for _ in range(128)]
    looked_up = sorted(random.Random(len(names)).sample(names, len(names) // 2), key=names.index)
    result = go(runs, scheduled("adv_lookups", {"files": names, "read": looked_up}))
    return len(set(result.artifact.texts) & set(looked_up))


needs_root = pytest.mark.skipif(
    not os.access("/proc/sys/vm/drop_caches", os.W_OK), reason="the kernel's caches: root only"
)


@needs_root
def test_on_the_schedule_lookups_of_missing_names_do_not_tell_which_client_code_made(tmp_path):
    """Looking up a name that does not exist leaves a negative entry in the kernel's
    directory cache, which no walk of the read set restores; the coordinator drops the
    unused entries inside each call's slot, before the walk."""
    assert lookups_told(tmp_path) <= 44


@pytest.mark.slow  # the channel, shown open where the entries are not dropped
def test_without_dropping_them_lookups_of_missing_names_tell_which_client_code_made(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(coordinator, "forget_lookups", lambda **_: False)
    assert lookups_told(tmp_path) >= 48


def directory_blocks_told(tmp_path, cold: bool = False) -> int:
    """How many of the 32 directories (of 64, outside the read set) client code looked a
    missing name up in are among the 32 whose lookup the method process found fastest, on
    the schedule (chance: 16 +- 3). A lookup reads the directory's blocks from the disk,
    and those stay in the block device's page cache when its entries are dropped."""
    names = []
    for i in range(64):
        directory = tmp_path / "dirs" / f"d{i}"
        directory.mkdir(parents=True)
        for j in range(300):  # a directory of several blocks
            (directory / f"an-entry-with-a-longer-name-{j:04d}").touch()
        names.append(str(directory / f"missing-{os.urandom(8).hex()}"))
    os.sync()  # written back: a drop keeps dirty pages
    if cold:  # the directories out of the cache (and all else nothing maps)
        page_cache.DROP_CACHES.write_text("3")
    return lookups_told(tmp_path / "runs", names)


@needs_root
def test_on_the_schedule_lookups_in_directories_outside_the_read_set_tell_nothing(tmp_path):
    """Inside each call's slot, once the read set is locked, the coordinator also drops
    every page nothing maps (``forget_lookups(directory_blocks=True)``), the directories'
    blocks among them: none is faster for client code's lookup."""
    assert directory_blocks_told(tmp_path) <= 23


@needs_root
@pytest.mark.slow  # the channel, shown open where only the entries are dropped (and cold)
def test_dropping_only_the_entries_leaves_the_directories_blocks_telling(tmp_path, monkeypatch):
    monkeypatch.setattr(coordinator, "forget_lookups", lambda **_: page_cache.forget_lookups())
    assert directory_blocks_told(tmp_path, cold=True) >= 24


def cpu_caches_told(tmp_path) -> int:
    """How many of the 32 regions (of 64, in the middle of a library every sandbox maps)
    client code read are among the 32 the method process read fastest after the call, on
    the schedule (chance: 16 +- 2). The 32 are drawn at random (seeded), so that a
    difference between regions that follows their place in the file (every other one, say)
    cannot pass for the caches."""
    import torch
    from adversaries import REGION

    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    start = library.stat().st_size // 2 // 4096 * 4096
    offsets = [start + i * REGION for i in range(64)]
    read = sorted(random.Random(33).sample(offsets, 32))
    params = {"file": str(library), "offsets": offsets, "read": read}
    result = go(tmp_path, scheduled("adv_cpu_caches", params))
    root = os.access(page_cache.DROP_CACHES, os.W_OK)  # else the kernel's caches stay
    assert ("lookups" in result.record["privacy"]["open_on_schedule"]) != root
    return len(set(result.artifact.texts) & {str(o) for o in read})


def test_on_the_schedule_the_cpu_caches_tell_nothing(tmp_path):
    """Inside each call's slot the coordinator reads a buffer twice the largest cache on
    every CPU (``cpu_caches.CacheSweep``): the lines client code left in the caches are
    gone before the method process runs. (Here the harness's own work between the call
    and the probe disturbs the caches enough without it: ``tests/test_cpu_caches.py``
    shows the channel, and the sweep closing it, on bare processes.)"""
    told = cpu_caches_told(tmp_path)
    assert told <= 24, f"{told} of 32 on {cpu_and_caches()}"  # 25 or more by chance: 7e-6


def _spectre_v2() -> str:
    """The kernel's Spectre v2 mitigations ("" where unreadable: a sandbox that imports
    this module for a client function here may not read /sys)."""
    try:
        return Path("/sys/devices/system/cpu/vulnerabilities/spectre_v2").read_text()
    except OSError:
        return ""


needs_conditional_ibpb = pytest.mark.skipif(
    "IBPB: conditional" not in _spectre_v2(),
    reason="the kernel offers no per-process flush of the branch predictors",
)


@needs_conditional_ibpb
def test_untrusted_processes_have_their_branch_predictors_flushed_on_every_switch(tmp_path):
    """The branch predictors are the CPU's too (a class found here): every untrusted
    process asks the kernel, for good, for a flush (IBPB) whenever it is switched in or out,
    so neither side can time branches the other trained (the sweep covers the data caches
    only)."""
    result = go(tmp_path, spec("adv_speculation"))
    [line] = result.artifact.texts  # "conditional force disabled" here
    assert line.startswith("SpeculationIndirectBranch:") and line.endswith("force disabled")


@needs_conditional_ibpb
def test_the_client_workers_branch_predictors_are_flushed_too(tmp_path):
    """Client code, which trains branches on private data, runs flushed as well (it tells by
    the class of the exception it raises, all of a failure that leaves the worker)."""
    with pytest.raises(PrivacyError, match="raised PermissionError"):
        go(tmp_path, spec("adv_failing_client", {"fn": "tell_branch_flush", "batched": False}))


@needs_conditional_ibpb
def test_the_flush_is_kept_by_children_and_cannot_be_undone():
    says_ok_in_a_child(
        textwrap.dedent(
            """
            import ctypes, os
            from benchmark.isolation.containment import isolate_branch_predictors
            assert isolate_branch_predictors()
            libc = ctypes.CDLL(None)
            assert libc.prctl(53, 1, 2, 0, 0) != 0  # PR_SPEC_ENABLE: refused
            if os.fork() == 0:
                status = open("/proc/self/status").read()
                os._exit(0 if "force disabled" in status else 1)
            assert os.waitstatus_to_exitcode(os.wait()[1]) == 0
            print("ok")
            """
        )
    )


def test_a_method_that_fails_to_start_on_the_schedule_lets_the_host_go(tmp_path):
    """The host's schedule lock and the locked read set are let go where the method
    process fails before its first answer: the next run on the schedule in this process
    starts (before, it was refused as "already open")."""
    with pytest.raises(Exception):  # noqa: B017 (whatever the method process reports)
        go(tmp_path / "a", scheduled("adv_fails_to_start", {}))
    assert not coordinator._holding_host
    assert go(tmp_path / "b", scheduled("adv_speculation", {})).artifact.texts


@needs_namespaces
def test_the_method_process_sees_no_process_of_the_host(tmp_path):
    """Through the host's /proc a method process could ``stat`` other processes' entries
    (Landlock restricts reads, not ``stat``) and read host thread ids, so count the
    processes client code starts. Its /proc is its own PID namespace's: the coordinator's
    entry is not there."""
    params = {"channels": ["proc"], "port": os.getpid()}
    result = go(tmp_path, spec("adv_channel", params))
    assert result.artifact.texts == ["proc: none"]


@needs_namespaces
def test_what_client_code_writes_in_its_scratch_no_method_process_can_stat(tmp_path):
    """Landlock refuses reading the client side's scratch, not ``stat``: client code writes
    a file there, and the method process stats it by its path beside its own work dir.
    The scratch is a tmpfs of the client worker's own, so the path names nothing."""
    result = go(tmp_path, spec("adv_channel", {"channels": ["scratch"], "port": 9}))
    assert result.artifact.texts == ["scratch: refused: FileNotFoundError"]
    assert list((tmp_path / result.record["run_key"] / "client_tmp").iterdir()) == []


@needs_seccomp
def test_the_public_corpus_reads_under_the_seccomp_filter():
    """The cpu profile's public corpus includes a packaged SQLite file: the method process
    reads it (the on-device LM's cache key hashes the corpus) with file locks refused."""
    code = textwrap.dedent(
        """
        from benchmark.isolation.sandbox import deny_shared_kernel_objects
        from benchmark.profiles.public_corpus import popquotes_documents
        assert deny_shared_kernel_objects()
        print(len(popquotes_documents()))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 100


def says_ok_in_a_child(code: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_seccomp_filter_refuses_every_socket_family_and_ipc_object(tmp_path):
    """Directly, in a child: every address family, socketpair, SysV and POSIX IPC, locks,
    inotify, RWF_NOWAIT reads (a page-cache probe) and O_PATH opens (a held directory
    entry, past the coordinator's drop) are refused; the process still reads, writes its
    pipes and imports torch."""
    if not seccomp_available():
        pytest.skip("needs seccomp (x86_64)")
    code = textwrap.dedent(
        """
        import ctypes, fcntl, os, socket
        from benchmark.isolation.sandbox import deny_shared_kernel_objects
        assert deny_shared_kernel_objects()
        libc = ctypes.CDLL(None, use_errno=True)
        families = [socket.AF_INET, socket.AF_INET6, socket.AF_UNIX, socket.AF_NETLINK,
                    socket.AF_PACKET]
        attempts = [lambda f=f: socket.socket(f, socket.SOCK_DGRAM) for f in families]
        attempts.append(socket.socketpair)
        fd = os.open(os.__file__, os.O_RDONLY)
        attempts += [lambda: fcntl.flock(fd, fcntl.LOCK_SH), lambda: fcntl.lockf(fd, fcntl.LOCK_SH)]
        def c(result):
            if result == -1:
                raise OSError(ctypes.get_errno(), "refused")
        attempts += [lambda: c(libc.shmget(1, 4096, 0o1000 | 0o600)),
                     lambda: c(libc.msgget(1, 0o1000 | 0o600)),
                     lambda: c(libc.semget(1, 1, 0o1000 | 0o600)),
                     lambda: c(libc.mq_open(b"/q", os.O_CREAT | os.O_RDWR, 0o600, None)),
                     lambda: c(libc.inotify_init1(0)),
                     lambda: c(libc.syscall(310, os.getppid(), 0, 0, 0, 0, 0)),
                     lambda: os.preadv(fd, [bytearray(8)], 0, os.RWF_NOWAIT),
                     lambda: os.open("/usr", os.O_PATH),
                     lambda: os.open("/usr", os.O_PATH | os.O_DIRECTORY, dir_fd=fd),
                     lambda: c(libc.syscall(437, -100, b"/usr", 0, 0))]
        for attempt in attempts:
            try:
                attempt()
            except OSError as exc:
                assert exc.errno == 1, exc
                continue
            raise AssertionError("not refused")
        r, w = os.pipe()
        os.write(w, b"x")
        assert os.read(r, 1) == b"x" and fcntl.fcntl(r, fcntl.F_GETFL) >= 0
        assert os.preadv(fd, [bytearray(8)], 0) == 8  # a plain preadv2 reads
        import torch
        assert float(torch.ones(2).sum()) == 2.0
        os.chdir("/usr")  # a method process may; a process that runs client code may not
        print("ok")
        """
    )
    says_ok_in_a_child(code)


def test_a_process_that_runs_client_code_keeps_its_working_directory():
    """A working directory holds its entry in the kernel's caches across the coordinator's
    drop of them: client code could keep one of its choice cached for the method process."""
    if not seccomp_available():
        pytest.skip("needs seccomp (x86_64)")
    code = textwrap.dedent(
        """
        import os
        from benchmark.isolation.sandbox import deny_shared_kernel_objects
        assert deny_shared_kernel_objects(client_code=True)
        fd = os.open("/usr", os.O_RDONLY | os.O_DIRECTORY)
        for attempt in (lambda: os.chdir("/usr"), lambda: os.fchdir(fd)):
            try:
                attempt()
            except PermissionError:
                continue
            raise AssertionError("not refused")
        print("ok")
        """
    )
    says_ok_in_a_child(code)


# --- class 6: the corpus the split was cut from ---------------------------------------------


def corpus_split():
    """The toy split, as if cut from the chitchat corpus (its manifest pins the package)."""
    split = make_split()
    manifest = {
        **split.manifest,
        "source": {"name": "chitchat", "revision": "chitchat-dataset==0.9.0"},
    }
    return dataclasses.replace(split, manifest=manifest)


def chitchat_file():
    import importlib.util

    spec_ = importlib.util.find_spec("chitchat_dataset")
    if spec_ is None:
        pytest.skip("the chitchat-dataset package is not installed")
    return Path(spec_.submodule_search_locations[0]) / "dataset.json"


@needs_landlock
def test_the_splits_corpus_and_the_raw_source_caches_are_unreadable(tmp_path, monkeypatch):
    """Server code and a client function each try the chitchat corpus (the split's
    source), a raw source cache, the evaluator's margins on private tuples (an earlier
    run's) and the hub's access token: refused; a sibling package, the rest of the cache
    and a hub model read (the client function raises if any denied read goes through)."""
    cache = tmp_path / "cache"
    raw = cache / "sources" / "chitchat" / "records-x.jsonl"
    raw.parent.mkdir(parents=True)
    raw.write_text("raw source records")
    margins = cache / "generator_margins" / "0123.npy"
    margins.parent.mkdir()
    margins.write_text("margins of private tuples")
    allowed = cache / "public_start" / "x.pt"  # a cache entry the sandbox may read
    allowed.parent.mkdir()
    allowed.write_text("public")
    hub = tmp_path / "hub"  # the hub's access token, beside a model it may read
    (hub / "hub" / "models--x").mkdir(parents=True)
    (hub / "token").write_text("hf_secret")
    model = hub / "hub" / "models--x" / "config.json"
    model.write_text("{}")
    monkeypatch.setenv("FEDSYNTH_CACHE", str(cache))
    monkeypatch.setenv("HF_HOME", str(hub))
    denied = [str(chitchat_file()), str(raw), str(margins), str(hub / "token")]
    allowed = [np.__file__, str(allowed), str(model)]
    params = {"denied": denied, "allowed": allowed}
    result = go(tmp_path / "runs", spec("adv_read_corpus", params), corpus_split())
    expected = [f"{p}: refused: PermissionError" for p in denied]
    assert result.artifact.texts == expected + [f"{p}: read" for p in allowed]


# --- class 3: a recomputation carries nothing to a later one ------------------------------


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _until(check) -> bool:
    for _ in range(100):
        if check():
            return True
        time.sleep(0.02)
    return False


def test_a_stop_reaches_a_process_that_left_its_process_group():
    """The schedule stops the client side and the method process in turn. A stop sent to
    the process group alone misses a child client code moved into a session of its own
    (``setsid``), which would run on beside the method process; ``signal_tree`` stops it."""
    code = textwrap.dedent(
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            print(os.getpid(), flush=True)
        time.sleep(30)
        """
    )
    command = [sys.executable, "-c", code]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, process_group=0)
    escaped = int(proc.stdout.readline())
    try:
        os.killpg(proc.pid, signal.SIGSTOP)
        assert _until(lambda: _state(proc.pid) == "T")
        assert _until(lambda: _state(escaped) == "S")  # the group's stop missed it
        signal_tree(proc.pid, signal.SIGSTOP)
        assert _until(lambda: _state(escaped) == "T")
        signal_tree(proc.pid, signal.SIGCONT)
        assert _until(lambda: _state(escaped) == "S" and _state(proc.pid) == "S")
    finally:
        for pid in (escaped, proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_on_the_isolated_path_a_recomputation_finds_nothing_an_earlier_one_left(tmp_path):
    """The same client function through a run (two releases, each checked): in the client
    worker it answers 0; in a recomputation, 1 where an earlier one left state, which the
    check would refuse (the worker said 0). The run ends, so none found any."""
    result = go(tmp_path, spec("adv_recompute_state"))
    assert result.record["privacy"]["ledger"] and result.artifact.texts == ["nothing"]


@needs_landlock
def test_a_recomputation_finds_nothing_an_earlier_one_left(tmp_path):
    """The independence check's processes, sandboxed as on the isolated path, recompute a
    function that leaves state for later calls (files, a module, a daemon), over two
    releases: every call must find none, else its row (1) differs from the expected 0 and
    the release is refused."""
    from benchmark.federation import independence_check
    from benchmark.isolation.client_process import child_env
    from benchmark.isolation.coordinator import harness_code, policy_for
    from benchmark.isolation.sandbox import sandbox_environment
    from benchmark.isolation.template import spawn
    from benchmark.protocol import jobs

    scratch = tmp_path / "recompute_tmp"
    scratch.mkdir()
    policy = policy_for(harness_code() + [Path(__file__).parent], [scratch])
    env = {**child_env(), **sandbox_environment(policy, scratch)}
    independence_check.set_zygote_launch(lambda fd: spawn("zygote", (fd,), env))
    try:
        for release in range(2):
            check = independence_check.IndependenceCheck(
                jobs.CLIENT, jobs.snapshot(adversaries.leaves_state, None), frozenset({0, 1, 2})
            )
            for client in range(3):
                records = [{"text": f"t{release}{client}", "client_id": "c"}]
                check.submit(client, records, 7, {"row": np.array([0.0])})
            check.finish(1.0)
        assert not list(scratch.iterdir()), "a call's scratch outlived it"
    finally:
        independence_check.set_zygote_launch(None)


# --- class 8: every untrusted process dies with its run -------------------------------------


def _described(pid):
    """A process's state, parent, namespaces' pids and command line (for a failure)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        wanted = [x for x in status if x.split(":")[0] in ("State", "PPid", "NSpid", "NSsid")]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        return f"{pid}: {' | '.join(wanted)} | {cmdline[:160]}"
    except OSError:
        return f"{pid}: gone"


def survivors(tag, wait_s=3.0):
    """Live processes with ``tag`` in their command line (zombies are dead)."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for entry in Path("/proc").iterdir():
            try:
                mine = tag.encode() in (entry / "cmdline").read_bytes()
                if mine and "\tZ" not in (entry / "status").read_text():
                    alive.append(int(entry.name))
            except (OSError, ValueError):
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def test_what_a_runs_client_code_leaves_no_later_run_finds(tmp_path):
    """Colluding runs: one run's client code writes its texts into every directory it can
    (its own scratch at least: it fails where it wrote nowhere); once it ends nothing of
    that is left on the host, and a later run's method process, looking under the runs
    root and the usual places, finds none."""
    go(tmp_path, spec("adv_leave_for_later"))
    assert adversaries.find_left([str(tmp_path)]) == []
    later = go(tmp_path, spec("adv_find_left", {"roots": [str(tmp_path)]}))
    assert later.artifact.texts == ["nothing"]


@needs_namespaces
@pytest.mark.parametrize("outcome", ["fails", "succeeds", "overruns its schedule"])
def test_daemons_left_by_client_and_server_code_die_with_the_run(tmp_path, outcome):
    """Every client call, and the server side, leave a daemon; then the client function
    raises, or the run ends, or its first call overruns the public schedule (a timeout):
    none survives."""
    tag = f"fedsynth-daemon-{tmp_path.name}"
    params = {"tag": tag, "fail": outcome == "fails"}
    try:
        if outcome == "fails":
            with pytest.raises(PrivacyError, match="raised RuntimeError"):
                go(tmp_path, spec("adv_daemon", params))
        elif outcome == "succeeds":
            assert go(tmp_path, spec("adv_daemon", params)).artifact.texts
        else:  # settling alone takes longer than 0.1 s
            with pytest.raises(PrivacyError, match="longer than the run's public schedule"):
                go(tmp_path, scheduled("adv_daemon", params, call_seconds=0.1))
        assert survivors(tag) == []
    finally:
        for pid in survivors(tag, 0):
            os.kill(pid, 9)


@needs_namespaces
@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_a_daemon_dies_when_the_operator_kills_the_coordinator(tmp_path, signal_name):
    """A run on the isolated path, in a process of its own (the operator's ``fedsynth
    run``): the server side and every client call leave a daemon (setsid, double fork),
    then the method process waits; the operator kills the coordinator: nothing of the run's
    untrusted processes survives."""
    import signal

    tag = f"fedsynth-daemon-{tmp_path.name}"
    coordinator = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import adversaries
        from doubles import StubProfile, make_split
        from benchmark.runner import run
        from benchmark.spec import spec_from_dict
        params = {{"tag": {tag!r}, "fail": False, "linger": 300}}
        run(spec_from_dict({{"split": {{"path": "unused"}}, "seed": 5,
                             "method": {{"name": "adv_daemon", "params": params}},
                             "privacy": {{"epsilon": 2.0, "delta": 1e-5}}}}),
            runs_root=Path({str(tmp_path)!r}), profile=StubProfile(), split=make_split(),
            isolated=True)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = tmp_path / "coordinator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", coordinator], env=env, stderr=out)
    try:
        deadline = time.monotonic() + 120
        while len(survivors(tag, 0)) < 2:  # the server side's and a client call's
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        proc.send_signal(getattr(signal, signal_name))
        proc.wait(timeout=30)
        left = survivors(tag)
        assert left == [], [_described(pid) for pid in left]
    finally:
        proc.kill()
        for pid in survivors(tag, 0):
            os.kill(pid, 9)
