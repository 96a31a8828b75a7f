"""python/setup.py, as `pip install ./python` runs it: the build's progress reaches the
terminal even though pip keeps the backend's output to itself (issue 43)."""
import importlib.util
import io
import os
import subprocess
import sys

import pytest

SETUP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")


@pytest.fixture(scope="module")
def setup_module():
    pytest.importorskip("setuptools")
    spec = importlib.util.spec_from_file_location("cformers_setup", SETUP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: setup() is not called
    return module


def fake_build(lines, status=0):
    script = "".join(f"print({line!r})\n" for line in lines) + f"raise SystemExit({status})\n"
    return [sys.executable, "-c", script]


def test_build_progress_reaches_the_terminal(setup_module, capsys):
    terminal = io.StringIO()
    lines = ["[ 10%] Building C object src/a.c.o", "[ 10%] Building C object src/b.c.o", "[100%] Linking C shared library"]
    setup_module.run_reporting(fake_build(lines), "building libcformers.so with 2 jobs", terminal)
    told = terminal.getvalue()
    assert told.startswith("\ncformers: building libcformers.so with 2 jobs (pip install -v")
    assert "building libcformers.so with 2 jobs: 10%" in told and ": 100%" in told
    assert told.count(": 10%") == 1  # one update per new percentage
    assert told.endswith("cformers: building libcformers.so with 2 jobs: done\n")
    assert "[100%] Linking C shared library" in capsys.readouterr().out  # what pip install -v shows


def test_a_failed_build_raises(setup_module):
    terminal = io.StringIO()
    with pytest.raises(subprocess.CalledProcessError):
        setup_module.run_reporting(fake_build(["[ 50%] Building C object x", "error: x"], 2), "building", terminal)
    assert terminal.getvalue().endswith("\n") and "done" not in terminal.getvalue()
