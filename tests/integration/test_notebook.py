"""examples/quick_sweep.ipynb runs headless (nbclient, a fresh IPython kernel) against a real `smartune
serve`, as it is: smoke.yaml's tiny random BERT, vanilla and SMART at two learning rates (four trials, about
half a minute here). The server's URL and a team key reach the kernel through its environment, as they
would a user's Jupyter; a cell inserted after the notebook's `parameters` cell (papermill's convention)
bounds the wait."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.integration.client import Api
from tests.support.cluster import Server

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "quick_sweep.ipynb"
TRIALS = 4  # smoke.yaml's two methods x the notebook's two learning rates


def tagged(nb: nbformat.NotebookNode, tag: str) -> int:
    found = [i for i, cell in enumerate(nb.cells) if tag in cell.metadata.get("tags", [])]
    assert len(found) == 1, f"one cell tagged {tag!r}"
    return found[0]


def test_the_quick_sweep_notebook_runs_headless(server: Server, tmp_path: Path) -> None:
    key = Api(server, server.admin_key()).team_key("nlp")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.insert(tagged(nb, "parameters") + 1, nbformat.v4.new_code_cell("TIMEOUT_S = 240"))
    env = {**os.environ, "SMARTUNE_URL": server.url, "SMARTUNE_API_KEY": key}
    env.pop("SMARTUNE_API_KEY_FILE", None)
    env.pop("MPLBACKEND", None)  # the kernel's own inline backend: figures become image/png outputs
    client = NotebookClient(
        nb,
        timeout=300,  # per cell: the wait cell runs the whole sweep
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},  # the kernel's working folder
    )
    try:
        client.execute(env=env)
    finally:
        nbformat.write(nb, tmp_path / NOTEBOOK.name)  # what ran, for a failure's post-mortem
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
    frame_output = [
        o for o in nb.cells[tagged(nb, "trials-frame")].outputs if o.output_type == "execute_result"
    ]
    assert len(frame_output) == 1
    html = frame_output[0]["data"]["text/html"]
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert body.count("<tr>") == TRIALS  # one row per trial
    assert "learning_rate" in html and "best_score" in html
    plot = nb.cells[tagged(nb, "plot")].outputs
    assert any("image/png" in o.get("data", {}) for o in plot), "the plot cell shows a figure"
