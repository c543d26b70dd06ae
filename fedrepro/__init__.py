"""fedrepro: reproduce and extend FedElasticNet, FedDyn, LoSAC and compressed L2GD."""
from fedrepro import _compat  # noqa: F401  (must run before torchvision / lightning imports)

__version__ = "0.1.0"
