"""Values of the race check's shadow records that more than one race module writes or reads.

The instrumenter (``race_check``) and the collectives' reads (``race_collectives``) write them; the report
(``race_report``) reads them back.
"""
from __future__ import annotations

__all__ = ["SEVERAL"]

#: a thread field meaning "several threads" (a collective read, or reads by more than one thread)
SEVERAL = -2
