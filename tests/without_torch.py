"""Runs Python as the light install does (``pip install biorank``, no ``train`` extra): torch, transformers and
sentence-transformers cannot be imported. ``python tests/without_torch.py -m biorank.cli ARGS`` or ``-c CODE``."""

from __future__ import annotations

import runpy
import sys

ABSENT = ("torch", "transformers", "sentence_transformers")


class _Absent:
    """A finder that answers for the absent libraries as an environment without them would."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


if __name__ == "__main__":
    sys.meta_path.insert(0, _Absent())
    how, what, *rest = sys.argv[1:]
    sys.argv = [what, *rest]
    if how == "-m":
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    else:
        exec(compile(what, "<without torch>", "exec"), {"__name__": "__main__"})
