"""``generator_only``: the control that separates the generator from the private signal.

What it answers: how good is the generator's own text, written from public data alone,
under the same downstream protocol as the LLM methods' releases? A text release below
``public_only`` may be the generator's text or the DP step; (method − generator_only) is
the part of a row the private signal bought (paper 004's Expand-only row asks the same).
It is a **control**: ε = 0 (it never calls the client pool, so the ledger stays empty),
and leaderboards label it and never rank it.

The release: ``num_synthetic`` texts from the profile's generator, each prompted with
three random public texts in the few-shot structure of paper 004 Fig. 3 / paper 000 Fig. 5
(:func:`methods.private_evolution.few_shot_prompt`), the generated sample being the text
before the next sample heading (:func:`~methods.private_evolution.parse_generated`),
empty generations re-drawn (:func:`~methods.private_evolution.expand`).

Which prompt construction it shares, and why: POPri's (:mod:`methods.popri`) — its round-0
samples and its final ``expand`` over :func:`~methods.private_evolution.eligible_public`
(every public text with at least one word), the untrained generator being exactly
POPri's policy at round 0 (no DPO step yet) and PE+SFT's before its SFT step (which
generates its release with the same ``expand`` over the same public texts). PE and
PrE-Text start from public texts too, but their round 0 *is* public text (the initial
population is copied, not generated), and PrE-Text's Expand prompts with DP seeds, which
a control without private signal does not have; POPri's round 0 is the generator writing
from public prompts, which is what this control isolates. The sampling settings
(``max_new_tokens`` and the release's ``release_temperature`` / ``release_top_p``, the
knobs a suite tunes for every LLM method: :mod:`methods.release_sampling`) and
``num_synthetic`` are POPri's per profile, read from its configs rather than repeated here;
the ``bench`` suite sets ``num_synthetic`` to its release size, as it does for every text
release, and tunes its sampling over the same grid as the LLM methods'.
"""

from __future__ import annotations

from typing import Any

from benchmark.api import Artifact, Method, MethodContext
from methods.bounds import REFERENCE_UNITS
from methods.popri import POPri
from methods.private_evolution import eligible_public, expand
from methods.release_sampling import release_sampling

# POPri's settings this control shares: the release size and how each text is sampled.
SHARED_WITH_POPRI = (
    "num_synthetic",
    "max_new_tokens",
    "release_temperature",
    "release_top_p",
    "generate_batch_size",
)


class GeneratorOnly(Method):
    """ε = 0 control: ``num_synthetic`` texts of the generator from public 3-shot prompts."""

    name = "generator_only"
    role = "control"
    artifact_kind = "texts"
    privacy_units = REFERENCE_UNITS
    models = ("generator",)
    configs = {
        profile: {key: config[key] for key in SHARED_WITH_POPRI}
        for profile, config in POPri.configs.items()
    }

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.require_counts("num_synthetic", "max_new_tokens", "generate_batch_size")
        self.require_positive("release_top_p")

    def num_rounds(self) -> int:
        return 0

    def finish(self, ctx: MethodContext, state: Any) -> Artifact:
        cfg = self.config
        params = release_sampling(cfg, cfg["max_new_tokens"])
        texts = expand(
            ctx.profile.generator(),
            eligible_public(ctx, 1),
            cfg["num_synthetic"],
            params,
            cfg["generate_batch_size"],
            ctx.rng(0),
        )
        return Artifact(kind=self.artifact_kind, texts=texts)
