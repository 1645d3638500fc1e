"""Regenerate `sglang_flags.py` from an SGLang source tree, without importing SGLang (it needs
torch and a GPU stack): `python -m supervisor.sim.gen_sglang_flags /path/to/sglang >
supervisor/sim/sglang_flags.py`.

It reads the declarations SGLang builds its parser from (`sglang/srt/server_args.py`
ServerArgs.add_cli_args → `sglang/srt/arg_groups/arg_utils.py` add_cli_args_from_dataclass over
the `A[T, Arg(...)]` fields of `sglang/srt/arg_groups/fields/*.py`, plus the handful of
`parser.add_argument` calls in server_args.py) and writes every option string with its arity,
so the simulator's parser accepts, abbreviates and refuses exactly what SGLang's does.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

_BOOL = ("bool", "Optional[bool]")


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _const(node: ast.expr | None) -> Any:
    return node.value if isinstance(node, ast.Constant) else None


def _arity(typ: str, meta: ast.Call | None) -> tuple[int | str, str | None]:
    """(number of values or an argparse nargs, "int"/"float"/None) for one field."""
    nargs = _const(_kw(meta, "nargs")) if meta is not None else None
    action = _kw(meta, "action") if meta is not None else None
    if action is not None:
        kwargs = _kw(meta, "action_kwargs")
        if isinstance(kwargs, ast.Dict):
            for k, v in zip(kwargs.keys, kwargs.values):
                if _const(k) == "nargs":
                    return _const(v), None
        return 0, None                  # store_true-like custom actions
    inner = typ[len("Optional["):-1] if typ.startswith("Optional[") else typ
    if typ in _BOOL:
        return 0, None
    if nargs is not None:
        return nargs, None
    has_parser = meta is not None and _kw(meta, "type_parser") is not None
    if (inner.startswith("List[") or inner.startswith("list[")) and not has_parser:
        return "+", None
    kind = inner if inner in ("int", "float") and not has_parser else None
    return 1, kind


def field_flags(fields_dir: Path) -> list[tuple[tuple[str, ...], int | str, str | None, bool]]:
    out = []
    for path in sorted(fields_dir.glob("*.py")):
        for cls in (n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)):
            for st in cls.body:
                if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                    continue
                ann = st.annotation
                if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name)
                        and ann.value.id == "A"):
                    continue
                elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
                meta = elts[1] if len(elts) > 1 and isinstance(elts[1], ast.Call) else None
                if meta is not None and _const(_kw(meta, "no_cli")):
                    continue
                name = "--" + st.target.id.replace("_", "-")
                aliases: list[str] = []
                if meta is not None:
                    name = _const(_kw(meta, "cli_name")) or name
                    al = _kw(meta, "aliases")
                    if isinstance(al, (ast.List, ast.Tuple)):
                        aliases = [_const(e) for e in al.elts]
                typ = ast.unparse(elts[0])
                arity, kind = _arity(typ, meta)
                action = _kw(meta, "action") if meta is not None else None
                names = [name, *aliases]
                if action is not None and "BooleanOptionalAction" in ast.unparse(action):
                    names += ["--no-" + n[2:] for n in names]
                required_kw = _const(_kw(meta, "required")) if meta is not None else None
                required = (arity == 1 and st.value is None and required_kw is not False) \
                    or required_kw is True
                out.append((tuple(names), arity, kind, required))
    return out


def manual_flags(server_args: Path) -> list[tuple[tuple[str, ...], int | str, str | None, bool]]:
    out = []
    fn = next(n for n in ast.walk(ast.parse(server_args.read_text()))
              if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = tuple(a.value for a in node.args if isinstance(_const(a), str))
        action = _kw(node, "action")
        nargs = _kw(node, "nargs")
        if action is not None and "nargs" not in {k.arg for k in node.keywords}:
            arity: int | str = 0
        else:
            arity = _const(nargs) if nargs is not None and _const(nargs) is not None else 1
        out.append((names, arity, None, False))
    return out


def reasoning_parsers(root: Path) -> list[str]:
    tree = ast.parse((root / "srt/parser/reasoning_parser_names.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "REASONING_PARSER_NAMES":
            return [_const(e) for e in node.value.elts]
    raise SystemExit("REASONING_PARSER_NAMES not found")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[0])
    if (root / "sglang").is_dir():
        root = root / "sglang"
    version: dict[str, Any] = {}
    exec((root / "_version.py").read_text(), version)    # a wheel's generated version file
    flags = field_flags(root / "srt/arg_groups/fields") + manual_flags(root / "srt/server_args.py")
    print(f'"""SGLang {version["__version__"]}\'s launch flags, generated by gen_sglang_flags.py '
          'from its source; do not edit.\n\nEach entry: (option strings, arity, value type, '
          'required). Arity is 0 for a switch,\n1 for one value, or an argparse nargs.\n"""\n')
    print("from __future__ import annotations\n")
    print(f'SGLANG_VERSION = "{version["__version__"]}"\n')
    print("FLAGS: tuple[tuple[tuple[str, ...], int | str, str | None, bool], ...] = (")
    for names, arity, kind, required in sorted(flags):
        print(f"    ({names!r}, {arity!r}, {kind!r}, {required!r}),")
    print(")\n")
    print("REASONING_PARSERS: tuple[str, ...] = (")
    for name in reasoning_parsers(root):
        print(f"    {name!r},")
    print(")")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
