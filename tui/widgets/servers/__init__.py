"""The servers region: one row per SGLang server with its GPUs' telemetry."""
