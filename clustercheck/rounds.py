"""Rounds of disjoint pairs: every node in at most one pair per round (net's link test, bench's pairwise)."""

from __future__ import annotations

from typing import List, Sequence, Tuple


def round_robin(names: Sequence[str]) -> List[List[Tuple[str, str]]]:
    """Rounds of disjoint pairs covering every pair once (the circle method)."""
    players = list(names) + ([None] if len(names) % 2 else [])
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
        players = [players[0], players[-1]] + players[1:-1]
    return rounds
