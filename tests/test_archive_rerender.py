"""The archive re-renders what is committed: restore the archived runs into an empty results
store, render a target with --done-only (nothing trains), and the table, its CSV and its claims
come out byte for byte as committed in docs/measured/. The samples: FedElasticNet Table 2's
CIFAR-10 rows, the whole table as `make restore` then `make table2 DONE_ONLY=1` renders it
(quick; every row whose run is archived, the rest "not computed yet"), and its MNIST rows at the
paper profile."""
import os
from pathlib import Path

import pytest

from conftest import real_data_root
from experiments.__main__ import main as experiments_main
from fedrepro.archive import restore

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "docs" / "measured"


def _have(*folders: str) -> bool:
    return bool(real_data_root()) and all((Path(real_data_root()) / f).is_dir() for f in folders)


@pytest.mark.parametrize("selection, committed, folders", [
    (["--datasets", "cifar10"], "fedelasticnet_table2_cifar10", ("CIFAR10",)),
    ([], "fedelasticnet_table2", ("CIFAR10", "MNIST", "EMNIST", "shakespeare")),  # make table2's default
    (["--datasets", "mnist", "--profile", "paper"], "fedelasticnet_table2_paper_mnist", ("MNIST",)),
])
def test_restored_runs_render_the_committed_table_byte_for_byte(selection, committed, folders, tmp_path,
                                                                monkeypatch, capsys):
    if not _have(*folders):  # without the data the rows read "data not here"
        pytest.skip(f"needs the real {', '.join(folders)} (FEDREPRO_DATA_ROOT)")
    monkeypatch.chdir(ROOT)  # the notes name the data folder as given: relative, as when it was rendered
    data_root = os.path.relpath(Path(real_data_root()).resolve(), ROOT)
    if f" {data_root}/" not in (MEASURED / f"{committed}.md").read_text():
        pytest.skip(f"the committed table names the data folder where it lay when rendered, beside the "
                    f"repository; here it is {data_root}")
    restored, _ = restore(tmp_path)
    assert restored, "the archive restored nothing"
    assert experiments_main(["fen", "table2", "--profile", "quick", *selection, "--done-only",  # a later --profile wins
                             "--results-root", str(tmp_path), "--data-root", data_root]) == 0
    capsys.readouterr()
    for suffix in (".md", ".csv", "_claims.md", "_runs.csv"):
        ours = (tmp_path / "tables" / f"fedelasticnet_table2{suffix}").read_text()
        assert ours == (MEASURED / f"{committed}{suffix}").read_text(), suffix
