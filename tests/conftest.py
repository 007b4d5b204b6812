"""Make `tests.helpers` importable however pytest is started (`pytest`, `python -m pytest`, from any directory)."""
import os, sys
_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _root not in sys.path: sys.path.insert(0, _root)
