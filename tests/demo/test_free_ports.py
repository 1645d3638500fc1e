"""Where free_base_port looks: its defaults, or $DFLASH_PORT_RANGE (the test suite gives each
of its workers a block there, so the demos they start pick ports apart)."""

from __future__ import annotations

import pytest

from supervisor.demo.free_ports import PORT_RANGE_ENV, free_base_port


def test_the_range_from_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "13500-13599")
    for _ in range(20):
        base = free_base_port(3)
        assert 13500 <= base and base + 3 <= 13599


def test_explicit_bounds_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "13500-13599")
    assert 13700 <= free_base_port(2, start=13700, stop=13800) < 13800


@pytest.mark.parametrize("value", ["13500", "a-b", "13599-13500", "80-90", "13500-70000"])
def test_a_bad_range_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                   value: str) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, value)
    with pytest.raises(ValueError, match=f"{PORT_RANGE_ENV}=.*expected"):
        free_base_port(1)


def test_the_suites_fixture_never_hands_out_a_port_twice_before_it_is_bound() -> None:
    # Three nodes' configs are written before any node binds its servers' ports: each search
    # finds the others' ports free. A collision (~3% a run with the random bases alone) failed
    # tests/multinode with "port ... is in use" on a node's server.
    from tests.fixtures import ports

    given: set[int] = set()
    for _ in range(30):
        base = ports.free_base_port(3)
        block = set(range(base, base + 3))
        assert not block & given, (base, sorted(block & given))
        given |= block
