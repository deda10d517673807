"""The repository's folders, the ground every path rule starts from: imported by the command line (cli.py, which must
not load torch) and by config.py, and by nothing below them for anything else. A relative path a user gives is the
repository's (config.resolve_profile_path), whatever the working directory."""
from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PARAMS_DIR = REPO_ROOT / "params"
NOTEBOOKS = REPO_ROOT / "notebooks"
OUTPUTS_DIR = REPO_ROOT / "outputs"


def profile_names(params: Path = PARAMS_DIR) -> list[str]:
    """The profiles: the files of <params>/profiles/ (config.available_profiles for config's PARAMS_DIR)."""
    return sorted(p.stem for p in (params / "profiles").glob("*.yaml"))
