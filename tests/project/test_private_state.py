"""No module of the package reaches into another object's private state, PyTorch's included: no
`x._name = ...` or `setattr(x, "_name", ...)`, and no read of `x._name` (or `getattr(x,
"_name")`), where `x` is not `self`, `cls` or a name the module itself defines; nor a touch of
the attributes PyTorch keeps for itself without an underscore (a LambdaLR's `lr_lambdas`, the
skip flag GradScaler hands a fused optimizer). The few uses PyTorch offers no public way around
are allowed below, each with its reason; an allowance no longer used fails too."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "translate"
# PyTorch's own attributes, though their names have no underscore
TORCH_INTERNALS = {"lr_lambdas", "found_inf", "grad_scale"}
ALLOWED = {
    ("translate/fast/linear.py", "t._version"):
        "a tensor's version counter, the one sign of an in-place change (an optimizer step, "
        "load_state_dict) that makes packed weights stale; PyTorch has no public accessor",
    ("translate/fast/linear.py", "torch.ops.mkldnn._reorder_linear_weight"):
        "oneDNN's weight packing, which PyTorch offers only as an underscored op: the fast "
        "engine's reason to exist, tested equal to the textbook path (tests/fast/)",
    ("translate/fast/linear.py", "torch.ops.mkldnn._linear_pointwise"):
        "oneDNN's matmul on packed weights with a fused activation, as above",
    ("translate/training/graphs.py", "torch._foreach_lerp_"):
        "the EMA inside a recorded CUDA graph, its weight a device tensor each replay reads; "
        "PyTorch's public EMA (swa_utils.get_ema_multi_avg_fn, optim.update_ema's) takes a "
        "float, which a recording would freeze, and has no public multi-tensor lerp",
    ("translate/training/optim.py", "optimizer.found_inf"):
        "step_unless: the flag a fused optimizer's kernels read to skip a step on the device, "
        "set as torch.amp.GradScaler sets it (its code expects a caller's grad_scale too); "
        "step() takes no argument for it",
    ("translate/training/optim.py", "optimizer.grad_scale"): "step_unless, as above",
    ("translate/serve/server.py", "os._exit"):
        "a documented function of the os module (exit without finalization): its underscore "
        "marks no privacy",
}


def own_names(tree: ast.Module) -> set[str]:
    """`self`, `cls`, and the names the module binds at its top level (its classes, functions
    and assignments, not its imports): their private attributes are its own."""
    names = {"self", "cls"}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def private_uses(source: str) -> list[tuple[int, str, str]]:
    """(line, "x._name", "read" or "write") for each use in `source` of another object's private
    attribute, or of one of TORCH_INTERNALS."""
    tree = ast.parse(source)
    own, found = own_names(tree), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base, name = node.value, node.attr
            kind = "read" if isinstance(node.ctx, ast.Load) else "write"  # Store, Del
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str)):
            base, name = node.args[0], node.args[1].value
            kind = "read" if node.func.id in ("getattr", "hasattr") else "write"
        else:
            continue
        dunder = name.startswith("__") and name.endswith("__")  # Python's own: __class__
        if (name.startswith("_") and not dunder) or name in TORCH_INTERNALS:
            if not (isinstance(base, ast.Name) and base.id in own):
                found.append((node.lineno, f"{ast.unparse(base)}.{name}", kind))
    return sorted(found)


def uses() -> dict[tuple[str, str], list[str]]:
    """(module path, "x._name") -> ["line: read/write", ...] over the package."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE.parent).as_posix()
        for line, what, kind in private_uses(path.read_text(encoding="utf-8")):
            found.setdefault((module, what), []).append(f"{line}: {kind}")
    return found


def test_no_module_touches_another_objects_private_state():
    stray = {f"{module}: {what} ({', '.join(where)})"
             for (module, what), where in uses().items() if (module, what) not in ALLOWED}
    assert stray == set(), "use the object's public interface (or allow it here, with why)"


def test_every_allowance_is_still_used():
    assert set(ALLOWED) - set(uses()) == set(), "remove the allowance: nothing needs it now"


def test_the_scan_sees_writes_reads_and_calls_and_leaves_own_names_alone():
    source = ("import torch\n"
              "class Box:\n"
              "    _made = 0\n"
              "    def __init__(self, other):\n"
              "        self._x = other._y\n"
              "        other._z = Box._made\n"
              "        setattr(other, '_w', getattr(torch, '_v'))\n"
              "        del other._u\n"
              "        sched.lr_lambdas[0] = None\n"
              "        self.__class__ = other.__class__\n")
    assert private_uses(source) == [
        (5, "other._y", "read"), (6, "other._z", "write"), (7, "other._w", "write"),
        (7, "torch._v", "read"), (8, "other._u", "write"), (9, "sched.lr_lambdas", "read")]
