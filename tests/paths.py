"""Where the repository is, for tests that run its tools, examples and scripts (tests live in folders by what
they need, so `__file__` alone does not say)."""
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
