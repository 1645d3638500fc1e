"""The state DB backed up beside the shards, and restored on a replacement node."""
