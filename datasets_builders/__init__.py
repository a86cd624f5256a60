"""Dataset builders: one module per public source, sharing one split pipeline.

Sources are registered lazily (imported on first use), so a source whose optional
dependencies are missing breaks only the builds that use it.
"""

from benchmark.registry import DATASETS

_BUILTIN_SOURCES = {
    "kjv": "datasets_builders.sources.kjv:KJVSource",
    "chatterbot": "datasets_builders.sources.chatterbot:ChatterbotSource",
    "chatterbot_prefs": "datasets_builders.sources.chatterbot:ChatterbotPreferenceSource",
    "chitchat": "datasets_builders.sources.chitchat:ChitchatSource",
    "chitchat_prefs": "datasets_builders.sources.chitchat_prefs:ChitchatPreferenceSource",
    "biorxiv": "datasets_builders.sources.biorxiv:BiorxivSource",
    "congress": "datasets_builders.sources.congress:CongressSource",
    "stackoverflow": "datasets_builders.sources.stackoverflow:StackOverflowSource",
    "yelp": "datasets_builders.sources.yelp:YelpSource",
    "pubmed": "datasets_builders.sources.pubmed:PubMedSource",
    "c4": "datasets_builders.sources.c4:C4Source",
    "oasst1": "datasets_builders.sources.preferences:OASST1Source",
    "hh_rlhf": "datasets_builders.sources.preferences:HHRLHFSource",
    "tldr": "datasets_builders.sources.preferences:TLDRSource",
    "public_prompts": "datasets_builders.sources.preferences:PublicPromptsSource",
}

for _name, _target in _BUILTIN_SOURCES.items():
    DATASETS.register_lazy(_name, _target)
