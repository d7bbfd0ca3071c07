"""The package's modules import one another without cycles (issue 46):
every import within ``leasesvc``, at module level, under ``TYPE_CHECKING``
or inside a function, read with :mod:`ast`, makes a graph that must be
acyclic; and each module imports alone in a fresh interpreter, without the
package's ``__init__`` having imported the rest first."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import unittest
from typing import Dict, List, Optional, Set

HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PKG = os.path.join(HERE, "leasesvc")


def modules() -> List[str]:
    """The modules of the package, as ``leasesvc.x`` (the package itself
    is ``leasesvc``)."""
    out = []
    for f in sorted(os.listdir(PKG)):
        if f.endswith(".py"):
            out.append("leasesvc" if f == "__init__.py" else "leasesvc." + f[:-3])
    return out


def resolve(mod: str, node: ast.ImportFrom) -> Optional[str]:
    """The absolute module an ``import from`` of ``mod`` names (None for
    one outside the package)."""
    if node.level == 0:
        base = node.module or ""
    else:
        parts = mod.split(".") if mod == "leasesvc" else mod.split(".")[:-1]
        parts = parts[:len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    return base if base == "leasesvc" or base.startswith("leasesvc.") else None


def imports_of(mod: str, known: Set[str]) -> Set[str]:
    """Every module of the package ``mod`` imports, wherever the import
    statement is (module level, ``if TYPE_CHECKING:``, a function)."""
    path = os.path.join(PKG, "__init__.py" if mod == "leasesvc" else mod.split(".", 1)[1] + ".py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    out.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(mod, node)
            if base is None:
                continue
            for a in node.names:
                sub = base + "." + a.name
                out.add(sub if sub in known else base)  # `from . import x` names the module x
    out.discard(mod)
    return out


def find_cycle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """A cycle of ``graph`` as a path that ends where it starts, or None."""
    state: Dict[str, int] = {}  # 1: on the stack, 2: done
    stack: List[str] = []

    def visit(n: str) -> Optional[List[str]]:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c is not None:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c is not None:
                return c
    return None


class ImportGraphTest(unittest.TestCase):
    def graph(self) -> Dict[str, Set[str]]:
        known = set(modules())
        # The package's __init__ imports everything to re-export it; the
        # modules never import the package itself, so it is a root.
        return {m: imports_of(m, known) for m in known}

    def test_the_graph_is_acyclic(self) -> None:
        g = self.graph()
        self.assertIsNone(find_cycle(g), "a cycle of imports within leasesvc")
        for m, deps in g.items():
            if m != "leasesvc":
                self.assertNotIn("leasesvc", deps, f"{m} imports the package itself (its __init__)")

    def test_the_checker_sees_cycles(self) -> None:
        """The checker can fail: a cycle through a TYPE_CHECKING or a
        function-local import counts."""
        self.assertEqual(find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}), ["a", "b", "c", "a"])
        self.assertIsNone(find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}))
        code = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .client import Client\n"
                "def f():\n    from . import session\n")
        tree = ast.parse(code)
        found = {resolve("leasesvc.watch", n) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} - {None}
        self.assertEqual(found, {"leasesvc.client", "leasesvc"})

    def test_the_layers(self) -> None:
        """What the issue named: neither the watch stream nor the session
        imports the client, and the holdings do not import the keeper."""
        g = self.graph()
        for m in ("leasesvc.watch", "leasesvc.session", "leasesvc._session_sockets", "leasesvc._session_wire",
                  "leasesvc._session_fork"):
            self.assertNotIn("leasesvc.client", g[m], m)
        self.assertNotIn("leasesvc.keeper", g["leasesvc.holding"])
        self.assertNotIn("leasesvc.elector", g["leasesvc.keeper"])

    def test_each_module_imports_alone(self) -> None:
        """In a fresh interpreter, with a bare package (its __init__ not
        run), each module imports with exactly what it imports itself; and
        the normal way too."""
        for m in modules():
            if m == "leasesvc":
                continue
            alone = ("import importlib, sys, types\n"
                     "p = types.ModuleType('leasesvc'); p.__path__ = [sys.argv[1]]; sys.modules['leasesvc'] = p\n"
                     f"importlib.import_module({m!r})\n")
            for code in (alone, f"import {m}\n"):
                with self.subTest(module=m, alone=code is alone):
                    env = dict(os.environ, PYTHONPATH=HERE)
                    r = subprocess.run([sys.executable, "-c", code, PKG], env=env, cwd=HERE,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
                    self.assertEqual(r.returncode, 0, r.stdout)


if __name__ == "__main__":
    unittest.main()
