"""The package's shape: one job per module, no module importing another's private names, no circle.
The import graph is printed (pytest -s shows it)."""

import ast
import json
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
        print("  %-14s -> %s" % (m, ", ".join(sorted(to)) or "(nothing of the package)"))
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


def table():
    with open(os.path.join(PACKAGE, "hooks.json"), encoding="utf-8") as f:
        return json.load(f)["hooks"]


def test_the_recorder_imports_nothing_else_of_the_package():
    """fileformat, the hooks that join the recorder (hooks.json: hook_torchrun) and record are the
    vendored recorder (reduce recorder joins them): standard library and torch, each importing only
    those before it."""
    graph, before = imports(), ["fileformat"]
    assert graph["fileformat"] == {}
    for row in table():
        if row["vendored"] == "recorder":
            assert set(graph[row["module"]]) <= set(before), row["name"]
            before.append(row["module"])
    assert set(graph["record"]) == set(before)


def test_hooks_table():
    """Every row of hooks.json names a module of the package that has what the row says (the functions
    it exports, its step, its before_replay), a hook vendored with the hooks imports hooks alone (for
    what they share), and reduce_batch.hooks gives each exported function."""
    import reduce_batch.hooks as hooks

    graph = imports()
    assert [row["name"] for row in table()] == ["lightning", "trainer", "torchrun"]
    for row in table():
        module = hooks.hook_module(row)
        for name in row["exports"] + [row["step"], row["before_replay"]]:
            if name:
                assert callable(getattr(module, name, None)), (row["name"], name)
        for name in row["exports"]:
            assert getattr(hooks, name) is getattr(module, name)
        if row["vendored"] == "hooks":
            assert set(graph[row["module"]]) == {"hooks"}, row["name"]
        assert (row["rebuilds"] is None) == (row["state_class"] is None), row["name"]
        assert row["step"] or not row["rebuilds"], row["name"]
        if row["rebuilds"]:
            assert hooks.class_kind(row["name"])[2] == row["rebuilds"]["base"]
    assert hooks.step_names() == ("lightning_step", "trainer_step")
    assert hooks.of_step("trainer_step")["child"] and not hooks.of_step("lightning_step")["child"]
    try:
        hooks.record_nothing  # noqa: B018
    except AttributeError as e:
        assert "reduce_batch.hooks" in str(e)
    else:
        raise AssertionError("hooks.__getattr__ gave a name no row exports")


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


def test_one_judge():
    """What a run means is reduce's to say (`reduce judge`, Go's signature.Judge): no module of the package
    reads a traceback, compares outputs or tells an out-of-memory failure by its text."""
    said = []
    for name in sorted(os.listdir(PACKAGE)):
        if name.endswith(".py"):
            with open(os.path.join(PACKAGE, name), encoding="utf-8") as f:
                src = f.read()
            said += [(name, x) for x in ('"Traceback (most recent call last):"', "assert_close", "def mismatch",
                                         '"out of memory" in', "can't allocate memory|") if x in src]
    assert said == [], said
