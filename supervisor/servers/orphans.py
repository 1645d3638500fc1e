"""Stopping servers left running by a previous daemon (it was SIGKILLed, or the node's
supervisor lost track of it), so no orphan holds GPU memory or a port when we launch.

The state DB records each server's pid, pgid (== pid: we start each in a new session), argv
and the leader's create_time. Deciding what is still ours, with pid reuse in mind:
- the leader is alive: ours only if its create_time and cmdline both match the record;
  otherwise the number was reused, and the new owner of that pgid is left alone;
- the leader is gone but processes remain in the group: a pgid cannot be handed out again
  while any process still carries it, so those are our server's children (each is also
  checked to be younger than the record).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from supervisor.servers.process_group import group_members, stop_group

log = logging.getLogger(__name__)

# create_time is derived from boot time and start ticks; allow for rounding, nothing more.
_CREATE_TIME_SLACK_S = 1.0


@dataclass(frozen=True)
class OrphanVerdict:
    name: str
    pgid: int
    pids: tuple[int, ...]  # what we would stop; empty when nothing of ours is left
    why: str


def judge(name: str, pid: int, pgid: int, argv: Sequence[str], started_at: float) -> OrphanVerdict:
    """Blocking (reads /proc)."""
    members = group_members(pgid)
    if not members:
        return OrphanVerdict(name, pgid, (), "no process left")
    try:
        leader = psutil.Process(pgid)
        leader_alive = leader.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        leader_alive = False
    if leader_alive:
        try:
            same_time = abs(leader.create_time() - started_at) <= _CREATE_TIME_SLACK_S
            same_cmd = leader.cmdline() == list(argv)
        except psutil.Error:
            return OrphanVerdict(name, pgid, (), "leader vanished while checking")
        if not (same_time and same_cmd):
            return OrphanVerdict(name, pgid, (), f"pid {pgid} was reused by another program")
        return OrphanVerdict(name, pgid, tuple(members), f"server still running (pid {pid})")
    ours = []
    for m in members:
        try:
            if psutil.Process(m).create_time() >= started_at - _CREATE_TIME_SLACK_S:
                ours.append(m)
        except psutil.Error:
            continue
    if not ours:
        return OrphanVerdict(name, pgid, (), "only older processes in the group")
    return OrphanVerdict(name, pgid, tuple(ours), "server's children outlived it")


def stop_orphan(record: Any, grace_s: float) -> tuple[OrphanVerdict, str]:
    """Judge one recorded server and stop its group when it is ours. Blocking."""
    verdict = judge(record.name, record.pid, record.pgid, record.argv, record.started_at)
    if not verdict.pids:
        return verdict, "left alone"
    log.warning("%s: stopping a server left by a previous daemon (pgid %d, pids %s): %s",
                record.name, verdict.pgid, list(verdict.pids), verdict.why)
    return verdict, stop_group(verdict.pgid, grace_s, name=record.name)
