"""Settings keys are named in one place: no module reads or writes the settings table with a
key spelled out as a string, and every key round-trips through a real store."""

from __future__ import annotations

import re
from pathlib import Path

from state.settings_keys import Setting
from state.store import Store

ROOT = Path(__file__).resolve().parents[2]
# store.get_setting("key") and astore.call(Store.set_setting, "key", ...)
LITERAL_KEY = re.compile(r"""(get|set)_setting\s*[(,]\s*['"]""")


def test_no_module_spells_a_settings_key_out() -> None:
    offenders = [f"{p.relative_to(ROOT)}:{n}" for folder in ("supervisor", "state")
                 for p in sorted((ROOT / folder).rglob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if LITERAL_KEY.search(line)]
    assert offenders == []


def test_the_pattern_catches_both_call_shapes() -> None:
    assert LITERAL_KEY.search('store.get_setting("max_tokens")')
    assert LITERAL_KEY.search("await astore.call(Store.set_setting, 'operator_pause', r)")
    assert not LITERAL_KEY.search("store.get_setting(Setting.MAX_TOKENS)")
    assert not LITERAL_KEY.search("await astore.call(Store.set_setting, Setting.X, r)")


def test_every_key_round_trips(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "job.db")
    try:
        for i, key in enumerate(Setting):
            store.set_setting(key, f"v{i}")
        assert [store.get_setting(key) for key in Setting] == [f"v{i}" for i in
                                                                range(len(Setting))]
        assert len({k.value for k in Setting}) == len(Setting)
    finally:
        store.close()
