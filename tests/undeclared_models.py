"""A method that asks the profile for a model it does not declare (tests/test_models_on_demand.py
runs it in its sandbox, where the profile refuses)."""

from benchmark.artifact import Artifact
from benchmark.method import Method
from benchmark.registry import METHODS


@METHODS.register("test_undeclared_generator")
class UndeclaredGenerator(Method):
    name = "test_undeclared_generator"
    artifact_kind = "texts"
    configs = {"tiny": {}}
    models = ("embedder",)  # but it samples from the generator

    def num_rounds(self):
        return 0

    def finish(self, ctx, state):
        ctx.profile.generator()
        return Artifact("texts", texts=["unreachable"])
