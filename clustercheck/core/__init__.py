"""Shared types every layer uses: exit codes and bad input (errors.py), the one result type (result.py),
the inventory of nodes (inventory.py), the judges' thresholds (thresholds.py), grouping by value (compare.py).
"""
