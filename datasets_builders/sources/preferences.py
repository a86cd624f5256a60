"""Preference data of paper 003 (DPPrefSyn): OASST1, Anthropic HH-RLHF, TL;DR, public prompts.

Every private source yields one record per preference tuple: ``extra["prompt"]``,
``extra["chosen"]``, ``extra["rejected"]`` (the tuple), ``text`` = prompt + chosen (what a
text-only consumer, dedupe or an embedder sees: the paper embeds ``prompt + response``),
a client id where the data has one, and the paper's formats (seed-003 §1.4): OA and HH
prompts are ``"\\n\\nHuman: ...\\n\\nAssistant: "`` with the full conversation history, TL;DR
prompts are ``"<post>\\n\\nSummary: "``. Tuples from the dataset's own train split are the
private training data; ``test_samples`` tuples sampled (seeded) from its test split are
pinned to the ``test`` part (the paper's win-rate prompts); the public prompt set the
paper pairs with the task (``public``) is pinned to the ``public`` part. The privacy unit
of paper 003 is one tuple, so the recipe partitions by document (``split_defaults``);
``--partition natural`` gives user-level clients where the data has users.

* ``oasst1`` (``OpenAssistant/oasst1``, Apache-2.0; train / validation): English
  (``lang == "en"``), non-deleted messages. Each ranked assistant reply of rank r >= 1 is
  paired, as rejected, with its sibling of rank r-1 as chosen; replies without that sibling
  are skipped. Prompt = the path from the tree's root to the parent. Client = the
  ``user_id`` of the prompter who asked (``client_by=responder``: the rejected reply's
  author). Date = the later creation date of the two replies. Test: 712 tuples.
  (Restricting to assistant replies is our reading; the paper only says sibling ranks.)
* ``hh_rlhf`` (``Anthropic/hh-rlhf``; train / test, rows ``chosen``/``rejected`` full
  dialogues): prompt = the chosen dialogue up to its last ``"\\n\\nAssistant:"``, responses =
  the remainders. No users, no dates. Test: 1,000 of the 8.55K test tuples.
* ``tldr`` (``openai/summarize_from_feedback`` config ``comparisons``; train / validation;
  also the original JSON-lines batches): Reddit posts only (rows whose ``info.post`` is
  empty are CNN/DM articles and skipped); chosen = ``summaries[choice]``. Client = the
  labeller (``worker``); label = the subreddit. Test: 979 of the validation tuples.
* ``public_prompts``: Alpaca instructions (``vicgalle/alpaca-gpt4``, ``instruction`` +
  ``input``; 52K), PKU-SafeRLHF train prompts (``PKU-Alignment/PKU-SafeRLHF``; 73.9K) or
  XSum train documents (``EdinburghNLP/xsum``; 204,045), all pinned to ``public``;
  ``extra["prompt"]`` holds the generation prompt (code variant; ``template=paper`` ends
  TL;DR prompts with "Assistant:" as the paper's text does).

Hub revisions default to ``main`` (``refs/convert/parquet`` for the script-based TL;DR and
XSum repos); pin commit SHAs with ``revision``/``test_revision``/``public_revision``, or
pass local files in the hub schema (``files``, ``test_files``, ``public_files``).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from datasets_builders.hub import HubDataset, expand_files, files_revision, iter_rows
from datasets_builders.source import Source, SourceRecord
from datasets_builders.sources._common import Option, RecordPolicy, parse_options

HUMAN, ASSISTANT = "\n\nHuman: ", "\n\nAssistant: "


@dataclass(frozen=True)
class PromptSet:
    """A public prompt set: where it lives and how a row becomes (id, text, prompt)."""

    name: str
    hub: HubDataset
    size: str
    licence: str


PROMPT_SETS = {
    "alpaca": PromptSet("alpaca", HubDataset("vicgalle/alpaca-gpt4"), "52K", "cc-by-nc-4.0"),
    "pku_saferlhf": PromptSet(
        "pku_saferlhf", HubDataset("PKU-Alignment/PKU-SafeRLHF"), "73.9K", "cc-by-nc-4.0"
    ),
    "xsum": PromptSet(
        "xsum",
        HubDataset("EdinburghNLP/xsum", revision="refs/convert/parquet"),
        "204,045",
        "bbc-research-use",
    ),
}
_XSUM_PROMPT = "Summarize the following article in a paragraph of 50 words or less: "


def public_prompt(set_name: str, row: dict[str, Any], template: str) -> tuple[str, str] | None:
    """``(text, generation prompt)`` of one public row, or None when it has no text."""
    if set_name == "alpaca":
        text = " ".join(
            str(row.get(k) or "").strip() for k in ("instruction", "input") if row.get(k)
        )
        return (text, f"{HUMAN}{text}{ASSISTANT}") if text else None
    if set_name == "pku_saferlhf":
        text = str(row.get("prompt") or "").strip()
        return (text, f"{HUMAN}{text}{ASSISTANT}") if text else None
    text = str(row.get("document") or "").strip()
    end = ASSISTANT if template == "paper" else "\n\nSummary: "
    return (text, f"\n\n{_XSUM_PROMPT}{text}{end}") if text else None


def public_records(
    set_name: str,
    rows: Iterable[dict[str, Any]],
    template: str,
    limit: int | None,
    policy: RecordPolicy,
) -> Iterator[SourceRecord]:
    """Records of a public prompt set, pinned to the ``public`` part."""
    if set_name not in PROMPT_SETS:
        raise ValueError(f"unknown public prompt set {set_name!r}; use {sorted(PROMPT_SETS)}")
    count = 0
    for index, row in enumerate(rows):
        if limit is not None and count >= limit:
            return
        made = public_prompt(set_name, row, template)
        if made is None:
            policy.malformed(f"{set_name} row {index}", "empty prompt")
            continue
        count += 1
        ident = row.get("id") if set_name == "xsum" and row.get("id") else index
        yield SourceRecord(
            text=made[0],
            source_id=f"{set_name}:{ident}",
            licence=PROMPT_SETS[set_name].licence,
            extra={"prompt": made[1], "prompt_set": set_name, "part": "public"},
        )


def _tuple_record(
    source_id: str, prompt: str, chosen: str, rejected: str, **kw: Any
) -> SourceRecord:
    extra = {"prompt": prompt, "chosen": chosen, "rejected": rejected, **kw.pop("extra", {})}
    return SourceRecord(text=prompt + chosen, source_id=source_id, extra=extra, **kw)


def sample_test(records: list[SourceRecord], k: int, seed: int) -> list[SourceRecord]:
    """``k`` records drawn without replacement (seeded), kept in their original order."""
    if k >= len(records):
        chosen = records
    else:
        picked = set(random.Random(f"{seed}|test").sample(range(len(records)), k))
        chosen = [r for i, r in enumerate(records) if i in picked]
    return [replace(r, extra={**r.extra, "part": "test"}) for r in chosen]


_COMMON_OPTIONS = (
    Option("files", None, "local train files in the hub schema", "list"),
    Option("test_files", None, "local test files in the hub schema", "list"),
    Option("revision", "main", "hub revision of the train and test splits"),
    Option("seed", 0, "seed of the test sample (the paper does not give one)", "int"),
    Option("public_files", None, "local files of the public prompt set", "list"),
    Option("public_revision", None, "hub revision of the public prompt set"),
    Option("public_max", None, "at most this many public prompts", "int"),
    Option("template", "code", "TL;DR/XSum prompt ending: code (Summary:) or paper"),
    Option("on_malformed", "skip", "malformed records: skip (counted) or error"),
)


class _PreferenceSource(Source):
    """Train tuples, a seeded test sample and the paired public prompts of one task."""

    options: ClassVar[tuple[Option, ...]] = ()
    hub: ClassVar[HubDataset]
    test_split: ClassVar[str]
    default_test_samples: ClassVar[int]
    default_public: ClassVar[str]
    extra_options: ClassVar[tuple[Option, ...]] = ()
    split_defaults: ClassVar[dict[str, Any]] = {
        "partition": "document",
        "span_length": None,
        "dedupe": "record",
        "validation_clients": 0,
        "test_clients": 0,
    }

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()

    @classmethod
    def option_spec(cls) -> tuple[Option, ...]:
        return (
            Option("test_samples", cls.default_test_samples, "tuples sampled for test", "int"),
            Option("public", cls.default_public, "public prompt set paired (none: no set)"),
            *_COMMON_OPTIONS,
            *cls.extra_options,
        )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.options = cls.option_spec()

    def revision(self, options: dict[str, Any]) -> str:
        opts = parse_options(options, self.options, self.name)
        parts = []
        for files in (opts["files"], opts["test_files"]):
            if files:
                parts.append(files_revision(expand_files(files)))
        if not opts["files"]:
            parts.append(replace(self.hub, revision=opts["revision"]).describe())
        if opts["public"] != "none":
            if opts["public_files"]:
                parts.append(files_revision(expand_files(opts["public_files"])))
            else:
                parts.append(self._public_hub(opts).describe())
        return f"{' + '.join(parts)} test_samples={opts['test_samples']} seed={opts['seed']}"

    def _public_hub(self, opts: dict[str, Any]) -> HubDataset:
        if opts["public"] not in PROMPT_SETS:
            raise ValueError(f"{self.name}: public must be none or one of {sorted(PROMPT_SETS)}")
        hub = PROMPT_SETS[opts["public"]].hub
        return replace(hub, revision=opts["public_revision"] or hub.revision)

    def _rows(self, opts: dict[str, Any], split: str, files: Any, cache_dir: Path) -> Any:
        hub = replace(self.hub, revision=opts["revision"], split=split)
        return iter_rows(hub, local_files=files, cache_dir=cache_dir)

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        opts = parse_options(options, self.options, self.name)
        self.stats = Counter()
        policy = RecordPolicy(self.name, opts["on_malformed"], self.stats)
        cache_dir = Path(cache_dir)
        for record in self.tuples(
            self._rows(opts, "train", opts["files"], cache_dir), opts, policy
        ):
            self.stats["train tuples"] += 1
            yield record
        if opts["test_samples"] > 0:
            rows = self._rows(opts, self.test_split, opts["test_files"], cache_dir)
            test = list(self.tuples(rows, opts, policy, prefix="test"))
            self.stats["test tuples available"] = len(test)
            yield from sample_test(test, opts["test_samples"], opts["seed"])
        if opts["public"] != "none":
            rows = iter_rows(
                self._public_hub(opts), local_files=opts["public_files"], cache_dir=cache_dir
            )
            yield from public_records(
                opts["public"], rows, opts["template"], opts["public_max"], policy
            )
        policy.summary()

    def tuples(
        self,
        rows: Iterable[dict[str, Any]],
        opts: dict[str, Any],
        policy: RecordPolicy,
        prefix: str = "train",
    ) -> Iterator[SourceRecord]:
        """The tuples of split ``prefix``'s hub rows: one per row here (:meth:`row_tuple`);
        a task whose tuples span rows overrides this."""
        for index, row in enumerate(rows):
            record = self.row_tuple(row, index, policy, prefix)
            if record is not None:
                yield record

    def row_tuple(
        self, row: dict[str, Any], index: int, policy: RecordPolicy, prefix: str
    ) -> SourceRecord | None:
        """The tuple of hub row ``index`` of split ``prefix``; None when it is skipped."""
        raise NotImplementedError


class OASST1Source(_PreferenceSource):
    name: ClassVar[str] = "oasst1"
    description: ClassVar[str] = "OpenAssistant OASST1 English preference pairs from sibling ranks"
    date_field: ClassVar[str | None] = "reply_created_date"
    client_words: ClassVar[str] = "one OASST1 user"
    client_is_person: ClassVar[bool] = True
    hub: ClassVar[HubDataset] = HubDataset("OpenAssistant/oasst1")
    test_split: ClassVar[str] = "validation"
    default_test_samples: ClassVar[int] = 712
    default_public: ClassVar[str] = "alpaca"
    extra_options: ClassVar[tuple[Option, ...]] = (
        Option("lang", "en", "message language kept"),
        Option("client_by", "prompter", "client id: prompter (asker) or responder"),
    )

    def tuples(
        self,
        rows: Iterable[dict[str, Any]],
        opts: dict[str, Any],
        policy: RecordPolicy,
        prefix: str = "train",
    ) -> Iterator[SourceRecord]:
        if opts["client_by"] not in {"prompter", "responder"}:
            raise ValueError("oasst1: client_by must be prompter or responder")
        messages: dict[str, dict[str, Any]] = {}
        children: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            if row.get("lang") != opts["lang"] or row.get("deleted"):
                continue
            if not row.get("message_id") or not isinstance(row.get("text"), str):
                policy.malformed(f"{prefix} message", "missing message_id or text")
                continue
            messages[str(row["message_id"])] = row
            if row.get("parent_id"):
                children.setdefault(str(row["parent_id"]), []).append(row)
        for parent_id in sorted(children):
            parent = messages.get(parent_id)
            if parent is None:
                continue
            ranked = {
                int(c["rank"]): c
                for c in children[parent_id]
                if c.get("role") == "assistant" and _is_number(c.get("rank"))
            }
            for rank in sorted(ranked):
                if rank == 0:
                    continue
                if rank - 1 not in ranked:
                    policy.skip("no sibling of rank r-1")
                    continue
                chosen, rejected = ranked[rank - 1], ranked[rank]
                walked = self._path(parent, messages)
                if walked is None:
                    policy.skip("broken conversation path")
                    continue
                path, path_dates = walked
                client = parent if opts["client_by"] == "prompter" else rejected
                # dated by its oldest text: a window must not let an earlier prompt through
                dates = [_day(m) for m in (chosen, rejected)] + path_dates
                yield _tuple_record(
                    f"oasst1:{chosen['message_id']}>{rejected['message_id']}",
                    path,
                    chosen["text"].strip(),
                    rejected["text"].strip(),
                    client_id=str(client.get("user_id") or "") or None,
                    date=min((d for d in dates if d), default=None),
                    licence="apache-2.0",
                    extra={"tree": str(chosen.get("message_tree_id") or ""), "rank": rank},
                )

    @staticmethod
    def _path(
        parent: dict[str, Any], messages: dict[str, dict[str, Any]]
    ) -> tuple[str, list[str]] | None:
        """``Human:``/``Assistant:`` history from the root to ``parent``, ending ready to
        reply, and the days its messages were written."""
        turns, days = [], []
        node: dict[str, Any] | None = parent
        while node is not None:
            role = HUMAN if node.get("role") == "prompter" else ASSISTANT
            turns.append(f"{role}{str(node['text']).strip()}")
            days.append(_day(node))
            parent_id = node.get("parent_id")
            node = messages.get(str(parent_id)) if parent_id else None
            if parent_id and node is None:
                return None
        if parent.get("role") != "prompter":
            return None
        return "".join(reversed(turns)) + ASSISTANT, days


def _day(message: dict[str, Any]) -> str:
    """The ISO day a message was written ("" when not given)."""
    return str(message.get("created_date") or "")[:10]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and value == value  # rejects None and NaN


def split_dialogue(dialogue: str) -> tuple[str, str] | None:
    """``(prompt up to the last "\\n\\nAssistant:", response)`` of an HH dialogue."""
    marker = ASSISTANT.rstrip()
    cut = dialogue.rfind(marker)
    if cut < 0:
        return None
    end = cut + len(marker)
    return dialogue[:end] + " ", dialogue[end:].strip()


class HHRLHFSource(_PreferenceSource):
    name: ClassVar[str] = "hh_rlhf"
    description: ClassVar[str] = "Anthropic HH-RLHF helpful/harmless preference pairs"
    date_field: ClassVar[str | None] = None
    hub: ClassVar[HubDataset] = HubDataset("Anthropic/hh-rlhf")
    test_split: ClassVar[str] = "test"
    default_test_samples: ClassVar[int] = 1000
    default_public: ClassVar[str] = "pku_saferlhf"

    def row_tuple(
        self, row: dict[str, Any], index: int, policy: RecordPolicy, prefix: str
    ) -> SourceRecord | None:
        chosen_split = split_dialogue(str(row.get("chosen") or ""))
        rejected_split = split_dialogue(str(row.get("rejected") or ""))
        if chosen_split is None or rejected_split is None:
            policy.malformed(f"{prefix} row {index}", "no Assistant turn")
            return None
        prompt, chosen = chosen_split
        if rejected_split[0] != prompt:
            self.stats["rejected with a different history"] += 1
        return _tuple_record(
            f"hh:{prefix}:{index}", prompt, chosen, rejected_split[1], licence="mit"
        )


class TLDRSource(_PreferenceSource):
    name: ClassVar[str] = "tldr"
    description: ClassVar[str] = "OpenAI TL;DR summarisation comparisons (Reddit posts)"
    date_field: ClassVar[str | None] = None
    client_words: ClassVar[str] = "one labelling worker"
    client_is_person: ClassVar[bool] = True
    hub: ClassVar[HubDataset] = HubDataset(
        "openai/summarize_from_feedback", revision="refs/convert/parquet", config="comparisons"
    )
    test_split: ClassVar[str] = "validation"
    default_test_samples: ClassVar[int] = 979
    default_public: ClassVar[str] = "xsum"

    def _rows(self, opts: dict[str, Any], split: str, files: Any, cache_dir: Path) -> Any:
        # The comparisons live only at refs/convert/parquet unless a revision is pinned.
        revision = opts["revision"] if opts["revision"] != "main" else self.hub.revision
        hub = replace(self.hub, revision=revision, split=split)
        return iter_rows(hub, local_files=files, cache_dir=cache_dir)

    def row_tuple(
        self, row: dict[str, Any], index: int, policy: RecordPolicy, prefix: str
    ) -> SourceRecord | None:
        info = row.get("info") or {}
        post = str(info.get("post") or "").strip()
        if not post:
            policy.skip("no Reddit post (CNN/DM article)")
            return None
        summaries = row.get("summaries") or []
        try:
            choice = int(row["choice"])
            chosen = str(summaries[choice]["text"]).strip()
            rejected = str(summaries[1 - choice]["text"]).strip()
        except (KeyError, IndexError, TypeError, ValueError):
            policy.malformed(f"{prefix} row {index}", "bad summaries or choice")
            return None
        return _tuple_record(
            f"tldr:{prefix}:{index}",
            f"{post}\n\nSummary: ",
            chosen,
            rejected,
            client_id=str(row.get("worker") or "") or None,
            label=str(info.get("subreddit") or "") or None,
            licence="openai-summarize-from-feedback",
            extra={"post_id": str(info.get("id") or ""), "batch": str(row.get("batch") or "")},
        )


class PublicPromptsSource(Source):
    name: ClassVar[str] = "public_prompts"
    description: ClassVar[str] = "Public prompt sets of paper 003: Alpaca, PKU-SafeRLHF, XSum"
    date_field: ClassVar[str | None] = None
    options: ClassVar[tuple[Option, ...]] = (
        Option("set", "alpaca", f"prompt set: {', '.join(sorted(PROMPT_SETS))}"),
        Option("files", None, "local files in the hub schema", "list"),
        Option("revision", None, "hub revision (default: the set's)"),
        Option("max_prompts", None, "at most this many prompts (paper ablation: 5K, 10K)", "int"),
        Option("template", "code", "XSum prompt ending: code (Summary:) or paper (Assistant:)"),
        Option("on_malformed", "skip", "malformed records: skip (counted) or error"),
    )
    split_defaults: ClassVar[dict[str, Any]] = {"span_length": None, "dedupe": "none"}

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()

    def _hub(self, opts: dict[str, Any]) -> HubDataset:
        if opts["set"] not in PROMPT_SETS:
            raise ValueError(f"public_prompts: set must be one of {sorted(PROMPT_SETS)}")
        hub = PROMPT_SETS[opts["set"]].hub
        return replace(hub, revision=opts["revision"] or hub.revision)

    def revision(self, options: dict[str, Any]) -> str:
        opts = parse_options(options, self.options, self.name)
        if opts["files"]:
            return files_revision(expand_files(opts["files"]))
        return self._hub(opts).describe()

    def fetch(self, options: dict[str, Any], cache_dir: Path) -> Iterator[SourceRecord]:
        opts = parse_options(options, self.options, self.name)
        self.stats = Counter()
        policy = RecordPolicy(self.name, opts["on_malformed"], self.stats)
        rows = iter_rows(self._hub(opts), local_files=opts["files"], cache_dir=Path(cache_dir))
        yield from public_records(opts["set"], rows, opts["template"], opts["max_prompts"], policy)
        policy.summary()
