"""CPU check of the bench scripts CI cannot run (those that need a modern torch and a GPU:
torch_baseline.py, torch_quant_baseline.py, e2e/): every call of a function a script defines, or
imports from a script beside it, binds to that function's signature (number of positional
arguments, keyword names). A signature change that misses a caller then fails here instead of on
the GPU machine, as torch_quant_baseline.py's call of make_inputs once did. Static (ast): nothing
is imported, so torch need not be installed."""
import ast
import copy
import glob
import inspect
import os
import unittest

BENCH = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))


def scripts():
    paths = glob.glob(os.path.join(BENCH, "*.py")) + glob.glob(os.path.join(BENCH, "*", "*.py"))
    return sorted(p for p in paths if os.sep + "tests" + os.sep not in p)


def parse(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path)


def top_level_functions(tree):
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def signature_of(fn):
    """inspect.Signature of an ast.FunctionDef: its parameters, with every default and annotation
    replaced by None (only the binding rules matter)."""
    args = copy.deepcopy(fn.args)
    for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
        if a is not None:
            a.annotation = None
    args.defaults = [ast.Constant(None) for _ in args.defaults]
    args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]
    stub = ast.Module(body=[ast.FunctionDef(name="stub", args=args, body=[ast.Pass()], decorator_list=[],
                                            returns=None, type_params=[])], type_ignores=[])
    ast.fix_missing_locations(stub)
    namespace = {}
    exec(compile(stub, "<signature>", "exec"), namespace)  # noqa: S102 (a def with no body)
    return inspect.signature(namespace["stub"])


def callable_names(path, tree, by_module):
    """Name -> (where, FunctionDef) for the functions a script can call by a plain name: its own
    top-level functions and those it imports with `from <script beside it> import name`."""
    names = {name: (path, fn) for name, fn in top_level_functions(tree).items()}
    here = os.path.dirname(path)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            source = os.path.join(here, node.module.replace(".", os.sep) + ".py")
            if source not in by_module:
                continue
            defs = top_level_functions(by_module[source])
            for alias in node.names:
                if alias.name in defs:
                    names[alias.asname or alias.name] = (source, defs[alias.name])
    return names


def bad_calls(path, tree, by_module):
    names = callable_names(path, tree, by_module)
    problems, checked = [], 0
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue  # *args / **kwargs: not statically known
        where, fn = names[node.func.id]
        checked += 1
        try:
            signature_of(fn).bind(*node.args, **{k.arg: None for k in node.keywords})
        except TypeError as e:
            problems.append(f"{os.path.relpath(path, BENCH)}:{node.lineno}: {node.func.id}(...) "
                            f"defined at {os.path.relpath(where, BENCH)}:{fn.lineno}: {e}")
    return problems, checked


class ScriptCalls(unittest.TestCase):
    def test_every_call_binds_to_its_definition(self):
        by_module = {p: parse(p) for p in scripts()}
        problems, checked = [], 0
        for path, tree in by_module.items():
            p, c = bad_calls(path, tree, by_module)
            problems += p
            checked += c
        self.assertEqual(problems, [])
        # The check must have looked at the scripts it exists for (a glob or parse change that
        # found nothing would pass vacuously).
        self.assertGreater(checked, 50)

    def test_a_missing_argument_is_caught(self):
        tree = ast.parse("def make(a, b, c, *, d=1):\n    pass\n"
                         "make(1, 2)\nmake(1, 2, 3, e=4)\nmake(1, 2, 3, d=4)\n")
        problems, checked = bad_calls(os.path.join(BENCH, "probe.py"), tree, {})
        self.assertEqual(checked, 3)
        self.assertEqual(len(problems), 2)
        self.assertIn("probe.py:3", problems[0])
        self.assertIn("probe.py:4", problems[1])


if __name__ == "__main__":
    unittest.main()
