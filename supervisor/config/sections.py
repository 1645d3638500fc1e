"""The job config's sections: every key, its type, its default and what it means, and the
error a bad one raises. Parsing and checking are beside this (coerce.py, checks.py, load.py).

The rule for a key: declare it with `key(default, "what it means")`, the text written for
an operator (what the value does, its unit, what 0 or false turns off). That text is the
key's only documentation: `python -m supervisor.config.reference` writes it into
docs/configuration.md, and tests/test_config_reference.py fails on a key without text, on a
docs/configuration.md the generator would write differently, and on a README, docs/ page or
systemd/example-config.toml that names a `section.key` not declared here. So adding a key is
three steps: declare it here with its text, run the generator, commit both. A section's
docstring is the paragraph under its heading in the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A config value that cannot be used; the message names the key."""


def key(default: Any, doc: str, *, shown: str = "") -> Any:
    """A config key's field: its default and its text for the reference (`shown`: how the
    default reads there when its value alone would mislead, e.g. "" for a derived path)."""
    meta = {"doc": doc, "shown": shown}
    if isinstance(default, (dict, list, set)):
        return field(default_factory=lambda: copy(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Partition:
    index: int
    count: int

    @classmethod
    def parse(cls, text: str, key: str = "job.partition") -> Partition:
        try:
            left, right = text.split("/")
            index, count = int(left), int(right)
        except ValueError:
            raise ConfigError(f"{key}: expected I/N (e.g. 0/8), got {text!r}") from None
        if count < 1 or not 0 <= index < count:
            raise ConfigError(f"{key}: need 0 <= I < N, got {text!r}")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class JobSection:
    """What the job reads, where it writes, and which part of a shared prompt file is this
    node's."""
    prompts: str = key("prompts.jsonl", "the JSONL prompts file: OpenAI `messages`, ShareGPT "
                       "`conversations` (turns as `from`/`value` or `role`/`content`), a bare "
                       "`prompt`, or MT-bench's `turns`; `id` optional (docs/prompts.md)")
    state: str = key("job.db", "the SQLite state DB, the job's audit record (state/README.md)")
    output: str = key("output", "a local directory, or `s3://bucket/prefix/`; checked at start, "
                      "before the import, for a file there or a directory the daemon cannot "
                      "write")
    shard_size: int = key(500, "completions per JSONL shard")
    model: str = key("default", "the model name sent to SGLang and written in every line; no `:` "
                     "(SGLang reads `model:adapter` as a LoRA adapter)")
    # "auto" in the file is resolved at load from the scheduler's environment.
    partition: Partition | None = key(None, "`\"I/N\"`: this node's share of a prompt file shared "
                                      "by N nodes (prompts whose stable id hash is I mod N); "
                                      "`\"auto\"`: I and N from a Slurm array or a Kubernetes "
                                      "Indexed Job (docs/many-nodes.md)")
    partition_count: int = key(0, "N for a Kubernetes Indexed Job (0: the "
                               "`DFLASH_PARTITION_COUNT` variable)")
    keep_token_ids: str = key("truncated", "exact token ids kept in the state DB, 4 bytes a "
                              "token: `\"truncated\"` those of every answer that ends at its "
                              "max tokens (what continuing it needs), `\"all\"` every answer's "
                              "(docs/continuing-truncated-answers.md)")
    shard_output_ids: bool = key(False, "shard lines carry the sampled `output_ids`, so a trainer "
                                 "reads the model's own tokens instead of re-tokenizing the "
                                 "text (needs `keep_token_ids = \"all\"`)")


@dataclass(frozen=True)
class GenerationSection:
    """Sampling, and the max tokens the job starts with."""
    max_tokens: int = key(4096, "the starting max tokens; changed live by the operator (kept in "
                          "the DB across restarts); must stay below "
                          "`servers.flags.context-length`")
    temperature: float = key(0.6, "sampling temperature")
    top_p: float = key(0.95, "sampling top-p")
    enable_thinking: bool = key(True, "sends `chat_template_kwargs.enable_thinking` (`false` too "
                                "when off: Qwen3's template thinks when nothing is said) and, "
                                "when on, `separate_reasoning`; on needs "
                                "`servers.flags.reasoning-parser`, or SGLang puts the thinking, "
                                "`<think>` tags and all, in `content`")


@dataclass(frozen=True)
class ServersSection:
    """The SGLang servers: which GPUs, how each is launched, and how it is supervised
    (supervisor/servers/README.md has the states and the timings' use)."""
    gpus: tuple[int, ...] = key((), "the GPU list, or use `count`; ids >= 0, each once. Where the "
                                "daemon starts with `CUDA_VISIBLE_DEVICES` set (Slurm's "
                                "`--gres=gpu:N`, a Kubernetes device plugin) these index into "
                                "that list: GPU 0 is its first entry, a server's "
                                "`CUDA_VISIBLE_DEVICES` is its entries (ordinals or UUIDs as "
                                "the scheduler wrote them), an index past the list stops the "
                                "start, and GPU telemetry shows the listed GPUs under the same "
                                "indices", shown="none")
    count: int = key(0, "N for GPUs 0..N-1 (instead of `gpus`); 0 with `attach` alone runs no "
                     "server of the daemon's own")
    tp_size: int = key(1, "GPUs per server (a tensor-parallel group)")
    host: str = key("127.0.0.1", "an IP address (v4 or v6) or host name the servers bind and the "
                    "daemon connects to; no scheme, no port")
    base_port: int = key(30000, "server i listens on `base_port + i`; keep them out of "
                         "22000-29999, where SGLang picks its NCCL ports (warned at load)")
    command: tuple[str, ...] = key(("python", "-m", "sglang.launch_server"),
                                   "the launch command before the flags (the demo uses the "
                                   "simulator); absolute under systemd, whose PATH has no venv")
    model_path: str = key("", "`--model-path`; required unless the job only attaches servers",
                          shown="none")
    flags: Mapping[str, Any] = key({}, "the table `[servers.flags]`: SGLang flags passed through "
                                   "in order, `name = value` gives `--name value`, `true` gives "
                                   "`--name`. Without `stream-interval` the daemon adds "
                                   "`--stream-interval 16` (SGLang's default, 1, streams a chunk "
                                   "per token: benchmarks/README.md); without `enable-metrics` it "
                                   "adds `--enable-metrics` (`enable-metrics = false` switches "
                                   "SGLang's `/metrics` off: over-commit, saturation and waiting "
                                   "detection are then blind, as a load warning and each "
                                   "server's status say). At `run` they are put to the installed "
                                   "SGLang's own parser (docs/checks.md)", shown="none")
    log_dir: str = key("logs", "one rotating log per server: the server writes it itself (never "
                       "a pipe to the daemon), the daemon follows it")
    startup_timeout_s: float = key(1200.0, "model load and CUDA graph capture: the longest a "
                                   "server may take from launch to `/health_generate` 200")
    health_interval_s: float = key(5.0, "seconds between health probes (and reads of SGLang's "
                                   "`/metrics`) of a READY server")
    # Above SGLang's own 20 s: /health_generate waits that long for the scheduler to make
    # progress before its 503 (`sglang/srt/entrypoints/http_server.py:218`).
    health_timeout_s: float = key(30.0, "one `/health_generate` probe's limit: above SGLang's own "
                                  "20 s (it waits that long for its scheduler before its 503), "
                                  "so a loaded server is not failed by our probe while SGLang "
                                  "would still answer; 21 s or less is warned at load (not for "
                                  "the simulator)")
    health_failures: int = key(3, "failed or timed-out health probes in a row that end a life "
                               "(a `hang`)")
    hang_timeout_s: float = key(600.0, "hung: requests in flight and no token from the server "
                                "this long (none of its streams, nor SGLang's decode-token "
                                "counter); completions never decide it, a thinking answer "
                                "takes minutes. Without a token signal (`dispatch.stream` off "
                                "and no `enable-metrics`): no completion for the longest answer "
                                "at the measured speed, never less than this")
    stop_grace_s: float = key(30.0, "after SIGTERM to a server's process group, how long it may "
                              "take to exit before SIGKILL")
    drain_timeout_s: float = key(300.0, "a restart or retune lets a server's requests in flight "
                                 "finish this long; the rest is requeued")
    backoff_initial_s: float = key(5.0, "the first restart's wait; doubling per failure (+-20% "
                                   "jitter)")
    backoff_max_s: float = key(300.0, "the longest wait between restarts")
    max_failures: int = key(5, "more failures than this within `failure_window_s`: FAILED until "
                            "an operator resets it")
    failure_window_s: float = key(1800.0, "the window `max_failures` counts in")
    max_unserved_failures: int = key(5, "... or this many lives in a row failed before "
                                     "completing an answer: FAILED (0: never); a hang seen "
                                     "only after `hang_timeout_s` never fills the window above")
    max_brief_failures: int = key(10, "... or this many lives in a row each failed within "
                                  "`served_after_s` of serving, whatever they answered: "
                                  "FAILED (0: never); a server that answers a little and then "
                                  "hangs at every start")
    served_after_s: float = key(300.0, "a life served long when its token progress lasted this "
                                "long (it starts the brief-lives count again)")
    launcher: str = key("auto", "who runs the server processes: `process` (the daemon's own "
                        "children, each in a session of its own), `systemd` (a "
                        "`dflash-sglang@` unit per server, so a daemon restart leaves them "
                        "loaded), `auto` (systemd when the daemon is a systemd service and "
                        "the template is installed, else process); docs/what-survives-what.md")
    attach: tuple[str, ...] = key((), "SGLang servers the daemon did not launch (separate Slurm "
                                  "jobs, pods), `[\"http://node7:30000\", ...]`, each "
                                  "`http(s)://host:port` with nothing after the port: supervised "
                                  "and fed like its own, never launched, restarted, retuned or "
                                  "stopped; named `ext0`, `ext1`, ... in the order given "
                                  "(docs/what-survives-what.md, \"Attached servers\")")

    @property
    def own_servers(self) -> bool:
        """Whether the daemon launches servers of its own (an attach-only job has none)."""
        return bool(self.gpu_list)

    @property
    def gpu_list(self) -> tuple[int, ...]:
        return self.gpus if self.gpus else tuple(range(self.count))

    def max_running_requests(self) -> int | None:
        value = self.flags.get("max-running-requests")
        return int(value) if value is not None else None

    @property
    def context_length(self) -> int | None:
        """The servers' --context-length flag as a number, where set: every check against it
        (config, reload, live max tokens) and the status read this one. TOML may give it as
        "32768" (SGLang's argparse takes either)."""
        value = self.flags.get("context-length")
        if value is None:
            return None
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"servers.flags.context-length: must be an integer >= 1, "
                              f"got {value!r}")
        return value


@dataclass(frozen=True)
class DispatchSection:
    """Keeping every READY server's slots busy: limits, retries, the circuit breaker, the
    stream watch and the saturation guard (docs/design.md)."""
    max_in_flight_per_server: int = key(
        0, "0: follow the server: its `max-running-requests` flag (lowered to what SGLang "
        "reports if it runs fewer), else the limit SGLang reports on `/server_info` once READY "
        "(32, with a log line, if it does not say), summed over its data- and "
        "attention-parallel ranks and bounded by what its KV pool holds at the live max tokens "
        "(pool / (0.7 x max tokens): without the flag SGLang's own figure is an estimate of at "
        "least 2048; the READY event says `slots_from = \"kv pool\"`)")
    queue_ahead: int = key(
        0, "requests kept waiting in SGLang's queue on top of what it runs, so a slot that "
        "frees is refilled by SGLang at its next step, not after our next request's round trip "
        "and admission (0: in flight = what it runs); the saturation guard and the wait rule "
        "expect this queue (benchmarks/README.md: 4 filled every slot on the simulator). Off "
        "by default until a killed scheduler's queued requests are shown to come back without "
        "counting an attempt (one did, once, on real SGLang; a later run of the same test "
        "counted none). Not added where "
        "`max_in_flight_per_server` fixes the count; from each server's next READY life")
    request_timeout_s: float = key(3600.0, "one request's limit; a timeout is a retry")
    max_attempts: int = key(3, "attempts before a prompt is marked failed")
    claim_batch: int = key(64, "most prompts claimed per store round trip (and buffered per "
                           "server)")
    stop_grace_s: float = key(120.0, "on SIGTERM, how long requests in flight may finish before "
                              "the rest is requeued (0: at once); minutes of GPU work per stop "
                              "are worth the wait")
    breaker_error_rate: float = key(0.5, "the circuit breaker: pause dispatch when more than this "
                                    "share of the recent requests failed (1: never)")
    breaker_window: int = key(200, "the requests the breaker looks at")
    breaker_min_samples: int = key(50, "how many requests the breaker waits for before it judges")
    stream: bool = key(True, "stream each answer under its own request id (`rid`), watched while "
                       "it decodes: stalls, and loops as soon as one is confirmed, are "
                       "aborted on the server by `/abort_request`; false: one plain POST per answer (a server or proxy "
                       "that does not stream)")
    stall_s: float = key(120.0, "a streamed request with no new token this long, while its "
                         "server made no token for anyone, is aborted and retried (an attempt "
                         "counted; event `request_stalled`, folded per server into one row per "
                         "30 s: state/README.md)")
    wait_s: float = key(1800.0, "a streamed request silent while its server streams for others "
                        "is waiting (SGLang queued it by KV budget, retracted it, or it is "
                        "behind a long prefill): shown as waiting, aborted only after this long "
                        "without a token, never counted toward a hang (docs/design.md)")
    stall_hang_count: int = key(3, "this many stalls on one server within `stall_hang_window_s` "
                                "restart it as hung (0: never)")
    stall_hang_window_s: float = key(300.0, "the window `stall_hang_count` counts in")
    saturation_guard: bool = key(True, "lower a server's in-flight limit live while SGLang queues "
                                 "or retracts what we send or its throughput collapses, and "
                                 "raise it back carefully; needs `enable-metrics` "
                                 "(supervisor/servers/README.md)")
    saturation_floor: int = key(4, "the lowest limit the guard sets")
    saturation_calm_s: float = key(60.0, "the sign-free time before each step back up")
    saturation_collapse_ratio: float = key(0.5, "generation throughput per request in flight "
                                           "under this share of its recent peak at the same "
                                           "limit, as busy as then, is a collapse (0: only "
                                           "queueing and retractions count)")


@dataclass(frozen=True)
class QualitySection:
    """The quality gate: rolling rates over the last completions, and when to pause."""
    window: int = key(200, "the completions in the gate's rolling window")
    min_samples: int = key(50, "completions the gate waits for before it judges")
    max_bad_rate: float = key(0.5, "pause dispatch when more than this share of the window is bad "
                              "(empty, no reasoning with thinking on, leftover `<think>`)")
    max_truncation_rate: float = key(1.0, "pause on truncation too, when set below 1 (truncation "
                                     "alone is otherwise only reported)")
    max_loop_rate: float = key(1.0, "pause when more than this share of the window ran into max "
                               "tokens looping (degenerate repetition a higher limit does not "
                               "fix); 1: never")
    max_thinking_truncated_rate: float = key(0.5, "pause when more than this share of the window "
                                             "was cut off inside the thinking (content empty, "
                                             "all text in reasoning): the \"87% empty answers\" "
                                             "incident; 1: never")
    metrics_window_s: float = key(60.0, "the window for req/s, tok/s and the ETA")


@dataclass(frozen=True)
class UploadsSection:
    """Shards to S3 or a local directory, verified (supervisor/uploads/README.md: keys,
    checksums, retries); credentials always come from boto3's usual chain."""
    endpoint_url: str | None = key(None, "an S3-compatible endpoint (MinIO, Ceph, R2); none: AWS")
    region: str | None = key(None, "a region over the credential chain's")
    concurrency: int = key(4, "shard uploads at a time, in worker threads")
    keep_local: bool = key(False, "keep the spool copy of a shard after its verified upload")
    multipart_threshold_bytes: int = key(64 * 1024 * 1024, "larger shards go multipart (at least "
                                         "5 MiB)", shown="64 MiB")
    multipart_part_bytes: int = key(16 * 1024 * 1024, "the multipart part size (at least 5 MiB)",
                                    shown="16 MiB")
    sha256_checksum: bool = key(True, "send S3's `x-amz-checksum-sha256` besides `Content-MD5` "
                                "(off for stores that reject it)")
    timeout_s: float = key(60.0, "one S3 request's connect/read limit; botocore retries a "
                           "request a few times within it")
    retry_initial_s: float = key(1.0, "the backoff after a failed upload, doubling with jitter...")
    retry_max_s: float = key(120.0, "... up to this")
    drain_timeout_s: float = key(600.0, "at the end of a finished job, how long to wait for the "
                                 "upload backlog")
    min_free_bytes: int = key(1024 * 1024 * 1024, "the disk guard: dispatch pauses while the "
                              "shard directory's disk has less free (0: off)", shown="1 GiB")
    spool_dir: str = key("spool", "where shards wait for an S3 upload")


@dataclass(frozen=True)
class BackupSection:
    """The state DB copied beside the shards, so a replacement node resumes exactly
    (docs/many-nodes.md)."""
    enabled: bool | None = key(None, "copy the state DB beside the shards, under the partition's "
                               "key; unset: on for `job.partition` jobs",
                               shown="with a partition")
    interval_s: float = key(900.0, "seconds between backups while running (also one at start and "
                            "one at stop; 0: only those)")
    restore: bool = key(True, "with no state DB at start, restore this partition's latest backup "
                        "from the output")


@dataclass(frozen=True)
class ControlSection:
    """The control socket (docs/control.md)."""
    socket: str = key("", "the control socket's path (relative: to the config's directory)",
                      shown="`$RUNTIME_DIRECTORY/control.sock` under systemd, else beside the "
                      "state DB")
    group: str = key("", "the socket's group (name or gid): its members may watch and act, like "
                     "`docker.sock`'s", shown="the daemon's group")
    interval_s: float = key(1.0, "how often the daemon builds a fresh status snapshot: the event "
                            "stream carries each one, and a polled `GET /v1/status` gets the "
                            "latest, at most this (+0.2 s) old, without waiting for the state DB "
                            "(after an action, the next poll gets a fresh one)")
    metrics_listen: str = key("", "`host:port` of a read-only TCP listener serving only `GET "
                              "/metrics` (the socket's text) for a cluster's Prometheus, e.g. "
                              "`\"0.0.0.0:9464\"`; a taken port stops the start "
                              "(docs/monitoring.md)",
                              shown="`$DFLASH_METRICS_LISTEN` (the Slurm batch file sets it), "
                              "else off")
    metrics_job: str = key("", "the `job` label on every metric series, the same on every node "
                           "of the job so that a fleet sums without relabelling",
                           shown="the last part of `job.output` (`run-01` for "
                           "`s3://bucket/datasets/run-01/`)")


@dataclass(frozen=True)
class TuneSection:
    """The tuner: a canary search for the flags that give the most tokens per GPU-second,
    while the job runs (docs/tuning.md)."""
    enabled: bool = key(False, "start the search when the job starts (else `ctl tune start`); "
                         "a reload that turns it on starts it, off stops it")
    max_trials: int = key(8, "candidates tried at most, one restart of the canary each")
    min_window_s: float = key(120.0, "a trial's (and the baseline's) shortest measured window")
    max_window_s: float = key(900.0, "a window ends here even when the gain stays within the "
                              "noise (the candidate is then rejected)")
    min_answers: int = key(30, "canary answers a window needs at least")
    warmup_s: float = key(60.0, "seconds after READY not measured (the batch fills from empty)")
    warmup_answers: int = key(5, "and the canary's first answers after READY, not measured "
                              "(at least its slots: one whole batch turns over)")
    noise_k: float = key(3.0, "a gain is kept only when above this many times the noise "
                         "(the spread of the control/control ratio)")
    sample_s: float = key(5.0, "seconds between samples of each server's output tokens")
    long_batch: bool = key(True, "before a candidate is kept, a full batch of the job's longest "
                           "prompts at the live max tokens must go through the canary (the OOM "
                           "that comes only with the first such batch); its answers are dropped")
    space: Mapping[str, Any] = key({}, "the table `[tune.space]`: flag -> list of values to "
                                   "try in order, e.g. `max-running-requests = [32, 64]`",
                                   shown="around what SGLang chose: running requests up, "
                                   "the Mamba cache when it caps, memory fraction +0.02 steps")


@dataclass(frozen=True)
class JobConfig:
    job: JobSection = JobSection()
    generation: GenerationSection = GenerationSection()
    servers: ServersSection = ServersSection()
    dispatch: DispatchSection = DispatchSection()
    quality: QualitySection = QualitySection()
    uploads: UploadsSection = UploadsSection()
    backup: BackupSection = BackupSection()
    control: ControlSection = ControlSection()
    tune: TuneSection = TuneSection()
    # Relative paths in the file are relative to the file's directory.
    base_dir: Path = Path(".")

    def path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base_dir / p

    @property
    def output_is_s3(self) -> bool:
        return self.job.output.startswith("s3://")

    @property
    def backups_enabled(self) -> bool:
        enabled = self.backup.enabled
        return self.job.partition is not None if enabled is None else enabled


SECTIONS: dict[str, type] = {
    "job": JobSection,
    "generation": GenerationSection,
    "servers": ServersSection,
    "dispatch": DispatchSection,
    "quality": QualitySection,
    "uploads": UploadsSection,
    "backup": BackupSection,
    "control": ControlSection,
    "tune": TuneSection,
}
