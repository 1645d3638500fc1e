"""The job's TOML configuration: parsing, defaults and validation.

Every key is known; an unknown key or a bad value is refused with the key's dotted path and
what is allowed, because a typo in a day-long job's config must fail at start, not at 3 a.m.

The sections and their defaults are in sections.py, one table to one section in coerce.py,
the checks across keys in checks.py, reading TOML in load.py; this package's names are
those modules' public ones.
"""

from supervisor.config.checks import NCCL_PORTS, check_gpus_exist, load_warnings
from supervisor.config.load import load_config, parse_config, with_flags
from supervisor.config.sections import (
                                        BackupSection,
                                        ConfigError,
                                        ControlSection,
                                        DispatchSection,
                                        GenerationSection,
                                        JobConfig,
                                        JobSection,
                                        Partition,
                                        QualitySection,
                                        ServersSection,
                                        TuneSection,
                                        UploadsSection,
)

__all__ = ["NCCL_PORTS", "BackupSection", "ConfigError", "ControlSection", "DispatchSection",
           "GenerationSection", "JobConfig", "JobSection", "Partition", "QualitySection",
           "ServersSection", "TuneSection", "UploadsSection", "check_gpus_exist", "load_config",
           "load_warnings", "parse_config", "with_flags"]
