"""Every command's options: help text on each, defaults in ``--help``, output paths checked before the work."""

import argparse
import subprocess
import sys
import time

import pytest

from workbench.cli import build_parser, main, parsers


def _options():
    for p in parsers(build_parser()):
        for a in p._actions:
            if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
                yield p.prog, a


def test_every_option_of_every_command_has_help():
    missing = [f"{prog} {a.option_strings[-1]}" for prog, a in _options() if not (a.help or "").strip()]
    assert not missing, f"options without help: {missing}"
    progs = {prog for prog, _ in _options()}
    assert {"workbench accept", "workbench sglang lint", "workbench sglang compare"} <= progs


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["accept", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "samples per forward pass (default: 8)" in out
    assert "(default 4; docs/trees.md)" in out          # --steps: its help names the default (None means "chain of 4")
    assert "(default: None)" not in out and "(default: False)" not in out
    with pytest.raises(SystemExit):
        main(["sglang", "compare", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default 4)" in out and "(default: 4)" not in out   # help that already names its default is kept


@pytest.mark.parametrize("argv, needle", [
    (["accept", "--target", "T", "--draft", "D", "--data", "x.jsonl", "--json", "/unwritable/dir/x.json"],
     "--json /unwritable/dir/x.json: folder /unwritable/dir does not exist"),
    (["accept", "--target", "T", "--draft", "D", "--data", "x.jsonl", "--per-chain", "{tmp}"],
     "is a folder, expected a file name"),
    (["diagnose", "--target", "T", "--draft", "D", "--data", "x.jsonl", "--json", "/nope/d.json"], "/nope does not exist"),
    (["rewire", "--target", "T", "--draft", "D", "--data", "x", "--eval-data", "y", "--out", "{tmp}/f.txt"],
     "exists and is not a folder"),
    (["regenerate", "--target", "T", "--data", "x.jsonl", "--out", "/nope/o.jsonl"], "/nope does not exist"),
    (["report", "--out", "{tmp}/f.txt"], "exists and is not a folder"),
])
def test_output_paths_fail_fast_before_any_model_is_loaded(argv, needle, tmp_path, capsys):
    (tmp_path / "f.txt").write_text("x")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    needle = needle.replace("{tmp}", str(tmp_path))
    t0 = time.perf_counter()
    assert main(argv) == 2                       # T, D do not exist: reaching the loaders would fail otherwise
    err = capsys.readouterr().err
    assert err.startswith("error: --") and needle in err and err.count("\n") == 1, err
    assert "Traceback" not in err and time.perf_counter() - t0 < 5


def test_output_folder_may_be_created(tmp_path):
    from workbench.core.files import check_output

    check_output(tmp_path / "new" / "deeper", folder=True)   # created later by the command
    check_output(tmp_path / "x.json")
    assert not (tmp_path / "new").exists()


def test_an_unwritable_output_folder_fails_before_the_run_even_as_root():
    """``--json /proc/out.json``: os.access says yes to root there; creating the temporary file says no,
    so the run stops before loading anything instead of ending in a FileNotFoundError traceback."""
    from workbench.core.errors import WorkbenchError
    from workbench.core.files import check_output

    with pytest.raises(WorkbenchError, match=r"^output /proc/out.json: folder /proc is not writable"):
        check_output("/proc/out.json")
    proc = subprocess.run([sys.executable, "-m", "workbench", "accept", "--target", "t", "--draft", "d", "--data",
                           "x.jsonl", "--json", "/proc/out.json"], capture_output=True, text=True)
    assert proc.returncode == 2 and "/proc is not writable" in proc.stderr and "Traceback" not in proc.stderr


def test_kill_runs_the_cleanup_of_a_command_like_ctrl_c(tmp_path):
    """`kill PID` (SIGTERM) on a running command: its `finally` clauses run (servers it started are stopped by
    pid), it says it was interrupted and exits 130, as after Ctrl-C."""
    import subprocess
    import sys
    import time

    marker = tmp_path / "cleaned"
    code = ("import sys, time\n"
            "from workbench import cli\n"
            "def run(args):\n"
            "    try:\n"
            "        print('ready', flush=True); time.sleep(60)\n"
            "    finally:\n"
            f"        open({str(marker)!r}, 'w').write('stopped')\n"
            "cli.check_outputs = lambda args: None\n"
            "p = cli.build_parser(); ns = p.parse_args(['inspect', 'x']); ns._run = run\n"
            "cli.build_parser = lambda: type('P', (), {'parse_args': lambda self, a: ns})()\n"
            "sys.exit(cli.main([]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.terminate()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    assert marker.read_text() == "stopped"
