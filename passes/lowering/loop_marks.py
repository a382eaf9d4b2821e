"""Annotation keys that mark the serial loops a partitioned parallel nest becomes.

``LoopPartition`` writes them; the passes after it (shared-atomic fences, ``LoopVectorize``, conversion
staging) find their loops by them. They live apart from the partitioner so that a pass can read a mark
without importing the partitioner, and the partitioner can call those passes without an import cycle.
"""
from __future__ import annotations

__all__ = ["PARTITIONED_KEY", "SLOT_LOOP_KEY"]

#: annotation on the outermost serial loop a partitioned nest becomes (value: the nest's loop key)
PARTITIONED_KEY = "tilelayout.partitioned"
#: annotation on the innermost slot loop (value: the nest's loop key); the vectorizer works on these
SLOT_LOOP_KEY = "tilelayout.slot_loop"
