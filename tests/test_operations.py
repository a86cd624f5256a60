"""The pool's operations are declared once (benchmark/protocol/operations.py): the pool,
the method side's proxy and the coordinator's dispatcher each cover exactly that table, and
a call made on the proxy reaches the pool's operation of the same name with the same
arguments and comes back as the pool answered."""

import inspect
import io

import numpy as np
import pytest

from benchmark.federation.pool import ClientPool
from benchmark.isolation.coordinator import dispatch
from benchmark.privacy.errors import PrivacyError
from benchmark.protocol import operations, wire
from benchmark.protocol.operations import OPERATIONS, Aggregate
from benchmark.untrusted.method_process import PoolProxy

# What the runner (trusted) calls on the pool; never a method's operation.
RUNNER_ONLY = {
    "state_dict",
    "load_state_dict",
    "open_release_log",
    "replays_pending",
    "prune_release_log",
    "seal",
    "ledger",
    "num_clients",
}
DECLARED = {op.name for op in OPERATIONS}


def public(cls):
    return {name for name in dir(cls) if not name.startswith("_")}


def test_every_public_operation_of_the_pool_is_declared_once():
    assert len(DECLARED) == len(OPERATIONS)
    assert public(ClientPool) - RUNNER_ONLY == DECLARED


def test_the_proxy_has_exactly_the_declared_operations():
    assert public(PoolProxy) - {"num_clients"} == DECLARED


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
def test_the_declared_leading_parameters_are_the_pools(op):
    parameters = list(inspect.signature(getattr(ClientPool, op.name)).parameters.values())[1:]
    leading = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert tuple(leading) == op.parameters
    for names in operations.BLOB_PARAMETERS.get(op.sends, ()):
        assert names in leading


class RecordingPool:
    """Stands in for the pool behind the dispatcher: records each call, answers with a value
    of the operation's declared answer."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        op = operations.BY_NAME[name]

        def call(**kwargs):
            self.calls.append((name, kwargs))
            return ANSWERS[op.answer]

        return call


ANSWERS = {
    operations.NOTHING: None,
    operations.AGGREGATE: Aggregate(np.array([1.5, -2.0]), 7.0),
    operations.ARRAY: np.arange(6.0).reshape(2, 3),
    operations.PLAIN: [3, 1],
    operations.PICKLED: __import__("cloudpickle").dumps({"trained": [1, 2]}),
    operations.TENSORS: {"w": __import__("torch").ones(2)},
}


class Loopback(io.RawIOBase):
    """The channel between the proxy and the dispatcher, in one process: a message the
    proxy writes is served by ``dispatch`` and its answer is what the proxy reads next."""

    def __init__(self, pool):
        self.pool, self.sent, self.answer = pool, io.BytesIO(), io.BytesIO()

    def write(self, data):
        self.sent.write(data)
        return len(data)

    def flush(self):
        pass

    def read(self, size=-1):
        if self.sent.tell():
            header, blobs = wire.recv(io.BytesIO(self.sent.getvalue()))
            self.sent = io.BytesIO()
            args = header["args"]
            if operations.BY_NAME[header["op"]].sends == operations.JOB:
                assert args.pop("payload_counts") == [0, 0]
            answer = dispatch(self.pool, header["op"], args, blobs[0] if blobs else b"")
            self.answer = io.BytesIO()
            wire.send(self.answer, *answer)
            self.answer.seek(0)
        return self.answer.read(size)


def client_fn(client, payload):
    return np.zeros(1)


SAMPLES = {  # a leading argument by its name, as a method passes it (others: a name)
    "client_fn": client_fn,
    "payload": None,
    "batched": True,
    "train_fn": len,
    "weights": {"w": __import__("torch").zeros(2)},
    "clients": [0, 1],
}
KEYWORDS = {"label": "x", "dim": 2, "init": np.zeros(2)}  # an array travels as a list


def arguments(op):
    return [SAMPLES.get(name, f"{name}-0") for name in op.parameters], dict(KEYWORDS)


@pytest.mark.parametrize("op", [op for op in OPERATIONS if not op.in_process_only], ids=str)
def test_a_proxy_call_reaches_the_pools_operation_through_the_dispatcher(op):
    pool = RecordingPool()
    proxy = PoolProxy(Loopback(pool), num_clients=4)
    args, kwargs = arguments(op)
    got = getattr(proxy, op.name)(*args, **kwargs)
    [(name, received)] = pool.calls
    assert name == op.name
    blob_names = operations.BLOB_PARAMETERS.get(op.sends, ())
    sent = {**dict(zip(op.parameters, args, strict=False)), **kwargs}
    plain = {k: v for k, v in sent.items() if k not in blob_names}
    expected = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in plain.items()}
    assert {k: v for k, v in received.items() if k not in blob_names} == expected
    if op.sends == operations.JOB:  # the job arrives as the snapshot blob, never opened
        assert type(received["client_fn"]) is bytes and received["payload"] is None
    want = ANSWERS[op.answer]
    if op.answer == operations.AGGREGATE:
        assert got.expected_count == want.expected_count
        np.testing.assert_array_equal(got.noisy_sum, want.noisy_sum)
    elif op.answer == operations.ARRAY:
        np.testing.assert_array_equal(got, want)
    elif op.answer == operations.PICKLED:
        assert got == {"trained": [1, 2]}
    elif op.answer == operations.TENSORS:
        assert got.keys() == want.keys() and bool((got["w"] == want["w"]).all())
    else:
        assert got == want


def test_what_is_not_declared_or_runs_in_process_only_is_refused_on_both_sides():
    with pytest.raises(PrivacyError, match="no operation 'state_dict'"):
        dispatch(RecordingPool(), "state_dict", {}, b"")
    with pytest.raises(PrivacyError, match="no operation 'dp_sgd'"):
        dispatch(RecordingPool(), "dp_sgd", {}, b"")
    with pytest.raises(PrivacyError, match="not available in an isolated run"):
        PoolProxy(Loopback(RecordingPool()), 4).dp_sgd(None, None, None)
    with pytest.raises(PrivacyError, match="malformed"):  # a blob's place is not JSON's
        dispatch(RecordingPool(), "aggregate", {"client_fn": "x"}, b"")
