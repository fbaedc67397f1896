"""memplan: how much memory training a model takes, what it is made of, and how much less a better plan needs."""

__version__ = "0.1.0"
