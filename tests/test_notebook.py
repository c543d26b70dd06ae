"""notebooks/fedelasticnet_figures.ipynb runs top to bottom on a smoke results store."""
import subprocess
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from conftest import torch_threads
from experiments.__main__ import main
from test_fen_tables import mnist_runs_here

ROOT = Path(__file__).resolve().parent.parent


def test_notebook_redraws_a_smoke_store(tmp_path, monkeypatch):
    results = tmp_path / "results"
    mnist_runs_here(monkeypatch)
    with torch_threads(1):  # one split: six runs are enough for the notebook
        assert main(["fen", "table2", "--profile", "smoke", "--seeds", "1", "--datasets", "mnist",
                     "--splits", "dirichlet0.3", "--results-root", str(results)]) == 0

    # Kernel "python3" = this interpreter: a spec installed under a prefix that JUPYTER_PATH
    # puts first, whatever other python3 kernels the machine has.
    prefix = tmp_path / "jupyter"
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix), "--name", "python3"],
                   check=True, capture_output=True)
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    monkeypatch.setenv("FEDREPRO_RESULTS", str(results))

    nb = nbformat.read(ROOT / "notebooks" / "fedelasticnet_figures.ipynb", as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(ROOT)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "6 finished runs" in text and "1 figures" in text
    pngs = list((results / "figures").glob("notebook_*.png"))
    assert len(pngs) == 1 and pngs[0].stat().st_size > 10_000
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1
