"""Downstream classification (paper 001): train on synthetic labelled texts, test on real.

The classifier is a multinomial logistic regression on the profile's sentence embeddings
(papers 000/001 fine-tune RoBERTa/BERT; an embedding probe is what runs on a CPU and it
ranks synthetic sets by the same signal: how well their label-conditional distribution
matches the real one). Macro-F1 averages over the classes present in the real test labels,
so a class the synthetic set never produced counts with F1 = 0 (paper 001 does not state
its averaging; macro is implied by its remark on majority-class predictions).
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score

from benchmark.artifact import Artifact
from benchmark.control_codes import code_field
from benchmark.data import LABEL, TEXT
from benchmark.evaluation.base import EvalContext, Metric, MetricNotApplicable


def train_and_score(
    x_train: np.ndarray,
    y_train: list[str],
    x_test: np.ndarray,
    y_test: list[str],
    c: float = 1.0,
    max_iter: int = 1000,
) -> dict[str, float]:
    """Fit on (x_train, y_train), report accuracy and macro-F1 on (x_test, y_test).

    A synthetic set with a single label cannot fit a classifier; it predicts that label.
    """
    classes = sorted(set(y_train))
    if len(classes) == 1:
        predicted = np.array([classes[0]] * len(y_test), dtype=object)
    else:
        clf = LogisticRegression(C=c, max_iter=max_iter)
        clf.fit(x_train, np.asarray(y_train, dtype=object))
        predicted = clf.predict(x_test)
    truth = np.asarray(y_test, dtype=object)
    return {
        "accuracy": float(accuracy_score(truth, predicted)),
        "macro_f1": float(
            f1_score(truth, predicted, labels=sorted(set(y_test)), average="macro", zero_division=0)
        ),
    }


class Classification(Metric):
    """Accuracy and macro-F1 on the labelled records of ``test_part``.

    ``field`` names one field of composite control codes (``Review Stars``, ``Anatomy``):
    the task is then that field's value, as paper 001 scores Yelp's category and rating, and
    each PubMed MeSH indicator, separately. Records without the field are left out.
    """

    name = "classification"
    models = ("embedder",)

    def __init__(
        self,
        test_part: str = "test",
        c: float = 1.0,
        max_iter: int = 1000,
        field: str | None = None,
    ) -> None:
        super().__init__(
            test_part=test_part,
            classifier="logistic_regression",
            f1_average="macro",
            c=c,
            max_iter=max_iter,
            **({"field": field} if field is not None else {}),
        )
        self.test_part, self.c, self.max_iter, self.field = test_part, c, max_iter, field

    def _task(self, label: object) -> str | None:
        """The class of a label for this task; None leaves the text out."""
        if label in (None, ""):
            return None
        return str(label) if self.field is None else code_field(str(label), self.field)

    def check_applicable(self, artifact: Artifact) -> None:
        if artifact.kind != "labelled_texts" or not artifact.texts:
            raise MetricNotApplicable("classification needs a non-empty labelled_texts release")

    def compute(self, artifact: Artifact, ctx: EvalContext) -> dict[str, float]:
        test = [(r[TEXT], self._task(r.get(LABEL))) for r in ctx.split.records(self.test_part)]
        test = [(text, y) for text, y in test if y is not None]
        synthetic = [
            (t, self._task(y)) for t, y in zip(artifact.texts, artifact.labels, strict=True)
        ]
        synthetic = [(text, y) for text, y in synthetic if y is not None]
        if not test or not synthetic:
            raise MetricNotApplicable(
                f"no labels for this task in the split's {self.test_part!r} part or the release"
            )
        self.record(featurizer=ctx.profile.embedder().name)
        scores = train_and_score(
            ctx.embed([text for text, _ in synthetic]),
            [y for _, y in synthetic],
            ctx.embed([text for text, _ in test]),
            [y for _, y in test],
            self.c,
            self.max_iter,
        )
        return {**scores, "n_synthetic": float(len(synthetic)), "n_test": float(len(test))}
