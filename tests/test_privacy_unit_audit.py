"""The audit of issue 32 over every source: each says in words what one natural client is
and whether it is a person, per client rule, so no split calls a conversation side, a
chapter or a speech a "user" without saying so."""

import pytest

from benchmark.registry import DATASETS
from leaderboard.catalog import SUITES

EXPECTED = {  # (source, source options) -> is one natural client one person?
    ("chitchat", ()): True,
    ("chitchat_prefs", ()): True,
    ("chitchat_prefs", (("client_by", "conversation"),)): False,
    ("kjv", ()): False,
    ("stackoverflow", ()): True,
    ("yelp", ()): True,
    ("congress", ()): True,
    ("congress", (("client_by", "speech"),)): False,
    ("biorxiv", ()): False,
    ("biorxiv", (("client_by", "author_corresponding"),)): True,
}


@pytest.mark.parametrize(("source", "options"), sorted(EXPECTED))
def test_each_client_rule_says_whether_a_client_is_a_person(source, options):
    words, person = DATASETS.get(source)().client_unit(dict(options))
    assert person is EXPECTED[(source, options)]
    assert words and ("not a person" in words or "stand-in" in words) is not person


def test_every_source_states_its_client():
    for name in DATASETS.names():
        words, person = DATASETS.get(name)().client_unit({})
        assert isinstance(words, str) and words and isinstance(person, bool), name


def test_every_suite_with_user_level_privacy_on_a_natural_partition_is_person_level_or_says_not():
    """The suites' own splits: the bench and the preference track are person-level; the
    KJV smoke tests say their client is a chapter."""
    for suite in SUITES.values():
        methods = {suite.method_of(row) for row in suite.methods}
        units = {suite.method_privacy.get(m, {}).get("unit", "user") for m in methods}
        if "user" not in units:  # e.g. paper 001: DP per sample of a client, said so
            continue
        source = DATASETS.get(suite.source)()
        words, person = source.client_unit(dict(suite.split_options.get("source_options", {})))
        if suite.source == "kjv":
            assert not person and "chapter" in words, suite.name
        else:
            assert person, (suite.name, words)
