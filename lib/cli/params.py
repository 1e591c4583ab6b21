"""A workload's parameters as the command line sees them: read, parsed and validated.

The one list of a workload's parameters is the parameters cell of `notebooks_src/<workload>.py`;
its values are checked by the same `from_params` the notebook's config cell calls, before any
kernel starts. `train-anywhere run`, `params` and `sweep` all come through here.
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib import workloads as contract

ROOT = Path(__file__).resolve().parents[2]  # the repository: lib/cli/params.py
SOURCES = ROOT / "notebooks_src"


class UsageError(ValueError):
    """A mistake on the command line: printed as one line, exit status 2."""


def closest(value: str, known) -> str:
    """" (did you mean X?)" for the known name nearest to `value`, else ""."""
    near = difflib.get_close_matches(value, list(known), n=1, cutoff=0.5)
    return f" (did you mean {near[0]}?)" if near else ""


def workloads() -> list[str]:
    """Every workload with both halves: its module (lib/workloads) and its notebook source."""
    sources = {p.stem for p in SOURCES.glob("*.py")}
    return [w for w in contract.names() if w in sources]


def platforms() -> dict[str, Any]:
    from lib.runtime.platforms import PLATFORMS

    return dict(PLATFORMS)


def _known(kind: str, name: str, known) -> str:
    """`name` if it is one of `known`, else one line naming the closest and the choices."""
    if name not in known:
        raise UsageError(f"unknown {kind} {name!r}{closest(name, known)}; expected one of "
                         f"{', '.join(known)}. See `train-anywhere list`.")
    return name


def check_workload(name: str) -> str:
    return _known("workload", name, workloads())


def check_platform(name: str) -> str:
    from lib.runtime.platforms import RENAMED

    if name in RENAMED:
        raise UsageError(f"platform {name!r} is now {RENAMED[name]!r} (this machine: CUDA, MPS "
                         f"or the CPU); use --platform {RENAMED[name]}, or leave it out.")
    return _known("platform", name, platforms())


@dataclass(frozen=True)
class Param:
    """One line of a parameters cell: `NAME = default  # comment`."""

    name: str
    default: Any
    comment: str


def parameters(workload: str) -> list[Param]:
    """The parameters cell of notebooks_src/<workload>.py, in order (the one list there is)."""
    import jupytext

    nb = jupytext.read(SOURCES / f"{check_workload(workload)}.py", fmt="py:percent")
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(cell.source).readline)
                if tok.type == tokenize.COMMENT}
    out = []
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            out.append(Param(node.targets[0].id, ast.literal_eval(node.value),
                             comments.get(node.lineno, "")))
    return out


def parse_value(text: str) -> Any:
    """A `-p` value: a Python literal (3, 0.1, True, None, [0, 1], 'x'), else the string."""
    lowered = {"true": True, "false": False, "none": None, "null": None}
    if text.lower() in lowered:
        return lowered[text.lower()]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def collect_overrides(pairs: list[list[str]] | None) -> dict[str, Any]:
    """`-p NAME VALUE` pairs -> {NAME: value}; names must be written as in the cell."""
    out = {}
    for name, value in pairs or []:
        if name != name.upper():
            raise UsageError(f"parameter name {name!r} is not UPPER_CASE; write it as in the "
                             f"parameters cell, e.g. -p {name.upper()} {value}.")
        out[name] = parse_value(value)
    return out


def config_class(workload: str):
    """The workload's RunConfig subclass (its contract's `config`)."""
    return contract.get(workload).config


def resolve_params(workload: str, platform: str, overrides: dict[str, Any]):
    """Validate `overrides` as the notebook's config cell would; return (params, config).

    Unknown names fail here with the closest known one; values fail with the config's own
    one-line message. Nothing is started.
    """
    defaults = {p.name: p.default for p in parameters(workload)}
    for name in overrides:
        if name not in defaults:
            raise UsageError(f"unknown parameter {name}{closest(name, defaults)} for "
                             f"{workload}; see `train-anywhere params {workload}`.")
    if "PLATFORM" in overrides and overrides["PLATFORM"] != platform:
        raise UsageError(f"-p PLATFORM {overrides['PLATFORM']} contradicts --platform "
                         f"{platform}; choose the notebook with --platform alone.")
    namespace = {**defaults, **overrides, "PLATFORM": platform}
    try:
        cfg = config_class(workload).from_params(namespace)
    except ValueError as exc:  # ConfigError / UserError: already one line with the fix
        raise UsageError(str(exc).strip().splitlines()[-1]) from None
    return {k: v for k, v in overrides.items() if k != "PLATFORM"}, cfg


def absolute_paths(params: dict[str, Any]) -> dict[str, Any]:
    """DATA_DIR and OUT_DIR relative to the caller's directory (the kernel runs elsewhere)."""
    return {k: (str(Path(v).expanduser().resolve()) if k in ("DATA_DIR", "OUT_DIR")
                and isinstance(v, str) else v) for k, v in params.items()}


def check_folder(option: str, path: Path) -> Path:
    """`path` for a folder the run writes (--out, -p DATA_DIR): one line (exit 2) when it is a
    file, lies below a file, or cannot be written."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {str(path)!r} is a file, not a folder; give a folder (it "
                         "is created if missing).")
    above = next(p for p in (path, *path.parents) if p.exists())
    if not above.is_dir():
        raise UsageError(f"{option} {str(path)!r} lies below {str(above)!r}, which is a file; "
                         "give a folder path.")
    if not os.access(above, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {str(path)!r} cannot be written ({str(above)!r} is not "
                         "writable); give a folder you can write to.")
    return path


def config_for(spec: dict) -> Any:
    """The validated config of one sweep cell (its cell.json: workload, platform, params)."""
    params = {p.name: p.default for p in parameters(spec["workload"])}
    params.update(spec["params"], PLATFORM=spec["platform"])
    return config_class(spec["workload"]).from_params(params)
