"""reduce_batch.modules: where a module's files are, and whether a file is installed rather than the user's: what
resolving a step and deciding what it may run both need."""

import contextlib
import os
import sys

# The hooks' module as the package names it, and as a vendored copy (reduce_hooks.py) recorded it:
# a step of either is the package's (steps.resolve_step).
HOOKS_MODULES = ("reduce_batch.hooks", "reduce_hooks")


def under(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def is_installed(real, tree):
    """Whether the file at real (symbolic links resolved) is the interpreter's: in a
    site-packages or dist-packages folder, the standard library, or under the interpreter's
    prefix (unless the tree itself lies there: a repository under /usr with Debian's /usr
    prefix is still the user's)."""
    import site
    import sysconfig

    if {"site-packages", "dist-packages"} & set(real.split(os.sep)):
        return True
    dirs = [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    for fn in ("getsitepackages", "getusersitepackages"):
        with contextlib.suppress(AttributeError):  # a virtualenv's old site.py lacks them
            got = getattr(site, fn)()
            dirs += [got] if isinstance(got, str) else list(got)
    if any(d and under(real, os.path.realpath(d)) for d in dirs):
        return True
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        p = os.path.realpath(p)
        if under(real, p) and not under(tree, p):
            return True
    return False


def module_files(name):
    """[(module name, its file, or "built-in" or "frozen")] of the modules whose code
    `import name` would run, its parent packages first, found without running any: the module
    sys.modules holds, else the spec the finders of sys.meta_path give, in their order, as the
    import asks them. A namespace package (no code) is left out; the list stops at a module
    that is not found (the import fails there)."""
    out, path = [], None
    parts = name.split(".")
    for i in range(len(parts)):
        sub = ".".join(parts[:i + 1])
        m = sys.modules.get(sub)
        if m is not None:
            spec = getattr(m, "__spec__", None)
            origin = getattr(m, "__file__", None) or (spec.origin if spec is not None else None) or "built-in"
            locations = getattr(m, "__path__", None)
        else:
            spec = _find_spec(sub, path)
            if spec is None:
                return out
            origin, locations = spec.origin, spec.submodule_search_locations
            if origin in (None, "namespace") and locations is not None:
                origin = None  # a namespace package: no code of its own
        if origin is not None:
            out.append((f"its {'module' if i == len(parts) - 1 else 'package'} {sub}", origin))
        if locations is None:
            return out  # not a package: importing a submodule of it fails after running it
        path = list(locations)
    return out


def _find_spec(name, path):
    """The spec the import system finds for name (path: its parent's __path__, None for a
    top-level module), asking the finders of sys.meta_path in order, as importing it would;
    finding it runs none of its code."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(name, path)
        if spec is not None:
            return spec
    return None
