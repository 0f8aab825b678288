"""examples/quickstart.ipynb runs top to bottom in a real Jupyter kernel (nbclient + ipykernel), every cell
without error -- including the synchronous API called inside the kernel's running event loop."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


@pytest.mark.slow
def test_quickstart_notebook_runs_in_a_jupyter_kernel(gpu):
    nbformat = pytest.importorskip("nbformat", reason="pip install -e .[test] installs nbclient")
    nbclient = pytest.importorskip("nbclient", reason="pip install -e .[test] installs nbclient")
    pytest.importorskip("ipykernel", reason="pip install -e .[test] installs ipykernel")
    from piegpu.errors import ModelError
    from piegpu.model.default import default_model_dir
    try:
        default_model_dir(verbose=False)  # the kernel loads the default model itself
    except ModelError as e:
        pytest.skip(f"default model unavailable: {e}")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=False,
                                     resources={"metadata": {"path": str(ROOT / "examples")}})
    client.execute(env=env)  # raises CellExecutionError naming the cell on any error

    def text(cell) -> str:
        return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    code = [c for c in nb.cells if c.cell_type == "code"]
    everything = "\n".join(text(c) for c in code)
    for bad in ("Traceback", "Task was destroyed", "Cannot run the event loop", "never awaited"):
        assert bad not in everything, everything
    sync = next(c for c in code if ".run()" in c.source and "sync run() and sync iteration agree" in c.source)
    assert "sync run() and sync iteration agree" in text(sync)
    assert "Paris" in text(sync)  # the default model answers correctly under greedy decoding
    cancel = next(c for c in code if "g.cancel()" in c.source)
    assert text(cancel).startswith("cancelled")
    assert "released" in text(code[-1])
