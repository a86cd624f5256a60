"""The coordinator's side of the isolated path: it starts the method process and serves the
pool calls the method makes, without loading any method code itself.

The coordinator is the runner's process (:mod:`benchmark.runner`). It owns the split, the
:class:`~benchmark.federation.pool.ClientPool` (sampling, clipping, summing, noise), the
ledger and the accountant, the checkpoints and the evaluation. Method code runs in two
untrusted processes: the method process (:mod:`benchmark.untrusted.method_process`) and the
client worker (:mod:`benchmark.untrusted.client_worker`). The one channel between the
method and the private data is the pool's API, carried by :class:`MethodProcess` as JSON
arguments and opaque job blobs; the coordinator unpickles nothing it receives.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmark.federation.pool import ClientPool
from benchmark.files import atomic_write, exclusive_lock
from benchmark.isolation.bounds import RequestBoundError, RequestBounds
from benchmark.isolation.client_process import PRIVATE_LOG, ClientFunctionError, child_env
from benchmark.isolation.containment import signal_tree
from benchmark.isolation.corpus import denied_paths
from benchmark.isolation.cpu_caches import CacheSweep
from benchmark.isolation.engine_service import EngineService
from benchmark.isolation.page_cache import Pins, forget_lookups, keep_resident
from benchmark.isolation.sandbox import (
    Policy,
    gpu_access,
    interpreter_paths,
    readable_except,
    sandbox_environment,
)
from benchmark.isolation.template import spawn
from benchmark.privacy.errors import PrivacyError
from benchmark.protocol import wire
from benchmark.protocol.engine_calls import ENGINE
from benchmark.protocol.operations import (
    AGGREGATE,
    ARRAY,
    BLOB_PARAMETERS,
    BY_NAME,
    FUNCTION,
    JOB,
    PICKLED,
    PLAIN,
    TENSORS,
    WEIGHTS,
)


class MethodError(RuntimeError):
    """Method code raised (in the method process); the message is the method's own."""


def _error_types() -> dict[str, Callable[[str], Exception]]:
    """Errors the harness's own code raises in the method process, re-raised here as the
    same types (tests and users match on them); anything else is a :class:`MethodError`."""
    from benchmark.artifact import ArtifactError
    from benchmark.checkpoints import UnsafeCheckpointError
    from benchmark.protocol.operations import ServerAccessError
    from benchmark.registry import RegistryError
    from benchmark.spec import SpecError

    kinds = (ArtifactError, PrivacyError, RegistryError, ServerAccessError, SpecError)
    return {cls.__name__: cls for cls in (*kinds, UnsafeCheckpointError)}


HUB_TOKENS = ("token", "stored_tokens")  # the hub's access tokens, under HF_HOME


def policy_for(
    code: list[Path],
    read_write: list[Path],
    readable: list[Path] | None = None,
    denied: tuple[Path, ...] = (),
    gpu: bool = False,
    client_code: bool = False,
) -> Policy:
    """What an untrusted process may see: the interpreter, the harness's and the method's
    code, the model caches (read-only), and its own ``read_write`` directories; never the
    cache's entries computed from private data (the builders' raw sources, the evaluator's
    margins on private tuples: :func:`~benchmark.profiles.cache.private_caches`), the hub's
    access tokens, nor ``denied`` (a split's corpus,
    :mod:`.corpus`). A GPU
    run's process (``gpu``: :func:`runs_on_gpu`) may also open the GPU's device nodes and
    read the driver's state and CUDA's libraries (:func:`~.sandbox.gpu_access`). A process
    that runs ``client_code`` gets its scratch as a tmpfs of its own (``private_scratch``)."""
    from benchmark.profiles.cache import cache_dir, private_caches
    from benchmark.profiles.candidate_corpus import candidates_dir

    # A rule needs its directory to exist, and the cache holds denied ones (``sources``),
    # so the policy grants the cache's entries as they are now: the candidate sets the
    # harness builds for the method during the run need their directory here already.
    candidates_dir().mkdir(parents=True, exist_ok=True)
    hub = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    gpu_read, gpu_write = gpu_access() if gpu else ((), ())
    extra = tuple(readable or ())
    readable_paths = (*interpreter_paths(), *code, cache_dir(), hub, *extra, *gpu_read)
    denied = (*denied, *private_caches(), *(hub / name for name in HUB_TOKENS))
    read_only, list_only = readable_except(readable_paths, denied)
    return Policy(read_only, tuple(read_write), list_only, gpu, gpu_write, client_code)


def runs_on_gpu(profile: Any) -> bool:
    """Whether a run is a GPU run: its resolved model profile (trusted: a built-in, or the
    object the runner's caller passed) puts its models on CUDA. The coordinator alone
    decides it; a method never chooses its sandbox. A profile object without
    ``accelerator`` (a test's stand-in) runs on the CPU."""
    accelerator = getattr(profile, "accelerator", None)
    return accelerator is not None and accelerator() == "cuda"


def harness_code() -> list[Path]:
    """The packages an untrusted process imports from this checkout (not the checkout
    itself, which may hold splits and results). Found without importing them: locating
    adapter code must not run it."""
    found = []
    for name in ("benchmark", "methods"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(f"the {name!r} package is not installed")
        found.extend(Path(p) for p in spec.submodule_search_locations)
    return found


LOOKUPS_SHOWN = (
    "fedsynth: the kernel's directory cache cannot be dropped here (not root): on the public "
    "schedule, the names client code looks up (missing ones) stay visible to the method "
    "process's timing"
)

# What a run on the schedule leaves open where the host cannot close it, as its record
# names them (``privacy.open_on_schedule``; a third-party method's is then never published).
LOOKUPS, DIRECTORY_BLOCKS, PAGE_ORDER = "lookups", "directory blocks", "page cache order"
GPU_CACHES = "GPU caches"  # a GPU run's: nothing sweeps the GPU's own caches between turns

# One run on the schedule at a time per host: the caches it drops, locks and sweeps are the
# host's, and another run's client code would move them meanwhile. A fixed path, not the
# temp dir's (which a process's TMPDIR may move).
HOST_SCHEDULE_LOCK = Path(os.environ.get("FEDSYNTH_SCHEDULE_LOCK", "/tmp/fedsynth-schedule.lock"))
WAITING = "fedsynth: waiting for another run on the public schedule on this host to end"
_holding_host = False  # this process holds that lock
OPEN_ON_SCHEDULE = "open_on_schedule.json"  # in the run directory: what stayed open so far


class _Settling:
    """What the coordinator does, inside each call's slot, before a method process on the
    schedule runs again, so that nothing client code did in the call shows in its timing:
    the kernel's unused directory entries and inodes dropped, and, once the read set is
    locked, every page nothing maps (:func:`~.page_cache.forget_lookups`); the read set
    resident and locked again (:func:`~.page_cache.keep_resident`); the CPU's caches
    refilled (:class:`~.cpu_caches.CacheSweep`). It collects what the host could not
    close, and a GPU run's GPU caches, which nothing here sweeps: the client worker's
    kernels leave lines in the GPU's L2 that the method process's kernels could time.
    ``log`` (the run directory's, which no untrusted process writes) keeps that set across
    a crash and resume: the releases an earlier attempt delivered are replayed, so what was
    open when they were computed stays in the record."""

    def __init__(self, policy: Policy, log: Path | None = None) -> None:
        global _holding_host
        if _holding_host:  # a second wait in this process would never end
            raise PrivacyError("a run on the public schedule is already open in this process")
        self.policy, self.log = policy, log
        self.pins = Pins()
        self.sweep = CacheSweep()
        earlier = json.loads(log.read_text()) if log is not None and log.exists() else []
        self.open: set[str] = set(earlier)
        self._held = contextlib.ExitStack()
        self._held.enter_context(exclusive_lock(HOST_SCHEDULE_LOCK, waiting=WAITING))
        _holding_host = self._holding = True
        if policy.gpu:
            self._left_open(GPU_CACHES)

    def __call__(self, after_client_code: bool = True) -> None:
        locked = self.pins.planned and self.pins.refused is None
        if not forget_lookups(directory_blocks=locked):
            if LOOKUPS not in self.open:
                print(LOOKUPS_SHOWN, file=sys.stderr, flush=True)
            self._left_open(LOOKUPS)
        elif after_client_code and not locked:
            self._left_open(DIRECTORY_BLOCKS)
        keep_resident(self.policy.read_only, self.policy.list_only, self.pins)
        if self.pins.refused is not None:
            self._left_open(PAGE_ORDER)
        self.pins.final = True  # planned before any client code ran: later, a refusal stops
        self.sweep.sweep()

    def _left_open(self, name: str) -> None:
        if name not in self.open:
            self.open.add(name)
            if self.log is not None:
                atomic_write(self.log, json.dumps(sorted(self.open)))

    def close(self) -> None:
        """Unlock the read set, free the sweep's buffer and let the next run on the
        schedule start (once)."""
        global _holding_host
        self.pins.release()
        self.sweep.release()
        if self._holding:
            self._held.close()
            _holding_host = self._holding = False


class MethodProcess:
    """One method process; :meth:`request` sends a command and serves the pool calls the
    method makes until the command's answer arrives."""

    def __init__(
        self,
        init: dict[str, Any],
        blobs: list[bytes],
        pool: ClientPool | None,
        policy: Policy,
        tmp_dir: Path,
        clients: Any = None,
        bounds: RequestBounds | None = None,
        call_seconds: float | None = None,
        open_log: Path | None = None,
        engines: EngineService | None = None,
    ) -> None:
        # On the schedule what it may read is kept resident and locked, and the host held:
        # both let go at close, or at once where this constructor fails.
        self._settle = _Settling(policy, open_log) if call_seconds is not None else None
        try:
            if self._settle is not None:
                self._settle(after_client_code=False)
            ours, theirs = wire.stream_pair()
            self.proc = spawn(
                "method",
                (theirs.fileno(),),
                {**child_env(policy.gpu), **sandbox_environment(policy, tmp_dir)},
                process_group=True,  # stopped and continued as a whole (call_seconds)
                gpu=policy.gpu,
            )
        except BaseException:
            if self._settle is not None:
                self._settle.close()
            raise
        self.call_seconds = call_seconds  # the public schedule of pool calls, if any
        theirs.close()
        self._sock = ours
        self._stream = ours.makefile("rwb")
        self._pool = pool
        self._clients = clients  # the pool's client executor: told each call's payload counts
        if call_seconds is not None and clients is not None:  # its memos wake client code
            clients.outside_calls = lambda: self._on_schedule(time.perf_counter())
        self.bounds = bounds or RequestBounds.from_environment()
        self._engines = engines  # the run's vLLM engines, for the method's sampling calls
        self.served_seconds = 0.0  # spent serving pool calls (not the method's own time)
        self._pending: Callable[[], None] | None = None  # a checkpoint for the next slot
        wire.send(self._stream, init, *blobs)

    def at_checkpoint(self, save: Callable[[], None]) -> None:
        """Save a round's checkpoint: at once, or, on the public schedule, at the start of
        the next pool call's slot, while this process is stopped (or at
        :meth:`flush_checkpoint`, once it has answered). The checkpoint holds the clients'
        memos, whose size client code chooses: written between rounds while this process
        runs, its time would tell that size. A newer checkpoint replaces one not yet
        written (it covers the same releases and more)."""
        if self.call_seconds is None:
            save()
        else:
            self._pending = save

    def flush_checkpoint(self) -> None:
        save, self._pending = self._pending, None
        if save is not None:
            save()

    def answer(self) -> wire.Message:
        """The next answer, serving pool calls before it."""
        while True:
            try:
                header, blobs = wire.recv(self._stream, self.bounds.message_bytes)
            except wire.MessageTooLarge:
                raise RequestBoundError(
                    "a message from the method process exceeds the harness's bound of "
                    f"{self.bounds.message_bytes:,} bytes (message_bytes); it was refused "
                    "unread. An operator can raise it with FEDSYNTH_BOUND_MESSAGE_BYTES"
                ) from None
            except wire.ChannelClosed as exc:
                raise MethodError(f"the method process ended without answering ({exc})") from exc
            if "failed" in header:
                kind = _error_types().get(str(header["failed"]))
                message = str(header.get("message", ""))
                if kind is None:
                    raise MethodError(f"{header['failed']}: {message}")
                raise kind(message)
            if ENGINE in header:  # public weights and the method's inputs: no schedule
                wire.send(self._stream, *self._sample(header, blobs))
                continue
            if self._engines is not None:  # a session left open: the GPU is the harness's
                self._engines.rest()
            if header.get("done"):
                return header, blobs
            began = time.perf_counter()
            with self._on_schedule(began):
                answer = self._serve(header, blobs)
                if self.call_seconds is not None and self._clients is not None:
                    self._clients.hold_memos()  # for the round's checkpoint, in this slot
            self.served_seconds += time.perf_counter() - began
            wire.send(self._stream, *answer)

    @contextlib.contextmanager
    def _on_schedule(self, began: float) -> Iterator[None]:
        """Serve a pool call on the run's public schedule (``privacy.call_seconds``): the
        method process stopped meanwhile (``SIGSTOP`` to its process group and every process
        below it, :func:`~.containment.signal_tree`: no thread of it can measure the client
        side's load), and its answer held until ``call_seconds``
        after the request, so neither its clocks nor its progress tell how long client code
        took; before it runs again, the caches client code could have moved are settled
        (:class:`_Settling`), so neither do its reads, lookups and memory accesses. Work
        past the
        schedule stops the run: a late answer would tell. The clients' memos are fetched
        within the call's slot (:meth:`~.client_process.MemoHolding.hold_memos`); a
        checkpoint that still wakes client code (no call since it last ran) takes a slot of
        its own."""
        if self.call_seconds is None:
            yield
            return
        self._signal(signal.SIGSTOP)
        try:
            self.flush_checkpoint()
            yield
            self._settle()
            late = time.perf_counter() - began - self.call_seconds
            if late > 0:
                raise PrivacyError(
                    f"a pool call's work took longer than the run's public schedule of "
                    f"{self.call_seconds:g} s per call (privacy.call_seconds); the run stops "
                    "(a late answer would tell the method how long client code ran)"
                )
            time.sleep(-late)
        finally:
            self._signal(signal.SIGCONT)

    def _signal(self, number: int) -> None:
        signal_tree(self.proc.pid, number)

    def request(self, header: dict[str, Any], *blobs: bytes) -> wire.Message:
        wire.send(self._stream, header, *blobs)
        return self.answer()

    def _sample(self, header: dict[str, Any], blobs: list[bytes]) -> tuple[dict[str, Any], bytes]:
        if self._engines is None:
            raise PrivacyError("the method process sent a sampling call to a run without engines")
        return self._engines.serve(header, blobs)

    def _serve(self, header: dict[str, Any], blobs: list[bytes]) -> tuple[dict[str, Any], bytes]:
        pool, op, args = self._pool, header.get("op"), header.get("args")
        if pool is None or not isinstance(args, dict):
            raise PrivacyError(f"the method process sent a malformed request ({op!r})")
        job, what = (blobs[0] if blobs else b""), _call_name(args)
        try:
            self._check_bounds(op, args, pool.num_clients)
            if isinstance(op, str) and op in BY_NAME and BY_NAME[op].sends == JOB:
                self._declare(args.pop("payload_counts", None))
            return dispatch(pool, op, args, job)
        except ClientFunctionError as exc:  # fixed text, named by the call the method made
            raise ClientFunctionError(f"pool.{op} ({what}): {exc}") from None
        except (TypeError, KeyError) as exc:
            raise PrivacyError(f"pool.{op}: malformed arguments ({exc})") from exc

    def _check_bounds(self, op: Any, args: dict[str, Any], num_clients: int) -> None:
        """Refuse a call whose memory the method sets (a release's dimension, every unit's
        rows, DP-PCA's covariance) beyond :class:`RequestBounds`, before any work."""
        dim = args.get("dim")
        if type(dim) is not int:
            return  # the pool refuses what is not a whole number
        self.bounds.check("release_dim", dim, f"pool.{op}: dim")
        declared = BY_NAME.get(op) if isinstance(op, str) else None
        if declared is not None and declared.holds_rows:
            self.bounds.check("held_floats", num_clients * dim, f"pool.{op}: units x dim")
        if declared is not None and declared.holds_square:
            self.bounds.check("held_floats", dim * dim, f"pool.{op}: dim x dim")

    def _declare(self, counts: Any) -> None:
        """Tell the client executor what one client downloads (floats, texts) for this call:
        the method side counts its own payload (public data; a client worker, which runs
        client code, is never asked); the records publish it."""
        if not (
            isinstance(counts, list)
            and len(counts) == 2
            and all(type(n) is int and 0 <= n < 2**53 for n in counts)
        ):
            raise PrivacyError("the method process sent malformed payload counts")
        if self._clients is not None:
            self._clients.payload_counts = (counts[0], counts[1])

    def close(self) -> None:
        try:
            self._stream.close()
            self._sock.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        finally:
            try:
                if self._settle is not None:
                    self._settle.close()
            finally:  # a run that failed in a session: the next run's method meets it asleep
                if self._engines is not None:
                    self._engines.rest()

    @property
    def open_on_schedule(self) -> set[str]:
        """What the host could not close on the schedule (names, as :class:`_Settling`)."""
        return set() if self._settle is None else set(self._settle.open)


def dispatch(
    pool: Any, name: Any, args: dict[str, Any], blob: bytes
) -> tuple[dict[str, Any], bytes]:
    """The pool's answer to one call from the method process, as a header and a blob: the
    declared operation (:mod:`benchmark.protocol.operations`) called with the JSON
    arguments and the call's blob in its declared place, its value encoded as declared."""
    op = BY_NAME.get(name) if isinstance(name, str) else None
    if op is None or op.in_process_only:
        raise PrivacyError(f"the pool has no operation {name!r}")
    taken = [p for params in BLOB_PARAMETERS.values() for p in params if p in args]
    if taken:
        raise PrivacyError(f"pool.{op.name}: malformed arguments ({taken[0]} is not JSON)")
    if op.sends == JOB:
        args = {**args, "client_fn": blob, "payload": None}
    elif op.sends == FUNCTION:
        args = {**args, "train_fn": blob}
    elif op.sends == WEIGHTS:
        from benchmark.checkpoints import load_state_blob

        args = {**args, "weights": load_state_blob(blob, cpu=True)}  # the worker trains them
    value = getattr(pool, op.name)(**args)
    if op.answer == AGGREGATE:
        return {"expected_count": value.expected_count}, wire.array_bytes(value.noisy_sum)
    if op.answer == ARRAY:
        return {}, wire.array_bytes(value)
    if op.answer == PLAIN:
        return {"value": value}, b""
    if op.answer == PICKLED:
        return {}, value
    if op.answer == TENSORS:
        return {}, tensors_blob(value)
    return {}, b""


def _call_name(args: dict[str, Any]) -> str:
    """The call's label or tree name, as the method gave it (public), shortened."""
    name = args.get("label", args.get("name"))
    return f"label {str(name)[:80]!r}" if name is not None else "no label"


def tensors_blob(tensors: dict[str, Any]) -> bytes:
    """Tensors the harness computed (a mean model delta), saved for the method process."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    return buffer.getvalue()


def method_source(name: str, plugin: Path | None = None) -> dict[str, Any]:
    """How the method process finds method ``name`` without this process importing it: in
    a submitted ``plugin`` file (which it may read, alone of its directory); a built-in or
    an entry point by name; a method registered in this process (a test's, a ``--plugin``
    file's) by its module or file, whose directory it may then read."""
    from benchmark.registry import METHODS, PLUGIN_PREFIX

    if plugin is not None:
        path = Path(plugin).resolve()
        return {"imports": [], "plugin": str(path), "code": [path]}
    target = METHODS.registered_object(name)
    if target is None:
        return {"imports": [], "plugin": None, "code": []}
    module = sys.modules[target.__module__]
    path = Path(module.__file__ or "").resolve()
    if target.__module__.startswith(PLUGIN_PREFIX):
        return {"imports": [], "plugin": str(path), "code": [path.parent]}
    return {"imports": [target.__module__], "plugin": None, "code": [path.parent]}


def ask(
    init: dict[str, Any], blobs: list[bytes], code: list[Path], denied: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """One answer from a short-lived sandboxed method process that writes only its own
    temporary directory (loading a method runs its code)."""
    with tempfile.TemporaryDirectory(prefix="fedsynth-method-") as tmp:
        policy = policy_for(code, [Path(tmp)], denied=denied)
        process = MethodProcess(init, blobs, None, policy, Path(tmp))
        try:
            header, _ = process.answer()
        finally:
            process.close()
    return header


def plugin_methods(plugin: Path) -> list[str]:
    """The methods a submitted file registers, found without importing it here."""
    source = method_source("", plugin)
    init = {"op": "names", "plugin": source["plugin"], "threads": 1}
    return [str(name) for name in ask(init, [], harness_code() + source["code"])["names"]]


def _as_tensor(blob: bytes) -> Any:
    """Bytes the checkpoint keeps unopened (a method state, the clients' memos)."""
    import torch

    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


class RemoteMethod:
    """The runner's handle on a method process (the in-process counterpart is
    :class:`benchmark.runner.InProcessMethod`): states come back as byte tensors."""

    def __init__(self, process: MethodProcess, work_dir: Path) -> None:
        self._process = process
        self._work_dir = work_dir
        self._rounds = int(process.answer()[0]["num_rounds"])

    def num_rounds(self) -> int:
        return self._rounds

    def cache_requests(self) -> Any:
        """As the method sent them, within :class:`RequestBounds` (how many, how many
        texts and new tokens they ask the generator for); the trusted side checks every
        field before building any (``candidate_corpus.build_requested``)."""
        requests = self._process.request({"op": "caches"})[0]["requests"]
        check_cache_requests(requests, self._process.bounds)
        return requests

    def pool_seconds(self) -> float:
        """Seconds the coordinator has spent serving this process's pool calls."""
        return self._process.served_seconds

    def open_on_schedule(self) -> set[str]:
        return self._process.open_on_schedule

    def at_checkpoint(self, save: Callable[[], None]) -> None:
        self._process.at_checkpoint(save)

    def flush_checkpoint(self) -> None:
        self._process.flush_checkpoint()

    def setup(self) -> Any:
        return _as_tensor(self._process.request({"op": "setup"})[1][0])

    def resume(self, state: Any) -> None:
        self._process.request({"op": "resume"}, state.numpy().tobytes())

    def round(self, r: int) -> Any:
        return _as_tensor(self._process.request({"op": "round", "round": r})[1][0])

    def finish(self) -> Any:
        from benchmark.artifact import Artifact, ArtifactError
        from benchmark.registry import check_under

        blob = self._process.request({"op": "finish"})[1][0]
        try:
            data = json.loads(blob)
        except ValueError as exc:
            raise ArtifactError("artifact: the method process sent no JSON object") from exc
        artifact = Artifact.from_dict(data, "the method process")
        if artifact.model_dir is not None:  # the evaluator reads it: only the method's own
            check_under(self._work_dir, Path(artifact.model_dir), where="artifact.model_dir")
        return artifact

    def close(self) -> None:
        self._process.close()


def check_cache_requests(requests: Any, bounds: RequestBounds) -> None:
    """Refuse cache requests that would cost the coordinator more than ``bounds`` allow:
    their number, the texts they ask for (prompts x count) and the new tokens they allow
    (texts x max_new_tokens, the time the generator spends). Fields that are not plain
    data are left to ``build_requested``, which refuses them."""
    if not isinstance(requests, list):
        return
    bounds.check("cache_requests", len(requests), "cache requests")
    texts = tokens = 0
    for request in requests:
        if not isinstance(request, dict):
            continue
        prompts, count, params = (request.get(k) for k in ("prompts", "count", "params"))
        if isinstance(prompts, list) and type(count) is int and isinstance(params, list):
            asked = len(prompts) * max(count, 0)
            texts += asked
            if params and type(params[0]) is int:
                tokens += asked * max(params[0], 0)
    bounds.check("cache_texts", texts, "cache requests: prompts x count")
    bounds.check("cache_tokens", tokens, "cache requests: prompts x count x max_new_tokens")


_WARM_ROLES: set[tuple[str, str]] = set()  # (profile, role) whose caches this process built
_DESCRIPTIONS: dict[str, dict[str, Any]] = {}  # describe answers, by their question


def describe(
    init: dict[str, Any], blobs: list[bytes], code: list[Path], denied: tuple[Path, ...]
) -> dict[str, Any]:
    """A method's description (:func:`ask`, op ``describe``), asked once per question in
    this process: a run's key and the run itself ask the same one, and a sandboxed process
    start costs seconds. The question names the method's code (a submitted file by its
    content), its parameters and profile, so a changed file is asked again."""

    plugin = init.get("plugin")
    question = hashlib.sha256(
        json.dumps(
            [init, [str(c) for c in code], [str(d) for d in denied]], sort_keys=True, default=str
        ).encode()
    )
    question.update(Path(plugin).read_bytes() if plugin else b"")
    for blob in blobs:
        question.update(hashlib.sha256(blob).digest())
    key = question.hexdigest()
    if key not in _DESCRIPTIONS:
        _DESCRIPTIONS[key] = ask(init, blobs, code, denied)
    return json.loads(json.dumps(_DESCRIPTIONS[key]))  # a copy: callers may change theirs


class IsolatedLaunch:
    """Everything the runner needs to run one spec on the isolated path: the method's
    description, the client worker, the method process and their sandboxes."""

    def __init__(
        self, spec: Any, split: Any, profile: Any, plugin: Path | None, client_actors: int = 0
    ) -> None:
        import torch

        self.spec, self.split, self.profile = spec, split, profile
        self.client_actors = client_actors  # > 0: the clients on Ray actors (client_shards)
        self.source = method_source(spec.method.name, plugin)
        self.threads = torch.get_num_threads()
        self._by_name = profile is None or type(profile).__module__.startswith("benchmark.profiles")
        code = list(self.source["code"])
        if not self._by_name:
            code.append(Path(sys.modules[type(profile).__module__].__file__ or "").parent)
        self.code = harness_code() + code
        from benchmark.profiles import new_profile
        from benchmark.profiles.cache import cache_dir

        self.gpu = runs_on_gpu(profile if profile is not None else new_profile(spec.profile))

        self.denied = denied_paths(getattr(split, "manifest", {}), cache_dir())  # its corpus
        self._worker: Any = None
        self.models: tuple[str, ...] = ()  # the method's declared roles, from resolve()
        self.hub_ids: tuple[str, ...] = ()  # hub models it loads by id, from resolve()
        self.post_processing: Any = ()  # its declared post-processing keys, from resolve()

    def _init(self, op: str) -> tuple[dict[str, Any], list[bytes]]:
        blobs = []
        if not self._by_name:
            import cloudpickle

            blobs.append(cloudpickle.dumps(self.profile))
        init = {"op": op, "method": self.spec.method.name, "threads": self.threads}
        init |= {"imports": self.source["imports"], "plugin": self.source["plugin"]}
        init |= {"profile": self.spec.profile, "profile_pickled": not self._by_name}
        init["gpu"] = self.gpu  # the run's, as this process decided it
        return init, blobs

    def resolve(self) -> tuple[Any, str]:
        """The resolved spec and the method's role, from a sandboxed describe process."""
        from benchmark.method import ROLES
        from benchmark.profiles.hub_fetch import check_hub_ids
        from benchmark.profiles.roles import check_roles
        from benchmark.spec import ResolvedSpec, SpecError

        init, blobs = self._init("describe")
        info = describe({**init, "params": self.spec.method.params}, blobs, self.code, self.denied)
        unit = self.spec.privacy.unit
        if unit not in info["privacy_units"]:
            raise SpecError(
                f"privacy.unit: {unit!r} is not supported by {self.spec.method.name!r}; "
                f"allowed: {list(info['privacy_units'])}"
            )
        role = info["role"]
        if role not in ROLES or (role != "method" and self.source["code"]):
            raise SpecError(
                f"{self.spec.method.name}: role {role!r} is reserved to built-in adapters; "
                "a submitted adapter is ranked as a method"
            )
        try:
            self.models = check_roles(info["models"], f"{self.spec.method.name}.models")
            self.hub_ids = check_hub_ids(info["hub_ids"], f"{self.spec.method.name}.hub_ids")
        except ValueError as exc:
            raise SpecError(str(exc)) from exc
        where = f"{self.spec.method.name}.hub_ids"
        RequestBounds.from_environment().check("hub_models", len(self.hub_ids), where)
        resolved = ResolvedSpec(self.spec, info["config"], self.split.name, self.split.version)
        self.post_processing = info.get("post_processing")  # checked by the runner
        return resolved, role

    def _build_profile_caches(self) -> None:
        """Resolve the models the method declares (:attr:`benchmark.method.Method.models`,
        :meth:`~benchmark.method.Method.hub_ids`), and only those, before its sandbox
        starts; each (profile, role) once per process."""
        from benchmark.profiles.hub_fetch import HubModel, fetch

        bounds, where = RequestBounds.from_environment(), f"{self.spec.method.name}.hub_ids"
        fetch(
            [HubModel(i, "main", (self.spec.method.name,)) for i in self.hub_ids],
            admit_bytes=lambda size: bounds.check("hub_bytes", size, f"{where}: bytes to fetch"),
        )
        cold = [r for r in self.models if (self.spec.profile, r) not in _WARM_ROLES]
        if self._by_name and cold:
            from benchmark.profiles import new_profile
            from benchmark.profiles.base import bind_public

            profile = new_profile(self.spec.profile)
            bind_public(profile, self.split.texts("public"))  # as the method process will
            profile.build_caches(cold)
            _WARM_ROLES.update((self.spec.profile, r) for r in cold)

    def client_worker(self, units: dict[str, list[dict[str, Any]]], run_dir: Path) -> Any:
        from benchmark.federation.independence_check import set_zygote_launch

        self._build_profile_caches()  # the worker's policy names the caches it may read
        from benchmark.isolation.client_process import ClientProcess

        shards = [units[cid] for cid in sorted(units)]
        tmp = run_dir / "client_tmp"  # the client side's scratch; no other domain reads it
        checks = run_dir / "recompute_tmp"  # the independence check's, apart from the worker's
        for directory in (tmp, checks):
            directory.mkdir(exist_ok=True)
        log = run_dir / PRIVATE_LOG  # its output: client code writes it (coordinator only)
        policy = policy_for(self.code, [tmp], denied=self.denied, gpu=self.gpu, client_code=True)
        if self.client_actors > 0:
            from benchmark.isolation.client_shards import ShardedClients

            self._worker = ShardedClients(
                shards, policy, self.threads, tmp, self.client_actors, log
            )
        else:
            self._worker = ClientProcess(shards, policy, self.threads, tmp, log)
        zygote_policy = policy_for(
            self.code, [checks], denied=self.denied, gpu=self.gpu, client_code=True
        )
        zygote_env = {**child_env(self.gpu), **sandbox_environment(zygote_policy, checks)}
        set_zygote_launch(
            lambda fd: spawn(
                "zygote", (fd,), zygote_env, subprocess.DEVNULL, subprocess.DEVNULL, gpu=self.gpu
            )
        )  # it imports modules client code named: its output is not the operator's terminal
        return self._worker

    def warm(self, public_start: Callable[[], Any]) -> None:
        """Build the caches the method process may read, here, before it starts (it can
        read them but never writes what we read): its declared models' caches, once per
        process, profile and role (on an instance dropped after), and the shared public
        start (the evaluator needs it anyway)."""
        self._build_profile_caches()
        if any(m["name"] == "next_token" for m in self.spec.evaluation.metrics):
            public_start()

    def method(self, resolved: Any, pool: ClientPool, run_dir: Path) -> RemoteMethod:
        from dataclasses import asdict

        work_dir, quarantine = run_dir / "work", run_dir / "private_diagnostics"
        tmp = work_dir / "tmp"
        for directory in (quarantine, tmp):
            directory.mkdir(parents=True, exist_ok=True)
        init, blobs = self._init("run")
        init |= {"config": resolved.method_config, "privacy": asdict(self.spec.privacy)}
        init |= {"seed": self.spec.seed, "work_dir": str(work_dir)}
        init |= {"diagnostics_root": str(run_dir), "num_clients": pool.num_clients}
        policy = policy_for(self.code, [work_dir, quarantine], denied=self.denied, gpu=self.gpu)
        public = json.dumps(self.split.records("public")).encode()
        validation = json.dumps(self.split.records("validation")).encode()
        process = MethodProcess(
            init, [public, validation, *blobs], pool, policy, tmp, clients=self._worker,
            call_seconds=self.spec.privacy.call_seconds, open_log=run_dir / OPEN_ON_SCHEDULE,
            engines=EngineService(self._run_profile, self.models),
        )  # fmt: skip
        try:
            return RemoteMethod(process, work_dir)
        except BaseException:  # e.g. the adapter's constructor raised: its process ends here
            process.close()
            raise

    def _run_profile(self) -> Any:
        """The run's profile in this process: what names the engines a method samples."""
        from benchmark.profiles import get_profile

        return self.profile if self.profile is not None else get_profile(self.spec.profile)

    def close(self) -> None:
        from benchmark.federation.independence_check import set_zygote_launch, stop_zygote

        if self._worker is not None:
            self._worker.close()
            set_zygote_launch(None)
            stop_zygote()
