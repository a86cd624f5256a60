"""Chit-chat conversations from the ``chitchat-dataset`` package: an offline population of real
people (1,055 in the private window), with real dates and a real shift between public and
private text.

Origin: ``chitchat_dataset/dataset.json`` of the installed package (MIT; version 0.9.0 has
7,168 conversations, 258,145 messages from 1,315 senders). Each conversation maps to
``{"messages": [[{"text", "timestamp", "sender"}, ...] per turn, ...], "start": ISO time,
"prompt": topic prompt (sometimes missing), "ratings": {...}}``.

Records and clients:

- **client = one person** (a ``sender``: 1,315 in the corpus, 1,055 in the private window),
  with all their conversations under them, so the privacy unit "user" is a chat
  participant. An earlier version made each sender's side of each conversation a client
  (9,635 private clients), which silently turned one person into up to 1,499 units:
  their guarantee was group privacy over all of them, and held-out test clients shared
  people with train. The contribution bound is the pipeline's per-client ``cap`` on spans.
- **record = one person's side of one conversation** (their messages in order, one per
  line); the pipeline chunks it into the usual 64-token spans, so the on-device LM sees
  a speaker's own phrasing in context rather than isolated three-word messages.
- ``date`` = the conversation's start date (``start``, else its first timestamp), so a
  conversation never straddles the public/private cut; ``label`` and ``extra["prompt"]``
  are the topic prompt (a control code for label-conditioned methods), ``""`` if missing.
  A person who talked both before and inside the window (55 people) keeps no text in the
  public part (``before_window:person_disjoint``): a person's data sits under their client
  or nowhere, never partly outside the privacy unit.

Default recipe (``split_defaults``): private = conversations started in the window
2018-05-01 … 2018-11-30, public = the conversations before it by people with no text in
the window (``before_window:person_disjoint``: April 2018 conversations, data a model
trained then could have seen; with the overlapping people's, 63 % of the 4,000 public
spans were written by private people, 27 % by test people), 100 validation and
250 test people drawn and held out whole (so train, validation and test are
person-disjoint; drawn before spans under the minimum length drop, so 93 and 233 keep
data), at
most 8 spans per person, at most 4,000 public spans. The split's sizes:
``docs/measurements/working-scale.md#chitchat``.

The shift is real, not only in time: the collection ran in two periods (April–May and
September–November 2018) and the autumn conversations were seeded with a new, AI-themed
set of prompts ("What if computers started asking not to be turned off?"), so the private
train/test clients contain topics that are rare in the public April data.

Contamination: the corpus has been public on GitHub and PyPI since 2018, so any modern LLM
may have seen it; it is registered as a **demo corpus** (``demo = True``) and every
contamination check reports it contaminated, whatever the model's cut-off.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from datasets_builders.source import Source, SourceRecord

LICENCE = "MIT"
PACKAGE = "chitchat-dataset"


def dataset_path() -> Path:
    spec = importlib.util.find_spec("chitchat_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the chitchat source needs the {PACKAGE} package")
    return Path(spec.submodule_search_locations[0]) / "dataset.json"


@functools.cache
def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a chitchat dataset file ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of conversations, got {type(data).__name__}")
    return data


def conversation_records(conversation_id: str, conversation: Any) -> Iterator[SourceRecord]:
    """One record per sender of one conversation (their messages in order, one per line),
    owned by the sender: a person is one client across all their conversations."""
    try:
        messages = [m for turn in conversation["messages"] for m in turn]
        start = conversation.get("start") or messages[0]["timestamp"]
        by_sender: dict[str, list[str]] = {}
        for message in messages:
            text = str(message["text"]).strip()
            if text:
                by_sender.setdefault(str(message["sender"]), []).append(text)
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"conversation {conversation_id!r}: malformed ({exc!r})") from exc
    prompt = str(conversation.get("prompt") or "")
    for sender, texts in by_sender.items():
        yield SourceRecord(
            text="\n".join(texts),
            source_id=f"chitchat:{conversation_id}:{sender}",
            client_id=sender,
            date=str(start)[:10],
            label=prompt,
            licence=LICENCE,
            extra={"prompt": prompt, "conversation": conversation_id},
        )


class ChitchatSource(Source):
    """Chit-chat conversations; a client is one person (sender), dated by conversation start."""

    name = "chitchat"
    description = (
        "chitchat-dataset conversations; a client is one person (all their conversation "
        "sides); dated by conversation start; demo"
    )
    client_words = "one chat participant"
    client_is_person = True
    demo = True
    date_field = "conversation start"
    split_defaults: ClassVar[dict[str, Any]] = {
        "partition": "natural",
        "date_start": "2018-05-01",
        "date_end": "2018-11-30",
        "public": "before_window:person_disjoint",
        "public_max": 4000,
        "span_length": 64,
        "cap": 8,
        "validation_clients": 100,
        "test_clients": 250,
    }

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        unknown = sorted(set(options) - {"path"})
        if unknown:
            raise ValueError(f"source 'chitchat' takes only 'path', got {unknown}")
        data = _load(Path(options.get("path") or dataset_path()))
        for conversation_id in sorted(data):
            yield from conversation_records(conversation_id, data[conversation_id])

    def revision(self, options: dict[str, Any]) -> str:
        if options.get("path"):
            return f"file {Path(options['path']).name}"
        return f"{PACKAGE}=={importlib.metadata.version(PACKAGE)}"
