"""Win rate of a released generator against the test set's preferred responses (paper 003).

For each sampled test prompt the released model answers greedily (through its chat
template when it has one, via the profiles' ``HFGenerator``); the judge compares that
answer (as A) with the record's ``chosen`` response (as B); the win rate is the mean verdict
(ties count one half), and per test tuple its verdict is kept
(:func:`~benchmark.evaluation.client_counts.verdict_counts`, over every tuple of the part,
0 of 0 where a seed judged none) so the table's interval resamples the test tuples as well
as the seeds. A preference release is scored through the policy the evaluator
aligns on it (SFT + DPO of the profile's ``preference_policy``: ``EvalContext.policy``); a
released model is scored as it is. The judges that read log-probabilities use the language
model the judge spec names (``lm``: one no policy starts from, e.g. Gemma 3 270M for the
``prefs`` track) or else the profile's generator (the stand-in for paper 003's GPT-4o),
never the policy being judged.

Head to head (paper 003 Table 15): with ``against`` = another run's ``artifact.json``, B is
that release's policy's greedy answer to the same prompt instead of the reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.artifact import Artifact
from benchmark.data import CLIENT_ID, HELD_OUT
from benchmark.evaluation.base import EvalContext, Metric, MetricNotApplicable
from benchmark.evaluation.client_counts import verdict_counts
from benchmark.evaluation.downstream import model_device
from benchmark.evaluation.judges import (
    GENERATOR_JUDGES,
    VerdictJudge,
    judge_generator,
    make_judge,
)
from benchmark.evaluation.sampling import shuffled_subset
from benchmark.profiles.base import SamplingParams
from benchmark.profiles.hf_generator import HFGenerator


class WinRate(Metric):
    """Judge-based win rate; ``judge`` is ``{"type": ..., ...}`` (see ``judges.make_judge``)."""

    name = "win_rate"
    kinds = ("model", "preferences")

    @classmethod
    def models_for(cls, kind: str, settings: dict[str, Any]) -> tuple[str, ...]:
        """The policy a preference release aligns, and the profile's generator where an
        offline judge scores with it (a judge naming its own ``lm`` loads that instead)."""
        if kind not in cls.kinds:
            return ()
        judge = settings.get("judge") or {}
        policy = ("preference_policy",) if kind == "preferences" else ()
        reads_generator = judge.get("type", "loglik") in GENERATOR_JUDGES and "lm" not in judge
        return (*policy, "generator") if reads_generator else policy

    def __init__(
        self,
        judge: dict[str, Any] | None = None,
        n_prompts: int = 200,
        max_new_tokens: int = 128,
        test_part: str = "test",
        prompt_field: str = "prompt",
        reference_field: str = "chosen",
        against: str | None = None,
    ) -> None:
        self.judge_spec = dict(judge or {"type": "loglik"})
        super().__init__(
            judge=self.judge_spec,
            n_prompts=n_prompts,
            max_new_tokens=max_new_tokens,
            test_part=test_part,
            prompt_field=prompt_field,
            reference_field=reference_field,
            against=against,
        )
        self.against = against
        self.n_prompts, self.max_new_tokens, self.test_part = n_prompts, max_new_tokens, test_part
        self.prompt_field, self.reference_field = prompt_field, reference_field

    def _answers(self, artifact: Artifact, ctx: EvalContext, prompts: list[str]) -> list[str]:
        """Greedy answers of the release's policy (``EvalContext.policy``)."""
        model, tokenizer = ctx.policy(artifact)
        device = str(model_device(model))  # where the policy is: not moved
        policy = HFGenerator(
            model, tokenizer, name=f"policy of {artifact.kind} release", device=device
        )
        greedy = SamplingParams(max_new_tokens=self.max_new_tokens, temperature=0.0)
        return policy.generate(prompts, greedy)

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, Any]:
        records = [
            r
            for r in ctx.split.records(self.test_part)
            if r.get(self.prompt_field) and r.get(self.reference_field)
        ]
        if not records:
            raise MetricNotApplicable(
                f"the {self.test_part!r} part has no {self.prompt_field}/{self.reference_field}"
            )
        order = shuffled_subset(list(range(len(records))), self.n_prompts, ctx.seed)
        chosen = [records[i] for i in order]
        prompts = [str(r[self.prompt_field]) for r in chosen]
        answers = self._answers(artifact, ctx, prompts)
        if self.against is None:
            references = [str(r[self.reference_field]) for r in chosen]
        else:  # head to head: the other release's policy answers the same prompts
            references = self._answers(Artifact.load(Path(self.against)), ctx, prompts)
        judge = make_judge(self.judge_spec, judge_generator(self.judge_spec, ctx.profile), ctx.seed)
        self.record(**{f"judge_{k}": v for k, v in judge.settings().items()})
        verdicts = judge.compare(prompts, answers, references)
        result: dict[str, Any] = {
            "win_rate": float(verdicts.mean()),
            "ties": float((verdicts == 0.5).sum()),
            "n": float(len(verdicts)),
        }
        if self.test_part in HELD_OUT:  # never per-tuple detail of the train part
            ids = [str(r[CLIENT_ID]) for r in records]
            counts = verdict_counts(ids, [ids[i] for i in order], verdicts, "win_rate")
            result["per_client"] = {self.test_part: counts.to_json()}
        if isinstance(judge, VerdictJudge):
            result["parse_failures"] = float(judge.parse_failures)
        return result
