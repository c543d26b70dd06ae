"""LoSAC's experiment targets (targets.py): Table II (ablation over M and T), Figures 1-5 (curves),
Figure 6 (DLG) and Figure 7 (low-rank matrix estimation). docs/losac_experiments.md describes the
commands and choices."""
