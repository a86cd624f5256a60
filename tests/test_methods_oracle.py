"""The oracle control: real train texts only, as many as asked, seeded, and non-private."""

import math

import pytest
from model_methods_support import finish, make_context, make_split

from benchmark.privacy.accountants import epsilon_from_ledger
from benchmark.privacy.errors import PrivacyError
from benchmark.privacy.ledger import NONPRIVATE
from methods.oracle import Oracle


def release(tmp_path, seed=0, num_texts=10, epsilon=math.inf):
    ctx = make_context(tmp_path, epsilon=epsilon, seed=seed)
    method = Oracle(Oracle.resolve_config("tiny", {"num_texts": num_texts}))
    return ctx, finish(method, ctx, method.setup(ctx))


def test_the_oracle_releases_real_train_texts_only(tmp_path):
    split = make_split()
    ctx, artifact = release(tmp_path)
    train = {r["text"] for r in split.records("train")}
    elsewhere = {r["text"] for part in ("validation", "public") for r in split.records(part)}
    assert artifact.kind == "texts" and len(artifact.texts) == 10
    assert len(set(artifact.texts)) == 10  # drawn without replacement
    assert set(artifact.texts) <= train and not set(artifact.texts) & elsewhere
    assert [r.mechanism for r in ctx.pool.ledger.releases] == [NONPRIVATE]
    assert math.isinf(epsilon_from_ledger(ctx.pool.ledger.releases, 1e-5))


def test_the_draw_follows_the_spec_seed(tmp_path):
    first = release(tmp_path / "a", seed=1)[1].texts
    assert release(tmp_path / "b", seed=1)[1].texts == first
    assert release(tmp_path / "c", seed=2)[1].texts != first


def test_asking_for_more_texts_than_exist_releases_all_of_them(tmp_path):
    assert len(release(tmp_path, num_texts=1000)[1].texts) == len(make_split().records("train"))


def test_the_oracle_refuses_a_private_budget(tmp_path):
    with pytest.raises(PrivacyError, match="non-private"):
        release(tmp_path, epsilon=1.0)


def test_the_oracle_is_a_control():
    assert Oracle.role == "control"
