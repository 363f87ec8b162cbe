"""The Python SDK of a smartune server: submit sweeps, follow them, read their trials and results.

    import smartune

    with smartune.Client() as client:  # $SMARTUNE_URL and $SMARTUNE_API_KEY
        job_id = client.submit("examples/quick.yaml")
        job = client.wait(job_id, progress=lambda j: print(j["state"]))
        frame = client.trials_frame(job_id)  # pandas: one row per trial

Importing it loads the standard library only: httpx when a Client is made, PyYAML when a spec file is
read, pandas for `trials_frame`. The `smartune` command line (`cli/`, also `python -m cli`) is built on it.
"""

from __future__ import annotations

from smartune.client import FINAL_STATES, Client
from smartune.errors import ServerUnreachable, SmartuneError
from smartune.specs import read_spec

__all__ = ["FINAL_STATES", "Client", "ServerUnreachable", "SmartuneError", "read_spec"]
