"""The claims index, docs/measured/claims.md: every claim of the catalogue
(fedrepro/reference/claims.csv) once, with its verdict on our numbers, the target that judges it,
the profile the verdict was measured at and the file it comes from.

    python -m experiments.claims_index [--out docs/measured/claims.md]    # write it (make claims)
    python -m experiments.claims_index --check                            # exit 1 if it is stale

It reads three things and runs nothing: the catalogue, the registry (which target lists which
claim, `experiments/registry.py`) and every committed docs/measured/*_claims.md (what a target
wrote when it rendered). A verdict word of those files becomes one of:

    holds / fails           as the file says ("holds (tie)" counts as holds)
    undecided               "not evaluated" with a reason that is not missing data: censoring at
                            the profile's round cap, the seeds' interval, some of the runs not made
    not run yet             "not evaluated" with nothing of the claim's scope run: its runs are
                            not made (compute), so no number bears on it yet
    not runnable            "not evaluated" because the data is not here (or, with no output at
                            all, `NOT_RUNNABLE`)
    not judged yet          no committed output of its target, or no target lists it

When several files judge one claim (several targets, or one target at several datasets or
profiles), the row shows each file's verdict and heads it with the project's own rule for
several checks of one claim (`fedrepro.reports.claims.combine`): any fails, it fails; else any
undecided (or not run yet, or not runnable), it is not decided; else it holds. A file that ran none
of the claim's scope at one profile is left out of that rule where the same target judged the claim
at another profile (its runs exist, at that profile). A claim that one
case confirms (`CONFIRMED_BY_ONE_CASE`) holds when any file finds its case and fails only when
every file fails.
"""
from __future__ import annotations

import argparse
import csv
import difflib
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "fedrepro" / "reference" / "claims.csv"
MEASURED = ROOT / "docs" / "measured"
OUT = MEASURED / "claims.md"
PROFILES = sorted(p.stem for p in (ROOT / "conf" / "profile").glob("*.yaml"))

# Claims that follow from the upload format or the algorithm's definition, not from training:
# our numbers check the bookkeeping, so they are counted apart from the empirical claims.
BY_CONSTRUCTION = {
    "FEN-T2-3": "FedProx and FedDyn both upload one dense d-vector per client and round: equal totals "
                "follow from the upload format.",
    "FEN-T2-4": "SCAFFOLD uploads two d-vectors (model and control-variate updates), FedProx one: the "
                "ratio 2 is the upload format.",
    "FEN-T2-5": "An accounting identity (the catalogue says so): a dense upload is d values per "
                "participating client; the ratio to the paper checks the model size.",
    "FEN-T2-8": "FedDyn's local model and its local update are both dense d-vectors: the same count "
                "whichever is sent.",
    "FDY-S3-2": "A ledger identity: SCAFFOLD sends 2d floats per client and round, the others d.",
    "FDY-F3-1": "A property of the data split (Dirichlet or IID partition of MNIST), fixed before any "
                "training.",
    "L2G-S7-2": "An algebraic identity of the aggregation step at eta*lambda/(n p) = 1, up to rounding.",
    "L2G-S7-3": "The local steps between communications are geometric in p by Algorithm 1's definition "
                "(mean 1/p); no training outcome.",
}

# Claims with no committed output whose whole scope needs data ../shared/data lacks (its
# SOURCES.md): a render would print "not run: data not here".
NOT_RUNNABLE = {
    "LSC-F4-1": "UCI HAR features (HAR only; the catalogue notes they are not available here)",
}

# Fragments of a target's "data not here: ..." line -> the data it names.
ABSENT_DATA = (("UCI_HAR", "UCI HAR features"), ("a2a", "a2a training file"),
               ("CIFAR100", "CIFAR-100"), ("cifar100", "CIFAR-100"), ("a1a.t", "a1a test file"))

# Claims whose rule asks for one case, not every case ("confirmed if the list is non-empty"): a
# file that finds the case decides them; a file that finds none does not contradict another's.
CONFIRMED_BY_ONE_CASE = {
    "REV-R1-6": "the reviewer's point is confirmed by one (setting, pair) where a variant trails its base",
}

# A headline verdict from several files: the first of these any file has.
RANK = ("fails", "undecided", "not run yet", "not runnable", "holds")
CATEGORIES = ("holds", "fails", "undecided", "not run yet", "not runnable", "not judged yet")
# A target's reason that none of the claim's scope was run (the wordings of the four papers' checks)
# (read on the first line of the reason: later lines may name the runs a partial verdict lacks)
NOTHING_RUN = re.compile(r"nothing in the scope was run|\b(\d+) of \1 scope items not evaluated|are not (both|all) run"
                         r"|has the runs this needs|no \(base, variant\) pair with ok runs|^(undetermined: )?no finished "
                         r"run|^needs ok runs of")
REASON_CHARS = 170


# --- the *_claims.md files

@dataclass(frozen=True)
class Verdict:
    """One claim's verdict in one *_claims.md file, as written there."""
    claim_id: str
    written: str  # "holds", "holds (tie)", "fails", "not evaluated", or whatever the file says
    detail: tuple[str, ...]
    source: str  # the file's name


CLAIM_LINE = re.compile(r"^- \*\*(?P<id>[A-Za-z0-9-]+)\*\* (?P<verdict>[^:]+): ")
DETAIL_LINE = re.compile(r"^\s+- ?(?P<text>.*)$")


def parse_claims_file(text: str, source: str) -> list[Verdict]:
    """The verdicts of a *_claims.md file: a bullet per claim (`- **ID** verdict: claim`, the
    shape of `fedrepro.reports.claims.claims_markdown`), its detail lines as sub-bullets; any
    header line above them is skipped."""
    found = []
    for line in text.splitlines():
        head, sub = CLAIM_LINE.match(line), DETAIL_LINE.match(line)
        if head:
            found.append([head["id"], head["verdict"].strip(), []])
        elif sub and found and sub["text"].strip():
            found[-1][2].append(sub["text"].strip())
    return [Verdict(cid, verdict, tuple(detail), source) for cid, verdict, detail in found]


def profile_of(claims_file: Path) -> str:
    """The profile a claims file was measured at: stated in the file, else in the table or
    figure page beside it (X_claims.md -> X.md), else "unstated"; ", on MNIST" after it where the
    file says its figure was drawn on another dataset than the paper's."""
    head = claims_file.read_text(encoding="utf-8").split("\n", 1)[0] if claims_file.is_file() else ""
    other = re.search(r"here: ([\w-]+) \(--dataset\)|\bon ([\w-]+) \(the paper: ", head)
    where = f", on {other[1] or other[2]}" if other else ""
    for path in (claims_file, claims_file.with_name(claims_file.name.replace("_claims.md", ".md"))):
        if path.is_file():
            found = stated_profile(path.read_text(encoding="utf-8"))
            if found:
                return found + where
    return "unstated" + where


def profile_name(profile: str) -> str:
    """`profile_of`'s profile without its dataset note: "quick, on MNIST" -> "quick" (a figure drawn
    on another dataset is not another profile)."""
    return profile.split(",")[0]


def stated_profile(text: str) -> str:
    """'quick' from a note line '- profile: quick (...)' or '- profile quick; ...', else from a
    title '### ... profile=quick'; '' when neither states a known profile."""
    names = "|".join(PROFILES)
    for pattern in (rf"^- profile:? ({names})\b", rf"^#+ .*\bprofile=({names})\b"):
        match = re.search(pattern, text, re.MULTILINE)
        if match:
            return match[1]
    return ""


# --- a verdict word -> holds / fails / undecided / not runnable

def category_of(verdict: Verdict) -> tuple[str, str]:
    """(category, text for the verdict cell). A verdict word the vocabulary does not know is kept
    as written, in quotes, rather than guessed at."""
    if verdict.written in ("holds", "holds (tie)", "fails"):
        return verdict.written.split(" ")[0], verdict.written
    if verdict.written != "not evaluated":
        return "as written", f'"{verdict.written}" (as written)'
    detail = "\n".join(verdict.detail)
    if detail.startswith("outside its scope"):  # a table of datasets the claim does not cover
        return "out of scope", f"out of scope here: {shorten(detail)}"
    censored, missing = censoring(detail), missing_data(detail)
    if censored:
        return "undecided", f"undecided: {censored}" + (f"; the rest lacks {missing}" if missing else "")
    if missing:
        scope = re.search(r"\d+ of \d+ scope items not evaluated", detail)
        return "not runnable", f"not runnable: {missing} missing" + (f" ({scope[0]})" if scope else "")
    if verdict.detail and NOTHING_RUN.search(verdict.detail[0]):
        return "not run yet", f"not run yet: {shorten(verdict.detail[0])}"
    return "undecided", f"undecided: {shorten(verdict.detail[0] if verdict.detail else 'no reason given')}"


def censoring(detail: str) -> str:
    """Why a target left a claim undecided on the runs it had: the round cap, or noise."""
    stopped = re.search(r"stopped at round (\d+) of (\d+) \(profile cap\)", detail)
    if stopped:
        return f"censored: runs stop at round {stopped[1]} of {stopped[2]} (profile cap)"
    read = re.search(r"read at round (\d+), not (\d+)", detail)
    if read:
        return f"censored: read at round {read[1]}, not {read[2]} (profile cap)"
    # the undecided items, not a head ("holds in 4 of 6 ...", "... (1 undecided by censoring or ...)")
    undecided = [ln for ln in detail.splitlines() if ln.startswith(("undetermined: ", "undecided: "))
                 and " holds in " not in ln and not re.search(r"\d+ undecided\b", ln)]
    if undecided and all("seed noise" in ln and not re.search(r"\d\+", ln) for ln in undecided):
        return "within noise (the seed noise band)"
    # claims.verdict_of's head names why its items are open: "..., noise (...) leaves 2 undecided"
    why = re.search(r" evaluated, (.+?) leaves \d+ undecided", detail)
    if why and why[1].startswith("noise"):
        return "within noise (" + (why[1].removeprefix("noise").strip(" ()") or "the band its rule names") + ")"
    if "censor" in detail:
        caps = sorted({int(n) for n in re.findall(r"\b(\d+)\+", detail)})
        return "censored at the round cap" + (f" ({', '.join(f'{c}+' for c in caps)})" if caps else "")
    if re.search(r"within noise|seeds' interval|confidence interval", detail):
        return "within noise (the seeds' interval)"
    return ""


def missing_data(detail: str) -> str:
    """The data a target said is not here ('data not here: PATH lacks FILES'), by name."""
    named = []
    for line in re.findall(r"data not here: [^;]*", detail):
        name = next((name for key, name in ABSENT_DATA if key in line), line.removeprefix("data not here: "))
        if name not in named:
            named.append(name)
    return ", ".join(named)


def shorten(text: str) -> str:
    text = text.removeprefix("undetermined: ")
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS].rstrip() + " ..."


# --- the registry

def registered_targets() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """[(make name, paper, target name, claim ids)] of every registered target."""
    from experiments import registry

    return [(registry.make_name(paper, t), paper, t.name, tuple(t.claims))
            for paper in registry.PAPERS for t in registry.targets(paper).values()]


def target_of_file(stem: str, targets: list) -> str:
    """The make name of the target that wrote X_claims.md: X is '<paper>_<target>' with an
    optional '_<variant>' (fedelasticnet_table2_cifar10); the longest such prefix wins; '' when
    none matches."""
    matches = []
    for make, paper, name, _ in targets:
        prefix = ("" if paper == "baselines" else f"{paper}_") + name.replace("-", "_")
        if stem == prefix or stem.startswith(prefix + "_"):
            matches.append((len(prefix), make))
    return max(matches)[1] if matches else ""


# --- one row per claim

@dataclass
class Row:
    claim_id: str
    paper: str
    claim: str
    verdict: str  # the cell
    category: str
    targets: str
    profiles: str
    sources: str


def read_verdicts(measured: Path, targets: list) -> tuple[dict[str, list[tuple[Verdict, str, str]]], list[str]]:
    """{claim id: [(verdict, its file's profile, the make name of the target that wrote it)]}
    from every *_claims.md, and the problems found (unknown claim ids, files no target writes)."""
    by_claim, problems = {}, []
    for path in sorted(measured.glob("*_claims.md")):
        profile, writer = profile_of(path), target_of_file(path.name.removesuffix("_claims.md"), targets)
        if not writer:
            problems.append(f"{path.name}: no registered target writes a file of this name")
        for verdict in parse_claims_file(path.read_text(encoding="utf-8"), path.name):
            by_claim.setdefault(verdict.claim_id, []).append((verdict, profile, writer))
    return by_claim, problems


def verdict_cell(found: list[tuple[Verdict, str, str]], one_case: bool = False) -> tuple[str, str]:
    """(category, cell) over the files that judge a claim; each file's verdict is shown when they
    differ. one_case: the claim needs one case (`CONFIRMED_BY_ONE_CASE`), so one file that holds
    decides it and a file that fails only says its own figures lack the case."""
    by_text: dict[str, list[str]] = {}  # cell text -> the files (stems) that give it
    categories = []
    categorised = [(verdict, *category_of(verdict), profile, writer) for verdict, profile, writer in found]
    judged = [s for s in categorised if s[1] != "out of scope"]
    # a profile of a target that ran none of the claim's scope is no missing evidence where another
    # profile of the same target ran it (FedElasticNet Fig. 1 at paper has no CIFAR-10, quick has)
    decided_at = {(writer, profile_name(profile)) for _, category, _, profile, writer in judged
                  if category in ("holds", "fails", "undecided", "as written")}
    for verdict, category, text, profile, writer in judged or categorised:  # out of scope: judges nothing
        by_text.setdefault(text, []).append(verdict.source.removesuffix("_claims.md"))
        if not (category == "not run yet"
                and any(w == writer and p != profile_name(profile) for w, p in decided_at)):
            categories.append(category)
    rank = ("holds", *(c for c in RANK if c not in ("holds", "fails")), "fails") if one_case else RANK
    headline = next((c for c in ("as written", *rank) if c in categories), "not judged yet")
    if len(by_text) == 1:
        return headline, next(iter(by_text))
    return headline, f"{headline}; by file: " + "; ".join(f"{text} ({', '.join(stems)})"
                                                           for text, stems in by_text.items())


def targets_cell(claim_id: str, found: list, targets: list) -> str:
    """The targets whose committed files judge the claim (a dagger: the registry does not list
    the claim for it), then the others that list it and have no committed output."""
    listed = [make for make, _, _, claims in targets if claim_id in claims]
    writers = list(dict.fromkeys(writer or "unknown target" for _, _, writer in found))
    shown = [f"`make {w}`" + ("" if w in listed else " †") for w in writers]
    rest = [make for make in listed if make not in writers]
    if not shown:
        return ", ".join(f"`make {m}`" for m in rest) if rest else "no target judges it"
    return ", ".join(shown) + (f" (also listed by {', '.join(rest)}: no committed output)" if rest else "")


def row_of(claim: dict, found: list, targets: list) -> Row:
    cid = claim["claim_id"]
    if found:
        category, verdict = verdict_cell(found, one_case=cid in CONFIRMED_BY_ONE_CASE)
        profiles = ", ".join(dict.fromkeys(p for _, p, _ in found))
        sources = ", ".join(f"`{v.source}` ({p})" for v, p, _ in found)
    elif cid in NOT_RUNNABLE:
        category, verdict, profiles, sources = "not runnable", f"not runnable: {NOT_RUNNABLE[cid]}", "-", "-"
    else:
        category, verdict, profiles, sources = "not judged yet", "not judged yet", "-", "-"
    return Row(cid, claim["paper"], claim["claim"], verdict, category, targets_cell(cid, found, targets),
               profiles, sources)


# --- the page

def read_catalogue() -> list[dict]:
    with open(CATALOGUE, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def build(measured: Path = MEASURED) -> tuple[str, list[str]]:
    """(the text of claims.md, the problems found) from the catalogue, the registry and the
    *_claims.md files in `measured`."""
    catalogue, targets = read_catalogue(), registered_targets()
    found, problems = read_verdicts(measured, targets)
    known = {c["claim_id"] for c in catalogue}
    problems += [f"{v.source}: claim {cid} is not in the catalogue (fedrepro/reference/claims.csv)"
                 for cid, entries in sorted(found.items()) if cid not in known for v, _, _ in entries]
    rows = [row_of(c, found.get(c["claim_id"], []), targets) for c in catalogue]
    return render(rows), problems


def render(rows: list[Row]) -> str:
    empirical = [r for r in rows if r.claim_id not in BY_CONSTRUCTION]
    constructed = [r for r in rows if r.claim_id in BY_CONSTRUCTION]
    lines = [*header(rows, empirical, constructed)]
    for paper in dict.fromkeys(r.paper for r in empirical):
        lines += ["", f"## {paper}", "", *table([r for r in empirical if r.paper == paper])]
    lines += ["", "## By construction", "",
              "These follow from the upload format or the algorithm's definition; our runs check the "
              "bookkeeping, not a training outcome.", "",
              *table(constructed, reason=True)]
    return "\n".join(lines) + "\n"


def header(rows: list[Row], empirical: list[Row], constructed: list[Row]) -> list[str]:
    categories = list(CATEGORIES) + sorted({r.category for r in rows} - set(CATEGORIES))
    counts = {name: Counter(r.category for r in group)
              for name, group in (("empirical", empirical), ("constructed", constructed), ("all", rows))}
    return [
        "# The papers' claims on our numbers",
        "",
        "Generated by `make claims` (`python -m experiments.claims_index`) from the catalogue "
        "(`fedrepro/reference/claims.csv`), the registry (`experiments/registry.py`) and the committed "
        "`docs/measured/*_claims.md` files; do not edit it by hand (`--check` says whether it is current).",
        "",
        f"{len(rows)} claims: {len(empirical)} empirical, {len(constructed)} by construction (last section).",
        "",
        "| verdict | empirical | by construction | all |",
        "|---|--:|--:|--:|",
        *[f"| {cat} | {counts['empirical'][cat]} | {counts['constructed'][cat]} | {counts['all'][cat]} |"
          for cat in categories],
        f"| all | {len(empirical)} | {len(constructed)} | {len(rows)} |",
        "",
        "Verdicts: *holds* / *fails* as the target's claims file says (*holds (tie)* counts as holds); "
        "*undecided*: the target judged it \"not evaluated\" for the reason shown (censoring at the profile's "
        "round cap, noise, some runs not made); *not run yet*: none of its scope was run (compute: the "
        "target's output says which runs); *not runnable*: the data it needs is not here; *not judged yet*: "
        "no committed output of its target. Several files: any fails, it fails; else the first of undecided, "
        "not run yet, not runnable that a file gives (a target's file at one profile that ran none of the "
        "claim's scope counts for nothing where the same target's file at another profile judged it); each "
        "file's verdict is shown when they differ. A claim "
        f"one case confirms ({', '.join(sorted(CONFIRMED_BY_ONE_CASE))}) holds when any file finds the case "
        "and fails only when every file fails.",
        "",
        "Targets: `make <paper>-<target>` runs `python -m experiments <paper> <target>` (paper: fen, feddyn, "
        "losac, l2gd). "
        "†: the file of that target judges the claim though the registry does not list it for it. "
        "Sources are in this folder, each with the profile it was measured at (\"unstated\": neither it "
        "nor the page beside it says).",
    ]


def table(rows: list[Row], reason: bool = False) -> list[str]:
    """A markdown table of the rows; reason: a last column saying why each is by construction."""
    columns = ["id", "claim", "verdict on our numbers", "judged by", "profile", "source"]
    columns += ["why by construction"] if reason else []
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        cells = [r.claim_id, r.claim, r.verdict, r.targets, r.profiles, r.sources]
        cells += [BY_CONSTRUCTION[r.claim_id]] if reason else []
        lines.append("| " + " | ".join(cell(x) for x in cells) + " |")
    return lines


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# --- the command line

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.claims_index",
                                 description="Write (or --check) the claims index, docs/measured/claims.md.")
    ap.add_argument("--out", type=Path, default=OUT, help="the index to write or check (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="exit 1 if --out is not what would be written now")
    args = ap.parse_args(argv)
    text, problems = build()
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if args.check:
        return check(args.out, text) or (1 if problems else 0)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


def check(path: Path, text: str) -> int:
    """0 when `path` holds `text`; else the differences, and 1."""
    committed = path.read_text(encoding="utf-8") if path.is_file() else ""
    if committed == text:
        print(f"{path} is current")
        return 0
    sys.stdout.writelines(difflib.unified_diff(committed.splitlines(True), text.splitlines(True),
                                               f"{path} (committed)", f"{path} (generated now)"))
    print(f"{path} is stale: run `make claims`")
    return 1


if __name__ == "__main__":
    sys.exit(main())
