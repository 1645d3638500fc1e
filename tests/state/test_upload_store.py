"""The store's upload-side methods: a shard sent back for rewriting, the last upload error."""

from __future__ import annotations

import time

from tests.fixtures.state_db import store_with_shards


def test_rewrite_shard_resets_only_a_written_shard_with_that_digest(tmp_path):
    store, writer, _ = store_with_shards(tmp_path, 5, 5)
    shard = store.shards()[0]
    assert not store.rewrite_shard(shard.id, "0" * 64)            # another digest: untouched
    assert store.rewrite_shard(shard.id, shard.sha256)
    after = store.shard(shard.id)
    assert after.status == "assigned" and after.version == shard.version + 1
    assert not store.rewrite_shard(shard.id, shard.sha256)        # no longer 'written'
    writer.sync()
    again = store.shard(shard.id)
    assert again.status == "written" and again.sha256 == shard.sha256   # the same bytes


def test_last_upload_error_names_the_newest_waiting_shard_until_it_is_uploaded(tmp_path):
    store, _, _ = store_with_shards(tmp_path, 10, 5)
    first, second = store.shards()
    assert store.last_upload_error() is None
    store.note_upload_failure(first.id, "put: SlowDown")
    store.note_upload_failure(second.id, "put: EndpointConnectionError")
    store.note_upload_failure(second.id, "put: EndpointConnectionError again")
    assert store.last_upload_error() == (second.key, 2, "put: EndpointConnectionError again")
    store.mark_shard_uploaded(second.id, second.md5, "sha256:x", time.time())
    assert store.last_upload_error() == (first.key, 1, "put: SlowDown")
