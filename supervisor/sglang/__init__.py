"""SGLang 0.5.23's HTTP API as the daemon speaks it: one folder to read when SGLang changes."""
