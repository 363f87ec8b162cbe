"""Reading a job spec file (YAML or JSON) into the document the server validates; the CLI reads specs
with this too. YAML is read as YAML 1.2 reads numbers (`worker.contract.yaml12`, the loader the contract's
own spec files use): `1e-4` is a number, where PyYAML's YAML 1.1 makes it a string, which the server,
validating types strictly, refuses where a number goes. The document is sent as it is: the server
validates it and names the field at fault (client-side validation would need the whole contract, that is
pydantic and the method vocabulary, which this SDK does not load)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def read_spec(path: str | os.PathLike[str]) -> Any:
    """The document in a `.json` file (JSON) or any other (YAML); a ValueError names the file if it does
    not parse, a FileNotFoundError if it is not there."""
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON: {err}") from None
    import yaml

    from worker.contract.yaml12 import yaml_loader  # PyYAML and re only

    try:
        return yaml.load(text, Loader=yaml_loader())  # a SafeLoader subclass
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML: {err}") from None
