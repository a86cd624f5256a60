"""The method process: an adapter's server side, run apart from everything it must not touch.

It starts from a fresh interpreter (:mod:`benchmark.isolation.launch`) that sandboxes itself
(:mod:`benchmark.isolation.sandbox`) before it imports numpy or any method code, and only
then loads the adapter. It holds the public and
validation parts, its own profile and a :class:`PoolProxy`; the train and test records, the
pool, the ledger, the secret noise seed and the checkpoints are in the coordinator's
process and directories, which it can neither reach in memory nor read on disk. Patching
the harness's modules here changes only this process's copies; ε, noise and metrics are
computed elsewhere.

Commands from the coordinator (:mod:`benchmark.isolation.wire`): ``names`` (the methods a
submitted file registers), ``describe`` (the resolved config, role and privacy units),
``run`` (answered with the number of rounds), then ``setup``, ``round`` and ``resume``, each
answered with the method state as a torch-saved blob (checked to load as tensors and plain
data), and ``finish``, answered with the artifact as JSON. While a command runs, the method
calls the pool through the same channel; an exception in method code is answered with its
type and message.
"""

from __future__ import annotations

import io
import json
import socket
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.federation.costs import count_payload
from benchmark.federation.pool import Aggregate, ServerAccessError
from benchmark.isolation import wire
from benchmark.privacy.errors import PrivacyError


def _plain(value: Any) -> Any:
    """JSON for the pool's numeric arguments: a ``float`` subclass becomes its plain value,
    a numpy scalar its Python number; anything else is refused by the coordinator."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not a plain number")


class PoolProxy:
    """The method's view of the client pool: the same calls, answered by the coordinator.

    Client-side functions and payloads are cloudpickled here and run by the client worker;
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

    def _call(self, op: str, args: dict[str, Any], *blobs: bytes) -> wire.Message:
        header = json.loads(json.dumps({"op": op, "args": args}, default=_plain))
        wire.send(self._stream, header, *blobs)
        return wire.recv(self._stream)

    def aggregate(
        self,
        client_fn: Any,
        payload: Any = None,
        *,
        dim: int,
        clip_norm: float,
        noise_multiplier: float,
        sample_rate: float = 1.0,
        label: str,
        batched: bool = False,
    ) -> Aggregate:
        args = {"dim": dim, "clip_norm": clip_norm, "noise_multiplier": noise_multiplier}
        args |= {"sample_rate": sample_rate, "label": label, "batched": batched}
        return self._aggregate("aggregate", args, client_fn, payload)

    def _job_call(
        self, op: str, args: dict[str, Any], client_fn: Any, payload: Any
    ) -> wire.Message:
        """A call that runs ``client_fn`` on the clients: the job, and what one client
        downloads (counted here, from the payload the method made: the client worker, which
        runs client code, is never asked)."""
        counts = list(count_payload(payload))
        return self._call(op, {**args, "payload_counts": counts}, _job(client_fn, payload))

    def _aggregate(self, op: str, args: dict[str, Any], client_fn: Any, payload: Any) -> Aggregate:
        header, blobs = self._job_call(op, args, client_fn, payload)
        return Aggregate(wire.array_from(blobs[0]), float(header["expected_count"]))

    def open_tree(
        self,
        name: str,
        *,
        dim: int,
        clip_norm: float,
        noise_multiplier: float,
        cohort_size: int,
        max_leaves: int | None = None,
    ) -> int:
        args = {"name": name, "dim": dim, "clip_norm": clip_norm}
        args |= {"noise_multiplier": noise_multiplier, "cohort_size": cohort_size}
        return int(self._call("open_tree", {**args, "max_leaves": max_leaves})[0]["leaves"])

    def tree_step(
        self, name: str, client_fn: Any, payload: Any = None, batched: bool = False
    ) -> np.ndarray:
        args = {"name": name, "batched": batched}
        return wire.array_from(self._job_call("tree_step", args, client_fn, payload)[1][0])

    def centralized(self, train_fn: Any, *, label: str) -> Any:
        import cloudpickle

        blob = self._call("centralized", {"label": label}, cloudpickle.dumps(train_fn))[1][0]
        return cloudpickle.loads(blob)

    def strong_clients(self) -> list[int]:
        return [int(c) for c in self._call("strong_clients", {})[0]["clients"]]

    def define_group(self, name: str, clients: list[int]) -> None:
        self._call("define_group", {"name": name, "clients": list(clients)})

    def local_gaussian(
        self,
        client_fn: Any,
        payload: Any = None,
        *,
        dim: int,
        clip_norm: float,
        noise_multiplier: float,
        groups: list[str],
        label: str,
    ) -> Aggregate:
        args = {"dim": dim, "clip_norm": clip_norm, "noise_multiplier": noise_multiplier}
        args |= {"groups": list(groups), "label": label}
        return self._aggregate("local_gaussian", args, client_fn, payload)

    def local_dp_finetune(self, weights: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The weights travel as a torch-saved blob the coordinator loads as tensors only;
        the mean delta comes back the same way."""
        from benchmark.runner import load_state_blob

        blob = _state_blob(weights, "local_dp_finetune")
        return load_state_blob(self._call("local_dp_finetune", kwargs, blob)[1][0])

    def dp_preference_finetune(self, weights: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Weights go and come back as tensor-only blobs, as for ``local_dp_finetune``."""
        from benchmark.runner import load_state_blob

        blob = _state_blob(weights, "dp_preference_finetune")
        return load_state_blob(self._call("dp_preference_finetune", kwargs, blob)[1][0])

    def laplace_aggregate(self, client_fn: Any, payload: Any = None, **kwargs: Any) -> Any:
        return self._array("laplace_aggregate", kwargs, client_fn, payload)

    def dp_pca(self, client_fn: Any, payload: Any = None, **kwargs: Any) -> Any:
        return self._array("dp_pca", kwargs, client_fn, payload)

    def define_partition(
        self, name: str, client_fn: Any, payload: Any = None, **kwargs: Any
    ) -> None:
        self._job_call("define_partition", {**kwargs, "name": name}, client_fn, payload)

    def part_sizes(self, partition: str, **kwargs: Any) -> Any:
        return wire.array_from(self._call("part_sizes", {**kwargs, "partition": partition})[1][0])

    def dp_logistic_sgd(self, client_fn: Any, payload: Any = None, **kwargs: Any) -> Any:
        init = [float(v) for v in kwargs.pop("init")]
        return self._array("dp_logistic_sgd", {**kwargs, "init": init}, client_fn, payload)

    def _array(self, op: str, args: dict[str, Any], client_fn: Any, payload: Any) -> Any:
        """An operation whose answer is one array (checked by the pool's own signature)."""
        return wire.array_from(self._job_call(op, args, client_fn, payload)[1][0])

    def dp_sgd(self, *args: Any, **kwargs: Any) -> Any:
        raise PrivacyError(
            "pool.dp_sgd is not available in an isolated run: its per-example clipping and "
            "noise would run beside the method's code; use pool.aggregate with one example "
            "per privacy unit"
        )


def _job(client_fn: Any, payload: Any) -> bytes:
    from benchmark.federation.recompute import snapshot

    return snapshot(client_fn, payload)


# --- the process ---------------------------------------------------------------------------


def _state_blob(state: Any, where: str) -> bytes:
    """The method state as the checkpoint keeps it, refused now if it would not load back
    as tensors and plain data (see :mod:`benchmark.runner`)."""
    import torch

    from benchmark.runner import UnsafeCheckpointError, load_state_blob

    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
        load_state_blob(buffer.getvalue())
    except (UnsafeCheckpointError, TypeError, AttributeError) as exc:
        reason = " ".join(str(exc).split())
        raise UnsafeCheckpointError(
            f"method state after {where}: {reason}; a checkpoint keeps tensors, numbers, "
            "strings, lists, dicts and numpy arrays only"
        ) from exc
    return buffer.getvalue()


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


def _serve(init: dict[str, Any], blobs: list[bytes], stream: Any) -> None:
    from benchmark.runner import load_state_blob, seed_torch

    if init["op"] == "names":  # which methods a submitted file registers
        from benchmark.registry import METHODS, load_plugin_file

        names = METHODS.registered_by(load_plugin_file(init["plugin"]))
        wire.send(stream, {"done": True, "names": names})
        return
    method_cls = _load_method(init)
    profile = _profile(init, blobs)
    if init["op"] == "describe":
        config = method_cls.resolve_config(init["profile"], init["params"])
        info = {"config": config, "role": method_cls.role}
        info |= {"privacy_units": list(method_cls.privacy_units)}
        info |= {"models": list(method_cls.models), "hub_ids": list(method_cls.hub_ids(config))}
        wire.send(stream, {"done": True, **info})
        return
    method = method_cls(init["config"])
    from benchmark.profiles.declared import DeclaredProfile

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
            wire.send(stream, {"done": True}, _state_blob(state, "setup"))
        elif op == "round":
            seed_torch(seed, command["round"])
            state = method.round(ctx, state, command["round"])
            wire.send(stream, {"done": True}, _state_blob(state, f"round {command['round']}"))
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
