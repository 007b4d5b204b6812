"""The tensor package loads without import cycles (tools/tensor_imports.py): Tensor's op mixins (tensor/ops/) reach
Tensor only inside their methods, so every module imports first on its own and no module-level import loops back."""
import importlib.util, re
from tests.paths import REPO

_spec = importlib.util.spec_from_file_location("tensor_imports", REPO / "tools" / "tensor_imports.py")
ti = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ti)

def test_no_import_cycle():
  assert ti.cycles(ti.graph(ti.modules())) == []

def test_cycle_finder_finds_one():
  # (the check itself: a two-module loop and a self-contained chain)
  assert ti.cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]

def test_each_module_imports_alone():
  assert ti.import_failures(ti.modules()) == []

def test_no_setattr_on_tensor():
  # Tensor's methods are defined on the classes it inherits, where a reader and a type checker see them
  assigns = re.compile(r"^Tensor\.\w+(, *Tensor\.\w+)* *=(?!=)|setattr\(Tensor\b", re.M)
  assert [str(p) for p in ti.PKG.rglob("*.py") if assigns.search(p.read_text())] == []
  assert assigns.search("Tensor.cat = _cat") and assigns.search("for n in ns: setattr(Tensor, n, f)")

def test_elementwise_ops_is_a_base_of_tensor_only():
  # ops/elementwise.py tests operands with isinstance(y, ElementwiseOps) in place of isinstance(y, Tensor)
  from baregrad.tensor.tensor import Tensor
  from baregrad.tensor.ops.elementwise import ElementwiseOps
  assert ElementwiseOps.__subclasses__() == [Tensor]
  assert "__dict__" not in dir(Tensor.ones(1))   # every mixin keeps Tensor's slots
