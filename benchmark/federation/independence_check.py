"""The independence check (trusted side): sampled client rows recomputed alone, in a clean
process, and compared with the rows the pool clipped.

Per-client clipping bounds a client's influence on a release only if the row the pool
clips was computed from that client alone. A batched function can mix every client into
every row; a per-client function can keep what earlier clients showed it (an attribute, a
module global) and fold it into later rows. Neither is visible in the rows themselves, so
the pool (:class:`benchmark.federation.pool.ClientPool`) recomputes a random sample of them
here. Each sampled client is recomputed in a process of its own, which gets the client
function and the payload as they were before the release ran (pickled then), that
client's records and the seed of its call, and nothing else. It runs the call as the pool
does (a new :class:`ClientData` with an empty memo, a batch of one for batched functions,
inside :func:`client_scope`, under :func:`seeded_rngs`) and sends back the output, which
the pool compares with its own row. A client's memo is recomputed from its records (a memo
could otherwise carry what a batched ``memo_rows`` computed from several clients).

Processes (:mod:`benchmark.untrusted.zygote`: they run client code). A *zygote*, started
once from a fresh interpreter, only imports modules (those the jobs' pickles name that the
pool's process has imported: never a module a call imported, which would let a call leave
state for later ones) and forks; it never receives a function, a payload or a record. Per
release it forks a *release worker*, which receives the pickled job once and relays; per
sampled client the release worker forks a child that runs the call in a grandchild of its
own: process 1 of a new PID namespace where the kernel allows it, in a nested sandbox that
writes only a fresh scratch directory and signals nobody outside; once it ends, every
process it started is dead and the scratch removed. So a call finds nothing an earlier
call left, in memory, on disk or in a process, and cannot read the next client's records
(it never holds the release's socket). The job's large buffers travel out of band
(:func:`~benchmark.protocol.jobs.snapshot`): a child unpickles only the pickle stream, its
arrays views of the release worker's copy, so a 100 MB payload is not copied once per
sampled client. torch and the harness's modules are thus imported once per run (a method's
own modules, which the pool's process does not import on the isolated path, once per
call), and each recomputation costs two forks (milliseconds) on top of the call itself.

Protocol on a release worker's socket (frames of an 8-byte little-endian length and a
body):

1. worker → pool: ``b"I"`` and its pid (its process group, which the pool can kill);
2. pool → worker: a plain pickle of ``{"kind", "threads"}``, then the snapshot of
   ``(function, payload)``;
3. per client, pool → worker: a plain pickle of ``(records, seed)``; worker → pool: ``b"R"``
   and an ``.npz`` of the output arrays, or ``b"E"`` and the exception's type name (not its
   message, which client code writes);
4. end of input: the worker exits.

The pool reads answers as numpy arrays with ``allow_pickle=False``: a worker running hostile
code cannot make the pool unpickle anything. Workers' stdout and stderr go to /dev/null (the
pool's own run of the same calls already printed whatever they print). Needs ``os.fork``
(Linux, macOS).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import pickle
import pickletools
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmark.privacy.errors import PrivacyError
from benchmark.protocol.jobs import Rows, job_parts
from benchmark.protocol.wire import FRAME, read_frame, write_frame

# How far a recomputed row may be from the pool's, in L2 distance relative to the larger of
# its norm and the release's floor (its clip norm): float32 accumulation in another order
# (what honest rows differ by: docs/architecture.md, "The independence check's bound").
TOLERANCE = 1e-5
BLOCK = 1 << 20  # coordinates a check compares at once (8 MB in float64: reused, not zeroed)
GRACE_S = 300.0  # start-up and unpickling allowance on top of 4x the pool's own time
ZYGOTE = "benchmark.untrusted.zygote"  # the module the zygote runs (client code runs there)


def rows_match(
    expected: Rows, got: Rows, floor: float = 1.0, exact: bool = False, order: int = 2
) -> bool:
    """Same arrays, same shapes, each within :data:`TOLERANCE` of the pool's in L2
    distance (L1 with ``order`` 1: a Laplace sum's sensitivity), relative to its norm or
    ``floor``, whichever is larger; equal, with
    ``exact`` or for integer arrays (a part index or a token id that moves by one is
    another decision, however small the move).

    The bound is on the whole row, not per coordinate: a per-coordinate allowance, summed
    over a row's d coordinates, let every row of a release carry √d times more of other
    clients' data unseen, coherently across rows. What still passes unseen is a shift of
    each row by at most ``TOLERANCE`` × max(norm, floor); with the clip norm as the floor,
    every clipped row moves by at most 2 × ``TOLERANCE`` × the clip norm. A row whose norm
    overflows matches nothing (its allowance would be infinite)."""
    if expected.keys() != got.keys():
        return False
    for name, want in expected.items():
        have = got[name]
        if want.shape != have.shape or have.dtype.kind not in "biuf":
            return False
        if exact or want.dtype.kind in "biu":
            if not np.array_equal(have, want):
                return False
            continue
        norm, distance = _norm_and_distance(want.ravel(), have.ravel(), order)
        if not (math.isfinite(norm) and distance <= TOLERANCE * max(floor, norm)):
            return False
    return True


def _norm_and_distance(want: np.ndarray, have: np.ndarray, order: int) -> tuple[float, float]:
    """‖want‖ and ‖have − want‖ (L2, or L1 with ``order`` 1) in float64, a block of
    :data:`BLOCK` coordinates at a time: float64 copies of a whole 100 MB row are fresh
    memory the kernel zeroes on every check, and cost more than the arithmetic."""
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order}")
    norm = distance = 0.0
    for start in range(0, want.size, BLOCK):
        w = want[start : start + BLOCK].astype(np.float64)
        d = have[start : start + BLOCK].astype(np.float64) - w
        if order == 1:
            norm += float(np.abs(w).sum())
            distance += float(np.abs(d).sum())
        else:
            norm += float(w @ w)
            distance += float(d @ d)
    return (norm, distance) if order == 1 else (math.sqrt(norm), math.sqrt(distance))


# --- pool side-----------------------------------------------------------------------------


class IndependenceCheck:
    """One release's independence check: the ``chosen`` clients' rows, each recomputed
    alone (the pool's ``_recheck`` makes one).

    The function and payload are pickled when the check is made, before any client of the
    release runs. ``submit`` keeps the pool's rows of the chosen clients; ``finish``, after
    the pool's own computation (so the recomputation neither competes with it for cores
    nor shows in its client seconds), has them recomputed and compares. Any difference,
    error, crash or timeout raises :class:`PrivacyError`. Without chosen clients it does
    nothing.
    """

    def __init__(
        self,
        kind: str,
        job: bytes,
        chosen: frozenset[int],
        floor: float = 1.0,
        exact: bool = False,
        order: int = 2,
    ) -> None:
        self.chosen = chosen
        self._kind = kind
        self._floor, self._exact, self._order = floor, exact, order  # see rows_match
        self._job = job if chosen else b""
        self._calls: list[tuple[list[dict[str, Any]], int, Rows]] = []

    def submit(self, client: int, records: list[dict[str, Any]], seed: int, rows: Rows) -> None:
        """Keep ``rows`` (the pool's output for ``client``) if the client was chosen."""
        if client in self.chosen:
            self._calls.append((records, seed, rows))

    def finish(self, seconds: float) -> None:
        """Recompute the kept clients alone and compare, within ``GRACE_S`` + 4 × the pool's
        ``seconds``."""
        if not self._calls:
            return
        allowed = GRACE_S + 4 * seconds
        deadline = time.monotonic() + allowed
        worker = _Worker(_modules_in(self._job))
        try:
            worker.send(pickle.dumps({"kind": self._kind, **_torch_state()}), deadline)
            worker.send(self._job, deadline)
            for records, seed, expected in self._calls:
                worker.send(pickle.dumps((records, seed)), deadline)
                tag, body = worker.answer(deadline)
                if tag != b"R":
                    raise _refusal(f"recomputed alone, it raised {_error_name(body)}")
                got = _load_rows(body)
                if not rows_match(expected, got, self._floor, self._exact, self._order):
                    raise _refusal("a sampled client's row differs when recomputed alone")
        except TimeoutError:
            worker.kill()
            raise PrivacyError(
                "the independence check did not finish: recomputing the sampled clients alone "
                f"took longer than the {GRACE_S:.0f} s + 4 x the release's own time it allows; "
                "the release was not made (client code sets those times). A client function that "
                "waits on other clients, or a machine too loaded for the check to keep pace, "
                "causes this; a rerun of the run resumes from its last checkpoint"
            ) from None
        except BaseException:
            worker.kill()
            raise
        worker.close()


class _Worker:
    """The pool's end of one release worker's socket."""

    def __init__(self, preload: list[str]) -> None:
        self._socket = _fork_worker(preload)
        self._stream = self._socket.makefile("rwb")
        self._pid: int | None = None

    def send(self, body: bytes, deadline: float) -> None:
        self._within(deadline, write_frame, self._stream, body)

    def answer(self, deadline: float) -> tuple[bytes, bytes]:
        """The next answer's tag and body; the worker's pid is taken on the way."""
        while True:
            frame = self._within(deadline, read_frame, self._stream)
            if frame is None:
                raise _refusal("the recomputing process ended before answering")
            tag, body = frame[:1], frame[1:]
            if tag == b"I":
                self._pid = int(body)
            else:
                return tag, body

    def close(self) -> None:
        """End its input: it exits (the zygote reaps it)."""
        with contextlib.suppress(OSError):
            self._stream.close()
            self._socket.close()

    def kill(self) -> None:
        """Stop it and its children now: a zygote in a PID namespace of its own is killed
        whole (the worker's pid is one of that namespace; the next release starts a new
        zygote), else the worker's process group once its pid is known; without a pid it
        exits at its next read or write on the closed socket."""
        if not _kill_namespaced_zygote() and self._pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(self._pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self.close()

    def _within(self, deadline: float, operation: Any, *args: Any) -> Any:
        self._socket.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            return operation(*args)
        except TimeoutError:
            raise  # past the deadline: finish says so
        except OSError:
            return None  # the worker is gone: the missing answer says so


class _Zygote:
    """A clean process that only imports modules and forks one worker per release.

    Started from a fresh interpreter or the isolated path's launch template (never forked
    from the pool's process), it never
    receives a function, a payload or a record, so a worker forked from it holds nothing
    but imported modules until it is handed its release. Commands on its control socket:
    ``b"P"`` and a pickled list of module names to import, ``b"F"`` with a socket (passed
    as a file descriptor) to fork a worker on. It exits when the pool's process closes
    the socket.
    """

    def __init__(self, launch: ZygoteLaunch | None) -> None:
        self.control, theirs = socket.socketpair()
        self.proc = (launch or _plain_zygote)(theirs.fileno())
        self.launch = launch
        theirs.close()
        self.owner = os.getpid()  # a process forked from the pool's needs a zygote of its own
        self.preloaded: set[str] = set()
        threading.Thread(target=self.proc.wait, daemon=True).start()  # reaped when it ends

    def preload(self, names: list[str]) -> None:
        """Have it import ``names`` (those not sent before)."""
        new = [name for name in names if name not in self.preloaded]
        if new:
            self.preloaded.update(new)
            body = pickle.dumps(new)
            self.control.sendall(b"P" + FRAME.pack(len(body)) + body)

    def fork_after(self, preload: list[str]) -> socket.socket:
        """A socket connected to a worker forked once ``preload`` is imported."""
        self.preload(preload)
        mine, theirs = socket.socketpair()
        try:
            socket.send_fds(self.control, [b"F"], [theirs.fileno()])
        finally:
            theirs.close()
        return mine


# How to start the zygote on its end of the control socket (a descriptor), returning a
# handle with ``pid``, ``poll``, ``wait`` and ``kill``. The isolated path
# (benchmark.isolation) sets one that sandboxes it, since its workers run client code.
ZygoteLaunch = Callable[[int], Any]


def _plain_zygote(control_fd: int) -> subprocess.Popen:
    """The zygote in a plain interpreter (the in-process path), importing what the pool
    imports; its output is not the operator's terminal (it imports what client code
    named)."""
    paths = [p or os.getcwd() for p in sys.path]
    return subprocess.Popen(
        [sys.executable, "-m", ZYGOTE, str(control_fd)],
        pass_fds=(control_fd,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
    )


_zygote: _Zygote | None = None
_zygote_launch: ZygoteLaunch | None = None
_zygote_lock = threading.Lock()  # one command at a time on its control socket


def set_zygote_launch(launch: ZygoteLaunch | None) -> None:
    """Start later zygotes with ``launch`` (None: a plain interpreter); a running zygote
    started otherwise is replaced at the next release."""
    global _zygote_launch
    with _zygote_lock:
        _zygote_launch = launch


def stop_zygote() -> None:
    """End this process's zygote at the end of a run (in its own PID namespace its workers
    end with it), so the next run starts its own: a zygote kept across runs holds the
    sandbox of the run it was started for (a rerun of the same spec has the same launch,
    but its run directory, the one the zygote may write, was quarantined and is new)."""
    global _zygote
    with _zygote_lock:
        if _zygote is not None and _zygote.owner == os.getpid():
            _zygote.proc.kill()
        _zygote = None


def _fork_worker(preload: list[str]) -> socket.socket:
    """A worker forked once the zygote has imported ``preload``; the zygote is (re)started
    when it is not running or belongs to another process."""
    global _zygote
    with _zygote_lock:
        stale = _zygote is None or _zygote.owner != os.getpid() or _zygote.proc.poll() is not None
        if stale or _zygote.launch != _zygote_launch:
            _zygote = _Zygote(_zygote_launch)
        try:
            return _zygote.fork_after(preload)
        except OSError:  # it died since the last release: start a new one, once
            _zygote = _Zygote(_zygote_launch)
            return _zygote.fork_after(preload)


def _own_pid_namespace(pid: int) -> bool:
    """Whether process ``pid`` starts its children in another PID namespace than ours (the
    keeper of :func:`benchmark.isolation.containment.contain` does)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid_for_children") != os.readlink("/proc/self/ns/pid")
    except OSError:
        return False


def _kill_namespaced_zygote() -> bool:
    """Kill this process's zygote if it lives in a PID namespace of its own (all its
    workers die with it); False when there is none such. Asked once a worker ran: by then
    the zygote's launch has made its namespaces, if it could."""
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.owner != os.getpid():
            return False
        if not _own_pid_namespace(_zygote.proc.pid):
            return False
        _zygote.proc.kill()
        _zygote = None
        return True


def _modules_in(job: bytes) -> list[str]:
    """The modules a pickle names that this process has imported. Importing them in the
    zygote before it forks costs one import per run, not one per worker (a string that
    merely equals a module's name adds a harmless import)."""
    names: dict[str, None] = {}
    try:
        for _, arg, _ in pickletools.genops(job_parts(job)[0].tobytes()):
            if isinstance(arg, str) and arg in sys.modules:
                names[arg] = None
    except Exception as exc:  # a method process sent bytes that are not a snapshot
        raise PrivacyError(f"the client-side job is not a snapshot ({exc})") from exc
    return list(names)


def _torch_state() -> dict[str, Any]:
    """What the recomputation must match: torch's thread count (the order of its float
    reductions). Not this process's CUDA state: the rows may come from another process
    (the client worker), and every client call starts from CUDA initialised and seeded
    wherever the process can use it (:func:`~benchmark.federation.clients.seeded_rngs`)."""
    torch = sys.modules.get("torch")
    return {"threads": torch.get_num_threads() if torch is not None else None}


def _load_rows(body: bytes) -> Rows:
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as arrays:
            return {name.removeprefix("r_"): arrays[name] for name in arrays.files}
    except Exception:
        return {}  # not plain arrays: matches nothing


def _error_name(body: bytes) -> str:
    """A built-in exception class's name, else "an exception" (client code writes the
    answer's bytes, and can name a class anything: :mod:`~benchmark.federation.client_errors`)."""
    from benchmark.federation.client_errors import error_class

    return error_class(body.decode(errors="replace"))


def _refusal(why: str) -> PrivacyError:
    return PrivacyError(
        "client function output depends on other clients or on state kept across clients "
        f"({why}); the release was not made. A client-side function must compute each row "
        "from its own client's data, the payload and the pool-seeded RNGs only"
    )
