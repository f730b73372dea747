#!/usr/bin/env python3
"""Import lint of a Python package: no import cycle among its modules. Reads the sources only
(ast, standard library; nothing is imported), so it needs neither torch nor the library.

    python3 scripts/check_python_imports.py [PACKAGE_DIR]     (default python/arfusion)

Every import statement counts, those inside functions included (an import moved into a function
hides a cycle from the interpreter, not from the reader). A module importing `a.b.c` (or `from
a.b import c` where c is a module) depends on that module only: the parents an import implies
are the package's own business, but a module naming a package explicitly depends on its
__init__. Exit 1 naming each cycle (a strongly connected set of modules, and one closed path
through it), 0 when the graph has none. Run by scripts/check_layers.sh.
"""

import ast
import pathlib
import sys


def module_names(package_dir: pathlib.Path) -> dict:
    """{dotted module name: path} of every .py file of the package."""
    root = package_dir.name
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([root] + parts)] = path
    return out


def _resolve(importer: str, is_package: bool, level: int, module) -> str:
    """The absolute name a (relative) import names."""
    if level == 0:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([module] if module else []))


def imports_of(name: str, path: pathlib.Path, modules: dict) -> set:
    """The package's modules that module `name` imports anywhere in its source."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(name, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:          # from pkg import module
                    found.add(sub)
                elif target in modules:     # from module import name
                    found.add(target)
    found.discard(name)
    return found


def cycles(graph: dict) -> list:
    """Strongly connected components of more than one module, or of one that imports itself
    (Tarjan), each as a sorted list."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def closed_path(graph: dict, component: list) -> list:
    """One cycle through the component's first module, for the message."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}

    def walk(v):
        for w in sorted(graph[v] & members):
            if w == start and len(path) > 1:
                return True
            if w not in seen:
                seen.add(w)
                path.append(w)
                if walk(w):
                    return True
                path.pop()
        return False

    walk(start)
    return path + [start]


def main(argv) -> int:
    package_dir = pathlib.Path(argv[1] if len(argv) > 1 else
                               pathlib.Path(__file__).resolve().parent.parent / "python" / "arfusion")
    if not (package_dir / "__init__.py").is_file():
        print(f"check_python_imports: {package_dir} is not a package", file=sys.stderr)
        return 2
    modules = module_names(package_dir)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    found = cycles(graph)
    for comp in found:
        print(f"check_python_imports: import cycle among {', '.join(comp)}: "
              + " -> ".join(closed_path(graph, comp)))
    if found:
        return 1
    print(f"check_python_imports: {len(modules)} modules of {package_dir.name}, "
          f"{sum(len(v) for v in graph.values())} imports, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
