"""The claims index (docs/measured/claims.md, experiments/claims_index.py): every catalogue claim
once, the committed page current, and the reading of a target's *_claims.md file."""
import re

from experiments import claims_index as ci

ROW_ID = re.compile(r"^\| ([A-Z0-9]+-[A-Z0-9]+-\d+) \|", re.MULTILINE)

# A hand-written claims file in the shape the targets write (fedrepro.reports.claims.claims_markdown).
EXAMPLE = """Claims on our numbers (X-1, X-2; rules of claims.csv):

- **X-1** holds (tie): A claim: with a colon in it.
  - a == b (1 % tolerance): holds in 2 of 2 evaluated
- **X-2** fails: Another claim.
  - fails: mnist (3 vs 2)
- **X-3** not evaluated: Censored by the round cap.
  - undetermined: models(a) < models(b): holds in 0 of 2 evaluated, censoring leaves 2 undecided
  - undetermined: mnist 98.2 (a 100+ vs b 200+); mnist 97.2 (a 100+ vs b 200+)
- **X-4** not evaluated: Its data is missing.
  - undetermined: f(a) > f(b): holds in 1 of 1 evaluated
  - 1 of 2 scope items not evaluated: har: not run: data not here: data/UCI_HAR/UCI HAR Dataset/ lacks train/X_train.txt
- **X-5** not evaluated: Stopped early.
  - undecided: esr S=5 (loss 0.2; stopped at round 100 of 500 (profile cap): would fail)
- **X-6** partly: A verdict word the vocabulary lacks.
- **X-7** not evaluated: None of its runs made.
  - 4 of 4 scope items not evaluated (they lack ok runs): not run: not computed yet
- **X-8** not evaluated: Some of its runs made.
  - 1 of 4 scope items not evaluated (they lack ok runs): not run: not computed yet
"""


def test_every_catalogue_claim_is_exactly_one_row_of_the_committed_index():
    ids = [c["claim_id"] for c in ci.read_catalogue()]
    rows = ROW_ID.findall(ci.OUT.read_text(encoding="utf-8"))
    assert len(ids) == 117 == len(set(ids))
    assert sorted(rows) == sorted(ids)


def test_committed_index_is_what_the_generator_writes_from_the_committed_files():
    text, problems = ci.build()
    assert problems == []
    assert ci.OUT.read_text(encoding="utf-8") == text, "docs/measured/claims.md is stale: run `make claims`"


def test_curated_lists_name_catalogue_claims():
    ids = {c["claim_id"] for c in ci.read_catalogue()}
    assert set(ci.BY_CONSTRUCTION) <= ids and set(ci.NOT_RUNNABLE) <= ids


def test_parser_reads_each_verdict_and_its_detail():
    verdicts = ci.parse_claims_file(EXAMPLE, "example_claims.md")
    assert [(v.claim_id, v.written, len(v.detail)) for v in verdicts] == [
        ("X-1", "holds (tie)", 1), ("X-2", "fails", 1), ("X-3", "not evaluated", 2),
        ("X-4", "not evaluated", 2), ("X-5", "not evaluated", 1), ("X-6", "partly", 0),
        ("X-7", "not evaluated", 1), ("X-8", "not evaluated", 1)]
    assert verdicts[1].detail == ("fails: mnist (3 vs 2)",)


def test_verdicts_become_holds_fails_undecided_with_reason_or_not_runnable():
    got = [ci.category_of(v) for v in ci.parse_claims_file(EXAMPLE, "example_claims.md")]
    assert got == [
        ("holds", "holds (tie)"),
        ("fails", "fails"),
        ("undecided", "undecided: censored at the round cap (100+, 200+)"),
        ("not runnable", "not runnable: UCI HAR features missing (1 of 2 scope items not evaluated)"),
        ("undecided", "undecided: censored: runs stop at round 100 of 500 (profile cap)"),
        ("as written", '"partly" (as written)'),
        ("not run yet", "not run yet: 4 of 4 scope items not evaluated (they lack ok runs): not run: not computed yet"),
        ("undecided", "undecided: 1 of 4 scope items not evaluated (they lack ok runs): not run: not computed yet"),
    ]


def test_a_tie_within_the_seed_noise_is_not_called_censored():
    """FedDyn's count claims leave a tie within their seed-noise band undecided; the index names
    the noise, though censored caps appear among the items that held."""
    detail = ("undetermined: models(feddyn) < scaffold: holds in 1 of 2 evaluated, censoring or the seed noise "
              "leaves 1 undecided",
              "undetermined: Type 1 (feddyn 18 vs scaffold 30, fedavg 18) (within the 17% seed noise)",
              "holds: Homogeneous (feddyn 398 vs scaffold 2000+, fedavg 1000+)")
    got = ci.category_of(ci.Verdict("X-9", "not evaluated", detail, "t_claims.md"))
    assert got == ("undecided", "undecided: within noise (the seed noise band)")


def test_a_head_naming_censoring_or_noise_is_not_read_as_a_noise_item():
    """FDY-T2-6's head counts its open pairs ("(1 undecided by censoring or the seed noise)"); the
    open pair is censored on both sides ("?"), so the index says censored, not noise."""
    detail = ("undetermined: gain(higher) > (lower) in more than half the pairs: higher target gains more in "
              "1 of 3 (1 undecided by censoring or the seed noise)",
              "10% emnist_l iid: higher 1.3x vs lower 1.5x no; 10% emnist_l dirichlet0.6: higher ? vs lower 1.7x")
    got = ci.category_of(ci.Verdict("X-9", "not evaluated", detail, "t_claims.md"))
    assert got == ("undecided", "undecided: censored at the round cap")


def test_an_item_within_a_noise_band_is_named_from_the_verdicts_head():
    """verdict_of's head says what leaves items open; a noise band (FedElasticNet's 0.25 point,
    L2GD's standard error, FedDyn's seeds' interval) is named as noise, not censoring."""
    def cell(head):
        verdict = ci.Verdict("X-9", "not evaluated", (f"undetermined: {head}", "undecided: a (x)"), "t_claims.md")
        return ci.category_of(verdict)
    assert cell("acc(a) >= acc(b): holds in 0 of 1 evaluated, noise leaves 1 undecided") == \
        ("undecided", "undecided: within noise (the band its rule names)")
    fen = "holds in 2 of 3 evaluated, noise (within the 0.25 point seed spread of its bound) leaves 1 undecided"
    assert cell(f"acc(a) >= acc(b): {fen}") == \
        ("undecided", "undecided: within noise (within the 0.25 point seed spread of its bound)")


def test_several_files_fail_if_one_fails_and_show_each():
    holds, fails = (ci.Verdict("X-1", word, (), f"{name}_claims.md")
                    for word, name in (("holds", "a_table"), ("fails", "a_table_other")))
    category, text = ci.verdict_cell([(holds, "quick", "t"), (fails, "quick", "t")])
    assert category == "fails"
    assert text == "fails; by file: holds (a_table); fails (a_table_other)"


def test_a_claim_one_case_confirms_holds_on_one_file_and_fails_only_on_all():
    def verdicts(*words):
        return [(ci.Verdict("X-1", word, ("no (base, variant) pair with ok runs",) if word == "not evaluated" else (),
                            f"fig{i}_claims.md"), "quick", "t") for i, word in enumerate(words)]
    assert ci.verdict_cell(verdicts("fails", "holds", "not evaluated"), one_case=True)[0] == "holds"
    assert ci.verdict_cell(verdicts("fails", "not evaluated"), one_case=True)[0] == "not run yet"
    assert ci.verdict_cell(verdicts("fails", "fails"), one_case=True)[0] == "fails"
    assert ci.verdict_cell(verdicts("holds", "not evaluated"))[0] == "not run yet"  # every case needed
    assert set(ci.CONFIRMED_BY_ONE_CASE) <= {c["claim_id"] for c in ci.read_catalogue()}


def test_a_profile_that_ran_none_of_the_scope_does_not_undo_another_profiles_verdict():
    def v(word, name):
        return ci.Verdict("X-1", word, ("no setting of the scope has the runs this needs",)
                          if word == "not evaluated" else (), f"{name}_claims.md")
    holds, paper_none = v("holds", "fig1"), v("not evaluated", "fig1_paper")
    category, text = ci.verdict_cell([(holds, "quick", "fig1"), (paper_none, "paper", "fig1")])
    assert category == "holds"
    assert text.startswith("holds; by file: holds (fig1); not run yet: ")  # still shown
    # another target's file with nothing run still leaves the claim open (every case needed)
    assert ci.verdict_cell([(holds, "quick", "fig1"), (paper_none, "paper", "fig9")])[0] == "not run yet"
    # and so does the same profile's file of the same target (another dataset's output)
    assert ci.verdict_cell([(holds, "quick", "fig1"), (paper_none, "quick", "fig1")])[0] == "not run yet"
    assert ci.verdict_cell([(holds, "quick, on MNIST", "fig1"), (paper_none, "quick", "fig1")])[0] == "not run yet"


def test_profile_is_read_where_stated_and_unstated_otherwise(tmp_path):
    assert ci.stated_profile("### Table 2, profile=paper\n") == "paper"
    assert ci.stated_profile("- profile quick; seeds 1\n- rounds: 500 at profile=paper\n") == "quick"
    assert ci.stated_profile("- rounds: 500 at profile=paper (unstated)\n") == ""
    (tmp_path / "x_fig1_claims.md").write_text(EXAMPLE)
    assert ci.profile_of(tmp_path / "x_fig1_claims.md") == "unstated"
    (tmp_path / "x_fig1.md").write_text("notes\n- profile: smoke (conf/profile/smoke.yaml)\n")
    assert ci.profile_of(tmp_path / "x_fig1_claims.md") == "smoke"
    # a figure drawn on another dataset than the paper's says so beside its profile
    (tmp_path / "y_fig4_mnist_claims.md").write_text("### Claims on our numbers (y_fig4_mnist), profile=quick; data: "
                                                     "paper: CIFAR-10, here: MNIST (--dataset)\n\n" + EXAMPLE)
    assert ci.profile_of(tmp_path / "y_fig4_mnist_claims.md") == "quick, on MNIST"
    (tmp_path / "z_fig1_mnist_claims.md").write_text("### FedDyn Figure 1 claims on our curves, on MNIST (the paper: "
                                                     "CIFAR-10), profile=quick, seed 0\n\n" + EXAMPLE)
    assert ci.profile_of(tmp_path / "z_fig1_mnist_claims.md") == "quick, on MNIST"


def test_a_file_is_attributed_to_the_target_that_writes_it():
    targets = ci.registered_targets()
    assert ci.target_of_file("fedelasticnet_table2_cifar10", targets) == "fen-table2"
    assert ci.target_of_file("fedelasticnet_costs_p10", targets) == "fen-costs"
    assert ci.target_of_file("l2gd_fig10", targets) == "l2gd-fig10"
    assert ci.target_of_file("nobody_table9", targets) == ""


def test_build_reads_the_files_given_and_reports_unknown_claims(tmp_path):
    (tmp_path / "fedelasticnet_table2_claims.md").write_text(
        "- **FEN-T2-1** fails: Algorithm 3 uploads the fewest.\n  - fails: mnist/iid\n"
        "- **NOPE-1** holds: Not a catalogue claim.\n")
    text, problems = ci.build(tmp_path)
    assert problems == ["fedelasticnet_table2_claims.md: claim NOPE-1 is not in the catalogue "
                        "(fedrepro/reference/claims.csv)"]
    row = next(line for line in text.splitlines() if line.startswith("| FEN-T2-1 |"))
    assert "| fails | `make fen-table2` | unstated | `fedelasticnet_table2_claims.md` (unstated) |" in row
    assert "NOPE-1" not in text
    not_judged = next(line for line in text.splitlines() if line.startswith("| FEN-T2-2 |"))
    assert "| not judged yet | `make fen-table2` |" in not_judged


def test_check_fails_on_a_stale_index(tmp_path, capsys):
    out = tmp_path / "claims.md"
    out.write_text(ci.OUT.read_text(encoding="utf-8") + "edited by hand\n", encoding="utf-8")
    assert ci.main(["--out", str(out), "--check"]) == 1
    assert "-edited by hand" in capsys.readouterr().out  # the diff names the difference
    assert ci.main(["--out", str(out)]) == 0
    assert ci.main(["--out", str(out), "--check"]) == 0
