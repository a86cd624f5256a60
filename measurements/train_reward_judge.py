"""Train the preference track's reward judge and measure it on validation pairs.

The judge (:class:`benchmark.evaluation.judges.EmbeddingRewardJudge`) is a Bradley-Terry
head over all-mpnet-base-v2 embeddings of the conversation and the reply
(:mod:`benchmark.evaluation.reward_head`). Its data: the ``chitchat_prefs`` pairs dated
before 2018-05-01 that are in no part of the ``prefs`` split (checked by source id), so
no suite scores or trains on them. 150 of their conversations are held out for validation
(all their pairs: *dev*); training takes 4,000 pairs of the others. Each training pair's
chosen reply (what the person wrote) is set against negatives of four kinds:

- ``other``: the pair's rejected reply (a same-topic reply from another conversation);
- ``echo``: the conversation's last human turn, repeated (a head on topic alone rates a
  verbatim echo highest: measured 100 % without these);
- ``same``: a reply from the same conversation at least two turns away;
- ``gemma``: Gemma 3 270M's greedy reply to the prompt (40 tokens, cut at the next turn):
  model-written text from a model no policy starts from, so the head learns that a
  fluent, generic reply is not what a person chose. Weighted ``×k`` by repetition.

Candidates (:data:`CANDIDATES`) are selected on dev by the smallest of three agreements:
*human vs human* (chosen over rejected, dev pairs), *model vs human* (the person's reply
over the untouched base policy's greedy reply, 48 tokens, as ``win_rate`` makes it, on 150
dev prompts) and *over echo* (the person's reply over the last human turn repeated: a
judge a parrot beats would rank a policy that echoes its prompt first). The gate itself
(``measurements/judge_agreement.py``) is then measured once, on the split's public pairs,
with the selected head.

Steps, each resumable (outputs kept in ``--work``):

1. ``negatives --shard i/k``: the Gemma replies to the train prompts of shard ``i``;
2. ``answers``: the base policy's greedy replies to the dev prompts;
3. ``train``: embed every text (bf16 autocast, cached by text), train the candidates,
   select, ship the head (``benchmark/profiles/shipped/reward_heads/<name>.npz``, the name
   ending in the file's sha256, so a suite that names a head names its weights) and write
   the report (``--out``).

Run: ``.venv/bin/python measurements/train_reward_judge.py train --work /tmp/reward-judge
--out docs/measurements/reward_judge.json`` (after the first two steps).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.evaluation.reward_head import Pairs, RewardHead, conversation_text, train_head

BEFORE = "2018-05-01"
DEV_CONVERSATIONS, DEV_PAIRS, DEV_ANSWERS, TRAIN_PAIRS = 150, 300, 150, 4000
GEMMA_TOKENS, ANSWER_TOKENS = 40, 48
HEAD_NAME = "chitchat-mpnet"
# (negative kinds, gemma weight, hidden width)
CANDIDATES = [
    (kinds, weight, hidden)
    for kinds, weight in ((("other", "same"), 0), (("other", "echo", "same"), 0),
                          (("other", "same", "gemma"), 1), (("other", "same", "gemma"), 5),
                          (("other", "echo", "same", "gemma"), 5))
    for hidden in (0, 256)
]  # fmt: skip


def last_human_turn(prompt: str) -> str:
    return prompt.rsplit("\n\nHuman: ", 1)[-1].rsplit("\n\nAssistant: ", 1)[0].strip()


def pairs(splits: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, dev) pairs: the early pairs outside every part of the ``prefs`` split,
    split by conversation."""
    from benchmark.data import PARTS
    from benchmark.split_storage import load_split
    from datasets_builders.sources.chitchat_prefs import ChitchatPreferenceSource
    from leaderboard.catalog import get_suite
    from leaderboard.suites import ensure_split

    suite = get_suite("prefs")
    split = load_split(ensure_split(suite, splits))
    used = {r["source_id"] for part in PARTS for r in split.records(part)}
    options = dict(suite.split_options["source_options"])
    keys = ("conversation", "prompt", "chosen", "rejected")
    early = [
        {"source_id": r.source_id, **{k: r.extra[k] for k in keys}}
        for r in ChitchatPreferenceSource().fetch(options, splits)
        if r.date < BEFORE and r.source_id not in used
    ]
    conversations = sorted({p["conversation"] for p in early})
    random.Random(35).shuffle(conversations)
    held_out = set(conversations[:DEV_CONVERSATIONS])
    dev = [p for p in early if p["conversation"] in held_out]
    train = [p for p in early if p["conversation"] not in held_out]
    random.Random(0).shuffle(train)
    random.Random(1).shuffle(dev)
    return train[:TRAIN_PAIRS], dev[:DEV_PAIRS]


def gemma_negatives(train: list[dict[str, Any]], shard: int, shards: int, work: Path) -> None:
    """Gemma 3 270M's greedy replies to this shard's train prompts, kept as they come."""
    from benchmark.profiles.base import SamplingParams
    from benchmark.profiles.cpu import judge_lm

    path = work / f"gemma-{shard}-of-{shards}.json"
    done = json.loads(path.read_text()) if path.exists() else {}
    kept = kept_negatives(work)  # any shard's, from any earlier sharding
    todo = [p for i, p in enumerate(train) if i % shards == shard and p["source_id"] not in kept]
    generator = judge_lm("gemma-3-270m")
    for start in range(0, len(todo), 40):
        batch = todo[start : start + 40]
        replies = generator.generate(
            [p["prompt"] for p in batch],
            SamplingParams(max_new_tokens=GEMMA_TOKENS, temperature=0.0),
        )
        for p, reply in zip(batch, replies, strict=True):
            done[p["source_id"]] = reply.split("Human:")[0].split("\n\nAssistant:")[0].strip()
        path.write_text(json.dumps(done))
        print(f"shard {shard}: {len(done)} replies", flush=True)


def kept_negatives(work: Path) -> dict[str, str]:
    kept: dict[str, str] = {}
    for path in sorted(work.glob("gemma-*-of-*.json")):
        kept.update(json.loads(path.read_text()))
    return kept


def dev_answers(dev: list[dict[str, Any]], work: Path) -> list[str]:
    from judge_agreement import base_answers

    from benchmark.profiles import get_profile

    prompts = [p["prompt"] for p in dev[:DEV_ANSWERS]]
    return base_answers(get_profile("cpu"), prompts, ANSWER_TOKENS, work / "dev-answers.json")


class Embeddings:
    """Rows for texts, embedded once and kept in ``work`` (bf16 autocast)."""

    def __init__(self, work: Path) -> None:
        self.texts_path, self.rows_path = work / "embedded.json", work / "embedded.npy"
        texts = json.loads(self.texts_path.read_text()) if self.texts_path.exists() else []
        rows = np.load(self.rows_path) if texts else np.zeros((0, 768), np.float32)
        self.index = {t: i for i, t in enumerate(texts)}
        self.rows = rows

    def ensure(self, texts: set[str]) -> None:
        new = sorted(texts - set(self.index))
        if not new:
            return
        from benchmark.profiles.mpnet import load_embedder

        started = time.perf_counter()
        rows = load_embedder(bf16=True)(new)
        print(f"embedded {len(new)} texts in {time.perf_counter() - started:.0f} s", flush=True)
        for text in new:
            self.index[text] = len(self.index)
        self.rows = np.concatenate([self.rows, rows])
        np.save(self.rows_path, self.rows)
        self.texts_path.write_text(json.dumps(sorted(self.index, key=self.index.get)))

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.rows[[self.index[t] for t in texts]]


def triples(train: list[dict[str, Any]], kinds: tuple[str, ...], weight: int,
            gemma: dict[str, str]) -> list[tuple[str, str, str]]:  # fmt: skip
    """(context, chosen, negative) texts for the negative ``kinds``."""
    by_conversation = defaultdict(list)
    for p in train:
        by_conversation[p["conversation"]].append(p)
    rng, out = random.Random(0), []
    for p in train:
        context = conversation_text(p["prompt"])
        if "other" in kinds:
            out.append((context, p["chosen"], p["rejected"]))
        if "echo" in kinds:
            out.append((context, p["chosen"], last_human_turn(p["prompt"])))
        if "same" in kinds:
            turn = int(p["source_id"].rsplit(":", 1)[1])
            away = [q for q in by_conversation[p["conversation"]]
                    if abs(int(q["source_id"].rsplit(":", 1)[1]) - turn) >= 2]  # fmt: skip
            if away:
                out.append((context, p["chosen"], rng.choice(away)["chosen"]))
        if "gemma" in kinds and gemma.get(p["source_id"]):
            out.extend([(context, p["chosen"], gemma[p["source_id"]])] * weight)
    return out


def embedded(rows: list[tuple[str, str, str]], embed: Embeddings) -> Pairs:
    return Pairs(*(embed([row[i] for row in rows]) for i in range(3)))


def train_step(
    train: list[dict[str, Any]], dev: list[dict[str, Any]], work: Path, out: Path
) -> None:
    from benchmark.profiles import mpnet
    from benchmark.profiles.shipped import ship

    gemma = kept_negatives(work)
    answers = json.loads((work / "dev-answers.json").read_text())["answers"]
    every = [triples(train, kinds, weight, gemma) for kinds, weight, _ in CANDIDATES]
    dev_rows = [(conversation_text(p["prompt"]), p["chosen"], p["rejected"]) for p in dev]
    model_rows = [
        (conversation_text(p["prompt"]), p["chosen"], a)
        for p, a in zip(dev[: len(answers)], answers, strict=True)
    ]
    echo_rows = [
        (conversation_text(p["prompt"]), p["chosen"], last_human_turn(p["prompt"])) for p in dev
    ]
    embed = Embeddings(work)
    embed.ensure(
        {t for rows in (*every, dev_rows, model_rows, echo_rows) for row in rows for t in row}
    )
    human, model, echo = (embedded(rows, embed) for rows in (dev_rows, model_rows, echo_rows))
    report: dict[str, Any] = {
        "embedder": mpnet.LABEL,
        "data": {"before": BEFORE, "train_pairs": len(train), "dev_pairs": len(dev),
                 "dev_conversations": DEV_CONVERSATIONS, "dev_model_answers": len(answers),
                 "gemma_negatives": len(gemma), "gemma_tokens": GEMMA_TOKENS},
        "selection": "the largest min(dev human_vs_human, model_vs_human, over_echo)",
        "candidates": [],
    }  # fmt: skip
    best: tuple[float, RewardHead | None] = (-1.0, None)
    for (kinds, weight, hidden), rows in zip(CANDIDATES, every, strict=True):
        head, _, epoch = train_head(embedded(rows, embed), human, hidden=hidden)
        figures = {"human_vs_human": human.agreement(head), "model_vs_human": model.agreement(head),
                   "over_echo": echo.agreement(head)}  # fmt: skip
        candidate = {"negatives": list(kinds), "gemma_weight": weight, "hidden": hidden,
                     "triples": len(rows), "epoch": epoch, "dev": figures}  # fmt: skip
        report["candidates"].append(candidate)
        print(json.dumps(candidate), flush=True)
        score = min(figures.values())
        if score > best[0]:
            best = (score, RewardHead(head.layers, {"embedder": mpnet.LABEL, **candidate}))
    head = best[1]
    assert head is not None
    data = head.to_bytes()
    name = f"{HEAD_NAME}-{hashlib.sha256(data).hexdigest()[:12]}"  # a new head, a new name
    staged = work / f"{name}.npz"
    staged.write_bytes(data)
    ship(staged, f"reward_heads/{name}.npz")
    report["selected"] = {"head_name": name, **head.meta}
    print(f"shipped {name}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["negatives", "answers", "train"])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--splits", type=Path, default=Path("data/splits"))
    parser.add_argument("--shard", default="0/1", help="i/k: this process's share of the negatives")
    parser.add_argument("--out", type=Path, default=Path("docs/measurements/reward_judge.json"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    train, dev = pairs(args.splits)
    print(f"{len(train)} train pairs, {len(dev)} dev pairs", flush=True)
    if args.step == "negatives":
        shard, shards = (int(x) for x in args.shard.split("/"))
        gemma_negatives(train, shard, shards, args.work)
    elif args.step == "answers":
        dev_answers(dev, args.work)
    else:
        train_step(train, dev, args.work, args.out)


if __name__ == "__main__":
    main()
