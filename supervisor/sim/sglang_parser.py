"""SGLang 0.5.23's own command-line parser, rebuilt from its flag table (`sglang_flags.py`).

`python -m sglang.launch_server` parses its flags with `argparse.ArgumentParser(prog="sglang
serve")` and argparse's defaults (`sglang/srt/server_args.py` prepare_server_args), so:
- an unknown flag exits 2 with "sglang serve: error: unrecognized arguments: ...";
- allow_abbrev is on: a unique prefix is accepted (`--max-running` is
  `--max-running-requests`), a shared one exits 2 with "ambiguous option: --cuda-graph-max-bs
  could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill";
- `--model-path` (alias `--model`) is required.
The simulator parses with the same table, so a config that real SGLang would refuse is refused
here the same way, with the same message, and one it accepts is accepted.
"""

from __future__ import annotations

import argparse
import re
from decimal import Decimal

from .sglang_flags import FLAGS, REASONING_PARSERS

PROG = "sglang serve"


def human_readable_int(value: str) -> int:
    """SGLang's int parser for sizes such as --context-length (`sglang/srt/utils/common.py`
    human_readable_int): 32768, "32k" (SI, decimals allowed) or "32Ki" (IEC, integers)."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'.")
            return int(number) * iec[suffix]
        return int(Decimal(number) * {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer value: {value!r}") from None


# Flags whose value the simulator reads need SGLang's value parsing, not just its arity.
_TYPES = {"int": int, "float": float}
_SPECIAL_TYPES = {"--context-length": human_readable_int}


def sglang_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG)
    for names, arity, kind, required in FLAGS:
        kwargs: dict[str, object] = {}
        if arity == 0:
            kwargs["action"] = "store_true"
        else:
            if arity != 1:
                kwargs["nargs"] = arity
            value_type = _SPECIAL_TYPES.get(names[0]) or _TYPES.get(kind or "")
            if value_type is not None:
                kwargs["type"] = value_type
            if required:
                kwargs["required"] = True
        if names[0] == "--reasoning-parser":
            kwargs["choices"] = ["auto", *REASONING_PARSERS]
        parser.add_argument(*names, **kwargs)   # type: ignore[arg-type]
    return parser
