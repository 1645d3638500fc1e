"""The servers' context length is read in one place (`ServersSection.context_length`): a
`"32768"` given as a string in TOML is checked by the config, the live max-tokens check and
the status alike (the live check used to ignore a string and let 40000 through)."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.config import ConfigError
from supervisor.job.contract_status import build_status
from tests.fixtures.dispatching import dispatching, job_config, open_store
from tests.fixtures.job_status import job_status

HISTOGRAM = ((0, 4097), (1,), 1)


@pytest.mark.parametrize("given", [32768, "32768", " 32768 "])
def test_a_number_or_its_digits_read_the_same(tmp_path: Path, given: object) -> None:
    cfg = job_config(tmp_path, servers={"flags": {"context-length": given}})
    assert cfg.servers.context_length == 32768
    assert cfg.servers.flags["context-length"] == given     # passed to SGLang as written
    status = build_status(job_status(tmp_path), cfg, started_at=0.0, histogram=HISTOGRAM)
    assert status.context_length == 32768


def test_unset_is_none_and_nonsense_is_refused_at_load(tmp_path: Path) -> None:
    assert job_config(tmp_path).servers.context_length is None
    for bad in ("long", 0, True, 1.5):
        with pytest.raises(ConfigError, match="servers.flags.context-length: must be an "
                                              "integer >= 1"):
            job_config(tmp_path, servers={"flags": {"context-length": bad}})


async def test_the_live_max_tokens_check_reads_a_string_context_length(tmp_path: Path) -> None:
    store = open_store(tmp_path, [{"id": "p1", "messages": [{"role": "user", "content": "x"}]}])
    cfg = job_config(tmp_path, generation={"max_tokens": 4096},
                     servers={"flags": {"context-length": "32768"}})
    try:
        async with dispatching(store, cfg) as (d, _):
            with pytest.raises(ValueError, match="context length"):
                await d.set_max_tokens(40000, "test")
            assert d.max_tokens == 4096
            assert await d.set_max_tokens(8192, "test") == 4096
    finally:
        store.close()
