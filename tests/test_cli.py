"""The command line (normgrow/cli.py): every command answers --help without loading torch, pandas or transformers,
every argument is described and the shared options mean the same everywhere, and --outputs is NORMGROW_OUTPUTS."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import fakes
from normgrow import cli
from tiny_study import REPO, study_env

COMMANDS = [["normgrow"], ["normgrow", "run"], ["normgrow", "cache"], ["normgrow", "export"], ["normgrow.study"],
            ["normgrow.sweep"], ["normgrow.grid"], ["normgrow.bench"], ["normgrow.results"]]
HEAVY = ("torch", "pandas", "transformers")
# runs a command as `python -m` does, then prints which heavy modules it had imported when it exited
PROBE = """import runpy, sys
sys.argv = [sys.argv[1], *sys.argv[2:]]
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print("LOADED", [m for m in {heavy} if m in sys.modules])
""".format(heavy=HEAVY)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_loads_no_heavy_module(command, tmp_path):
    proc = subprocess.run([sys.executable, "-c", PROBE, *command, "--help"], cwd=REPO, env=study_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage: python -m normgrow" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "LOADED []", proc.stdout[-500:]


def parsers():
    """Every parser of every command, subcommands included, by name."""
    out = {}
    for name, build in cli.PARSERS.items():
        parser = build()
        out[name] = parser
        for action in parser._actions:
            if action.choices and isinstance(action.choices, dict):  # the subparsers of python -m normgrow
                out.update({f"{name} {sub}": p for sub, p in action.choices.items()})
    return out


@pytest.mark.parametrize("name", sorted(parsers()))
def test_every_argument_is_described_and_the_shared_options_agree(name):
    parser = parsers()[name]
    assert parser.description, f"{name} has no description"
    undescribed = [a.dest for a in parser._actions if not a.help and not a.choices]
    assert not undescribed, f"{name}: arguments without help: {undescribed}"
    options = {a.dest: a for a in parser._actions}
    if name == "normgrow":  # the subcommands hold the options
        return
    assert "outputs" in options and "NORMGROW_OUTPUTS" in options["outputs"].help
    if name not in ("normgrow export", "width", "intervention"):  # a file or folder; the grids' own profiles
        assert options["profile"].default == "cpu" and not options["profile"].required
    if name not in ("normgrow export", "normgrow events"):
        assert "Writes, under the outputs root" in parser.epilog


def test_outputs_option_is_the_outputs_root(tmp_path, monkeypatch):
    """A run of python -m normgrow run --outputs DIR lands in DIR/runs/<profile>/, not under NORMGROW_OUTPUTS."""
    from normgrow import __main__ as entry
    from normgrow import runner
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "elsewhere"))
    fakes.install(monkeypatch)
    monkeypatch.setattr(runner, "record_notebook", lambda spec: None)  # the kernel has no fake cache
    entry.main(["run", "--profile", "tiny", "--norm", "pre", "--schedule", "joint", "--run-name", "here",
                "--outputs", str(tmp_path / "chosen"), "--overrides", json.dumps(fakes.TINY_OVERRIDES)])
    assert (tmp_path / "chosen" / "runs" / "tiny").is_dir()
    assert [p.name for p in (tmp_path / "chosen" / "runs" / "tiny").iterdir()][0].startswith("here")
    assert not (tmp_path / "elsewhere").exists()


def test_run_on_an_outputs_root_it_cannot_write_ends_in_one_error_line(tmp_path, monkeypatch, capsys):
    """`python -m normgrow run` checks the outputs root before any work, as the study and sweep do (it used to end
    in a traceback)."""
    from normgrow.__main__ import main
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(blocker / "outputs"))
    assert main(["run", "--profile", "tiny", "--norm", "pre", "--schedule", "grow"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: outputs root ") and "cannot be created" in err and len(err.splitlines()) == 1


def test_a_full_disk_ends_a_command_in_one_error_line(tmp_path, monkeypatch, capsys):
    """A write that fails for lack of space ends every command in one `error:` line and exit 1, whether the error
    says so (ENOSPC) or not (torch.save's 'file write failed', when the outputs folder is nearly full); another
    error keeps its traceback."""
    import errno
    import shutil
    from types import SimpleNamespace

    from normgrow import runner
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))

    def fail(err):
        def work():
            raise err
        return work
    space = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x.pt"))
    assert runner.runner_exit(fail(space)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: the disk of {tmp_path} is full") and len(err.splitlines()) == 1
    torch_save = RuntimeError("[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file "
                              "data/0: file write failed")
    with pytest.raises(RuntimeError):  # plenty of room: not the disk
        runner.runner_exit(fail(torch_save))
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(free=1 << 20))
    assert runner.runner_exit(fail(torch_save)) == 1
    err = capsys.readouterr().err
    assert "(1.0 MiB free)" in err and "file write failed" in err and len(err.splitlines()) == 1


def test_a_notebook_run_from_a_terminal_shows_its_progress_there(tmp_path, monkeypatch):
    """papermill runs run_variant.ipynb in a kernel whose stdout is the notebook and whose stderr's fileno() is the
    terminal papermill runs in: every redraw of the bar goes to that terminal (the card's headless command shows its
    training there) and the finished bar, written by the process itself, to the notebook; in the runner's kernels
    (their runner reports progress) the bar stays in the notebook."""
    import io
    import sys

    import ipykernel  # noqa: F401 (a kernel's process has it loaded)
    from normgrow import progress

    terminal, notebook = open(tmp_path / "terminal", "w+"), io.StringIO()
    monkeypatch.setattr(sys, "stdout", notebook)
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.delenv(progress.RUNNER_KERNEL, raising=False)
    bar = progress.progress_bar(total=3, desc="run")
    bar.update(3)
    bar.close()
    shown = (tmp_path / "terminal").read_text()
    assert "run:   0%" in shown and "run: 100%" in shown
    # within the notebook's 10 s only the finished bar reaches it, once, and ends its line
    assert notebook.getvalue().count("run: ") == 1 and "run: 100%" in notebook.getvalue(), notebook.getvalue()
    assert notebook.getvalue().endswith("\n")
    monkeypatch.setenv(progress.RUNNER_KERNEL, "1")
    bar = progress.progress_bar(total=3, desc="runner's")
    bar.update(3)
    bar.close()
    assert "runner's: 100%" in notebook.getvalue() and "runner's" not in (tmp_path / "terminal").read_text()


def test_a_bad_value_through_papermill_ends_in_one_line(tmp_path):
    """The card's headless command with a bad value ends in the command line's one `error:` line and its exit status
    2 (before, papermill's own 30-line stack came first: normgrow.papermill_hook, which make install puts in the
    environment's site-packages); progress and papermill's headers stay above it."""
    import sysconfig
    from normgrow import papermill_hook
    assert (Path(sysconfig.get_path("purelib")) / papermill_hook.PTH).is_file(), "make install writes the hook's .pth"
    papermill = Path(sys.executable).with_name("papermill")  # the environment's, as its activated shell finds it
    proc = subprocess.run([str(papermill), "run_variant.ipynb", str(tmp_path / "out.ipynb"), "-p", "norm", "sideways",
                           "-p", "schedule", "grow"], cwd=REPO / "notebooks", capture_output=True, text=True,
                          timeout=300, env=study_env(tmp_path / "outputs"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == (
        "error: norm='sideways' is not allowed; allowed values: pre, post, mix, peri, deepnorm, lns"), proc.stderr
