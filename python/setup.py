"""Builds libcformers.so with CMake from the repository this directory sits in (or
$CFORMERS_SOURCE_DIR) and ships it inside the `cformers` package, next to the ctypes code
that loads it. Metadata is in pyproject.toml."""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "libcformers.so"


class BinaryDistribution(Distribution):
    """The package holds a compiled library: a platform wheel, not a pure-Python one."""

    def has_ext_modules(self):
        return True


def open_terminal():
    """The terminal pip runs in, or None: pip keeps a build backend's output to itself unless
    `pip install -v`, so the progress of a minute-long build goes to /dev/tty directly."""
    try:
        return open("/dev/tty", "w")
    except OSError:
        return None


def run_reporting(command, what, terminal):
    """Runs command, its output passed on to stdout (what `pip install -v` shows), and tells
    terminal (a stream or None) what is being built: one line naming it, then CMake's
    "[ NN%]" progress rewritten in place, then "done". Raises CalledProcessError on failure."""
    def tell(text):
        if terminal:
            terminal.write(text)
            terminal.flush()

    tell(f"\ncformers: {what} (pip install -v ./python shows the compiler's output)\n")  # off pip's spinner line
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    percent = None
    for line in process.stdout:
        sys.stdout.write(line)
        match = re.match(r"\[\s*(\d+)%\]", line)
        if match and match.group(1) != percent:
            percent = match.group(1)
            tell(f"\r\033[Kcformers: {what}: {percent}%")
    if process.wait() != 0:
        tell("\n")
        raise subprocess.CalledProcessError(process.returncode, command)
    tell(("\r\033[K" if percent else "") + f"cformers: {what}: done\n")


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        source = os.environ.get("CFORMERS_SOURCE_DIR", os.path.dirname(HERE))
        if not os.path.exists(os.path.join(source, "CMakeLists.txt")):
            raise RuntimeError(f"cformers: no CMakeLists.txt in {source}: set CFORMERS_SOURCE_DIR to the repository")
        build = os.environ.get("CFORMERS_CMAKE_BUILD_DIR", os.path.join(source, "build-python"))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        terminal = open_terminal()
        try:
            run_reporting(["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DCFORMERS_SHARED=ON"],
                          f"configuring with CMake in {build}", terminal)
            run_reporting(["cmake", "--build", build, "--target", "cformers_shared", "-j", jobs],
                          f"building {LIBRARY} (cmake --build -j {jobs})", terminal)
        finally:
            if terminal:
                terminal.close()
        built = os.path.join(build, LIBRARY)
        targets = [os.path.join(self.build_lib, "cformers", LIBRARY)]
        if getattr(self, "editable_mode", False):  # pip install -e: the package is the source tree
            targets.append(os.path.join(HERE, "cformers", LIBRARY))
        for target in targets:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.realpath(built), target)


if __name__ == "__main__":  # as pip's build backend runs it; python/tests import the helpers
    setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildWithCMake})
