"""How much disk does an install of biorank take, light and with each extra?

Makes a virtual environment with the given Python (default Debian's own /usr/bin/python3, as README's first
command does), installs this checkout into it (`pip install .`, or with extras), and measures the environment
with `du`, the empty environment's own pip and setuptools included; it keeps the largest packages. With
``--venv`` it measures an environment that exists instead of making one.

    python -m benchmarks.install_size                       # the light install
    python -m benchmarks.install_size --extras openvino
    python -m benchmarks.install_size --venv /tmp/lightvenv
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import suite

COLUMNS = suite.columns(("install", "install"), ("mb", "MB", ",.0f"), ("packages", "packages", ","),
                        ("largest", "largest (MB)"))
ROOT = Path(__file__).resolve().parents[1]


def _mb(path: Path) -> int:
    return int(subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def measure(venv: Path) -> dict:
    """The environment's size, its package count and its five largest packages."""
    site = next(venv.glob("lib/python3*/site-packages"))
    sizes = {p.name: _mb(p) for p in site.iterdir()
             if p.is_dir() and not p.name.endswith((".dist-info", "__pycache__"))}
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
    listed = subprocess.run([str(venv / "bin" / "pip"), "list", "--format", "freeze"], capture_output=True, text=True)
    return {"mb": _mb(venv), "packages": len(listed.stdout.splitlines()),
            "largest": ", ".join(f"{name} {mb}" for name, mb in largest)}


def main(argv: list[str] | None = None) -> None:
    parser = suite.parser(__doc__, __file__, cluster=False)
    parser.add_argument("--python", default="/usr/bin/python3", help="the interpreter of the environment")
    parser.add_argument("--extras", default="", help="extras to install, comma-separated (default: none)")
    parser.add_argument("--venv", type=Path, default=None, help="measure this environment instead of making one")
    args = parser.parse_args(argv)
    label = f"pip install .[{args.extras}]" if args.extras else "pip install ."
    suite.header(label)
    if args.venv is None:
        made = Path(tempfile.mkdtemp(prefix="biorank-install-size-")) / "venv"
        subprocess.run([args.python, "-m", "venv", str(made)], check=True)
        target = f"{ROOT}[{args.extras}]" if args.extras else str(ROOT)
        subprocess.run([str(made / "bin" / "pip"), "install", "-q", target], check=True, stdout=sys.stderr)
        venv = made
    else:
        venv = args.venv
    rows = [{"install": label, **measure(venv)}]
    suite.record(args, COLUMNS, rows, variant=args.extras.replace(",", "-") or "light",
                 settings={"python": args.python, "extras": args.extras},
                 notes="du -sm of the whole virtual environment, its own pip and setuptools included")


if __name__ == "__main__":
    main()
