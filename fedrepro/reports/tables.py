"""Paper table vs our measurement: join, format, render as markdown and CSV.

`ours` (long format, one row per key combination) needs the key columns, `ours_mean` and
`status`; optional columns default as noted: `ours_lo`/`ours_hi` (95 % interval over seeds,
default = mean), `n_seeds` (1), `reason`, `profile`, `seeds`, `data` (""). The reference side is
a frame from `reference.load_reference` (`paper_value`, `value_raw`, `confidence`).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

STATUSES = ("ok", "not run", "failed", "diverged")
DEFAULT_MISSING_REASON = "not run in this profile"

_OURS_DEFAULTS = {"reason": "", "profile": "", "seeds": "", "data": "", "executor": "", "n_seeds": 1}
# The text columns a run brings along (what the notes summarize); one place to add another.
_RUN_TEXT = [col for col, default in _OURS_DEFAULTS.items() if isinstance(default, str)]

# Output columns after the keys, in order; the first four are what the markdown shows.
OUTPUT_COLUMNS = [
    "ours", "paper", "ratio", "paper_confidence", "status", "reason", "profile", "seeds", "data",
    "executor", "ours_mean", "ours_lo", "ours_hi", "n_seeds", "paper_value",
]


def fmt_value(x) -> str:
    """Short number: integers as such, 2 decimals in the paper's range, else 4 significant."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    x = float(x)
    a = abs(x)
    if x.is_integer() and a < 1e6:
        return str(int(x))
    if 1 <= a < 1e5:
        return f"{x:.2f}"
    return f"{x:.4g}"


def format_ours(mean, lo, hi, n_seeds, status: str, reason: str) -> str:
    """`mean`, `mean ± half-width` (n_seeds > 1), or `not run (reason)` for a non-ok status."""
    if status != "ok":
        if reason.startswith(status):  # "not run in this profile" needs no "not run (...)"
            return reason
        return f"{status} ({reason})" if reason else status
    text = fmt_value(mean)
    if n_seeds and int(n_seeds) > 1 and not (math.isnan(lo) or math.isnan(hi)):
        text += f" ± {fmt_value((hi - lo) / 2)}"
    return text


def format_paper(raw: str, confidence: str, implied: str = "") -> str:
    """The printed string; `?` marks an OCR-reconstructed cell, empty cells say why."""
    raw = "" if raw is None or (isinstance(raw, float) and math.isnan(raw)) else str(raw)
    if raw.strip() == "":
        if confidence == "unreadable":
            return f"unreadable (implied {implied})" if implied else "unreadable"
        return "–"
    return raw + "?" if confidence == "ocr-uncertain" else raw


def _numeric(col: pd.Series) -> pd.Series | None:
    # A key column joins numerically when every value parses ("0.10" == 0.1, "200" == 200).
    values = pd.to_numeric(col, errors="coerce")
    return None if values.isna().any() else values.astype(float)


def _align_keys(ours: pd.DataFrame, ref: pd.DataFrame, keys: list[str]):
    ours, ref = ours.copy(), ref.copy()
    for k in keys:
        a, b = _numeric(ours[k]), _numeric(ref[k])
        if a is not None and b is not None:
            ours[k], ref[k] = a, b
        else:
            ours[k], ref[k] = ours[k].astype(str), ref[k].astype(str)
    return ours, ref


def _check_unique(df: pd.DataFrame, keys: list[str], side: str) -> None:
    dup = df[df.duplicated(keys, keep=False)]
    if len(dup):
        shown = dup[keys].drop_duplicates().head(5).to_dict("records")
        raise ValueError(f"{side} has several rows for the same keys {keys}: {shown}. "
                         "Add the distinguishing column to `keys` or filter first.")


def _require(df: pd.DataFrame, cols: list[str], side: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{side} lacks columns {missing}; it has {list(df.columns)}")


def compare_table(ours: pd.DataFrame, reference: pd.DataFrame, keys: list[str], *,
                  value_name: str, unit_note: str,
                  missing_reason: str = DEFAULT_MISSING_REASON) -> pd.DataFrame:
    """One row per key combination on either side, in the paper's row order, ours-only rows last.

    A reference row without a run of ours gets status "not run" and `missing_reason`.
    `ratio` = ours_mean / paper_value for ok rows with a paper number. `value_name` and
    `unit_note` travel in `table.attrs` for `to_markdown`.
    """
    _require(ours, list(keys) + ["ours_mean", "status"], "ours")
    _require(reference, list(keys) + ["paper_value", "value_raw", "confidence"], "reference")
    ours = ours.copy()
    for col, default in _OURS_DEFAULTS.items():
        if col not in ours.columns:
            ours[col] = default
    ours["ours_mean"] = ours["ours_mean"].astype(float)
    for col in ("ours_lo", "ours_hi"):
        ours[col] = ours[col].astype(float) if col in ours.columns else ours["ours_mean"]
    ours["status"] = ours["status"].astype(str).str.strip().str.lower()
    bad = sorted(set(ours["status"]) - set(STATUSES))
    if bad:
        raise ValueError(f"unknown status values {bad}; expected one of {STATUSES}")

    ref = reference[list(keys) + ["paper_value", "value_raw", "confidence"]].copy()
    ref["implied"] = reference["implied_by_ratios"] if "implied_by_ratios" in reference else ""
    ours, ref = _align_keys(ours, ref, keys)
    _check_unique(ours, keys, "ours")
    _check_unique(ref, keys, "reference")

    ours_cols = list(keys) + ["ours_mean", "ours_lo", "ours_hi", "n_seeds", "status", *_RUN_TEXT]
    both = ref.merge(ours[ours_cols], on=keys, how="left")
    only_ours = ours[ours_cols].merge(ref[keys], on=keys, how="left", indicator=True)
    only_ours = only_ours[only_ours["_merge"] == "left_only"].drop(columns="_merge")
    table = pd.concat([both, only_ours], ignore_index=True)

    # Text columns: NaN from the outer side becomes "" so formatting stays simple.
    for col in ("status", *_RUN_TEXT, "value_raw", "confidence", "implied"):
        table[col] = table[col].astype(object).where(table[col].notna(), "").astype(str)
    table["n_seeds"] = table["n_seeds"].fillna(0).astype(int)
    no_run = table["status"] == ""
    table.loc[no_run, "status"] = "not run"
    table.loc[(table["status"] == "not run") & (table["reason"] == ""), "reason"] = missing_reason
    # An "ok" without a number would print as blank; call it what it is.
    empty_ok = (table["status"] == "ok") & table["ours_mean"].isna()
    table.loc[empty_ok, ["status", "reason"]] = ["failed", "no value recorded"]

    no_ref = table["confidence"] == ""  # every reference row carries a confidence
    table["paper_confidence"] = table["confidence"].where(~no_ref, "no reference")
    table["paper"] = [
        "" if nr else format_paper(r, c, i)
        for nr, r, c, i in zip(no_ref, table["value_raw"], table["confidence"], table["implied"])
    ]
    ok = (table["status"] == "ok") & table["paper_value"].notna() & (table["paper_value"] != 0)
    table["ratio"] = (table["ours_mean"] / table["paper_value"]).where(ok)
    table["ours"] = [
        format_ours(m, lo, hi, n, s, r)
        for m, lo, hi, n, s, r in zip(table["ours_mean"], table["ours_lo"], table["ours_hi"],
                                      table["n_seeds"], table["status"], table["reason"])
    ]
    out = table[list(keys) + OUTPUT_COLUMNS].copy()
    out.attrs.update(value_name=value_name, unit_note=unit_note, keys=list(keys))
    return out


def _cell(x) -> str:
    if isinstance(x, float):
        return "" if math.isnan(x) else f"{x:g}"
    return str(x).replace("|", "\\|").replace("\n", " ")


def markdown_grid(headers: list[str], rows: list[list], right_align: set[int] = frozenset()) -> str:
    """A padded pipe table (GitHub markdown), readable as plain text in a terminal too."""
    cells = [[_cell(h) for h in headers]] + [[_cell(v) for v in r] for r in rows]
    widths = [max(3, *(len(r[i]) for r in cells)) for i in range(len(headers))]

    def line(r):
        return "| " + " | ".join(
            c.rjust(w) if i in right_align else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))
        ) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if i in right_align else "-" * (w + 2)
                          for i, w in enumerate(widths)) + "|"
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


def _summary(values: pd.Series) -> str:
    # "; " because a seeds value itself reads "0,1,2".
    seen = [v for v in dict.fromkeys(values.astype(str)) if v]
    return "; ".join(seen) if seen else "(none)"


def to_markdown(table: pd.DataFrame, title: str, notes: list[str]) -> str:
    """Title, table (keys, ours, paper, ours/paper), then notes.

    The caller's notes come first; lines for profile, seeds, data, executor (when the runs name
    it) and units are added from the table unless a caller note already starts with that word.
    """
    keys = table.attrs.get("keys") or [c for c in table.columns if c not in OUTPUT_COLUMNS]
    headers = list(keys) + ["ours", "paper", "ours / paper"]
    rows = [
        [r[k] for k in keys] + [r["ours"], r["paper"], "" if pd.isna(r["ratio"]) else f"{r['ratio']:.2f}"]
        for _, r in table.iterrows()
    ]
    n = len(keys)
    parts = [f"### {title}", "", markdown_grid(headers, rows, right_align={n, n + 1, n + 2}), ""]

    lines = list(notes)
    given = {ln.split(":")[0].strip().lower() for ln in lines}
    run = table[table["status"] != "not run"]
    if "profile" not in given:
        lines.append(f"profile: {_summary(run['profile'])}")
    if "seeds" not in given:
        lines.append(f"seeds: {_summary(run['seeds'])}")
    if "data" not in given:
        lines.append(f"data: {_summary(run['data'])}")
    if "executor" not in given and (run["executor"] != "").any():  # batched and sequential differ in rounding
        lines.append(f"executor: {_summary(run['executor'])}")
    if "units" not in given:
        name, unit = table.attrs.get("value_name", ""), table.attrs.get("unit_note", "")
        lines.append(f"units: {name}" + (f" ({unit})" if unit else ""))
    counts = table["status"].value_counts()
    lines.append(f"rows: {len(table)} (" + ", ".join(f"{counts[s]} {s}" for s in STATUSES if s in counts) + ")")
    if (table["n_seeds"] > 1).any():
        lines.append("± is the half-width of the 95 % interval over seeds.")
    if (table["paper_confidence"] == "ocr-uncertain").any():
        lines.append("? marks a paper cell reconstructed from garbled OCR text (ocr-uncertain).")
    parts += [f"- {ln}" for ln in lines]
    return "\n".join(parts) + "\n"


def write_table(table: pd.DataFrame, out_dir, stem: str, *, title: str | None = None,
                notes: list[str] = ()) -> dict[str, Path]:
    """Write <stem>.md (rendered) and <stem>.csv (every column) into out_dir, each atomically
    (a sweep killed while writing leaves the previous table, never half of one)."""
    from fedrepro import store

    out_dir = Path(out_dir)
    paths = {"md": out_dir / f"{stem}.md", "csv": out_dir / f"{stem}.csv"}
    store.write_text(paths["md"], to_markdown(table, title or stem, list(notes)))
    store.write_text(paths["csv"], table.to_csv(index=False))
    return paths
