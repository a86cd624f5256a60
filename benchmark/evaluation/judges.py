"""Pluggable pairwise judges for win rates (paper 003 uses GPT-4o; fedsynth runs offline).

A judge answers, for each (prompt, response A, response B), 1.0 if A is better, 0.0 if B is,
0.5 for a tie or an unparseable verdict. Two families:

- score judges rate each response on its own and compare scores: ``loglik`` (length-
  normalised log-likelihood of the response under the profile's public generator: a
  fluency/plausibility proxy that works offline on the ``cpu`` profile, *not* comparable
  with GPT-4o win rates), ``pmi`` (how much more likely the prompt makes the response
  than a context-free opening does, log p(r|x) − log p(r|∅): relevance to the context,
  which a fluent off-topic reply lacks) and ``reward_model`` (a local sequence-
  classification model) and ``embedding_reward`` (a reward head over all-mpnet-base-v2
  embeddings, shipped with the project: :class:`EmbeddingRewardJudge`). How often each
  prefers the human reply:
  ``docs/measurements/working-scale.md#judges``. A score judge reads the profile's
  generator unless its spec names another LM (``lm``, see :func:`judge_generator`), e.g.
  ``pmi`` under Gemma 3 270M, a model no policy starts from (why: :class:`ContextPMIJudge`).
  The ``prefs`` track's judge is ``embedding_reward``, the one that passed the gate
  (``measurements/judge_agreement.py``);
- verdict judges read both responses in one prompt and answer "A" or "B": ``llm`` (a local
  LLM, by comparing the log-probabilities of answering A and B) and ``http`` (any
  OpenAI-compatible chat-completions endpoint). Their A/B order is randomised per item with
  the judge's seed to cancel position bias; parse failures are counted and scored 0.5.
  They ask with a ``template`` (:mod:`benchmark.evaluation.judge_templates`): the short
  ``generic`` one, or paper 003's ``oasst`` / ``hh`` / ``tldr``.
"""

from __future__ import annotations

import json
import os
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmark.evaluation.judge_templates import JudgeTemplate, get_template
from benchmark.evaluation.reward_head import RewardHead, conversation_text
from benchmark.profiles.base import Generator, ModelProfile
from benchmark.profiles.packaged import distribution_version


class Judge(ABC):
    """Compares two response lists item by item."""

    name: str

    def settings(self) -> dict[str, Any]:
        return {"judge": self.name}

    @abstractmethod
    def compare(self, prompts: list[str], a: list[str], b: list[str]) -> np.ndarray:
        """Per item: 1.0 (A better), 0.0 (B better) or 0.5 (tie / no verdict)."""


class ScoreJudge(Judge):
    """A judge that scores each response independently."""

    @abstractmethod
    def score(self, prompts: list[str], responses: list[str]) -> np.ndarray: ...

    def compare(self, prompts: list[str], a: list[str], b: list[str]) -> np.ndarray:
        sa, sb = self.score(prompts, a), self.score(prompts, b)
        return np.where(sa > sb, 1.0, np.where(sa < sb, 0.0, 0.5))


class LogLikelihoodJudge(ScoreJudge):
    """Mean per-token log-probability of the response given the prompt under ``generator``."""

    name = "loglik"

    def __init__(self, generator: Generator) -> None:
        self.generator = generator

    def score(self, prompts: list[str], responses: list[str]) -> np.ndarray:
        sums = self.generator.logprobs(prompts, responses)
        ids = self.generator.tokenizer(list(responses), add_special_tokens=False)["input_ids"]
        lengths = np.array([len(x) for x in ids], dtype=np.float64)
        return np.where(lengths > 0, sums / np.maximum(lengths, 1), -np.inf)


class ContextPMIJudge(ScoreJudge):
    """log p(response | prompt) − log p(response | ``null_prompt``) under ``generator``.

    Why: a likelihood judge prefers whatever its model finds fluent (its own greedy text
    above all), whatever the prompt; the difference keeps only what the prompt explains.

    Why its ``generator`` must share no weights with the policies it judges: greedy decoding
    picks, token by token, the policy's likeliest continuation of the prompt, i.e. it climbs
    the first term of this score when the judge *is* the policy's starting model. Such a
    judge rates the untouched base model's greedy replies above what people wrote by
    construction (SmolLM2 judging SmolLM2's policies, measured:
    ``docs/measurements/working-scale.md#judges``), and every aligning step away from the
    start costs score. Under a model
    no policy starts from (``lm`` in the spec: Gemma 3 270M for the ``prefs`` track) the
    base model's decoding climbs nothing the judge reads, so its replies get no built-in
    advantage over human ones; whether they then score below the human replies is
    measured, not assumed (``measurements/judge_agreement.py``, model vs human on public
    pairs; the gate asks 70 %; results: ``docs/measurements/working-scale.md#judges``).
    """

    name = "pmi"

    def __init__(self, generator: Generator, null_prompt: str = "") -> None:
        self.generator, self.null_prompt = generator, null_prompt

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "null_prompt": self.null_prompt}

    def score(self, prompts: list[str], responses: list[str]) -> np.ndarray:
        given = self.generator.logprobs(prompts, responses)
        alone = self.generator.logprobs([self.null_prompt] * len(responses), responses)
        return given - alone


class RewardModelJudge(ScoreJudge):
    """A local reward model (``AutoModelForSequenceClassification`` with one output)."""

    name = "reward_model"

    def __init__(self, path: str, batch_size: int = 8, max_length: int = 512) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.path, self.batch_size, self.max_length = path, batch_size, max_length
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32)
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.eval()

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "path": self.path, "max_length": self.max_length}

    def _format(self, prompt: str, response: str) -> str:
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
                tokenize=False,
            )
        return f"{prompt}\n\n{response}"

    def score(self, prompts: list[str], responses: list[str]) -> np.ndarray:
        import torch

        texts = [self._format(p, r) for p, r in zip(prompts, responses, strict=True)]
        out = np.zeros(len(texts))
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                enc = self.tokenizer(
                    texts[start : start + self.batch_size],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                logits = self.model(**enc).logits[:, 0].float()
                out[start : start + len(logits)] = logits.numpy()
        return out


class EmbeddingRewardJudge(ScoreJudge):
    """A reward head over a sentence encoder's embeddings of the conversation and the reply
    (:mod:`benchmark.evaluation.reward_head`), trained on preference pairs no suite uses.

    Why: a log-probability judge under the policies' starting model rates that model's
    greedy replies above people's by construction (:class:`ContextPMIJudge`), and under
    another small LM (Gemma 3 270M) it still failed the gate (60 % model vs human). The
    encoder here (all-mpnet-base-v2) shares no weights with any policy or method, and the
    head learns what people chose, the model-written replies of a third model among its
    negatives (``measurements/train_reward_judge.py``). ``embed``: texts to unit rows, the
    encoder the head was trained on (its label is in the head's ``meta``)."""

    name = "embedding_reward"

    def __init__(
        self, head: RewardHead, embed: Callable[[list[str]], np.ndarray], head_name: str
    ) -> None:
        self.head, self.embed, self.head_name = head, embed, head_name

    def settings(self) -> dict[str, Any]:
        return {
            **super().settings(),
            "head": self.head_name,
            "embedder": self.head.meta.get("embedder"),
        }

    def score(self, prompts: list[str], responses: list[str]) -> np.ndarray:
        contexts = [conversation_text(p) for p in prompts]
        unique = sorted(set(contexts) | set(responses))
        rows = dict(zip(unique, self.embed(unique), strict=True))
        return self.head.score(
            np.stack([rows[c] for c in contexts]), np.stack([rows[r] for r in responses])
        )


def shipped_reward_judge(head_name: str) -> EmbeddingRewardJudge:
    """The head shipped as ``reward_heads/<head_name>.npz`` (``benchmark.profiles.shipped``,
    sha256-checked) over all-mpnet-base-v2, the encoder it was trained on."""
    from benchmark.profiles import mpnet
    from benchmark.profiles.shipped import shipped_file

    path = shipped_file(f"reward_heads/{head_name}.npz")
    if path is None:
        raise ValueError(f"no shipped reward head {head_name!r} (or its sha256 does not match)")
    head = RewardHead.load(path)
    if head.meta.get("embedder") != mpnet.LABEL:
        raise ValueError(
            f"reward head {head_name!r} was trained on {head.meta.get('embedder')}, "
            f"not {mpnet.LABEL}"
        )
    return EmbeddingRewardJudge(head, mpnet.load_embedder(), head_name)


class VerdictJudge(Judge):
    """A judge that sees both answers; the A/B order is shuffled per item (seeded)."""

    def __init__(self, seed: int = 0, template: str = "generic") -> None:
        self.seed = seed
        self.template: JudgeTemplate = get_template(template)
        self.parse_failures = 0

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "seed": self.seed, "template": self.template.name}

    @abstractmethod
    def verdicts(self, judge_prompts: list[str]) -> list[str | None]:
        """ "A", "B", or None (no usable verdict) per judge prompt."""

    def compare(self, prompts: list[str], a: list[str], b: list[str]) -> np.ndarray:
        swap = np.random.default_rng(self.seed).random(len(prompts)) < 0.5
        shown = [
            self.template.render(p, y if s else x, x if s else y)
            for p, x, y, s in zip(prompts, a, b, swap, strict=True)
        ]
        out = np.full(len(prompts), 0.5)
        for i, verdict in enumerate(self.verdicts(shown)):
            if verdict is None:
                self.parse_failures += 1
                continue
            first_shown_wins = verdict == "A"
            out[i] = float(first_shown_wins != bool(swap[i]))
        return out


class LocalLLMJudge(VerdictJudge):
    """A local LLM (a profile generator) as judge: picks the likelier of answering A or B."""

    name = "llm"

    def __init__(self, generator: Generator, seed: int = 0, template: str = "generic") -> None:
        super().__init__(seed, template)
        self.generator = generator

    def verdicts(self, judge_prompts: list[str]) -> list[str | None]:
        n = len(judge_prompts)
        prefix = self.template.answer_prefix()
        asked = [p + prefix for p in judge_prompts]
        a, b = (" A", " B") if prefix else ("A", "B")
        scores = self.generator.logprobs(asked * 2, [a] * n + [b] * n)
        return ["A" if sa > sb else "B" for sa, sb in zip(scores[:n], scores[n:], strict=True)]


class HTTPJudge(VerdictJudge):
    """An OpenAI-compatible ``/chat/completions`` endpoint given by the user.

    ``api_key_env`` names an environment variable holding the key; the key itself is never
    recorded. Requests are sent at temperature 0 with a tiny ``max_tokens``.
    """

    name = "http"

    def __init__(
        self,
        url: str,
        model: str,
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
        seed: int = 0,
        template: str = "generic",
    ) -> None:
        super().__init__(seed, template)
        self.url = (
            url
            if url.rstrip("/").endswith("/chat/completions")
            else (url.rstrip("/") + "/chat/completions")
        )
        self.model, self.api_key_env, self.timeout_s = model, api_key_env, timeout_s

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "url": self.url, "model": self.model}

    def _ask(self, content: str) -> str:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": content}],
            "temperature": 0,
            "max_tokens": self.template.max_tokens,
        }
        headers = {"Content-Type": "application/json"}
        if self.api_key_env:
            headers["Authorization"] = f"Bearer {os.environ[self.api_key_env]}"
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            reply = json.loads(response.read())
        return str(reply["choices"][0]["message"]["content"] or "")

    def verdicts(self, judge_prompts: list[str]) -> list[str | None]:
        return [self.template.parse(self._ask(p)) for p in judge_prompts]


GENERATOR_JUDGES = ("loglik", "pmi", "llm")


def judge_generator(spec: dict[str, Any], profile: ModelProfile) -> Generator | None:
    """The language model a log-probability judge reads: ``spec["lm"]`` (a name in
    :data:`benchmark.profiles.cpu.JUDGE_LMS`) when given, else ``profile``'s generator as
    scored (its transformers copy where it samples with vLLM: no engine for a judge);
    None for the judges that read none."""
    if spec.get("type", "loglik") not in GENERATOR_JUDGES:
        return None
    if "lm" in spec:
        from benchmark.profiles.cpu import judge_lm

        return judge_lm(str(spec["lm"]))
    return profile.scoring_generator()


def judge_loads(spec: dict[str, Any]) -> str:
    """What a judge of ``spec`` loads, in words, and whether its packages are installed (a
    suite's ``--plan`` lists it beside the runs' models)."""
    kind = spec.get("type", "loglik")
    if kind == "embedding_reward":
        from benchmark.profiles import mpnet

        head = spec.get("head_name")
        return f"{kind}: {mpnet.MODEL_ID} ({_installed(mpnet.CHUNKS)}) + shipped head {head}"
    if kind in GENERATOR_JUDGES and "lm" in spec:
        from benchmark.profiles.cpu import JUDGE_LMS

        packaged = JUDGE_LMS.get(str(spec["lm"]))
        if packaged is None:
            return f"{kind}: unknown judge model {spec['lm']!r}"
        return f"{kind}: {spec['lm']} ({_installed(packaged.distributions)})"
    if kind in GENERATOR_JUDGES:
        return f"{kind}: the profile's generator"
    if kind == "reward_model":
        return f"{kind}: {spec.get('path')}"
    return f"{kind}: {spec.get('model')} at {spec.get('url')}"


def _installed(distributions: Sequence[str]) -> str:
    missing = [d for d in distributions if distribution_version(d) == "not installed"]
    return f"missing {', '.join(missing)}" if missing else "installed"


def make_judge(spec: dict[str, Any], generator: Generator | None, seed: int) -> Judge:
    """Build a judge from ``{"type": "loglik" | "pmi" | "reward_model" | "embedding_reward" |
    "llm" | "http", ...}``."""
    options = dict(spec)
    kind = options.pop("type", "loglik")
    options.pop("lm", None)  # which LM ``generator`` is: see judge_generator
    if kind in GENERATOR_JUDGES and generator is None:
        raise ValueError(f"judge {kind!r} needs the profile's generator")
    if kind == "loglik":
        return LogLikelihoodJudge(generator, **options)
    if kind == "pmi":
        return ContextPMIJudge(generator, **options)
    if kind == "llm":
        return LocalLLMJudge(generator, seed=seed, **options)
    if kind == "reward_model":
        return RewardModelJudge(**options)
    if kind == "embedding_reward":
        return shipped_reward_judge(**options)
    if kind == "http":
        return HTTPJudge(seed=seed, **options)
    raise ValueError(
        f"unknown judge type {kind!r}; expected loglik, pmi, reward_model, embedding_reward, "
        "llm or http"
    )
