"""What the LoSAC figure targets share: a federation built from a config and driven round by
round in this process (Figures 6 and 7 need what a stored run does not keep: client 1's
round-5 upload, the server matrix after every round), and the LoSAC targets' shared options.

`build_loop` builds what `fedrepro.runner.run_experiment` runs (`run.federation_for`: model,
algorithm, executor, ledger, channel, RoundLoop) with the same seeds, so a figure's round t
is the round t a stored run of the same config would compute; it writes nothing and keeps
no checkpoints. Table II and Figures 1-5 go through the results store instead.
"""
from __future__ import annotations

from typing import Optional

from fedrepro.data.common import DatasetTensors
from fedrepro.metrics.ledger import Ledger
from fedrepro.run import Federated, federation_for


def build_loop(cfg, data: Optional[DatasetTensors] = None, ledger_class: type = Ledger, **ledger_kw) -> Federated:
    """The federation `run_experiment` would build for `cfg` (on the CPU, same seeds), on `data`
    when given (a relabelled view, e.g. Figure 6's binary MNIST), else the config's dataset.
    The ledger is `ledger_class(d, ..., **ledger_kw)` (a subclass may keep messages)."""
    return federation_for(cfg, "cpu", data, ledger_class=ledger_class, **ledger_kw)


def shared_options(ap, datasets: str = "", ignored: tuple = ()) -> None:
    """The shared table/figure options (reports.cli) as LoSAC reads them: --datasets defaults to
    every paper row (`datasets` names the keys; empty: the option is ignored), `ignored` options
    said so in --help."""
    ap.set_defaults(datasets="all")
    for action in ap._actions:
        if action.dest == "datasets":
            action.help = (f"comma-separated dataset keys ({datasets}) or 'all' (default: every paper row; rows "
                           "whose data is not here are listed as 'not run')") if datasets else "ignored here"
        elif action.dest in ignored:
            action.help = "ignored here"
