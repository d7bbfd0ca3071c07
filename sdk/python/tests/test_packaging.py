"""The package as ``pip install ./sdk/python`` installs it: pyproject.toml's
metadata, the layout setuptools is told to ship, and a source distribution
built by setuptools (a wheel needs the ``wheel`` package, which an offline
machine may lack) that imports from where it was unpacked."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
from email.parser import Parser
from typing import Any, Dict

import leasesvc

HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def pyproject() -> Dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        msg = "tomllib needs Python 3.11 or newer to read pyproject.toml"
        if os.environ.get("CI") == "true":
            raise AssertionError(msg)
        raise unittest.SkipTest(msg)
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


class MetadataTest(unittest.TestCase):
    def test_project(self) -> None:
        p = pyproject()
        proj = p["project"]
        self.assertEqual(proj["name"], "leasesvc")
        self.assertEqual(proj["dependencies"], [], "the SDK is standard library only")
        self.assertEqual(proj["requires-python"], ">=3.9")
        self.assertIn("Typing :: Typed", proj["classifiers"])
        self.assertTrue(os.path.isfile(os.path.join(HERE, proj["readme"])))
        self.assertTrue(proj["description"])
        self.assertIn("setuptools.build_meta", p["build-system"]["build-backend"])

    def test_version_has_one_source(self) -> None:
        p = pyproject()
        self.assertNotIn("version", p["project"], "the version lives in leasesvc.__version__ only")
        self.assertIn("version", p["project"]["dynamic"])
        self.assertEqual(p["tool"]["setuptools"]["dynamic"]["version"], {"attr": "leasesvc.__version__"})
        self.assertRegex(leasesvc.__version__, r"^\d+\.\d+\.\d+$")

    def test_layout(self) -> None:
        p = pyproject()
        st = p["tool"]["setuptools"]
        found = sorted(os.path.relpath(d, HERE).replace(os.sep, ".")
                       for d, _, files in os.walk(os.path.join(HERE, "leasesvc"))
                       if "__init__.py" in files and "__pycache__" not in d)
        self.assertEqual(sorted(st["packages"]), found, "every package under leasesvc/ must be listed")
        self.assertIn("py.typed", st["package-data"]["leasesvc"])
        self.assertTrue(os.path.isfile(os.path.join(HERE, "leasesvc", "py.typed")), "PEP 561 marker")

    def test_readme_says_how_to_install_first(self) -> None:
        with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
            text = f.read()
        first = re.search(r"^## (.+)$", text, re.M)
        assert first is not None
        self.assertEqual(first.group(1), "Install")
        section = text[first.end():].split("\n## ")[0]
        self.assertIn("pip install ./sdk/python", section)


class SdistTest(unittest.TestCase):
    def test_sdist_builds_and_imports(self) -> None:
        try:
            import setuptools  # noqa: F401
        except ImportError:
            msg = "setuptools is not installed (pip install setuptools) to build the source distribution"
            if os.environ.get("CI") == "true":
                raise AssertionError(msg)
            raise unittest.SkipTest(msg)
        tmp = tempfile.mkdtemp(prefix="leasesvc-sdist-")
        self.addCleanup(shutil.rmtree, tmp, True)
        src = os.path.join(tmp, "src")
        shutil.copytree(HERE, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", "node_modules"))
        out = subprocess.run(
            [sys.executable, "-c", "from setuptools import build_meta as b; print(b.build_sdist('dist'))"],
            cwd=src, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout)
        name = out.stdout.strip().splitlines()[-1]
        v = leasesvc.__version__
        self.assertEqual(name, f"leasesvc-{v}.tar.gz")
        with tarfile.open(os.path.join(src, "dist", name)) as tar:
            members = set(tar.getnames())
            root = f"leasesvc-{v}/"
            for f in ("PKG-INFO", "pyproject.toml", "README.md", "leasesvc/__init__.py", "leasesvc/aio.py",
                      "leasesvc/py.typed"):
                self.assertIn(root + f, members)
            pkg_dir = os.path.join(os.path.dirname(leasesvc.__file__))
            for f in sorted(os.listdir(pkg_dir)):  # every module, the split ones included (keeper, holding, ...)
                if f.endswith(".py"):
                    self.assertIn(root + "leasesvc/" + f, members)
            pkg = tar.extractfile(root + "PKG-INFO")
            assert pkg is not None
            info = Parser().parsestr(pkg.read().decode())
            self.assertEqual(info["Name"], "leasesvc")
            self.assertEqual(info["Version"], v)
            self.assertEqual(info["Requires-Python"], ">=3.9")
            unpacked = os.path.join(tmp, "unpacked")
            tar.extractall(unpacked)
        where = os.path.join(unpacked, f"leasesvc-{v}")
        env = {k: val for k, val in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = where
        got = subprocess.run(
            [sys.executable, "-c", "import leasesvc, leasesvc.aio; print(leasesvc.__version__); print(leasesvc.__file__)"],
            cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(got.returncode, 0, got.stdout)
        version, path = got.stdout.split()
        self.assertEqual(version, v)
        self.assertTrue(path.startswith(where), path)


if __name__ == "__main__":
    unittest.main()
