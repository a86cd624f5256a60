"""Method adapters, one module each, registered lazily by name."""

from benchmark.api import METHODS

_BUILTIN_METHODS = {
    "public_only": "methods.bounds:PublicOnly",
    "nonprivate": "methods.bounds:NonPrivate",
    "oracle": "methods.oracle:Oracle",
    "generator_only": "methods.generator_only:GeneratorOnly",
    "base_model": "methods.bounds:BaseModel",
    "dp_fedavg": "methods.dp_fedavg:DPFedAvg",
    "dp_ftrl": "methods.dp_ftrl:DPFTRL",
    "pre_text": "methods.pre_text:PreText",
    "pe_sft": "methods.pe_sft:PESFT",
    "popri": "methods.popri:POPri",
    "fed_ctg": "methods.fed_ctg:FedCTG",
    "dp_ftrl_dm": "methods.dp_ftrl_dm:DPFTRLDM",
    "dpprefsyn": "methods.dpprefsyn:DPPrefSyn",
    "dp_ft": "methods.dp_ft:DPFT",
}

for _name, _target in _BUILTIN_METHODS.items():
    METHODS.register_lazy(_name, _target)
