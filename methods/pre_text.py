"""PrE-Text (paper 004): Private Evolution on the clients, then ``Expand`` with the LLM.

Algorithm 1 of paper 004, line by line:

- lines 1–2 (``setup``): ``S_1`` = ``population_size`` public texts (paper: c4-en samples
  outside the private sites, > 20 words);
- lines 4–10 (``round`` × ``iterations``): the DP nearest-neighbour histogram of
  Algorithm 2 with lookahead, threshold H, resampling and ``Variation`` — see
  :mod:`methods.private_evolution`, which also lists the choices the paper leaves open;
- line 11 (``finish``): ``S_syn = Expand(∪_t Set(S'_t))``: ``expand_size`` samples from
  the profile's generator, each prompted with three random DP seeds in the structure of
  Fig. 3 (the text generated after the 4th heading, up to the 5th, is the sample);
  temperature and top-p 1.0, ``expand_max_new_tokens`` = 85 as the reference code.
  Expand is post-processing of the noisy histograms and costs no privacy.

The release is the expanded set (artifact kind ``texts``); the downstream on-device model
is trained on it by the evaluator. ``paper`` is App. D.2 at ε = 1.29 (N_syn = 1024; use
``population_size: 2048`` for ε = 7.58), 8 samples per client (JOBS/FORUMS/MICROBLOG;
16 for CODE), RoBERTa-large mask filling with W_steps = 2 and MASK% = 30 %, lookahead 4,
T = 11 and 2,000,000 expanded samples. ``cpu`` is scaled down to run in minutes on 2
cores (T = 3, N_syn = 16, no lookahead, W_steps = 1, 64 expanded samples of at most 48
tokens): the cpu profile's variation is SmolLM2 re-writing masked spans token by token,
about a second per text on one core, and Expand samples about 40 tokens/s. ``tiny`` runs
in seconds in the tests (with lookahead 1, so the tests exercise it).
"""

from __future__ import annotations

from typing import Any

from benchmark.artifact import Artifact
from benchmark.method import MethodContext
from benchmark.profiles.base import SamplingParams
from methods.private_evolution import PE_CPU, PE_PAPER, PE_TINY, PrivateEvolution, expand


class PreText(PrivateEvolution):
    name = "pre_text"
    artifact_kind = "texts"
    privacy_units = ("user",)
    configs = {
        "paper": {
            **PE_PAPER,
            "expand_size": 2_000_000,
            "expand_max_new_tokens": 85,
            "expand_batch_size": 256,
        },
        "cpu": {
            **PE_CPU,
            "expand_size": 64,
            "expand_max_new_tokens": 48,
            "expand_batch_size": 16,
        },
        "tiny": {
            **PE_TINY,
            "expand_size": 8,
            "expand_max_new_tokens": 16,
            "expand_batch_size": 8,
        },
    }

    def finish(self, ctx: MethodContext, state: Any) -> Artifact:
        seeds = list(state["seeds"])
        params = SamplingParams(max_new_tokens=self.config["expand_max_new_tokens"])
        texts = expand(
            ctx.profile.generator(),
            seeds,
            self.config["expand_size"],
            params,
            self.config["expand_batch_size"],
            ctx.rng(self.num_rounds()),
        )
        return Artifact(kind=self.artifact_kind, texts=texts)
