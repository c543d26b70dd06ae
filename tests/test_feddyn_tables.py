"""FedDyn tables and figures: App. A.2 settings, the paper's cells, the claims under
censoring, and a smoke Table 2 (IID rows, 5 devices) with Figure 8 redrawn from its runs."""
import argparse
import contextlib
import io
import os
from pathlib import Path

import pandas as pd
import pytest

from experiments import registry
from experiments.__main__ import parser_for
from experiments.feddyn import claims as cf
from experiments.feddyn import common, figures, settings, table2
from fedrepro.config import compose_config, effective
from fedrepro.errors import ConfigError
from fedrepro.metrics.targets import Count
from fedrepro.reports import target as driver
from fedrepro.reports.claims import evaluate_claims
from fedrepro.reports.cli import table_parser

TARGETS = registry.targets("feddyn")


def render(name: str, argv: list[str], scale=None) -> int:
    """`python -m experiments feddyn NAME ARGV` in this process, with `scale`."""
    target = TARGETS[name]
    return driver.run(target, parser_for("feddyn", target, name).parse_args(argv), scale)


def real_mnist():
    root = os.environ.get("FEDREPRO_DATA_ROOT")
    return root if root and (Path(root) / "MNIST" / "raw").is_dir() else None


# ---------------------------------------------------------------------------------------------
# Settings: App. A.2 as stated


def test_mnist_partial_participation_as_app_a2():
    r = settings.recipe("mnist", 0.1, "dirichlet0.3", 100, "balanced")
    assert (r.lr, r.lr_decay, r.weight_decay, r.batch_size, r.num_devices) == (0.1, 0.998, 1e-4, 50, 100)
    assert r.epochs == {"fedavg": 10, "fedprox": 10, "feddyn": 50}
    assert (r.alpha, r.mu, r.scaffold_k) == (0.01, 1e-4, 600)
    assert settings.recipe("mnist", 0.1, "iid", 100, "balanced").alpha == 0.03  # only 10 % IID
    assert settings.recipe("mnist", 0.01, "iid", 100, "balanced").alpha == 0.01


def test_mnist_full_participation_as_app_a2():
    r = settings.recipe("mnist", 1.0, "iid", 100, "balanced")
    assert (r.rounds, r.lr, r.lr_decay, r.weight_decay) == (500, 0.1, 1.0, 1e-4)
    assert (r.epochs["fedavg"], r.epochs["feddyn"], r.alpha, r.mu, r.scaffold_k) == (20, 50, 0.01, 1e-4, 600)


def test_scaffold_k_as_epochs_of_the_mean_client():
    overrides = settings.run_overrides("mnist", "iid", 0.1, 100, "balanced", "scaffold")
    paper = compose_config([*overrides, "profile=paper"])
    assert paper.train.local_epochs == 50
    assert effective(paper).steps_for(600, paper.train.batch_size) == 600  # K = 600
    quick = effective(compose_config([*overrides, "profile=quick"]))
    assert quick.steps_for(600, 50) == 12  # one epoch, as every method at quick
    assert settings.recipe("emnist_l", 0.1, "iid", 100, "balanced").scaffold_epochs() == 50  # K 500, n 480
    assert settings.recipe("cifar100", 0.1, "iid", 500, "balanced").scaffold_epochs() == 2  # K 4, n 100
    assert settings.recipe("cifar100", 0.1, "iid", 100, "unbalanced").scaffold_epochs() == 2  # K 20, n 500


def test_mlp_recipes_over_more_devices_cut_the_data_finer():
    """FedDyn Fig. 4 drawn on MNIST (`--dataset mnist`) asks for 1 000 devices, a count the paper
    runs on CIFAR only: the MNIST recipe then spreads the data over them (60 samples a device) with
    SCAFFOLD's K the same 50 epochs; at 100 devices the overrides are the tables' as before."""
    thousand = settings.recipe("mnist", 0.1, "iid", 1000, "balanced")
    assert (thousand.num_devices, thousand.samples_per_device, thousand.scaffold_k) == (1000, 60, 100)
    assert thousand.scaffold_epochs() == settings.recipe("mnist", 0.1, "iid", 100, "balanced").scaffold_epochs()
    cfg = compose_config(settings.run_overrides("mnist", "iid", 0.1, 1000, "balanced", "scaffold"))
    assert (cfg.train.num_clients, cfg.train.local_epochs) == (1000, 50)
    assert settings.run_overrides("mnist", "iid", 0.1, 100, "balanced", "feddyn") == [
        "dataset=mnist", "model=mlp_mnist", "split=iid", "participation=p10", "algorithm=feddyn",
        "algorithm.alpha=0.03", "train.num_clients=100", "train.rounds=1000", "train.lr=0.1",
        "train.lr_decay=0.998", "train.weight_decay=0.0001", "train.batch_size=50", "train.local_epochs=50"]
    assert settings.recipe("emnist_l", 0.1, "iid", 1000, "balanced").samples_per_device == 48


def test_run_overrides_compose():
    for alg in settings.ALGORITHMS:
        cfg = compose_config(settings.run_overrides("mnist", "dirichlet0.6", 1.0, 100, "balanced", alg))
        assert cfg.algorithm.name == alg and cfg.split.kind == "dirichlet" and cfg.split.alpha == 0.6
        assert cfg.participation.rate == 1.0 and cfg.train.lr_decay == 1.0 and cfg.train.rounds == 500
    cfg = compose_config(settings.run_overrides("mnist", "iid", 0.1, 100, "unbalanced", "feddyn"))
    assert (cfg.split.balance, cfg.split.sigma, cfg.algorithm.alpha) == ("lognormal", 0.3, 0.03)


def test_paper_cells_as_printed():
    ref = common.load_table(1)
    row = ref[(ref.setting == "Moderate") & (ref.dataset_key == "cifar10") & (ref.split_key == "iid")]
    cell = dict(zip(row.target + " " + row.algorithm_key, row.value_raw))
    assert cell["84.5 scaffold"] == "1852 (2.9x)"
    assert cell["84.5 fedavg"] == "1000+ (>1.6x)"
    assert cell["84.5 feddyn"] == "637"
    assert set(zip(row.target, row.target_rank)) == {("84.5", "higher"), ("82.3", "lower")}


# ---------------------------------------------------------------------------------------------
# Claims under censoring (hand-made frames)


def row(alg, value, censored=False, **kw):
    base = dict(table=2, setting="10%", num_devices=100, participation=0.1, balance="balanced",
                dataset_key="mnist", split_key="iid", target="98.2", own_target=True, target_rank="higher",
                algorithm_key=alg, status="ok", reason="", ours_mean=value, censored=censored, rounds=value,
                rounds_run=100, up_vectors_per_d=2.0 if alg == "scaffold" else 1.0, n_seeds=1,
                ours_lo=value, ours_hi=value)
    return {**base, **kw}


def verdict(claim, rows):
    out = evaluate_claims([claim], pd.DataFrame(rows), checks=cf.CHECKS).iloc[0]
    return out["verdict"], out["detail"]


def test_settings_option_keeps_those_rows_and_refuses_an_unknown_one():
    ref = common.load_table(2)
    kept, notes = common.select_rows(ref, "shakespeare", "all", "10%", data_root="data")
    assert set(kept.setting) == {"10%"} and set(kept.dataset_key) == {"shakespeare"} and len(kept) > 0
    assert any("rows of settings 100% omitted" in n for n in notes), notes
    ap = table_parser("t")
    common.add_table_options(ap)
    assert ap.parse_args(["--settings", "10%"]).settings == "10%"
    with pytest.raises(SystemExit, match=r"no setting '10'; its settings are 10%, 100%"):
        common.select_rows(ref, "shakespeare", "all", "10", data_root="data")


def test_filtered_render_keeps_the_other_saved_rows(tmp_path):
    def rows(setting, participation, value):
        return pd.DataFrame([{"setting": setting, "num_devices": 100, "participation": participation,
                              "balance": "balanced", "dataset_key": "shakespeare", "split_key": split,
                              "algorithm_key": alg, "target": 46.9, "profile": "quick", "eval_every": 1,
                              "status": "ok", "reason": "", "target_rank": "", "seeds": "0", "data": "",
                              "ours_mean": value}
                             for split in ("iid", "natural") for alg in ("feddyn", "fedavg")])
    path = tmp_path / "feddyn_table2_runs.csv"
    common.save_rows(rows("10%", 0.1, 60.0), path)
    common.save_rows(rows("100%", 1.0, 30.0), path)  # a --settings 100% render
    common.save_rows(rows("10%", 0.1, 55.0), path)  # the 10 % runs measured again
    saved = pd.read_csv(path)
    assert len(saved) == 8
    assert dict(zip(saved.setting, saved.ours_mean)) == {"10%": 55.0, "100%": 30.0}


def test_comparisons_under_censoring():
    exact = dict(noise=0.0)  # censoring alone
    assert cf.fewer(Count(30), Count(100, True), **exact) is True  # a censored baseline counts as larger
    assert cf.fewer(Count(100, True), Count(50), **exact) is False  # a censored FedDyn fails
    assert cf.fewer(Count(100, True), Count(200, True), **exact) is None
    assert cf.greater((2.0, 2.0), (1.5, 1.5), **exact) is True
    assert cf.greater((1.6, float("inf")), (1.5, 1.5), **exact) is True  # >1.6x beats 1.5x
    assert cf.greater((1.4, float("inf")), (1.5, 1.5), **exact) is None  # >1.4x may or may not
    assert cf.greater((0.0, 1.2), (1.5, 1.5), **exact) is False  # <1.2x loses


def test_comparisons_within_the_seed_noise_stay_open():
    n = cf.NOISE
    assert cf.greater((2.196, 2.196), (2.161, 2.161)) is None  # FDY-T2-4's MNIST gains at the paper's setting
    assert cf.not_less((2.161, 2.161), (2.196, 2.196)) is None
    assert cf.greater((1.5 * (1 + n) * 1.01,) * 2, (1.5, 1.5)) is True
    assert cf.greater((1.5, 1.5), (1.5 * (1 + n) * 1.01,) * 2) is False
    assert cf.fewer(Count(29), Count(30)) is None and cf.fewer(Count(29), Count(48)) is True
    assert cf.fewer(Count(48), Count(29)) is False
    assert cf.fewer(Count(195), Count(200, True)) is None  # reached just under the cap: may be noise
    assert cf.fewer(Count(100), Count(200, True)) is True and cf.fewer(Count(200, True), Count(100)) is False
    assert cf.fewer(Count(100, True), Count(200, True)) is None


def test_fewest_models_claim():
    good = [row("feddyn", 30), row("scaffold", 60), row("fedavg", 100, True), row("fedprox", 50)]
    assert verdict("FDY-T2-1", good)[0] == "holds"
    bad = [row("feddyn", 100, True), row("scaffold", 60), row("fedavg", 100, True), row("fedprox", 100, True)]
    assert verdict("FDY-T2-1", bad)[0] == "fails"
    open_ = [row("feddyn", 100, True), row("scaffold", 200, True), row("fedavg", 100, True), row("fedprox", 100, True)]
    v, detail = verdict("FDY-T2-1", open_)
    assert v == "not evaluated" and detail.startswith("undetermined")


def test_claim_not_run_names_the_reason():
    rows = [row(a, float("nan"), status="not run", reason="emnist_l loader arrives with the datasets issue",
                dataset_key="emnist_l") for a in cf.ALL]
    v, detail = verdict("FDY-T2-1", rows)
    assert v == "not evaluated" and "emnist_l loader arrives" in detail


def test_tally_undecided_pairs_go_either_way():
    # Two (setting, dataset, split) pairs; "more than half" needs both: one is undecided.
    rows = [row("feddyn", 10), row("scaffold", 40), row("feddyn", 5, target="97.2", target_rank="lower"),
            row("scaffold", 10, target="97.2", target_rank="lower"),
            row("feddyn", 10, split_key="dirichlet0.6"), row("scaffold", 200, True, split_key="dirichlet0.6"),
            row("feddyn", 5, split_key="dirichlet0.6", target="97.1", target_rank="lower"),
            row("scaffold", 30, split_key="dirichlet0.6", target="97.1", target_rank="lower")]
    v, detail = verdict("FDY-T2-6", rows)
    assert v == "holds", detail  # 4.0 > 2.0; >20x > 6x
    rows[5] = row("scaffold", 40, True, split_key="dirichlet0.6")  # >4x vs 6x: undecided
    v, detail = verdict("FDY-T2-6", rows)
    assert v == "not evaluated" and "undecided" in detail


def test_ledger_identity_claim():
    rows = [row(a, 10) for a in cf.ALL]
    assert verdict("FDY-S3-2", rows)[0] == "holds"
    rows[1] = row("scaffold", 10, up_vectors_per_d=1.0)
    assert verdict("FDY-S3-2", rows)[0] == "fails"


def test_cells_printed_as_the_paper_with_ratio_only_when_uncensored():
    ref = common.load_table(2)
    ref = ref[(ref.setting == "10%") & (ref.dataset_key == "mnist") & (ref.split_key == "iid")
              & (ref.target == "98.2")]
    frame = pd.DataFrame([row("feddyn", 90), row("scaffold", 200, True), row("fedavg", 450), row("fedprox", 300)])
    frame["setting"] = "10%"
    table = common.render(frame, ref, table2.SPEC).set_index("algorithm_key")
    assert table.loc["scaffold", "ours"] == "200+ (>2.2x)" and pd.isna(table.loc["scaffold", "ratio"])
    assert table.loc["fedavg", "ours"] == "450 (5.0x)" and table.loc["fedavg", "paper"] == "588 (5.9x)"
    assert table.loc["feddyn", "ours"] == "90" and table.loc["feddyn", "ratio"] == pytest.approx(0.9)


def test_eval_every_round_option_only_changes_quick():
    def args(profile, flag):
        return argparse.Namespace(profile=profile, eval_every_round=flag, data_root="data")
    assert common.eval_interval(args("quick", False)) == 5
    assert common.eval_interval(args("quick", True)) == 1
    assert common.eval_extra(args("paper", True)) == common.eval_extra(args("paper", False)) == []


def test_notes_name_the_overrides_every_run_took():
    spec = table2.SPEC
    frame = pd.DataFrame(columns=[*common.RUN_COLS, "status"])
    def args(override):
        return argparse.Namespace(profile="paper", eval_every_round=False, data_root="data", override=override)
    lines = common.notes(spec, args(["train.rounds=200"]), frame, [])
    assert "overrides of every run, after the table's own settings (they win): train.rounds=200" in lines
    assert not any(line.startswith("overrides") for line in common.notes(spec, args([]), frame, []))


# ---------------------------------------------------------------------------------------------
# Targets end to end (smoke)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """Table 2's IID rows at smoke with 5 devices (fast), then Figure 8 from the same runs."""
    root = tmp_path_factory.mktemp("feddyn")
    data_root = real_mnist() or str(root / "no-data")
    out, drawn = io.StringIO(), []
    scale = {"num_devices": 5}
    with pytest.MonkeyPatch.context() as mp:
        if not real_mnist():
            mp.setitem(settings.DATASETS, "mnist", ["dataset=mnist_5k", "model=mlp_mnist"])
        draw = figures.draw
        mp.setattr(figures, "draw", lambda number, panels, *a: drawn.extend(panels) or draw(number, panels, *a))
        common_args = ["--profile", "smoke", "--results-root", str(root), "--data-root", data_root]
        with contextlib.redirect_stdout(out):
            assert render("table2", [*common_args, "--datasets", "mnist", "--splits", "iid"], scale) == 0
            assert render("fig8", ["--only-existing", *common_args], scale) == 0
    return root, out.getvalue(), {p.title: sorted(p.curves) for p in drawn}


@pytest.mark.slow
def test_table2_smoke_renders_mnist_rows_with_paper_and_claims(smoke):
    root, printed, _ = smoke
    table = pd.read_csv(root / "tables" / "feddyn_table2.csv")
    assert len(table) == 16 and set(table.status) == {"ok"}  # 2 settings x 2 targets x 4 methods
    by = dict(zip(table.setting + " " + table.target.astype(str) + " " + table.algorithm_key, table.ours))
    assert by["10% 98.2 feddyn"] == "3+" and by["10% 98.2 scaffold"] == "6+ (?)"  # 3 rounds, SCAFFOLD x2
    md = (root / "tables" / "feddyn_table2.md").read_text()
    assert "588 (5.9x)" in md and "142 (1.4x)?" in md  # the paper's cells, OCR flag kept
    assert "splits dirichlet0.3, dirichlet0.6 omitted" in md
    claims = (root / "tables" / "feddyn_table2_claims.md").read_text()
    for claim in table2.SPEC.claims:
        assert f"**{claim}**" in claims
    assert "**FDY-S3-2** holds" in claims and "**FDY-T2-1** not evaluated" in claims
    assert "Claims on our numbers" in printed


@pytest.mark.slow
def test_figure8_redrawn_from_the_table_runs(smoke):
    root, _, curves = smoke
    assert (root / "figures" / "feddyn_fig8.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drawn = {title for title, labels in curves.items() if labels}
    assert drawn == {"IID, 100%, 100 devices", "IID, 10%, 100 devices"}
    assert all(curves[t] == sorted(settings.ALGORITHMS) for t in drawn)


def test_figures_use_the_table_overrides(monkeypatch):
    monkeypatch.setitem(settings.DATASETS, "mnist", ["dataset=mnist_5k", "model=mlp_mnist"])  # runs anywhere
    ref = common.load_table(2)
    cells, rows = common.grid(ref[(ref.dataset_key == "mnist") & (ref.split_key == "iid")], data_root="data")
    table = {(r["participation"], r["algorithm_key"]): c.overrides for c, r in zip(cells, rows)}
    assert all(table.values())  # runnable: the comparison below compares runs
    for p in (1.0, 0.1):
        panel = figures.convergence("mnist", [(p, 100, "balanced", "iid")], None, "data")[0]
        assert {alg: c.overrides for alg, c in panel.cells.items()} == {a: table[(p, a)] for a in settings.ALGORITHMS}


def test_figures_not_run_panels(tmp_path, capsys):
    args = ["--profile", "smoke", "--results-root", str(tmp_path), "--only-existing"]
    assert render("fig11", args) == 0
    assert render("fig1", ["--dataset", "mnist", *args]) == 0
    for name in ("feddyn_fig11.png", "feddyn_fig1_mnist.png"):
        assert (tmp_path / "figures" / name).stat().st_size > 0
    with pytest.raises(ConfigError, match="Figures 1, 2, 4, 12 only; Figure 8 is MNIST"):
        render("fig8", ["--dataset", "mnist", *args])
    with pytest.raises(ConfigError, match="--dataset mnst: FedDyn has no recipe for it; choose from mnist"):
        render("fig4", ["--dataset", "mnst", *args])


def test_figures_draw_seed_0_whatever_seeds_says(monkeypatch):
    monkeypatch.setenv("SEEDS", "3")
    target = TARGETS["fig8"]
    assert parser_for("feddyn", target, "fig8").parse_args([]).seeds == 1
    assert parser_for("feddyn", TARGETS["table2"], "table2").parse_args([]).seeds == 3


def test_table6_smoke_runs_the_generator_on_its_own_devices(tmp_path, capsys):
    assert render("table6", ["--profile", "smoke", "--results-root", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "tables" / "feddyn_table6.csv")
    assert len(table) == 16 and set(table.status) == {"ok"}  # 4 settings x 4 methods
    assert "**FDY-T6-1**" in (tmp_path / "tables" / "feddyn_table6_claims.md").read_text()


def test_table1_lists_every_row_when_no_dataset_runs(tmp_path, capsys):
    no_data = tmp_path / "no-data"  # no CIFAR here
    assert render("table1", ["--profile", "smoke", "--results-root", str(tmp_path), "--data-root", str(no_data)]) == 0
    table = pd.read_csv(tmp_path / "tables" / "feddyn_table1.csv")
    assert len(table) == 64 and set(table.status) == {"not run"}
    assert "every row is listed" in (tmp_path / "tables" / "feddyn_table1.md").read_text()


def test_a_curve_with_a_failed_seed_is_missing_not_a_mean_of_the_others(tmp_path):
    """`fill`: a seed the store lacks (--done-only) leaves the curve on its other seeds; a seed
    that failed or diverged takes the whole curve out, with why."""
    from types import SimpleNamespace

    from fedrepro.reports.grid import Cell

    def run(seed):
        folder = tmp_path / f"seed{seed}"
        folder.mkdir()
        (folder / "metrics.csv").write_text("round,all_test_acc\n5,0.5\n")
        return SimpleNamespace(folder=folder, summary={"seed": seed, "status": "finished"})

    rows = {"partial": ("not run", "not computed yet"), "failed": ("failed", "disk full, round 40"),
            "ok": ("ok", "")}
    panel = figures.Panel("p", {label: Cell({"curve": label}, ["x=1"]) for label in rows})
    frame = pd.DataFrame([{"status": s, "reason": r} for s, r in rows.values()])
    results = SimpleNamespace(options=SimpleNamespace(eval_every_round=False),
                              measure=lambda cells, metric: (frame, {0: [run(0)], 1: [run(1)], 2: [run(2)]}))
    figures.fill([panel], results)
    assert set(panel.curves) == {"partial", "ok"} and list(panel.curves["partial"]) == [0]
    assert panel.missing == {"failed": "failed: disk full, round 40"}


def test_a_diverged_curve_is_drawn_up_to_where_it_stopped_and_not_judged(tmp_path):
    """A diverged seed's rounds are drawn (dashed, in the panel data under 'diverged after round
    N') and dropped from the not-run note; the claims read `curves` only, which it stays out of."""
    from types import SimpleNamespace

    from fedrepro.reports.grid import Cell

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.csv").write_text("round,all_test_acc\n0,0.1\n5,0.4\n10,nan\n")
    run = SimpleNamespace(folder=folder, summary={"seed": 0, "status": "diverged", "rounds_completed": 12})
    panel = figures.Panel("p", {"Act": Cell({"curve": "Act"}, ["x=1"]), "All": Cell({"curve": "All"}, ["x=1"])})
    frame = pd.DataFrame([{"status": "diverged", "reason": "local training diverged in round 12"},
                          {"status": "not run", "reason": "not computed yet"}])
    results = SimpleNamespace(options=SimpleNamespace(eval_every_round=False),
                              measure=lambda cells, metric: (frame, {0: [run]}))
    figures.fill([panel], results)
    assert panel.curves == {} and set(panel.missing) == {"Act", "All"} and set(panel.diverged) == {"Act"}
    data = figures.panel_data([panel])
    assert set(data.curve) == {"Act: diverged after round 12"} and list(data["round"]) == [0, 5, 10]
    from fedrepro.reports.figures import panel_grid

    _, axes = panel_grid(1, 1)
    figures._draw(axes[0, 0], panel)
    note = " ".join(t.get_text() for t in axes[0, 0].texts)
    assert "not computed yet" in note and "diverged" not in note
    assert [t.get_text() for t in axes[0, 0].get_legend().get_texts()] == ["Act: diverged after round 12"]
