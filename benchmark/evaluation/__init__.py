"""Evaluation: every metric is registered by name (lazily) and recorded with its settings."""

from benchmark.registry import METRICS

_BUILTIN_METRICS = {
    "next_token": "benchmark.evaluation.next_token:NextTokenAccuracy",
    "in_vocab": "benchmark.evaluation.in_vocab:InVocabAccuracy",
    "fid": "benchmark.evaluation.fid:FID",
    "mauve": "benchmark.evaluation.mauve_metric:MAUVE",
    "classification": "benchmark.evaluation.classification:Classification",
    "mia": "benchmark.evaluation.mia:MembershipInference",
    "dcr": "benchmark.evaluation.mia:DistanceToClosestRecord",
    "win_rate": "benchmark.evaluation.win_rate:WinRate",
    "cost": "benchmark.evaluation.cost:Cost",
    "reward_accuracy": "benchmark.evaluation.preference_audit:RewardAccuracy",
    "premia": "benchmark.evaluation.preference_audit:Premia",
    "canary": "benchmark.evaluation.canary_audit:CanaryAudit",
}

for _name, _target in _BUILTIN_METRICS.items():
    METRICS.register_lazy(_name, _target)
