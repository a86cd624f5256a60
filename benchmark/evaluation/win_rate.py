"""Win rate of a released generator against the test set's preferred responses (paper 003).

For each sampled test prompt the released model answers greedily; the judge compares that
answer (as A) with the record's ``chosen`` response (as B); the win rate is the mean verdict
(ties count one half). Preference releases (pairs) are scored after the preference track
trains a model on them; here only ``model`` releases apply.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.artifact import Artifact
from benchmark.evaluation.base import EvalContext, Metric, MetricNotApplicable
from benchmark.evaluation.judges import VerdictJudge, make_judge
from benchmark.evaluation.sampling import shuffled_subset


def greedy_responses(
    model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, batch_size: int = 8
) -> list[str]:
    """Greedy answers, prompts through the chat template when the tokenizer has one."""
    import torch

    if tokenizer.chat_template:
        prompts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )
    config = model.config
    context = getattr(config, "n_positions", None) or config.max_position_embeddings
    room = context - max_new_tokens  # long prompts keep their end (the actual request)
    if room < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room in a {context} context")
    answers: list[str] = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(prompts), batch_size):
            enc = tokenizer(prompts[start : start + batch_size], add_special_tokens=False)
            rows = [list(r)[-room:] for r in enc["input_ids"]]
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, row in enumerate(rows):  # left padding for decoder-only models
                ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
                mask[i, width - len(row) :] = 1
            out = model.generate(
                input_ids=ids.to(model.device),
                attention_mask=mask.to(model.device),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                pad_token_id=pad_id,
            )
            answers += tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    return [a.strip() for a in answers]


class WinRate(Metric):
    """Judge-based win rate; ``judge`` is ``{"type": ..., ...}`` (see ``judges.make_judge``)."""

    name = "win_rate"
    kinds = ("model",)

    def __init__(
        self,
        judge: dict[str, Any] | None = None,
        n_prompts: int = 200,
        max_new_tokens: int = 128,
        test_part: str = "test",
        prompt_field: str = "prompt",
        reference_field: str = "chosen",
    ) -> None:
        self.judge_spec = dict(judge or {"type": "loglik"})
        super().__init__(
            judge=self.judge_spec,
            n_prompts=n_prompts,
            max_new_tokens=max_new_tokens,
            test_part=test_part,
            prompt_field=prompt_field,
            reference_field=reference_field,
        )
        self.n_prompts, self.max_new_tokens, self.test_part = n_prompts, max_new_tokens, test_part
        self.prompt_field, self.reference_field = prompt_field, reference_field

    def _load(self, model_dir: str, ctx: EvalContext) -> tuple[Any, Any]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        has_tokenizer = any(
            (Path(model_dir) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")
        )
        tokenizer = (
            AutoTokenizer.from_pretrained(model_dir)
            if has_tokenizer
            else ctx.profile.generator().tokenizer
        )
        return model, tokenizer

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
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
        references = [str(r[self.reference_field]) for r in chosen]
        model, tokenizer = self._load(str(artifact.model_dir), ctx)
        answers = greedy_responses(model, tokenizer, prompts, self.max_new_tokens)
        needs_generator = self.judge_spec.get("type", "loglik") in ("loglik", "llm")
        judge = make_judge(
            self.judge_spec, ctx.profile.generator() if needs_generator else None, ctx.seed
        )
        self.record(**{f"judge_{k}": v for k, v in judge.settings().items()})
        verdicts = judge.compare(prompts, answers, references)
        result = {
            "win_rate": float(verdicts.mean()),
            "ties": float((verdicts == 0.5).sum()),
            "n": float(len(verdicts)),
        }
        if isinstance(judge, VerdictJudge):
            result["parse_failures"] = float(judge.parse_failures)
        return result
