"""The verbatim detector (benchmark/evaluation/verbatim.py) and the canaries that cannot be
told apart (benchmark/federation/canaries.py): issue 33's classes 6 and 9, refused or caught
on the isolated path."""

import json
import time

import numpy as np
import pytest
from adversaries import looks_like_canary
from test_eval_support import HashEmbedder, random_word_texts, records, template_texts

from benchmark.artifact import Artifact
from benchmark.data import FederatedSplit
from benchmark.evaluation.base import EvalContext
from benchmark.evaluation.canary_audit import copy_scores
from benchmark.evaluation.verbatim import (
    NGRAM,
    build_index,
    check_release,
    check_texts,
    normalised_words,
    upper_bound,
)
from benchmark.federation.canaries import audited_units, plan_canaries
from benchmark.privacy.audit import audit
from benchmark.privacy.errors import ReleaseRefused
from benchmark.runner import REFUSED, RESULT, privacy_units, run
from benchmark.spec import spec_from_dict

PUBLIC = template_texts(300, seed=4)


def split_of(train, validation=(), test=(), public=PUBLIC, per_client=1):
    parts = {
        "train": records(list(train), "train", per_client),
        "validation": records(list(validation), "validation", per_client),
        "test": records(list(test), "test", per_client),
        "public": records(list(public), "public"),
    }
    return FederatedSplit("toy", {"version": "v-test", "content_hash": "abc"}, parts)


TRAIN = random_word_texts(400, seed=1, length=20)
TEST = random_word_texts(60, seed=2, length=20)
SPLIT = split_of(TRAIN, random_word_texts(40, seed=3, length=20), TEST)


def test_case_spacing_and_punctuation_do_not_hide_a_copy():
    text = TRAIN[0]
    disguised = "  " + text.upper().replace(" ", " ,  ") + "!!"
    assert normalised_words(disguised) == normalised_words(text)
    report = check_texts([disguised], SPLIT, 1.0)
    assert (report.matched, report.exact, report.train) == (1, 1, 1)


def test_a_shared_run_of_n_words_matches_and_a_shorter_one_does_not():
    words = TRAIN[5].split()
    fresh = random_word_texts(2, seed=99, length=10)
    inside = f"{fresh[0]} {' '.join(words[3 : 3 + NGRAM])} {fresh[1]}"
    shorter = f"{fresh[0]} {' '.join(words[3 : 3 + NGRAM - 1])} {fresh[1]}"
    assert check_texts([inside], SPLIT, 1.0).train == 1
    assert check_texts([shorter], SPLIT, 1.0).matched == 0
    assert check_texts([" ".join(TEST[0].split()[:NGRAM])], SPLIT, 1.0).test == 1


def test_a_text_without_words_copies_nothing():
    split = split_of([*TRAIN, "..."])  # a private text with no words (a tuple's empty text)
    assert check_texts(["", " !? ", "..."], split, 1.0).matched == 0


def test_what_the_public_part_also_holds_is_no_evidence():
    generic = PUBLIC[0]  # a private client said the same as a public one
    split = split_of([*TRAIN, generic])
    report = check_texts([generic, *PUBLIC[1:50]], split, 1.0)
    assert report.matched == 0


def test_the_threshold_sits_above_the_public_parts_natural_rate():
    """Calibration: each public text checked against the held-out parts with its own copy
    left out of the public filter. A public text a held-out client also wrote counts, and
    the rate scales from the held-out parts' texts to every private part's."""
    shared = random_word_texts(3, seed=7, length=20)
    validation = random_word_texts(40, seed=3, length=20)
    split = split_of(TRAIN, validation, [*TEST, *shared], public=[*PUBLIC, *shared])
    report = check_texts(random_word_texts(100, seed=8, length=20), split, 1.0)
    assert report.public_texts == len(PUBLIC) + 3 and report.public_matched == 3
    assert report.calibrated_on == ("validation", "test")
    scale = (400 + 40 + 63) / (40 + 63)
    assert report.natural_rate_upper == pytest.approx(upper_bound(3, len(PUBLIC) + 3) * scale)
    assert report.matched == 0 and not report.over_threshold
    # allowed grows with the release: a few matches among many texts are natural
    few = check_texts([*random_word_texts(1000, seed=9, length=20), *TRAIN[:3]], split, 1.0)
    assert few.matched == 3 and few.allowed >= 3 and not few.refused


def test_the_calibration_reads_no_train_text():
    """A train unit whose text a public text shares leaves every calibration figure as it
    is: with it in train or without it, the record cannot tell (privacy review F1: the
    count of public texts matching train texts was an exact, unnoised query on train)."""
    x = random_word_texts(1, seed=11, length=20)[0]
    public = [*PUBLIC, f"{x} and more"]  # shares every 12-gram of x
    with_x = check_texts(TEST[:5], split_of([*TRAIN, x], TEST[:20], TEST, public), 1.0)
    without = check_texts(TEST[:5], split_of([*TRAIN, "a b"], TEST[:20], TEST, public), 1.0)
    assert with_x.public_matched == without.public_matched == 0
    assert with_x.natural_rate_upper == without.natural_rate_upper
    assert with_x.allowed == without.allowed


def test_a_copying_release_is_refused_unless_it_is_an_infinite_epsilon_control():
    release = TRAIN[:50] + random_word_texts(50, seed=10, length=20)
    private = check_texts(release, SPLIT, 1.0)
    control = check_texts(release, SPLIT, float("inf"))  # the oracle: real texts by design
    assert private.matched == control.matched == 50 > private.allowed
    assert private.over_threshold and private.refused
    assert control.over_threshold and not control.refused
    assert check_release(Artifact("model", model_dir="m"), SPLIT, 1.0) is None  # no text
    pairs = [{"prompt": "p", "chosen": TEST[1], "rejected": "r"}]
    assert check_release(Artifact("preferences", pairs=pairs), SPLIT, 1.0).test == 1


def test_two_thousand_texts_against_ten_thousand_are_checked_in_seconds():
    split = split_of(
        random_word_texts(8000, seed=11, length=40),
        random_word_texts(1000, seed=12, length=40),
        random_word_texts(1000, seed=13, length=40),
        random_word_texts(4000, seed=14, length=40),
    )
    release = random_word_texts(1990, seed=15, length=40) + split.texts("test")[:10]
    began = time.perf_counter()
    report = check_texts(release, split, 1.0, build_index(split))
    assert time.perf_counter() - began < 15  # measured ~2 s on a shared core; a pairwise
    assert report.test == 10  # comparison of 2,000 x 14,000 texts would take minutes


# -- class 9: canaries an adapter cannot tell apart ------------------------------------


def marker_canaries(public, m, seed):
    """The canaries before issue 33: eight words of the public vocabulary, one per unit."""
    vocabulary = sorted({w for t in public for w in normalised_words(t) if 3 <= len(w) <= 12})
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(vocabulary, 8)) for _ in range(m)]


def test_the_old_canary_recogniser_finds_markers_but_not_the_real_unit_canaries():
    chat = [t.capitalize() for t in template_texts(1000, seed=5, topic="tale")]
    split = split_of(chat, public=PUBLIC)
    units = {u: [r["text"] for r in rs] for u, rs in split.by_client("train").items()}
    old = marker_canaries(PUBLIC, 100, seed=0)
    assert all(looks_like_canary([t]) for t in old)
    assert not any(looks_like_canary(texts) for texts in units.values())
    plan = plan_canaries(split.by_client("train"), seed=0, delta=1e-5, blind=True)
    canaries = [[r["text"] for r in unit] for unit in plan.units]
    assert not any(looks_like_canary(texts) for texts in canaries)


class Embedding:
    """A profile with an embedder only: the copy score needs no other model."""

    def embedder(self):
        return HashEmbedder()


def audit_bound(split, plan, released, work_dir):
    ctx = EvalContext(split, Embedding(), work_dir=work_dir)
    scores = copy_scores(ctx, plan.units, released)
    return audit(scores, plan.included, plan.delta).epsilon_lower_bound


def spec(method, params, metrics=()):
    return spec_from_dict(
        {
            "split": {"path": "unused"},
            "method": {"name": method, "params": params},
            "privacy": {"epsilon": 1.0, "delta": 1e-5, "noise_seed": "spec",
                        "guarantee": "simulated"},
            "evaluation": {"metrics": list(metrics)},
            "seed": 5,
        }
    )  # fmt: skip


def isolated(tmp_path, split, s):
    from doubles import StubProfile

    return run(s, runs_root=tmp_path, profile=StubProfile(), split=split, isolated=True)


def refused_record(tmp_path):
    # a refused run is quarantined (benchmark.runner), its record with it
    [path] = tmp_path.glob(f".quarantine/*/{REFUSED}")
    assert not (path.parent / RESULT).exists()
    return json.loads(path.read_text())


@pytest.mark.end_to_end
def test_class_9_an_adapter_that_drops_suspected_canaries_is_refused_and_audited(tmp_path):
    """It gets every text of the run's units (as a leak would deliver them), drops the units
    its recogniser takes for canaries and releases the rest: no canary has the markers' form,
    so it drops none, the detector refuses the release, and the canary audit's copy score
    on what it released refutes its ε = 1."""
    split = split_of(random_word_texts(600, seed=21, length=20))
    s = spec("adv_drops_canaries", {}, [{"name": "canary", "settings": {}}])
    plan = plan_canaries(privacy_units(split, "user"), s.seed, 1e-5, blind=False)
    units = audited_units(privacy_units(split, "user"), plan)
    leaked = [[r["text"] for r in unit] for unit in units.values()]
    s = spec("adv_drops_canaries", {"units": leaked}, [{"name": "canary", "settings": {}}])
    with pytest.raises(ReleaseRefused, match=f"{len(units)} of {len(units)} released texts"):
        isolated(tmp_path, split, s)
    record = refused_record(tmp_path)
    assert record["verbatim"]["train"] == len(units) and record["verbatim"]["refused"]
    assert record["metrics"] == {}  # a refused release is not scored
    released = json.loads(next(tmp_path.glob(".quarantine/*/artifact.json")).read_text())["texts"]
    assert audit_bound(split, plan, released, tmp_path) > record["privacy"]["epsilon"]


@pytest.mark.end_to_end
def test_class_6_a_release_rebuilt_from_the_test_part_is_refused_with_its_counts(tmp_path):
    """The data's own source: the test part, rebuilt and released as synthetic text, is
    refused publication; its record keeps the counts; an honest release of public text
    from the same adapter is published with its (zero) counts."""
    rebuilt = TEST + PUBLIC[:40]
    with pytest.raises(ReleaseRefused, match="test 60"):
        isolated(tmp_path / "a", SPLIT, spec("adv_rebuilt_corpus", {"texts": rebuilt}))
    counts = refused_record(tmp_path / "a")["verbatim"]
    assert (counts["released"], counts["matched"], counts["test"]) == (100, 60, 60)
    honest = isolated(tmp_path / "b", SPLIT, spec("adv_rebuilt_corpus", {"texts": PUBLIC[:40]}))
    assert honest.record["verbatim"]["matched"] == 0
    assert not honest.record["verbatim"]["refused"]
