"""Load the papers' reference tables (fedrepro/reference/*.csv) with normalized join keys.

Every file keeps its columns as the strings printed in the paper. On top of them
`load_reference` adds:

* `value_raw`    the value as printed (existing column kept; otherwise copied from the value column,
                 with "+" appended for censored FedDyn cells such as "1000+")
* `paper_value`  the same value as a float, NaN when empty or unreadable
* `dataset_key`, `split_key`, `algorithm_key`  lowercase keys our runs use (see the maps below)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd

from fedrepro.errors import DataError

ENV_VAR = "FEDREPRO_REFERENCE_ROOT"

# Printed dataset names -> our dataset keys. Others fall back to a slug of the name.
DATASET_KEYS = {
    "mnist": "mnist",
    "emnist-l": "emnist_l",
    "cifar-10": "cifar10",
    "cifar-100": "cifar100",
    "shakespeare": "shakespeare",
    "har": "har",
    "esr": "esr",
}

# Printed algorithm / method names -> our algorithm keys.
ALGORITHM_KEYS = {
    "fedprox": "fedprox",
    "algorithm 1": "fen_alg1",
    "scaffold": "scaffold",
    "algorithm 2": "fen_alg2",
    "feddyn": "feddyn",
    "algorithm 3": "fen_alg3",
    "fedavg": "fedavg",
    "losac": "losac",
}


class ReferenceNotFoundError(DataError, FileNotFoundError):
    """The reference folder or one of its files is missing."""


def package_reference_root() -> Path:
    """The reference values shipped with the package (fedrepro/reference/, see its README)."""
    return Path(__file__).resolve().parents[1] / "reference"


def reference_root() -> Path:
    """The reference folder: $FEDREPRO_REFERENCE_ROOT when set, else the package's own copy."""
    env = os.environ.get(ENV_VAR)
    root = Path(env) if env else package_reference_root()
    if not root.is_dir():
        where = f"{ENV_VAR}={env}" if env else "the package's fedrepro/reference"
        fix = f"unset {ENV_VAR} to use the package's copy" if env else "reinstall fedrepro"
        raise ReferenceNotFoundError(f"reference folder not found: {root} (from {where}); {fix}.")
    return root


def reference_path(name: str) -> Path:
    """Path of one reference file; `name` is a stem ("fedelasticnet_table2") or a file name."""
    root = reference_root()
    path = root / (name if name.endswith(".csv") or name.endswith(".md") else f"{name}.csv")
    if not path.is_file():
        available = ", ".join(sorted(p.stem for p in root.glob("*.csv")))
        raise ReferenceNotFoundError(
            f"reference file not found: {path}. Available in {root}: {available}"
        )
    return path


def read_reference_csv(name: str) -> pd.DataFrame:
    # Strings exactly as printed: no NaN guessing, no float parsing ("34.90" stays "34.90").
    return pd.read_csv(reference_path(name), dtype=str, keep_default_na=False)


def dataset_key(printed: str) -> str:
    # Drop descriptions such as "CIFAR-10 (Dirichlet alpha=0.5 ...)" before mapping.
    name = re.sub(r"\s*\(.*$", "", str(printed)).strip().lower()
    if name in DATASET_KEYS:
        return DATASET_KEYS[name]
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_")


def split_key(printed: str, alpha: str = "") -> str:
    """IID -> iid, Dirichlet (.6) -> dirichlet0.6, Non-IID (Shakespeare's own split) -> natural."""
    text = str(printed).strip().lower()
    if text == "":
        return ""
    if text == "iid":
        return "iid"
    if text.startswith("dirichlet"):
        if not str(alpha).strip():
            alpha = re.search(r"\.?\d+(\.\d+)?", text).group(0)
        return f"dirichlet{float(alpha):g}"
    if text == "non-iid":
        return "natural"
    if "sorted by label" in text:
        return "label_sorted"
    return re.sub(r"[^a-z0-9.]+", "_", text).strip("_")


def algorithm_key(printed: str, transmitted: str = "") -> str:
    """Map a printed method name; FedDyn's two transmit modes (FEN T3/T4) get their own keys."""
    key = ALGORITHM_KEYS.get(str(printed).strip().lower())
    if key is None:
        key = re.sub(r"[^a-z0-9]+", "_", str(printed).lower()).strip("_")
    if key == "feddyn":
        sent = str(transmitted).lower()
        if sent.startswith("local_model"):
            return "feddyn_model"
        if sent.startswith("local_update"):
            return "feddyn_update"
    return key


def _value_column(df: pd.DataFrame) -> str:
    # FEN / LoSAC / L2GD files print `value`; the FedDyn round tables print `rounds_value`.
    for col in ("value", "rounds_value", "num_samples"):
        if col in df.columns:
            return col
    raise ValueError(f"no value column in reference columns {list(df.columns)}")


def load_reference(name: str) -> pd.DataFrame:
    """One reference table with printed strings kept and `paper_value` + key columns added."""
    df = read_reference_csv(name)
    value_col = _value_column(df)
    if "value_raw" not in df.columns:
        raw = df[value_col].astype(str)
        if "censored" in df.columns:
            # "1000+" is how the paper prints a run that never reached the target.
            raw = raw.where(df["censored"].str.lower() != "true", raw + "+")
        df["value_raw"] = raw
    df["paper_value"] = pd.to_numeric(df[value_col], errors="coerce").astype(float)
    if "dataset" in df.columns:
        df["dataset_key"] = [dataset_key(d) for d in df["dataset"]]
    if "split" in df.columns:
        alphas = df["dirichlet_alpha"] if "dirichlet_alpha" in df.columns else [""] * len(df)
        df["split_key"] = [split_key(s, a) for s, a in zip(df["split"], alphas)]
    method_col = "algorithm" if "algorithm" in df.columns else "method" if "method" in df.columns else None
    if method_col:
        sent = df["transmitted"] if "transmitted" in df.columns else [""] * len(df)
        df["algorithm_key"] = [algorithm_key(a, t) for a, t in zip(df[method_col], sent)]
    if "confidence" not in df.columns:
        df["confidence"] = "ok"
    return df
