"""Sampling of the released texts: the temperature and top-p of an LLM method's final
generation only.

The released texts are generated after the last private step, from what the DP rounds
produced (POPri's aligned policy, PE's DP-selected seeds, PE+SFT's fine-tuned generator), so
how they are sampled is post-processing: tuning it on validation costs no privacy (issue
32: the DP-FL baselines were tuned, the LLM methods not even on this free knob). The
papers sample the release at temperature 1.0 and top-p 1.0, the defaults here; the rounds'
own sampling stays each method's paper setting.
"""

from __future__ import annotations

from typing import Any

from benchmark.api import SamplingParams

RELEASE_SAMPLING = {"release_temperature": 1.0, "release_top_p": 1.0}


def release_sampling(config: dict[str, Any], max_new_tokens: int) -> SamplingParams:
    """The final generation's sampling from a method config holding :data:`RELEASE_SAMPLING`'s
    keys (SamplingParams refuses values no generator can honour)."""
    return SamplingParams(
        max_new_tokens=max_new_tokens,
        temperature=float(config["release_temperature"]),
        top_p=float(config["release_top_p"]),
    )
