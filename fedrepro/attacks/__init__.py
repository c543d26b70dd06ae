"""Privacy attacks on what federated clients upload (LoSAC Sec. IV-B / V-D: Deep Leakage from Gradients)."""
