"""The compressed L2GD paper's targets (Bergou, Burlachenko, Dutta, Richtarik: "Personalized
Federated Learning with Communication Compression"), listed in `targets.py`: Figures 2-3
(logistic regression, `logistic.py`), Figures 4-11 and Table 2 (CIFAR-10, `cifar.py`) and, beyond
the papers, the compressors x algorithms comparison at equal bits (`compare_compression.py`).
Settings and every value the paper leaves open: `settings.py`; the claim checks: `claims.py`.
Docs: docs/l2gd_experiments.md."""
