"""Layout inference: the TIRx front end (program -> op graph), the per-op rules, the loop planner, the
level-by-level engine with its cost models, and the annotations that carry every decision in the IR."""
