"""YAML read as YAML 1.2 reads numbers: `1e-4` is a float (PyYAML's YAML 1.1 makes it a string, which the
contract, validating types strictly, refuses where a number goes). One loader for every reader of a spec:
the contract's spec files (`worker.contract.specfile`) and the SDK's `smartune.read_spec`, so the
canonical JSON that travels in `SMARTUNE_JOB_SPEC` (`5e-05`) and a file's `lr: 1e-4` stay numbers.
PyYAML is imported when the loader is first asked for, never at import time."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


@cache
def yaml_loader() -> Any:
    """PyYAML's safe loader, reading `1e-4` as the float YAML 1.2 says it is."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT, list("-+0123456789"))
    return Loader
