"""LoSAC's experiment targets: Table II (ablation over M and T), Figure 6 (DLG) and Figure 7
(low-rank matrix estimation). docs/losac_experiments.md describes the commands and choices."""
