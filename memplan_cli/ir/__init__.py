"""The model IR: operands, operations, use-def chains, a verified DAG and its topological order.

Loaders build a `Graph`; passes read it and write their results beside it (never into loaders).
"""
from memplan_cli.ir.dtypes import DTYPE_SIZE, dtype_size
from memplan_cli.ir.graph import Graph, Operand, Operation

__all__ = ["Graph", "Operand", "Operation", "DTYPE_SIZE", "dtype_size"]
