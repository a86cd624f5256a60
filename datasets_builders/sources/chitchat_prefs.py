"""Offline human preference pairs from the ``chitchat-dataset`` package (paper 003's schema).

Why: the preference sources of paper 003 (``oasst1``, ``hh_rlhf``, ``tldr``) are hub-backed,
so the CPU suite cannot build them offline, and ``chatterbot_prefs`` is tiny (2,026
first-turn pairs of scripted dialogues, no clients, no dates). The chit-chat corpus (7,168
conversations between real people, 2018-04-10 … 2018-11-16, a sender id and a timestamp on
every message, a topic prompt per conversation) gives a real, dated, multi-client
preference set once each reply is read as a human judgement: in its context, the reply a
person actually wrote is preferred over a fluent human reply written for another
conversation.

Record = one reply turn (the schema of :mod:`datasets_builders.sources.preferences`):

- turns: a conversation's messages in order, empty messages dropped, consecutive messages
  of one sender merged into one turn (joined by newlines; the package already groups
  them, the merge also joins what an empty message separated). A **reply** is a turn whose
  previous turn is another sender's; a conversation's first turn answers the topic prompt,
  not a person, and is no record;
- ``extra["prompt"]``: the conversation so far, ending with the other speaker's last turn,
  in the format of paper 003's OA/HH data (seed-003 §1.4):
  ``"\\n\\nHuman: ...\\n\\nAssistant: ...\\n\\nHuman: ...\\n\\nAssistant: "``; the replier is
  "Assistant", everyone else "Human". At most ``history`` turns (default 3), trimmed to
  start with a Human turn as HH/OA prompts do (so ``history=4`` gives 3);
- ``extra["chosen"]``: the replier's real turn;
- ``extra["rejected"]``: a real reply from a *different* conversation whose text differs
  from the chosen one, drawn from conversations on the same topic prompt when there is one
  (else from any), with ``random.Random(f"{seed}|{source_id}")``: the draw of one record
  does not depend on the others, so it is deterministic given ``seed``.
  ``extra["rejected_from"]`` is that reply's source id. Chosen is thus the human-preferred
  continuation in context; rejected is fluent, human and on-topic, but off-context;
- ``text`` = prompt + chosen (what dedupe and embedders see, as in the hub sources);
- every turn is clipped to ``max_chars`` (default 300) at a word boundary, so records stay
  short for the CPU (the turns' lengths: ``docs/measurements/working-scale.md#chitchat_prefs``);
- ``client_id`` = the replier's sender id (``client_by=speaker``): a client's records are
  all its replies; ``client_by=conversation`` gives ``<conversation>:<sender>`` clients as
  the ``chitchat`` source does (more, smaller clients). ``date`` = the reply's timestamp
  (its first message), ``label`` = the topic prompt (``""`` when missing),
  ``extra["conversation"]``/``extra["turn"]`` locate the reply (its merged-turn index).

Which replies may be drawn as rejected (``rejected_before``, default 2018-05-01, the
recipe's ``date_start``): only replies dated before it, i.e. public-era (April 2018)
replies; ``none`` allows any. Two reasons: a public record (dated before the cut) must not
carry an autumn reply, which is private text, into the public part; and a private client's
records then hold only its own replies and its conversation partners' turns, not a third
stranger's private reply. Every topic prompt of the package occurs in April, so a
same-topic rejected reply is found for all but 4 of the 129,423 replies that have a topic
(2,125 have none). Move it with the window:
``--date-start D --option rejected_before=D``.

Recipe (``split_defaults``), like ``chitchat``: private = replies dated 2018-05-01 …
2018-11-30, public = the replies before (April 2018, ``before_window``; at most 2,000), 50
validation and 100 test speakers held out whole, at most 16 pairs per speaker (the
contribution bound), pairs kept whole (no chunking) and deduplicated as whole tuples.

Privacy unit: a speaker (user level). Caveats, recorded here because they bound what the
guarantee means: a person's messages also appear as the "Human" turns of their partners'
records (the other side of a conversation is in the prompt, as in OASST1 and HH), so their
person-level guarantee is group privacy over themselves and their partners; and 51 of the
package's speakers reply both before and after the cut, so part of their data is public
(``chitchat`` leaves such people out of its public part, ``before_window:person_disjoint``;
this source keeps ``before_window``, since the ``prefs`` suite's unit is one sample, and
its split is built with it: changing the default would be a new ``prefs`` version).
Paper 003's own unit is one tuple: ``--partition document`` gives one pair per client
(held-out sizes then count pairs).

Measured on chitchat-dataset 0.9.0 (``fedsynth splits build chitchat_prefs``): 131,548
reply turns from 1,113 repliers, 112,572 of them dated in the private window (861
speakers) and 18,976 before it (303 speakers). The recipe's split's sizes and lengths:
``docs/measurements/working-scale.md#chitchat_prefs``.

Why a source of its own rather than an option of ``chitchat``: the record (a tuple, not a
speaker's text), the client and date rules and the recipe (dedupe, caps, no chunking)
all differ, and a source has one recipe; ``chatterbot_prefs`` set the precedent. It reads
the package through ``chitchat``'s loader (same ``path`` option, same malformed errors).
It is a **demo corpus** (public since 2018): every contamination check reports it
contaminated.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from datasets_builders.source import Source, SourceRecord
from datasets_builders.sources._common import Option, parse_options
from datasets_builders.sources.chitchat import LICENCE, ChitchatSource, _load, dataset_path
from datasets_builders.sources.preferences import ASSISTANT, HUMAN

NAME = "chitchat_prefs"
_DRAWS = 32  # random tries per pool before a scan (a clash needs the same conversation/text)


@dataclass(frozen=True)
class Turn:
    """Consecutive messages of one sender, merged; ``date`` is its first message's."""

    sender: str
    text: str
    date: str


@dataclass(frozen=True)
class Reply:
    """A reply that may be drawn as another record's rejected response (clipped text)."""

    source_id: str
    conversation: str
    text: str


def clip(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, at a word boundary when there is one."""
    if len(text) <= max_chars:
        return text
    window = text[: max_chars + 1]  # a space right after the limit is a boundary too
    cut = max((i for i, c in enumerate(window) if c.isspace()), default=0)
    return (text[:cut] if cut > 0 else text[:max_chars]).rstrip()


def merged_turns(conversation_id: str, conversation: Any) -> list[Turn]:
    """Non-empty messages in order, consecutive messages of one sender merged into a turn."""
    turns: list[Turn] = []
    try:
        for message in (m for turn in conversation["messages"] for m in turn):
            text = str(message["text"]).strip()
            if not text:
                continue
            sender = str(message["sender"])
            if turns and turns[-1].sender == sender:
                last = turns[-1]
                turns[-1] = Turn(sender, f"{last.text}\n{text}", last.date)
            else:
                turns.append(Turn(sender, text, str(message["timestamp"])[:10]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"conversation {conversation_id!r}: malformed ({exc!r})") from exc
    return turns


def format_prompt(history: list[Turn], replier: str) -> str:
    """``"\\n\\nHuman: …\\n\\nAssistant: "``: ``replier`` is the Assistant, others Human."""
    while history and history[0].sender == replier:
        history = history[1:]  # HH/OA prompts open with a Human turn
    return "".join(f"{ASSISTANT if t.sender == replier else HUMAN}{t.text}" for t in history) + (
        ASSISTANT
    )


def _same(a: str, b: str) -> bool:
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


class ChitchatPreferenceSource(Source):
    """(conversation so far, real reply, reply from another conversation) per reply turn."""

    name: ClassVar[str] = NAME
    description: ClassVar[str] = (
        "chitchat-dataset preference pairs: a reply turn in context (chosen) over a reply "
        "from another conversation on the topic (rejected); a client is the replying "
        "speaker; dated by the reply; demo"
    )
    demo: ClassVar[bool] = True
    date_field: ClassVar[str | None] = "reply timestamp"
    options: ClassVar[tuple[Option, ...]] = (
        Option("path", None, "a dataset.json in the package's format (default: the package's)"),
        Option("seed", 0, "seed of the rejected-reply draws", "int"),
        Option(
            "history", 3, "at most this many turns of context (trimmed to open on Human)", "int"
        ),
        Option("max_chars", 300, "every turn clipped to this many characters", "int"),
        Option(
            "rejected_before",
            "2018-05-01",
            "rejected replies only from replies dated before this date (none: any date)",
        ),
        Option("client_by", "speaker", "client id: speaker or conversation (conversation:sender)"),
    )
    split_defaults: ClassVar[dict[str, Any]] = {
        "partition": "natural",
        "date_start": "2018-05-01",
        "date_end": "2018-11-30",
        "public": "before_window",
        "public_max": 2000,
        "span_length": None,
        "dedupe": "record",
        "cap": 16,
        "validation_clients": 50,
        "test_clients": 100,
    }

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()

    def _options(self, options: dict[str, Any]) -> dict[str, Any]:
        opts = parse_options(options, self.options, self.name)
        if opts["history"] < 1 or opts["max_chars"] < 1:
            raise ValueError(f"{self.name}: history and max_chars must be positive")
        if opts["client_by"] not in {"speaker", "conversation"}:
            raise ValueError(f"{self.name}: client_by must be speaker or conversation")
        before = str(opts["rejected_before"]).strip()
        try:
            opts["rejected_before"] = (
                None if before.lower() == "none" else dt.date.fromisoformat(before).isoformat()
            )
        except ValueError as exc:
            raise ValueError(
                f"{self.name}: rejected_before must be a date YYYY-MM-DD or none, got {before!r}"
            ) from exc
        return opts

    def client_unit(self, options: dict[str, Any]) -> tuple[str, bool]:
        if self._options(options)["client_by"] == "speaker":
            return "one replying chat participant", True
        return "one speaker's replies in one conversation (a person has many: not a person)", False

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        opts = self._options(options)
        self.stats = Counter()
        data = _load(Path(opts["path"] or dataset_path()))
        conversations: list[tuple[str, str, list[Turn]]] = []
        pool: list[Reply] = []
        by_topic: dict[str, list[int]] = {}
        for conversation_id in sorted(data):
            conversation = data[conversation_id]
            turns = merged_turns(conversation_id, conversation)
            topic = str(conversation.get("prompt") or "")
            conversations.append((conversation_id, topic, turns))
            for index, turn in enumerate(turns[1:], start=1):  # after the merge: all replies
                before = opts["rejected_before"]
                if before is not None and turn.date >= before:
                    continue
                text = clip(turn.text, opts["max_chars"])
                reply = Reply(f"{NAME}:{conversation_id}:{index}", conversation_id, text)
                if topic:
                    by_topic.setdefault(topic, []).append(len(pool))
                pool.append(reply)
        self.stats["rejected pool replies"] = len(pool)
        everything = list(range(len(pool)))
        for conversation_id, topic, turns in conversations:
            for index, turn in enumerate(turns[1:], start=1):
                self.stats["reply turns"] += 1
                source_id = f"{NAME}:{conversation_id}:{index}"
                chosen = clip(turn.text, opts["max_chars"])
                if chosen != turn.text:
                    self.stats["chosen clipped"] += 1
                rng = random.Random(f"{opts['seed']}|{source_id}")
                rejected = None
                for kind, candidates in (("same topic", by_topic.get(topic)), ("any", everything)):
                    rejected = self._draw(rng, candidates or [], pool, conversation_id, chosen)
                    if rejected is not None:
                        self.stats[f"rejected from {kind}"] += 1
                        break
                if rejected is None:
                    self.stats["skipped: no rejected reply"] += 1
                    continue
                window = turns[max(0, index - opts["history"]) : index]
                history = [Turn(t.sender, clip(t.text, opts["max_chars"]), t.date) for t in window]
                prompt = format_prompt(history, turn.sender)
                client = turn.sender
                if opts["client_by"] == "conversation":
                    client = f"{conversation_id}:{turn.sender}"
                yield SourceRecord(
                    text=prompt + chosen,
                    source_id=source_id,
                    client_id=client,
                    date=turn.date,
                    label=topic,
                    licence=LICENCE,
                    extra={
                        "prompt": prompt,
                        "chosen": chosen,
                        "rejected": rejected.text,
                        "rejected_from": rejected.source_id,
                        "conversation": conversation_id,
                        "turn": index,
                    },
                )

    @staticmethod
    def _draw(
        rng: random.Random, candidates: list[int], pool: list[Reply], conversation: str, chosen: str
    ) -> Reply | None:
        def fits(reply: Reply) -> bool:
            return reply.conversation != conversation and not _same(reply.text, chosen)

        if not candidates:
            return None
        for _ in range(_DRAWS):
            reply = pool[rng.choice(candidates)]
            if fits(reply):
                return reply
        start = rng.randrange(len(candidates))  # rare: most candidates clash; scan them all
        for k in range(len(candidates)):
            reply = pool[candidates[(start + k) % len(candidates)]]
            if fits(reply):
                return reply
        return None

    def revision(self, options: dict[str, Any]) -> str:
        opts = self._options(options)
        return ChitchatSource().revision({"path": opts["path"]} if opts["path"] else {})
