"""The engine's layers, read from its source: no import cycle, the rules import no upper layer,
and `jobs` never imports the site (jobs/__init__.py and each folder's own paragraph).

Every import counts, those inside functions included: a cycle held together by
a function-level import is still a cycle. No database, no Django set-up.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"

# The root modules everything may lean on: the tables, the settings, the ranges, the errors.
FOUNDATION = {"jobs.models", "jobs.conf", "jobs.bounds", "jobs.exceptions", "jobs.signals",
              "jobs.egress"}
# What each layer may import besides itself, from the bottom up.
MAY_IMPORT = {
    "foundation": FOUNDATION,
    "jobs.engine": FOUNDATION,
    "jobs.selectors": FOUNDATION | {"jobs.engine"},
    "jobs.maintenance": FOUNDATION | {"jobs.engine", "jobs.selectors"},
}
# Nothing below these imports them.
TOP = ("jobs.admin", "jobs.management")


def module_names():
    """{dotted name: path} of every module of jobs/ but its migrations."""
    names = {}
    for path in JOBS.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        names[name] = path
    return names


def imports_of(name, path, known):
    """The modules `name` imports, anywhere in its body: jobs modules by their own name (a
    package's submodule rather than the package), others by their top-level package."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target not in known and "." in target and target.startswith("jobs."):
                target = target.rsplit(".", 1)[0]
            # `import jobs` reaches the lazy public surface, resolved on use: not an edge.
            if target != name and target != "jobs":
                found.add(target if target.startswith("jobs.") else target.split(".")[0])
    return found


def graph():
    known = module_names()
    return {name: {t for t in imports_of(name, path, known) if t in known}
            for name, path in known.items()}, known


def cycles(edges):
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def layer_of(name):
    if name in FOUNDATION:
        return "foundation"
    return next((layer for layer in MAY_IMPORT if layer != "foundation"
                 and (name == layer or name.startswith(layer + "."))), None)


def within(name, prefixes):
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_cycle_finder_finds_a_cycle_held_by_a_function_level_import(tmp_path):
    # The finder is what the other tests trust: a cycle it cannot see would pass them all.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from jobs.engine import queries\n")
    assert imports_of("jobs.x", module, {"jobs.engine.queries"}) == {"jobs.engine.queries"}


def test_no_module_of_jobs_imports_another_that_imports_it_back():
    edges, _known = graph()
    assert cycles(edges) == []


def test_each_layer_imports_only_the_layers_below_it():
    edges, _known = graph()
    wrong = {}
    for name, targets in edges.items():
        layer = layer_of(name)
        if layer is None:
            continue
        allowed = MAY_IMPORT[layer] | {layer}
        bad = sorted(t for t in targets if not within(t, allowed) and t not in allowed)
        if bad:
            wrong[name] = bad
    assert wrong == {}


def test_nothing_below_the_admin_and_the_commands_imports_them():
    edges, _known = graph()
    wrong = {name: sorted(t for t in targets if within(t, TOP))
             for name, targets in edges.items() if not within(name, TOP)}
    assert {name: bad for name, bad in wrong.items() if bad} == {}


def test_the_engine_imports_no_module_of_the_site():
    site = {path.name for path in ROOT.iterdir()
            if path.is_dir() and (path / "__init__.py").exists() and path.name != "jobs"}
    assert {"core", "project", "downloads", "insights"} <= site  # the check sees the site
    known = module_names()
    wrong = {name: sorted(imports_of(name, path, known) & site) for name, path in known.items()}
    assert {name: bad for name, bad in wrong.items() if bad} == {}


def test_every_folder_opens_with_a_paragraph_on_its_role_and_what_it_may_import():
    for package in ("engine", "selectors", "maintenance", "runtime", "runtime/process", "cv",
                    "admin"):
        doc = ast.get_docstring(ast.parse((JOBS / package / "__init__.py").read_text()))
        assert doc and "import" in doc, f"jobs/{package}/__init__.py"
