"""The method process: an adapter's server side, run apart from everything it must not touch.

It starts through the launch (:mod:`benchmark.isolation.launch`), forked from the launch
template (:mod:`benchmark.isolation.template`) or from a fresh interpreter, and sandboxes
itself (:mod:`benchmark.isolation.sandbox`) before it imports any method code; only then
does it load the adapter. It holds the public and
validation parts, its own profile and a :class:`PoolProxy`; the train and test records, the
pool, the ledger, the secret noise seed and the checkpoints are in the coordinator's
process and directories, which it can neither reach in memory nor read on disk. Patching
the harness's modules here changes only this process's copies; ε, noise and metrics are
computed elsewhere.

Commands from the coordinator (:mod:`benchmark.protocol.wire`): ``names`` (the methods a
submitted file registers), ``describe`` (the resolved config, role and privacy units),
``run`` (answered with the number of rounds), then ``setup``, ``round`` and ``resume``, each
answered with the method state as a torch-saved blob (checked to load as tensors and plain
data), and ``finish``, answered with the artifact as JSON. While a command runs, the method
calls the pool through the same channel, and samples its profile's vLLM engines there too
(:mod:`.engine_proxy`: vLLM cannot start in this sandbox); an exception in method code is
answered with its type and message.
"""

from __future__ import annotations

import json
import socket
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.checkpoints import load_state_blob, save_checked, seed_torch
from benchmark.federation.costs import count_payload
from benchmark.privacy.errors import PrivacyError
from benchmark.profiles.vllm_engine import route_engines
from benchmark.protocol import wire
from benchmark.protocol.jobs import snapshot
from benchmark.protocol.operations import (
    AGGREGATE,
    ARRAY,
    BLOB_PARAMETERS,
    FUNCTION,
    JOB,
    OPERATIONS,
    PICKLED,
    PLAIN,
    TENSORS,
    Aggregate,
    Operation,
    ServerAccessError,
)
from benchmark.untrusted.engine_proxy import engine_route


def _plain(value: Any) -> Any:
    """JSON for the pool's arguments: a numpy scalar becomes its Python number, an array its
    nested list, a ``float`` subclass its plain value; anything else is refused here (the
    coordinator checks every number again)."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, range):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not a plain number")


class PoolProxy:
    """The method's view of the client pool: the same calls, answered by the coordinator.

    Its operations are derived from the declaration (:mod:`benchmark.protocol.operations`):
    client-side functions and payloads are cloudpickled here and run by the client worker;
    what comes back is what the in-process pool returns (noisy sums, prefix sums, a tree's
    size, the non-private bound's centralized result)."""

    def __init__(self, stream: Any, num_clients: int) -> None:
        self._stream = stream
        self._num_clients = num_clients

    @property
    def num_clients(self) -> int:
        return self._num_clients

    def __getattr__(self, name: str) -> Any:
        raise ServerAccessError(
            f"the client pool has no {name!r}: server-side code only receives clipped, "
            "noised aggregates (use pool.aggregate or pool.open_tree)"
        )

    def _operation(self, op: Operation, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One call of ``op``: its arguments as JSON and its blob, sent to the coordinator;
        its answer, read back as the pool gives it."""
        if op.in_process_only:
            raise PrivacyError(
                f"pool.{op.name} is not available in an isolated run: {op.in_process_only}"
            )
        if len(args) > len(op.parameters):
            raise TypeError(f"pool.{op.name} takes {len(op.parameters)} positional arguments")
        named = dict(zip(op.parameters, args, strict=False))
        if named.keys() & kwargs.keys():
            raise TypeError(f"pool.{op.name} got {sorted(named.keys() & kwargs.keys())} twice")
        named |= kwargs
        blobs = _blobs(op, named)
        header = json.loads(json.dumps({"op": op.name, "args": named}, default=_plain))
        wire.send(self._stream, header, *blobs)
        return _answer(op, *wire.recv(self._stream))


def _blobs(op: Operation, named: dict[str, Any]) -> list[bytes]:
    """Take the call's blob arguments out of ``named``: a job (and what one client
    downloads, counted here from the payload the method made: the client worker, which runs
    client code, is never asked), a centralized function, or weights (a tensor-only blob)."""
    if not op.sends:
        return []
    missing = [p for p in BLOB_PARAMETERS[op.sends][:1] if p not in named]
    if missing:
        raise TypeError(f"pool.{op.name} needs {missing[0]}")
    if op.sends == JOB:
        payload = named.pop("payload", None)
        named["payload_counts"] = list(count_payload(payload))
        return [snapshot(named.pop("client_fn"), payload)]
    if op.sends == FUNCTION:
        import cloudpickle

        return [cloudpickle.dumps(named.pop("train_fn"))]
    return [save_checked(named.pop("weights"), None, f"method state after {op.name}")]


def _answer(op: Operation, header: dict[str, Any], blobs: list[bytes]) -> Any:
    """The coordinator's answer to ``op``, as the in-process pool returns it."""
    if op.answer == AGGREGATE:
        return Aggregate(wire.array_from(blobs[0]), float(header["expected_count"]))
    if op.answer == ARRAY:
        return wire.array_from(blobs[0])
    if op.answer == PLAIN:
        return header["value"]
    if op.answer == PICKLED:
        import cloudpickle

        return cloudpickle.loads(blobs[0])
    if op.answer == TENSORS:
        return load_state_blob(blobs[0])
    return None


def _proxy_method(op: Operation) -> Any:
    def call(self: PoolProxy, *args: Any, **kwargs: Any) -> Any:
        return self._operation(op, args, kwargs)

    call.__name__, call.__qualname__ = op.name, f"PoolProxy.{op.name}"
    where = f"benchmark.federation.mechanisms.{op.mechanism}"
    call.__doc__ = f"``pool.{op.name}`` (:mod:`{where}`), answered by the coordinator."
    return call


for _op in OPERATIONS:
    setattr(PoolProxy, _op.name, _proxy_method(_op))


# --- the process ---------------------------------------------------------------------------


def _load_method(init: dict[str, Any]) -> Any:
    import importlib

    from benchmark.registry import METHODS, load_plugin_file

    for module in init["imports"]:
        importlib.import_module(module)
    if init["plugin"]:
        import cloudpickle

        name = load_plugin_file(init["plugin"])
        cloudpickle.register_pickle_by_value(sys.modules[name])  # the worker has no file
    return METHODS.get(init["method"])


def _context(init: dict[str, Any], blobs: list[bytes], stream: Any, profile: Any) -> Any:
    from benchmark.federation.quarantine import Diagnostics
    from benchmark.method import MethodContext
    from benchmark.spec import PrivacySpec

    return MethodContext(
        pool=PoolProxy(stream, init["num_clients"]),
        public=json.loads(blobs[0]),
        validation=json.loads(blobs[1]),
        profile=profile,
        privacy=PrivacySpec(**init["privacy"]),
        seed=init["seed"],
        work_dir=Path(init["work_dir"]),
        diagnostics=Diagnostics(Path(init["diagnostics_root"])),
    )


def _profile(init: dict[str, Any], blobs: list[bytes]) -> Any:
    if init["profile_pickled"]:
        import cloudpickle

        return cloudpickle.loads(blobs[-1])
    from benchmark.profiles import new_profile

    return new_profile(init["profile"])


def check_gpu_reached(profile: Any, gpu_run: bool) -> None:
    """A GPU run's method process (``gpu_run``: the coordinator's decision) must reach CUDA:
    else the ``paper`` profile would load its models on the CPU and sample with
    transformers, another instrument under the run's name, rather than fail."""
    if gpu_run and profile.accelerator() is None:
        raise RuntimeError(
            "a GPU run's method process cannot reach CUDA inside its sandbox "
            "(torch.cuda.is_available() is False there): the run stops rather than load "
            "its models on the CPU"
        )


def _serve(init: dict[str, Any], blobs: list[bytes], stream: Any) -> None:
    if init["op"] == "names":  # which methods a submitted file registers
        from benchmark.registry import METHODS, load_plugin_file

        names = METHODS.registered_by(load_plugin_file(init["plugin"]))
        wire.send(stream, {"done": True, "names": names})
        return
    method_cls = _load_method(init)
    if init["op"] == "describe":  # no profile: a describe process has no GPU to build one on
        config = method_cls.resolve_config(init["profile"], init["params"])
        info = {"config": config, "role": method_cls.role}
        info |= {"privacy_units": list(method_cls.privacy_units)}
        info |= {"models": list(method_cls.models), "hub_ids": list(method_cls.hub_ids(config))}
        info |= {"post_processing": list(method_cls.post_processing)}
        wire.send(stream, {"done": True, **info})
        return
    route_engines(engine_route(stream))  # vLLM cannot start here: the coordinator samples
    profile = _profile(init, blobs)
    check_gpu_reached(profile, init["gpu"])
    method = method_cls(init["config"])
    from benchmark.data import TEXT
    from benchmark.profiles.base import bind_public
    from benchmark.profiles.declared import DeclaredProfile

    bind_public(profile, [record[TEXT] for record in json.loads(blobs[0])])

    ctx = _context(init, blobs, stream, DeclaredProfile(profile, method_cls.models, init["method"]))
    seed, state = init["seed"], None
    wire.send(stream, {"done": True, "num_rounds": int(method.num_rounds())})
    while True:
        try:
            command, state_blobs = wire.recv(stream)
        except wire.ChannelClosed:
            return
        op = command["op"]
        if op == "caches":
            wire.send(stream, {"done": True, "requests": method.cache_requests(ctx)})
        elif op == "resume":
            state = load_state_blob(state_blobs[0])
            wire.send(stream, {"done": True})
        elif op == "setup":
            seed_torch(seed, -1)
            state = method.setup(ctx)
            wire.send(stream, {"done": True}, save_checked(state, None, "method state after setup"))
        elif op == "round":
            seed_torch(seed, command["round"])
            state = method.round(ctx, state, command["round"])
            where = f"method state after round {command['round']}"
            wire.send(stream, {"done": True}, save_checked(state, None, where))
        elif op == "finish":
            seed_torch(seed, method.num_rounds())
            artifact = method.finish(ctx, state)
            wire.send(stream, {"done": True}, json.dumps(asdict(artifact)).encode())


def main(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    stream = sock.makefile("rwb")
    init, blobs = wire.recv(stream)
    if init["threads"]:
        import torch

        torch.set_num_threads(init["threads"])
    try:
        _serve(init, blobs, stream)
    except Exception as exc:
        wire.send(stream, {"failed": type(exc).__name__, "message": " ".join(str(exc).split())})
