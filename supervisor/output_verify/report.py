"""What `verify` found, and how it is printed."""

from __future__ import annotations

from dataclasses import dataclass, field

from state.verify_ledger import Sample


@dataclass(frozen=True)
class ShardProblem:
    key: str
    problem: str


@dataclass(frozen=True)
class BadLine:
    key: str
    line: int
    reason: str


@dataclass
class VerifyReport:
    destination: str
    prompts_file: str
    partitions: int                       # N; 1 for a single-node job
    expected: int = 0                     # distinct usable prompts in the file
    present_once: int = 0
    missing: dict[int, Sample] = field(default_factory=dict)
    duplicated: Sample = Sample(0, ())
    unexpected: Sample = Sample(0, ())
    misplaced: Sample = Sample(0, ())
    bad_lines: int = 0
    bad_line_samples: list[BadLine] = field(default_factory=list)
    bad_shards: list[ShardProblem] = field(default_factory=list)
    # Job-level problems: another prompt file, mixed partition counts, no recorded checksums.
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    shards: int = 0
    digests_unchecked: int = 0            # shards with no record to compare their bytes with
    lines: int = 0
    bytes: int = 0

    @property
    def missing_total(self) -> int:
        return sum(s.count for s in self.missing.values())

    @property
    def clean(self) -> bool:
        return (self.expected > 0 and self.present_once == self.expected
                and not self.missing and not self.duplicated.count
                and not self.unexpected.count and not self.misplaced.count
                and not self.bad_lines and not self.bad_shards and not self.problems)

    def lines_out(self) -> list[str]:
        def eg(sample: Sample) -> str:
            return f" (e.g. {', '.join(sample.first)})" if sample.first else ""

        parts = f"{self.partitions} partitions" if self.partitions > 1 else "one partition"
        out = [f"verify {self.destination} against {self.prompts_file} ({parts})",
               f"  shards read:       {self.shards} ({self.lines} lines, "
               f"{self.bytes / 1e6:.1f} MB)",
               f"  prompts:           {self.expected} in the file, {self.present_once} present "
               "exactly once"]
        out.append(f"  missing:           {self.missing_total}")
        for part, sample in sorted(self.missing.items()):
            out.append(f"    partition {part}: {sample.count}{eg(sample)}")
        out.append(f"  duplicated:        {self.duplicated.count}{eg(self.duplicated)}")
        out.append(f"  not in the prompt file: {self.unexpected.count}{eg(self.unexpected)}")
        out.append(f"  in the wrong partition: {self.misplaced.count}{eg(self.misplaced)}")
        out.append(f"  unparseable lines: {self.bad_lines}")
        out += [f"    {b.key}:{b.line}: {b.reason}" for b in self.bad_line_samples]
        unchecked = (f" ({self.digests_unchecked} with no recorded checksum: not compared)"
                     if self.digests_unchecked else "")
        out.append(f"  shards not matching their recorded checksum: {len(self.bad_shards)}"
                   f"{unchecked}")
        out += [f"    {s.key}: {s.problem}" for s in self.bad_shards[:20]]
        if len(self.bad_shards) > 20:
            out.append(f"    ... and {len(self.bad_shards) - 20} more")
        out += [f"  problem: {p}" for p in self.problems]
        out += [f"  note: {n}" for n in self.notes]
        out.append("verify: complete and clean" if self.clean else "verify: NOT complete and clean")
        return out
