"""The package's shape: no import cycle among trtkit modules (lazy imports included), no module over 450 lines.

An import inside a function is still a dependency: a cycle through one works
only while every module in it happens to be imported in the right order, and
it ties modules that should stand apart (the data flows one way). The graph is
read from each module's source (every ``import`` anywhere in its AST), so
nothing is imported and no optional package is needed.
"""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "trtkit"
MAX_LINES = 450


def module_files(root, package):
    """{dotted module name: file path}; a package's name maps to its __init__.py."""
    found = {}
    base = os.path.join(root, package)
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        for name in files:
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), root)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            found[".".join(rel)] = os.path.join(folder, name)
    return found


def _resolve(name, modules):
    """The module ``name`` imports: itself when it is one, else its longest prefix that is (a package)."""
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) if parts else None


def import_graph(root=ROOT, package=PACKAGE):
    """{module: set of package modules it imports}, from every import statement in its AST."""
    modules = module_files(root, package)
    graph = {}
    for name, path in modules.items():
        with open(path) as handle:
            tree = ast.parse(handle.read(), path)
        is_package = path.endswith("__init__.py")
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(_resolve(alias.name, modules) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                if base != package and not base.startswith(package + "."):
                    continue
                for alias in node.names:
                    child = base + "." + alias.name
                    targets.add(child if child in modules else _resolve(base, modules))
        graph[name] = {t for t in targets if t and t != name and (t == package or t.startswith(package + "."))}
    return graph


def cycles(graph):
    """One shortest cycle (a list of modules, first repeated last) per strongly connected component."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(node):  # Tarjan's algorithm; the graph is a few dozen modules deep at most
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    found = []
    for component in components:
        start = min(component)
        paths, queue = {start: [start]}, [start]
        while queue:  # breadth first inside the component: the shortest way back to start
            node = queue.pop(0)
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    found.append(paths[node] + [start])
                    queue = []
                    break
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    queue.append(nxt)
    return sorted(found)


def test_walker_sees_lazy_imports_and_reports_the_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import b  # noqa\n")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from .. import c\n")
    (pkg / "c.py").write_text("import os\n\ndef g():\n    import pkg.a\n")
    (pkg / "d.py").write_text("from pkg import a\nfrom pkg.sub import nothing_here\n")
    graph = import_graph(str(tmp_path), "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.c"}  # relative import of a module
    assert graph["pkg.c"] == {"pkg.a"}  # lazy, inside a function
    assert graph["pkg.d"] == {"pkg.a", "pkg.sub"}  # a name that is no module: the package (__init__)
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]


def test_no_import_cycle_among_trtkit_modules():
    graph = import_graph()
    assert len(graph) > 40 and "trtkit.training.loop" in graph["trtkit.training.runner"]  # the walk saw the tree
    found = cycles(graph)
    assert not found, "import cycles (lazy imports count): " + "; ".join(" -> ".join(c) for c in found)


def test_no_module_over_450_lines():
    sizes = {}
    for name, path in module_files(ROOT, PACKAGE).items():
        with open(path) as handle:
            sizes[name] = len(handle.read().splitlines())
    assert len(sizes) > 40
    too_long = sorted("{} ({} lines)".format(n, c) for n, c in sizes.items() if c > MAX_LINES)
    assert not too_long, "modules over {} lines: {}".format(MAX_LINES, ", ".join(too_long))
