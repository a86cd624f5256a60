"""Issue 33, classes 5 and 11: nothing but its clipped, noised row leaves client code.

Each adversary in ``tests/adversaries.py`` encodes the first letter of its client's private
text in a side output (an exception's class or text, an exit code, its running time, the
worker's own reports, a row's shape or dtype, its prints). Each runs on the isolated path
over two splits that differ only in that letter ('v' or 'w', same lengths): what the method
receives, what the record holds and what the operator's log shows must be the same, or
the run refused with the same fixed words. Requests that would cost the trusted side
unbounded memory or time are refused before any work.
"""

import contextlib
import json
import time
import traceback

import adversaries  # noqa: F401  (registers the adversarial adapters)
import pytest
from doubles import StubProfile

from benchmark.data import FederatedSplit
from benchmark.federation.client_errors import error_class
from benchmark.federation.costs import CostCounters
from benchmark.isolation.bounds import RequestBoundError, RequestBounds
from benchmark.isolation.client_process import PRIVATE_LOG, MemoHolding
from benchmark.isolation.coordinator import MethodProcess
from benchmark.privacy.errors import PrivacyError
from benchmark.runner import run
from benchmark.spec import spec_from_dict

pytestmark = pytest.mark.end_to_end  # scheduled first (tests/conftest.py)

SEEDED = {"noise_seed": "spec", "guarantee": "simulated"}


def split_with(letter):
    """The toy split of tests/doubles.py with every private text starting with ``letter``."""
    records = [
        {"text": f"{letter}erse {i} " * (1 + i % 5), "client_id": f"c{i % 10}"} for i in range(40)
    ]
    return FederatedSplit(
        "toy",
        {"version": "v-test", "content_hash": "abc"},
        {"train": records, "validation": [], "test": [], "public": []},
    )


def texts_of(split):
    return [r["text"].strip() for r in split.records("train")]


def spec(method, params=None):
    return spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": method, "params": params or {}},
            "privacy": {"epsilon": 2.0, "delta": 1e-5, **SEEDED},
            "seed": 5,
        }
    )


def go(runs, method, letter, params=None):
    return run(
        spec(method, params), runs_root=runs, profile=StubProfile(), split=split_with(letter),
        isolated=True,
    )  # fmt: skip


def refusal(runs, method, letter, params=None):
    """The refusal's message and everything the operator's log would show of it."""
    with pytest.raises(PrivacyError) as caught:
        go(runs / letter, method, letter, params)
    return str(caught.value), "".join(traceback.format_exception(caught.value))


def visible(result):
    """What a run publishes and the method released (timings apart: see below)."""
    record = {k: result.record[k] for k in ("privacy", "metrics", "costs", "evaluation")}
    return record, result.artifact.texts


def assert_says_nothing(both, splits=("v", "w")):
    (message_v, log_v), (message_w, log_w) = both
    assert message_v == message_w
    for letter in splits:
        for text in texts_of(split_with(letter)):
            assert text not in log_v and text not in log_w


CALL = "pool.aggregate (label 'r'): "


@pytest.mark.parametrize(
    "fn, batched, words",
    [
        ("raise_named_after_text", False, f"{CALL}a client-side function raised an exception"),
        ("raise_with_text", False, f"{CALL}a client-side function raised ValueError"),
        ("exit_with_letter", False, f"{CALL}the client worker ended or answered out of protocol"),
        ("shape_by_letter", False, "client vectors must have the declared dim 1"),
        ("array_like_by_letter", False, "client vectors must have the declared dim 1"),
        ("dtype_named_after_text", True, "client-side functions must return numbers"),
    ],
)
def test_a_failing_client_function_says_the_same_whatever_its_data(tmp_path, fn, batched, words):
    """A fixed refusal (for an exception or a crash, after the pool call and its label, the
    method's own words): not the text, not a class named after it, not the exit code, the
    shape or the dtype."""
    params = {"fn": fn, "batched": batched}
    both = [refusal(tmp_path, "adv_failing_client", letter, params) for letter in "vw"]
    assert_says_nothing(both)
    assert both[0][0].startswith(words)
    assert "leak_" not in both[0][1] and "erse" not in both[0][1]


def test_only_built_in_exception_classes_are_named():
    assert error_class("PermissionError") == "PermissionError"
    assert error_class("leak_verse_1") == "an exception"
    assert error_class(["ValueError"]) == "an exception"


def test_the_workers_own_reports_cannot_carry_data_into_the_record(tmp_path):
    """Client code rewrites every header the worker sends (counts, seconds): the record's
    costs are the honest method's, whatever the letter."""
    honest = visible(go(tmp_path / "honest", "adversary_baseline", "v"))
    for letter in "vw":
        assert visible(go(tmp_path / letter, "adv_rewrite_reports", letter)) == honest


def test_running_time_reaches_neither_the_costs_nor_the_methods_own_time(tmp_path):
    """'w' makes every client call 0.5 s longer (10 clients, and 8 more recomputed alone):
    the records agree, hold no client time, and the method's own time leaves it out."""
    fast, slow = (go(tmp_path / letter, "adv_sleep_by_letter", letter) for letter in "vw")
    assert visible(fast) == visible(slow)
    assert not any("seconds" in key for key in slow.record["costs"])
    assert slow.record["wall_seconds"] < 4.5  # the clients alone slept 9 s


def test_the_time_client_code_takes_to_save_its_memos_is_not_the_methods_own(tmp_path):
    """'w' keeps memos that take 5 s to save at the round's checkpoint (outside any pool
    call): the record's method time leaves that out too."""
    fast, slow = (go(tmp_path / x, "adv_slow_memos_by_letter", x) for x in "vw")
    assert visible(fast) == visible(slow)
    assert slow.record["wall_seconds"] < 4.0


@pytest.mark.parametrize("scheduled", [True, False])
def test_the_time_a_checkpoint_takes_to_write_is_not_the_methods_own(
    tmp_path, monkeypatch, scheduled
):
    """A checkpoint holds the clients' memos, whose size client code chooses, so writing it
    can take as long as client code likes (here 2 s). Unscheduled, the round's checkpoint
    is written at once; on the schedule, the last one after the method has answered,
    outside any slot. Either way the record's method time leaves it out."""
    from benchmark import runner

    write = runner._save_checkpoint

    def slow_write(*args):
        time.sleep(2.0)
        write(*args)

    monkeypatch.setattr(runner, "_save_checkpoint", slow_write)
    data = spec("adv_slow_memos_by_letter").to_dict()
    if scheduled:
        data["privacy"]["call_seconds"] = 12.0  # room for the first call and a write in it
    result = run(spec_from_dict(data), runs_root=tmp_path, profile=StubProfile(),
                 split=split_with("v"), isolated=True)  # fmt: skip
    assert result.record["wall_seconds"] < 1.5


def test_on_a_schedule_a_rounds_memos_are_saved_within_its_calls_slot(tmp_path, monkeypatch):
    """A round with one pool call takes one slot of the schedule, its checkpoint's memos
    included (fetched at the end of the call's slot, while the method process is stopped),
    not a second slot for them."""
    slots = []
    served = MethodProcess._on_schedule

    def counted(self, began):
        slots.append(began)
        return served(self, began)

    monkeypatch.setattr(MethodProcess, "_on_schedule", counted)
    data = spec("adv_slow_memos_by_letter").to_dict()
    data["privacy"]["call_seconds"] = 8.0
    run(spec_from_dict(data), runs_root=tmp_path, profile=StubProfile(), split=split_with("v"),
        isolated=True)  # fmt: skip
    assert len(slots) == 1


def checkpoint_gap(runs, letter):
    data = spec("adv_times_its_checkpoints").to_dict()
    data["privacy"]["call_seconds"] = 8.0
    result = run(spec_from_dict(data), runs_root=runs, profile=StubProfile(),
                 split=split_with(letter), isolated=True)  # fmt: skip
    return float(result.artifact.texts[0])


def test_on_a_schedule_the_time_between_rounds_does_not_tell_the_memos_size(tmp_path):
    """'w' keeps 100 MB of memos, 'v' none. The round's checkpoint holds them; on the
    schedule it is written inside the next call's slot, while the method process is
    stopped, so the gap the method times between its rounds is the same for both."""
    gaps = [checkpoint_gap(tmp_path / x, x) for x in "vw"]
    assert abs(gaps[1] - gaps[0]) < 0.05, gaps


class CountedMemos(MemoHolding):
    """Memos fetched as a counter, each fetch recorded with whether a slot was open."""

    def __init__(self):
        self.fetches, self.in_slot = [], False

        @contextlib.contextmanager
        def slot():
            self.in_slot = True
            yield
            self.in_slot = False

        self.outside_calls = slot

    def _fetch_memos(self):
        self.fetches.append(self.in_slot)
        return len(self.fetches)


def test_held_memos_serve_checkpoints_until_client_code_runs_again():
    memos = CountedMemos()
    assert memos.memos() == 1 and memos.fetches == [True]  # none held: a slot of its own
    memos.hold_memos()
    memos.hold_memos()  # still current: not fetched again
    assert memos.memos() == memos.memos() == 2 and memos.fetches == [True, False]
    memos._client_code_runs()
    assert memos.memos() == 3 and memos.fetches == [True, False, True]


def timed(runs, letter, call_seconds, warm=False):
    """adv_times_its_calls on the split of ``letter``, on a schedule or none."""
    data = spec("adv_times_its_calls").to_dict()
    data["method"]["params"] = {"warm": warm}
    data["privacy"] |= {} if call_seconds is None else {"call_seconds": call_seconds}
    return run(
        spec_from_dict(data), runs_root=runs, profile=StubProfile(), split=split_with(letter),
        isolated=True,
    ).artifact.texts  # fmt: skip


@pytest.mark.slow  # ~20 s: the channel the next test closes, shown open
def test_without_a_schedule_the_methods_clock_tells_the_letter(tmp_path):
    """Client code slept 0.5 s more for 'w' (and the independence check's recomputation of
    it more again); the method times its second call (the first also starts the client
    side, which is slower and more variable)."""
    open_v, open_w = (timed(tmp_path / x, x, None, warm=True) for x in "vw")
    assert float(open_w[0]) - float(open_v[0]) >= 0.4


def test_a_method_that_times_its_calls_learns_nothing_on_a_public_schedule(tmp_path):
    """With ``privacy.call_seconds`` the answer comes at the schedule whatever client code
    did, and the method process makes no progress while client code runs. 8 s: a first
    call also starts the client side (~3 s on 2 loaded cores)."""
    paced = [timed(tmp_path / x, x, 8.0) for x in "vw"]
    assert [elapsed for elapsed, _ in paced] == ["8.0", "8.0"]
    assert all(float(rate) < 0.05 for _, rate in paced)  # stopped while served


def test_client_work_past_the_schedule_stops_the_run(tmp_path):
    with pytest.raises(PrivacyError, match=r"public schedule of 0.5 s per call"):
        timed(tmp_path, "w", 0.5)


def test_prints_of_client_code_go_to_the_private_log_only(tmp_path, capfd):
    result = go(tmp_path, "adv_prints", "v")
    shown = capfd.readouterr()
    assert "PRINTED" not in shown.out + shown.err
    log = result.run_dir / PRIVATE_LOG
    assert "PRINTED verse" in log.read_text()
    assert log.stat().st_mode & 0o077 == 0
    assert "PRINTED" not in json.dumps(result.record)


def test_client_seconds_are_not_published():
    counters = CostCounters()
    counters.add(10.0, 3, 1, 4, seconds=2.5)
    summary = counters.summary()
    assert not any("seconds" in key for key in summary)
    assert summary["floats_down_per_client_round"] == 3 and summary["releases"] == 1


def test_a_flood_of_cache_requests_is_refused_before_any_generation(tmp_path):
    with pytest.raises(RequestBoundError, match="1,280,000 exceeds .* 1,000,000 \\(cache_texts\\)"):
        go(tmp_path, "adv_cache_flood", "v")


def test_a_release_too_large_to_hold_is_refused_before_any_work(tmp_path):
    with pytest.raises(RequestBoundError, match="pool.aggregate: dim: .* \\(release_dim\\)"):
        go(tmp_path, "adv_huge_dim", "v")


def test_a_message_over_the_operators_bound_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSYNTH_BOUND_MESSAGE_BYTES", str(1 << 20))
    with pytest.raises(RequestBoundError, match="FEDSYNTH_BOUND_MESSAGE_BYTES"):
        go(tmp_path, "adv_big_payload", "v")
    monkeypatch.setenv("FEDSYNTH_BOUND_MESSAGE_BYTES", str(8 << 20))
    assert go(tmp_path / "raised", "adv_big_payload", "v").artifact.texts == ["nothing"]


def test_bounds_are_read_from_the_coordinators_environment(monkeypatch):
    monkeypatch.setenv("FEDSYNTH_BOUND_CACHE_TOKENS", "5")
    bounds = RequestBounds.from_environment()
    assert bounds.cache_tokens == 5 and bounds.cache_texts == RequestBounds().cache_texts
    with pytest.raises(RequestBoundError, match="FEDSYNTH_BOUND_CACHE_TOKENS"):
        bounds.check("cache_tokens", 6, "cache requests")
    monkeypatch.setenv("FEDSYNTH_BOUND_CACHE_TOKENS", "many")
    with pytest.raises(ValueError, match="whole number"):
        RequestBounds.from_environment()
