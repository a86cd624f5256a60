"""The page cache of a method process's read set, kept whole on the schedule (issue 33):
``benchmark.isolation.page_cache``. The end-to-end check is in ``tests/test_channels.py``."""

import os
import resource
from pathlib import Path

import pytest

from benchmark.isolation import page_cache
from benchmark.privacy.errors import PrivacyError


def _drop(path: Path, sync: bool = False) -> None:
    """Evict the file's pages, as memory pressure would (``sync``: written ones too, which
    are dirty until then: the kernel keeps those)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if sync:
            os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _evicted(tmp_path: Path, name: str, size: int) -> Path:
    path = tmp_path / name
    path.write_bytes(os.urandom(size))
    _drop(path, sync=True)
    if size > 4096 and _resident(path) == -(-size // 4096):
        pytest.skip("this file system keeps a file's pages (tmpfs): nothing to bring back")
    return path


def _resident(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        return page_cache.resident_pages(fd, path.stat().st_size)
    finally:
        os.close(fd)


def test_every_page_of_the_read_set_is_resident_after_it(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    files = [_evicted(tmp_path / "a", "one", 300_000), _evicted(tmp_path / "a" / "b", "two", 5)]
    found = page_cache.keep_resident([tmp_path / "a"])
    assert [_resident(f) for f in files] == [74, 1]
    assert (found.files, found.total_bytes) == (2, 300_005)
    assert page_cache.keep_resident([tmp_path / "a"]).read_back_bytes == 0  # all there


def test_mincore_and_cachestat_agree(tmp_path):
    path = _evicted(tmp_path, "f", 64 * 4096)
    with path.open("rb") as f:
        f.seek(8 * 4096)
        f.read(4096)
        counted = page_cache.resident_pages(f.fileno(), 64 * 4096)
        assert counted == page_cache._mincore(f.fileno(), 64 * 4096)


def test_roots_are_walked_once_and_links_not_followed(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "x.so").write_bytes(b"x")
    (tmp_path / "outside").write_bytes(b"y")
    (tmp_path / "lib" / "link").symlink_to(tmp_path / "outside")
    (tmp_path / "alias").symlink_to(tmp_path / "lib")  # as /lib is /usr/lib
    roots = [tmp_path / "alias", tmp_path / "lib", tmp_path / "lib" / "x.so"]
    assert list(page_cache.regular_files(roots)) == [str(tmp_path / "lib" / "x.so")]


def test_a_read_set_the_memory_cannot_hold_stops_the_run(tmp_path, monkeypatch):
    _evicted(tmp_path, "f", 8192)
    monkeypatch.setattr(page_cache, "resident_pages", lambda fd, size, may_map: 0)  # always evicted
    monkeypatch.setattr(page_cache, "_POLL_TRIES", 2)
    with pytest.raises(PrivacyError, match=r"8,192 of 8,192 bytes .* could not be made"):
        page_cache.keep_resident([tmp_path])


def test_a_file_whose_access_time_it_may_not_keep_is_brought_back_unread(tmp_path, monkeypatch):
    """Where ``O_NOATIME`` is refused (a file the coordinator does not own), a read would
    move the access time of a file client code evicted; read-ahead does not."""
    path = _evicted(tmp_path, "f", 300_000)
    os.utime(path, ns=(10**18, path.stat().st_mtime_ns))  # older than its mtime: a read moves it
    monkeypatch.setattr(page_cache, "_open", lambda name: (os.open(name, os.O_RDONLY), False))
    assert page_cache.keep_resident([tmp_path]).read_back_bytes == 300_000
    assert _resident(path) == 74 and path.stat().st_atime_ns == 10**18


def test_a_short_count_from_cachestat_is_checked_through_a_mapping(tmp_path, monkeypatch):
    """On an overlay (a container's root) ``cachestat`` sees none of the real file's pages."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    monkeypatch.setattr(page_cache, "_cachestat", lambda fd: 0)
    with path.open("rb") as f:
        f.read()
        assert page_cache.resident_pages(f.fileno(), 8192) == 2


def _locked_kib() -> int:
    """This process's locked memory (``VmLck``)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmLck:"))


can_lock = pytest.mark.skipif(
    os.geteuid() != 0 and resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] < (1 << 20),
    reason="locking memory needs root or a lock limit of 1 MiB",
)


@can_lock
def test_the_read_set_is_locked_for_the_run_and_a_replaced_file_anew(tmp_path):
    """Locked for the run, the read set's pages go neither to pressure (the least recently
    used first: the files client code did not read) nor to an eviction; a file replaced
    since is locked anew and its old pages unlocked; released, none stay locked."""
    (tmp_path / "a").mkdir()
    files = [_evicted(tmp_path / "a", name, 64 * 4096) for name in ("one", "two")]
    before = _locked_kib()
    pins = page_cache.Pins()
    page_cache.keep_resident([tmp_path / "a"], pins=pins)
    assert pins.refused is None and _locked_kib() - before == 2 * 256
    for path in files:
        _drop(path)
    assert [_resident(f) for f in files] == [64, 64]
    replacement = tmp_path / "new"
    replacement.write_bytes(os.urandom(32 * 4096))
    os.replace(replacement, files[0])
    page_cache.keep_resident([tmp_path / "a"], pins=pins)
    assert _locked_kib() - before == 256 + 128
    pins.release()
    assert _locked_kib() == before


def test_nothing_is_locked_where_too_little_memory_would_stay_available(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    _evicted(tmp_path / "a", "one", 8 * 4096)
    monkeypatch.setattr(page_cache, "pin_margin", lambda: page_cache.meminfo_bytes("MemTotal"))
    before = _locked_kib()
    pins = page_cache.Pins()
    page_cache.keep_resident([tmp_path / "a"], pins=pins)
    assert "available" in pins.refused and _locked_kib() == before


@pytest.fixture
def settling(tmp_path, monkeypatch):
    """Make the coordinator's settlings (:class:`~benchmark.isolation.coordinator._Settling`)
    under a lock of this test's own, each closed at the end, and record the drops asked."""
    from benchmark.isolation import coordinator
    from benchmark.isolation.sandbox import Policy

    monkeypatch.setattr(coordinator, "HOST_SCHEDULE_LOCK", tmp_path / "schedule.lock")
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "a").write_bytes(b"x" * 10_000)
    made, drops = [], []
    monkeypatch.setattr(coordinator, "forget_lookups", lambda **kw: drops.append(kw) or True)

    def make(gpu=False, log=None):
        settle = coordinator._Settling(Policy(read_only=(tmp_path / "set",), gpu=gpu), log)
        settle.sweep.sweep = lambda: drops.append("swept")
        made.append(settle)
        return settle

    make.drops = drops
    yield make
    for settle in made:
        settle.close()


def test_what_the_host_cannot_close_on_the_schedule_is_collected(settling, monkeypatch):
    """The coordinator's settling between a call and the method process's next turn names
    what it could not do, for the record (``privacy.open_on_schedule``): the drop refused
    (not root), and, with the read set not locked, the drop of the directories' blocks
    (it would drop the read set too) and the page cache's order; a GPU run's GPU caches."""
    from benchmark.isolation import coordinator

    monkeypatch.setattr(page_cache, "pin_margin", lambda: 1 << 50)  # no room to lock
    settle = settling()
    settle(after_client_code=False)  # before the method process starts
    assert settle.open == {coordinator.PAGE_ORDER}
    settle()  # after a call
    assert settle.open == {coordinator.PAGE_ORDER, coordinator.DIRECTORY_BLOCKS}
    assert settling.drops == [{"directory_blocks": False}, "swept"] * 2
    monkeypatch.setattr(coordinator, "forget_lookups", lambda **kw: False)
    settle()
    assert coordinator.LOOKUPS in settle.open
    settle.close()
    assert settling(gpu=True).open == {coordinator.GPU_CACHES}  # nothing sweeps them yet


def test_what_stayed_open_is_kept_across_a_resume(settling, tmp_path, monkeypatch):
    """The releases an attempt delivered are replayed when the run resumes, so what was
    open when they were computed stays named, from the run directory's log."""
    from benchmark.isolation import coordinator

    log = tmp_path / coordinator.OPEN_ON_SCHEDULE
    monkeypatch.setattr(coordinator, "forget_lookups", lambda **kw: False)  # not root
    first = settling(log=log)
    first(after_client_code=False)
    first.close()
    monkeypatch.setattr(coordinator, "forget_lookups", lambda **kw: True)  # root, resumed
    assert coordinator.LOOKUPS in settling(log=log).open


def test_a_read_set_file_that_cannot_be_locked_later_stops_the_run(settling, tmp_path, monkeypatch):
    """Once the first walk is done (before any client code ran), whether a file can still
    be locked follows the memory client code holds: a refusal then stops the run instead
    of being recorded (client code would choose a word of the record)."""
    settle = settling()
    settle(after_client_code=False)
    monkeypatch.setattr(page_cache, "pin_margin", lambda: 1 << 50)
    monkeypatch.setattr(page_cache, "_CHECK_EVERY", 1)
    (tmp_path / "set" / "b").write_bytes(b"y" * 10_000)  # e.g. a cache a method asked for
    with pytest.raises(PrivacyError, match="the run stops"):
        settle()


@pytest.mark.skipif(not os.access("/proc/sys/vm/drop_caches", os.W_OK), reason="root only")
def test_once_the_read_set_is_locked_the_directories_blocks_go_too(settling):
    settle = settling()
    settle(after_client_code=False)
    settle()
    assert settling.drops == [
        {"directory_blocks": False},
        "swept",
        {"directory_blocks": True},
        "swept",
    ]
    assert settle.open == set()


def _resident_set_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmRSS:"))


def test_a_closed_settling_frees_its_sweep_at_once(settling):
    """Each settling sweeps the CPU's caches with a buffer of a gigabyte or more. A
    finished run's objects can wait in reference cycles for the collector: were the
    buffer freed only with them, a process that runs several scheduled runs (a suite, the
    tests) would hold a gigabyte per run, and the next run's read set could not be locked
    for want of memory (seen: 11 GB in one test process, then the lock refused)."""
    before = _resident_set_bytes()
    kept = []  # still referenced, as by a cycle not yet collected
    for _ in range(3):
        settle = settling()
        settle(after_client_code=False)
        settle.close()
        kept.append(settle)
    assert _resident_set_bytes() - before < 512 << 20
    assert all(settle.sweep.nbytes == 0 for settle in kept)


def test_runs_on_the_schedule_take_the_host_one_at_a_time(tmp_path, monkeypatch):
    """The caches a run on the schedule drops, locks and sweeps are the host's: a second
    one waits until the first has closed (here, a second process's)."""
    import subprocess
    import sys
    import textwrap
    import time

    from benchmark.isolation import coordinator
    from benchmark.isolation.sandbox import Policy

    lock = tmp_path / "schedule.lock"
    monkeypatch.setattr(coordinator, "HOST_SCHEDULE_LOCK", lock)
    monkeypatch.setattr(coordinator, "forget_lookups", lambda **_: True)
    first = coordinator._Settling(Policy(read_only=()))
    second = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            from benchmark.files import exclusive_lock
            from pathlib import Path
            with exclusive_lock(Path({str(lock)!r}), waiting="waits"):
                print("got it", flush=True)
            """)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )  # fmt: skip
    time.sleep(2)
    assert second.poll() is None  # waiting
    first.close()
    out, err = second.communicate(timeout=30)
    assert out == "got it\n" and "waits" in err
