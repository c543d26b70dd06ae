"""Models as functions of one flat parameter vector (DESIGN.md principle 1)."""
from fedrepro.models.flat import FlatModel, build_model

__all__ = ["FlatModel", "build_model"]
