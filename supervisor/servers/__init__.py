"""SGLang server processes: launch, health, state machine, restart policy, fleet.

Nothing is imported here on purpose: `dflash-supervisor serve-server` (each server unit's
ExecStart and ExecStopPost under systemd) imports `servers.unit_spec` alone, and pulling in
the fleet with it cost every server start and stop about 1.5 s. Import the submodules."""
