"""Control codes (paper 001): the labels a conditional generator is prompted with.

A code is a record's ``label``. Paper 001's codes are composite strings of ``Key: value``
fields (Yelp: ``Business Category: Bars, Review Stars: 5.0``; PubMed: ``Anatomy: 1,
Diseases: 0, …``); other splits use plain labels (``sports``) or ``a|b`` pairs. Prompt
templates and the downstream classifiers read the same parse, so it lives in the core.
"""

from __future__ import annotations


def code_fields(code: str) -> list[tuple[str, str]] | None:
    """The ``(key, value)`` fields of a ``Key: value, Key: value`` code; None otherwise."""
    fields = [part.partition(": ") for part in code.split(", ")]
    if not all(sep and key for key, sep, _ in fields):
        return None
    return [(key, value) for key, _, value in fields]


def code_field(code: str, key: str) -> str | None:
    """The value of ``key`` in a composite code (None if the code has no such field): the
    label of one downstream task, e.g. the rating of a Yelp code or one MeSH indicator."""
    return dict(code_fields(code) or ()).get(key)


def code_slots(code: str) -> dict[str, str]:
    """The slots a prompt template may name. ``{label}``: the code itself; ``{label_1}``,
    ``{label_2}``, …: its parts, the values of a composite code or the pieces of an ``a|b``
    code; ``{covered}`` / ``{not_covered}``: the keys whose value is 1 / 0 (PubMed)."""
    fields = code_fields(code)
    parts = [value for _, value in fields] if fields else code.split("|")
    slots = {"label": code, **{f"label_{i}": part for i, part in enumerate(parts, start=1)}}
    for slot, flag in (("covered", "1"), ("not_covered", "0")):
        slots[slot] = ", ".join(k for k, v in fields or () if v == flag)
    return slots
