"""A topological sort for dependency graphs given as successor maps (a deadlocked schedule's report
in :mod:`ppopt.validation`, the solver's models and windows). Validating, tabling and simulating a
schedule order its ops by :mod:`ppopt.flat`'s per-device walk instead, which builds no graph."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

Node = TypeVar("Node", bound=Hashable)


def topological_order(successors: Mapping[Node, Iterable[Node]]) -> list[Node]:
    """Nodes ordered so that each comes after all its predecessors (Kahn's algorithm, FIFO, so the
    order is deterministic). Every successor must be a key. Nodes on or behind a cycle are left
    out: a result shorter than ``successors`` means the graph has a cycle.
    """
    waiting = dict.fromkeys(successors, 0)
    for nexts in successors.values():
        for node in nexts:
            waiting[node] += 1
    ready = deque(node for node, count in waiting.items() if count == 0)
    order: list[Node] = []
    while ready:
        node = ready.popleft()
        order.append(node)
        for nxt in successors[node]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                ready.append(nxt)
    return order
