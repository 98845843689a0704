"""The package's shape: one job per module, no module importing another's private names, no circle.
The import graph is printed (pytest -s shows it)."""

import ast
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "reduce_batch")
MODULES = {n[:-3] for n in os.listdir(PACKAGE) if n.endswith(".py") and n != "__init__.py"}


def imports():
    """{module: {imported module: [names]}} of the package's own imports (relative, or of reduce_batch)."""
    graph = {}
    for name in sorted(os.listdir(PACKAGE)):
        if not name.endswith(".py"):
            continue
        mod = "__init__" if name == "__init__.py" else name[:-3]
        edges = graph.setdefault(mod, {})
        for node in ast.walk(ast.parse(open(os.path.join(PACKAGE, name), encoding="utf-8").read())):
            if isinstance(node, ast.ImportFrom) and (node.level == 1 or node.module == "reduce_batch"):
                if node.module in (None, "reduce_batch"):  # from . import steps
                    for a in node.names:
                        edges.setdefault(a.name, [])
                else:
                    edges.setdefault(node.module.split(".")[-1], []).extend(a.name for a in node.names)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("reduce_batch."):
                        edges.setdefault(a.name.split(".")[1], [])
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                # reduce_batch._x, rb._x; steps._x of `from . import steps`; reduce_batch.steps._x
                v = node.value
                if isinstance(v, ast.Name) and v.id in ("reduce_batch", "rb"):
                    edges.setdefault("__init__", []).append(node.attr)
                elif isinstance(v, ast.Name) and v.id in MODULES:
                    edges.setdefault(v.id, []).append(node.attr)
                elif isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id in (
                        "reduce_batch", "rb") and v.attr in MODULES:
                    edges.setdefault(v.attr, []).append(node.attr)
    return graph


def test_no_private_names_across_modules():
    bad = [(m, to, n) for m, edges in imports().items() for to, names in edges.items() for n in names
           if n.startswith("_") and not n.startswith("__") and to != m]
    assert bad == [], "private names imported across modules (module, from, name): %r" % bad


def test_no_circle():
    graph = {m: {to for to in edges if to != m and to in imports()} for m, edges in imports().items()}
    for m in graph:
        graph[m].discard("__init__")  # the package itself: every module is imported through it
    print("\nreduce_batch's import graph:")
    for m, to in sorted(graph.items()):
        print("  %-10s -> %s" % (m, ", ".join(sorted(to)) or "(nothing of the package)"))
    seen, stack = {}, []

    def visit(m):
        if seen.get(m) == 1:
            raise AssertionError("an import circle: " + " -> ".join(stack[stack.index(m):] + [m]))
        if seen.get(m) == 2:
            return
        seen[m] = 1
        stack.append(m)
        for to in sorted(graph[m]):
            visit(to)
        stack.pop()
        seen[m] = 2

    for m in sorted(graph):
        visit(m)


def test_the_recorder_imports_nothing_else_of_the_package():
    """fileformat and record are the vendored recorder (reduce recorder joins them): standard library
    and torch, record importing fileformat alone."""
    graph = imports()
    assert graph["fileformat"] == {}
    assert list(graph["record"]) == ["fileformat"]


def test_plugin_takes_only_reduces_fixtures(tmp_path):
    """Installed, the plugin runs in every pytest session of the environment: a fixture.json is
    reduce's when it is a JSON object with its version and source, or beside a fixture's batch.bin
    (a malformed record of reduce's is one failing item); another tool's is left alone."""
    import sys

    sys.path.insert(0, HERE)
    from reduce_batch import plugin

    ours, theirs, broken, other = (tmp_path / n for n in ("ours", "theirs", "broken", "other"))
    for d in (ours, theirs, broken, other):
        d.mkdir()
    (ours / "fixture.json").write_text('{"version": 2, "source": {"file": "crash.bin"}}')
    (theirs / "fixture.json").write_text('{"name": "a fixture of another tool"}')
    (broken / "fixture.json").write_text("{not json")
    (broken / "batch.bin").write_bytes(b"")
    (other / "fixture.json").write_text("[1, 2]")
    assert plugin.is_fixture(ours / "fixture.json")
    assert plugin.is_fixture(broken / "fixture.json")
    assert not plugin.is_fixture(theirs / "fixture.json")
    assert not plugin.is_fixture(other / "fixture.json")
    assert not plugin.is_fixture(tmp_path / "none" / "fixture.json")
