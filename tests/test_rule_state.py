"""The engine's attempt state honours the declared rule-state interface."""
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tilelayout.passes.inference.layout_inference import _Engine, _State  # noqa: E402
from tilelayout.passes.inference.rule_state import RuleState  # noqa: E402


def test_engine_state_is_a_rule_state():
    func = importlib.import_module("cases.reduce_broadcast").VARIANTS["64x128_t128"]()
    state = _State(_Engine(func, None, "register-count"))
    assert isinstance(state, RuleState)
    missing = [name for name in dir(RuleState) if not name.startswith("_") and not hasattr(state, name)]
    assert missing == []
