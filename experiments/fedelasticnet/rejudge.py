"""Judge a committed FedElasticNet table's claims again from its CSV, with the current checks.

    python -m experiments.fedelasticnet.rejudge docs/measured/fedelasticnet_table2_shakespeare.csv

For the tables whose runs are not in the run archive (Tables 2-4 on Shakespeare, made on an
earlier machine: about 1 h a run here), so `DONE_ONLY=1` cannot render them again. The table's
own claims (`TableSpec.claims`) read the table's numbers (ours_mean, its interval, status), which
the CSV holds; they are judged again and rewritten in <stem>_claims.md. A claim that needs more
than the CSV holds (FEN-T2-5: the runs' parameter count) and the file's other claims (read from
the runs or from other tables) keep the verdict judged on the runs, and the file says which
claims were judged again and from what.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

from experiments.fedelasticnet.claims import CHECKS
from experiments.fedelasticnet.tables import TABLE2, TABLE3, TABLE4
from fedrepro.errors import ConfigError
from fedrepro.reports.claims import claims_markdown, evaluate_claims

SPECS = {2: TABLE2, 3: TABLE3, 4: TABLE4}


def _blocks(text: str) -> dict[str, str]:
    """{claim id: its bullet and sub-bullets} of a claims file."""
    parts = re.split(r"(?m)^(?=- \*\*)", text)
    return {re.match(r"- \*\*([^*]+)\*\*", p).group(1): p.rstrip("\n") for p in parts if p.startswith("- **")}


def rejudge(csv: Path) -> str:
    match = re.fullmatch(r"fedelasticnet_table([234])(_\w+)?\.csv", csv.name)
    if not match:
        raise ConfigError(f"{csv}: expected a FedElasticNet Table 2-4 CSV (fedelasticnet_table<N>[_suffix].csv)")
    spec = SPECS[int(match.group(1))]
    ours = pd.read_csv(csv, dtype={"seeds": str, "profile": str, "status": str})
    frame = evaluate_claims(spec.claims, ours, checks=CHECKS)
    lacking = frame["verdict"].eq("not evaluated") & frame["detail"].astype(str).str.startswith("needs columns")
    judged = _blocks(claims_markdown(frame[~lacking]))
    path = csv.with_name(csv.stem + "_claims.md")
    before = _blocks(path.read_text()) if path.exists() else {}
    kept = {cid: block for cid, block in before.items() if cid not in judged}
    order = [*before, *(cid for cid in judged if cid not in before)]  # the file's order
    lines = [f"{', '.join(judged)} judged again on {csv.name} (its runs are not archived) with the current "
             f"checks; {', '.join(kept) or 'no other claim'} as judged on the runs when they were made.",
             "", *({**kept, **judged}[cid] for cid in order)]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    print(rejudge(Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
