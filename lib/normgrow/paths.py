"""The repository's folders and the rules every path and name follows, the ground every other module stands on
(cli.py imports it without loading torch): a relative path a user gives is the repository's (resolve_profile_path),
whatever the working directory; outputs go under outputs_dir(); a profile or run name is a plain name (check_name).
ParamError, the error of a bad parameter, lives here because these rules are the first to raise it."""
from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PARAMS_DIR = REPO_ROOT / "params"
NOTEBOOKS = REPO_ROOT / "notebooks"
OUTPUTS_DIR = REPO_ROOT / "outputs"


def profile_names(params: Path = PARAMS_DIR) -> list[str]:
    """The profiles: the files of <params>/profiles/ (config.available_profiles for config's PARAMS_DIR)."""
    return sorted(p.stem for p in (params / "profiles").glob("*.yaml"))


class ParamError(ValueError):
    """A parameter has a bad name or value. The message names the key and what is allowed."""


def resolve_profile_path(value: str | os.PathLike) -> Path:
    """A path from a profile, by the one rule of the module docstring: ``~`` expanded, absolute as given, relative
    to REPO_ROOT otherwise (never to the working directory). Symlinks are not resolved."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


def outputs_dir() -> Path:
    """Root of all outputs: REPO_ROOT/outputs, or NORMGROW_OUTPUTS (tests point it at a temporary directory) by the
    one path rule (resolve_profile_path: relative to REPO_ROOT, never to the working directory, so a runner started
    anywhere and the kernels it starts in notebooks/ name the same folder). An empty value is a ParamError."""
    value = os.environ.get("NORMGROW_OUTPUTS")
    if value is None:
        return OUTPUTS_DIR
    if not value.strip():
        raise ParamError("NORMGROW_OUTPUTS is set but empty; unset it (outputs/ of the repository) or name a directory")
    return resolve_profile_path(value)


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
PROFILE_SUFFIXES = (".yaml", ".yml")


def check_name(what: str, value) -> str:
    """value if it is a safe profile / run name, else ParamError naming the parameter."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ParamError(f"{what}={value!r} must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or "
                         "digit (no '/', no '..', no spaces)")
    return value


def is_profile_path(profile) -> bool:
    """A profile is a name (a file of params/profiles) or a path to a profile file: a value with a path separator or
    a .yaml / .yml suffix is a path."""
    text = os.fspath(profile) if isinstance(profile, (str, os.PathLike)) else ""
    return "/" in text or os.sep in text or text.endswith(PROFILE_SUFFIXES)


def tuned_file(profile_path: Path) -> Path:
    """Where ``python -m normgrow.sweep --write`` stores a profile's tuned lr and warmup per arm, a generated file the
    profile reads where it says ``tuned``: params/tuned/<name>.yaml for a file of params/profiles/, else
    <name>.tuned.yaml beside the profile's own file."""
    path = Path(profile_path)
    if path.parent.name == "profiles":
        return path.parent.parent / "tuned" / f"{path.stem}.yaml"
    return path.with_name(f"{path.stem}.tuned.yaml")


def profile_name(profile) -> str:
    """The name a profile's runs and results go under (outputs/runs/<name>): a path profile's file stem, checked to be a
    plain name; a name as given (checked where it is used)."""
    return check_name("profile (the file's stem)", Path(profile).stem) if is_profile_path(profile) else profile
