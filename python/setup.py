"""Builds libcformers.so with CMake from the repository this directory sits in (or
$CFORMERS_SOURCE_DIR) and ships it inside the `cformers` package, next to the ctypes code
that loads it. Metadata is in pyproject.toml."""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = "libcformers.so"


class BinaryDistribution(Distribution):
    """The package holds a compiled library: a platform wheel, not a pure-Python one."""

    def has_ext_modules(self):
        return True


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        source = os.environ.get("CFORMERS_SOURCE_DIR", os.path.dirname(HERE))
        if not os.path.exists(os.path.join(source, "CMakeLists.txt")):
            raise RuntimeError(f"cformers: no CMakeLists.txt in {source}: set CFORMERS_SOURCE_DIR to the repository")
        build = os.environ.get("CFORMERS_CMAKE_BUILD_DIR", os.path.join(source, "build-python"))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DCFORMERS_SHARED=ON"])
        subprocess.check_call(["cmake", "--build", build, "--target", "cformers_shared", "-j", jobs])
        built = os.path.join(build, LIBRARY)
        targets = [os.path.join(self.build_lib, "cformers", LIBRARY)]
        if getattr(self, "editable_mode", False):  # pip install -e: the package is the source tree
            targets.append(os.path.join(HERE, "cformers", LIBRARY))
        for target in targets:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.realpath(built), target)


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildWithCMake})
