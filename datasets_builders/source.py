"""What a source module supplies: normalised records from one public origin.

A source knows only how to fetch its origin and map each item to a
:class:`SourceRecord`; the shared pipeline (:mod:`datasets_builders.pipeline`) does the
rest (date window, dedupe, cleaning, client assignment, chunking, caps, manifest).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True)
class SourceRecord:
    """One item of a source in the common schema.

    ``date`` is an ISO date (YYYY-MM-DD) or None when the source has no dates;
    ``client_id`` is the natural client (author, speaker, user, chapter, …) or None.
    """

    text: str
    source_id: str
    client_id: str | None = None
    date: str | None = None
    label: str | None = None
    licence: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Source(ABC):
    """A public origin of text; subclasses register in ``datasets_builders/__init__.py``."""

    name: ClassVar[str]
    description: ClassVar[str]
    # Demo corpora that public LMs have certainly seen (KJV, chatterbot) say so here.
    demo: ClassVar[bool] = False
    # Which date field the window filter uses (recorded in the manifest).
    date_field: ClassVar[str | None] = None
    # What one natural client (``SourceRecord.client_id``) is, in words, and whether it is
    # one person: the privacy unit "user" means this client, so a reader must be told.
    client_words: ClassVar[str] = "one natural client of the source"
    client_is_person: ClassVar[bool] = False

    def client_unit(self, options: dict[str, Any]) -> tuple[str, bool]:
        """(what one natural client is, whether it is one person) under these source
        options; sources whose client rule is an option override this."""
        return self.client_words, self.client_is_person

    @abstractmethod
    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        """Yield records; network sources cache raw responses under ``cache_dir`` so that
        an interrupted build resumes instead of starting over."""

    def revision(self, options: dict[str, Any]) -> str:
        """Identifier of the source's version (package version, dataset revision, API)."""
        return "unknown"
