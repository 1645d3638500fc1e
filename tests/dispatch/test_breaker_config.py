"""The breaker's and the thinking-truncation gate's config keys: defaults that catch the
incidents, and a one-line refusal naming the key for a value that cannot work."""

from __future__ import annotations

import pytest

from supervisor.config import ConfigError, parse_config

BASE = {"servers": {"count": 1, "model_path": "/models/m"},
        "generation": {"enable_thinking": False}}


def _cfg(section: str, **values):
    data = {k: dict(v) for k, v in BASE.items()}
    data.setdefault(section, {}).update(values)
    return parse_config(data)


def test_defaults_pause_on_a_systemic_error_and_on_answers_cut_in_the_thinking():
    cfg = _cfg("dispatch")
    d, q = cfg.dispatch, cfg.quality
    assert (d.breaker_error_rate, d.breaker_window, d.breaker_min_samples) == (0.5, 200, 50)
    assert q.max_thinking_truncated_rate == 0.5


def test_the_keys_are_read():
    d = _cfg("dispatch", breaker_error_rate=0.9, breaker_window=500,
             breaker_min_samples=100).dispatch
    assert (d.breaker_error_rate, d.breaker_window, d.breaker_min_samples) == (0.9, 500, 100)
    assert _cfg("quality", max_thinking_truncated_rate=1).quality.max_thinking_truncated_rate == 1


@pytest.mark.parametrize("section, values, fragment", [
    ("dispatch", {"breaker_error_rate": 0}, "dispatch.breaker_error_rate: must be within (0, 1]"),
    ("dispatch", {"breaker_error_rate": 1.5}, "dispatch.breaker_error_rate: must be within (0, 1]"),
    ("dispatch", {"breaker_error_rate": "half"}, "dispatch.breaker_error_rate"),
    ("dispatch", {"breaker_window": 0}, "dispatch.breaker_window: must be > 0"),
    ("dispatch", {"breaker_min_samples": 0},
     "dispatch.breaker_min_samples: must be within 1..dispatch.breaker_window (200)"),
    ("dispatch", {"breaker_window": 20, "breaker_min_samples": 50},
     "dispatch.breaker_min_samples: must be within 1..dispatch.breaker_window (20), got 50"),
    ("quality", {"max_thinking_truncated_rate": 0},
     "quality.max_thinking_truncated_rate: must be within (0, 1]"),
    ("quality", {"max_thinking_truncated_rate": 2.0},
     "quality.max_thinking_truncated_rate: must be within (0, 1]"),
    ("dispatch", {"breaker_windows": 10}, "dispatch.breaker_windows: unknown key"),
])
def test_a_value_that_cannot_work_is_refused_naming_the_key(section, values, fragment):
    with pytest.raises(ConfigError) as err:
        _cfg(section, **values)
    message = str(err.value)
    assert fragment in message and "\n" not in message
