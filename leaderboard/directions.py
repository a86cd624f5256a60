"""Which way is better for each metric: one table, read by the leaderboard's tables and by
hyperparameter selection (a leaf module, so neither imports the other)."""

# Metrics where smaller is better; everything else is larger-is-better. MAUVE's frontier
# integral is a divergence between the release's and the real texts' distributions.
LOWER_IS_BETTER = (
    "next_token.ce", "fid.fid", "mia.loss_auc", "mia.calibrated_auc", "premia.auc", "dcr.auc",
    "mauve.frontier_integral",
)  # fmt: skip


def lower_is_better(metric: str) -> bool:
    """Whether a smaller value of ``metric`` is the better one."""
    return metric in LOWER_IS_BETTER
