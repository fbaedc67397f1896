"""The package version: a leaf every layer may read (the package __init__ reaches up to the API)."""

__version__ = "0.1.0"
