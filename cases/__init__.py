"""Golden cases: one module per kernel family, checked by ``maint/run.py`` against ``expected/``."""
