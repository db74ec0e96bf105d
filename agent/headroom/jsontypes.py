"""The names of the values headroom handles untyped, each saying why it is untyped (issue 31).

A value is written ``Any`` only where nothing is known of its type until it is checked: a document parsed from
JSON or YAML, before its shape is checked. These aliases name those classes, so an annotation says which one it
is; every other ``Any`` in agent/headroom carries a comment on its line or the line above saying why
(tests/test_architecture.py checks both). This module sits at the bottom: it imports nothing of headroom, and any
module may import it (``samples.py`` and ``schema.py``, which import nothing of the other rooms, comment theirs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A value parsed from JSON before its shape is checked: a serving runtime's answer, the agent's status API
# document (/api/v1/status), a probe result, a trace line (--record), a model's config.json, the Prometheus HTTP
# API's answer. It is a str, an int, a float, a bool, None, a list or a dict of them; each reader checks the
# keys and types it uses where it reads them (isinstance), so the type is not written here.
JsonValue = Any
# A JSON object as built or parsed: its keys are strings, its values JsonValue.
JsonDoc = dict[str, Any]
# A JSON object only read.
JsonMapping = Mapping[str, Any]

# A value as YAML parsed it (config.yaml, a workload profile, a scenario, an inventory), before the schema
# validates it; and a mapping in that format built in code (an automatic workload's profile, a scenario's GPU)
# and handed to the same validator. Its type is what the validator checks, not known before.
YamlValue = Any
# A mapping of such values, read only (``top`` of a profile's section readers).
YamlMapping = Mapping[str, Any]
# A mapping of such values as built (a profile's fields before profile_from_dict).
YamlDict = dict[str, Any]

# A validated section of config.yaml (``agent``, ``web``, ``collectors.<name>``, ``analysis``): each key's value
# has the type its schema in config.py declares, which differs key by key (a float, a tuple of strings, a bool).
Settings = Mapping[str, Any]
