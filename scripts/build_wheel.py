"""Build dbtester's wheel, the load engine compiled inside, into ``dist/``:
what a machine without a Rust toolchain installs (``pipx install
dist/dbtester-*.whl``). ``make wheel`` runs it.

It is the wheel ``dbtester agents up`` builds for the servers (from a clean
copy of the source tree, its build backend and every dependency's wheel
cached under ``$DBTESTER_HOME/wheelhouse``), so the two never differ.

    python scripts/build_wheel.py [--out dist] [--with-dependencies]

``--with-dependencies`` copies the dependencies' wheels beside it, for a
machine with no route to PyPI: ``pip install --no-index --find-links dist
dist/dbtester-*.whl``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbtester.remote.wheels import build_wheelhouse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("dist"))
    parser.add_argument("--with-dependencies", action="store_true")
    args = parser.parse_args()
    house = build_wheelhouse(say=lambda line: print(line, file=sys.stderr))
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("dbtester-*.whl"):
        old.unlink()  # one dbtester wheel: the one just built
    wheel = Path(shutil.copy2(house.dbtester_wheel, args.out))
    if args.with_dependencies:
        for dependency in house.directory.glob("*.whl"):
            shutil.copy2(dependency, args.out)
    size = wheel.stat().st_size / 1e6
    print(f"{wheel} ({size:.1f} MB): pipx install {wheel}")


if __name__ == "__main__":
    main()
