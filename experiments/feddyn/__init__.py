"""FedDyn (Acar et al., ICLR 2021): Tables 1, 2, 4, 5, 6 (models transmitted to reach a target)
and Figures 1, 2, 4-13. Shared grid and rendering: common.py; App. A.2's hyperparameters:
settings.py."""
