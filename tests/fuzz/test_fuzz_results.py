"""Fuzz the results-directory readers: a corrupt or hostile directory gives
ResultsError (exit 2) naming a file inside it, never a traceback, a hang, a
read outside the directory or a large allocation; what the readers accept
the analysis can use.

Inputs: mutated copies of ``tests/fixtures/results-v1`` (a real run written by
schema version 1): JSON and YAML mutated as data and as text, CSV cells and
columns, the numpy arrays of ``client-latency.npz`` (dtypes, shapes, lengths,
the outcome table, a forged header declaring a huge array) and its bytes, and
the file system (missing files, directories, FIFOs, devices and loops where
files should be). ``tests/fuzz/corpus/results/<case>/`` holds overlays: files
that replace the fixture's, each a crash once found.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import signal
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import strategies as st

from dbtester.analyze import analyze
from dbtester.errors import ResultsError
from dbtester.results import CLIENT_COLUMNS, SERVER_COLUMNS, Records, ResultsDir, read_metrics
from dbtester.results.schema import upgrade
from tests.conftest import ROOT
from tests.fuzz.engine import budget, fuzz
from tests.fuzz.mutate import hostile_values, mutate_bytes, mutate_data, mutate_text, rarely

pytestmark = pytest.mark.fuzz

FIXTURE = ROOT / "tests" / "fixtures" / "results-v1"
CORPUS = Path(__file__).parent / "corpus" / "results"
BASE: dict[str, bytes] = {
    p.relative_to(FIXTURE).as_posix(): p.read_bytes() for p in FIXTURE.rglob("*") if p.is_file()
}
JSON_FILES = sorted(r for r in BASE if r.endswith(".json"))
CSV_FILES = sorted(r for r in BASE if r.endswith(".csv") and "/" in r)
NPZ_FILES = sorted(r for r in BASE if r.endswith(".npz"))
ARRAYS = ("due_ns", "latency_ns", "service_ns", "code", "step", "codes")
#: a reader that takes longer than this on a directory of this size hangs
HANG_S = 60


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


KEYS = sorted(
    {k for r in JSON_FILES for k in _keys(json.loads(BASE[r]))}
    | _keys(yaml.safe_load(BASE["config.yaml"]))
)


# ---------------------------------------------------------------------- what goes on disk


class Special:
    """Something other than a regular file where a file was."""

    def __init__(self, kind: str, target: str = "") -> None:
        self.kind = kind
        self.target = target

    def __repr__(self) -> str:
        return f"Special({self.kind!r}, {self.target!r})"


Tree = dict[str, "bytes | Special"]


def write_tree(root: Path, tree: Tree) -> None:
    for rel, content in sorted(tree.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content.kind == "dir":
            path.mkdir(exist_ok=True)
            (path / "x").write_text("x")
        elif content.kind == "fifo":
            os.mkfifo(path)
        elif content.kind == "symlink":
            path.symlink_to(content.target)


def overlay(case: Path) -> Tree:
    """The fixture with the files of a corpus case laid over it (an empty file
    named ``<name>.deleted`` deletes ``<name>``)."""
    tree: Tree = dict(BASE)
    for path in sorted(p for p in case.rglob("*") if p.is_file()):
        rel = path.relative_to(case).as_posix()
        if rel.endswith(".deleted"):
            tree.pop(rel.removesuffix(".deleted"), None)
        elif rel.endswith(".symlink"):
            tree[rel.removesuffix(".symlink")] = Special("symlink", path.read_text().strip())
        else:
            tree[rel] = path.read_bytes()
        for parent in Path(rel).parents:  # a file laid where the fixture has a directory
            tree.pop(parent.as_posix(), None)
    for rel in [r for r in tree if any(o.startswith(r + "/") for o in tree)]:
        tree[rel] = Special("dir")  # ... or a directory where it has a file
    return tree


# ---------------------------------------------------------------------- mutations


def _mutate_json(draw: st.DataObject, blob: bytes) -> bytes:
    how = draw.draw(st.sampled_from(["data", "text", "special"]), label="json how")
    if how == "data":
        try:
            data = mutate_data(draw, json.loads(blob), KEYS, shared=False)
            return json.dumps(data, indent=draw.draw(st.sampled_from([None, 2]))).encode()
        except (ValueError, RecursionError):  # mutated before into something else
            how = "text"
    if how == "text":
        text = blob.decode("utf-8", "replace")
        return mutate_text(draw, text).encode("utf-8", "surrogatepass")
    return draw.draw(
        st.sampled_from(
            [
                b"[" * 100_000,
                b'{"schema_version": ' + b"9" * 5000 + b"}",
                b'{"schema_version": 1e999}',
                b'{"schema_version": NaN}',
                b'{"schema_version": 3}',
                b'{"schema_version": 0}',
                b'{"schema_version": -1}',
                b'{"schema_version": true}',
                b'{"schema": 1}',
                b"{}",
                b"[]",
                b"null",
                b'"x"',
                b"\xff\xfe{}",
                b"",
            ]
        ),
        label="json special",
    )


def _mutate_yaml(draw: st.DataObject, blob: bytes) -> bytes:
    if draw.draw(st.booleans(), label="yaml as data"):
        try:
            data = mutate_data(draw, yaml.safe_load(blob), KEYS)
            return yaml.safe_dump(data, sort_keys=False).encode("utf-8", "surrogatepass")
        except Exception:  # mutated before into something that is no longer YAML
            pass
    text = blob.decode("utf-8", "replace")
    return mutate_text(draw, text).encode("utf-8", "surrogatepass")


CELLS = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "",
    "abc",
    "1e400",
    "-1e400",
    "-1",
    "9" * 30,
    "0x10",
    " 1",
    '"',
    "1,2",
    "1e-400",
    "-0",
    "TRUE",
    "9223372036854775808",
    "-9223372036854775809",
]


def _mutate_csv(draw: st.DataObject, blob: bytes) -> bytes:
    rows = list(csv.reader(blob.decode("utf-8", "replace").splitlines()))
    for _ in range(draw.draw(st.integers(1, 3), label="csv ops")):
        op = draw.draw(
            st.sampled_from(
                ["cell", "drop-col", "rename-col", "dup-col", "no-header", "rows", "ragged", "dup"]
            ),
            label="csv op",
        )
        if not rows:
            break
        width = len(rows[0])
        j = draw.draw(st.integers(0, max(0, width - 1)), label="column")
        if op == "cell" and len(rows) > 1:
            i = draw.draw(st.integers(1, len(rows) - 1), label="row")
            if j < len(rows[i]):
                rows[i][j] = draw.draw(
                    st.sampled_from(CELLS) | st.text(max_size=8) | st.integers().map(str),
                    label="cell",
                )
        elif op == "drop-col":
            rows = [r[:j] + r[j + 1 :] for r in rows]
        elif op == "rename-col" and width:
            rows[0][j] = draw.draw(st.sampled_from([*SERVER_COLUMNS, "", "x"]), label="name")
        elif op == "dup-col":
            rows = [[*r, r[j]] if j < len(r) else r for r in rows]
        elif op == "no-header":
            rows = rows[1:]
        elif op == "rows":
            keep = draw.draw(st.integers(0, len(rows)), label="keep rows")
            rows = rows[:keep]
        elif op == "ragged":
            rows.append([*rows[-1], "1"])
        elif op == "dup":
            rows = rows + rows[1:] if draw.draw(st.booleans()) else rows[:1] + rows[:0:-1]
    text = "\n".join(",".join(r) for r in rows) + "\n"
    if draw.draw(st.booleans(), label="csv text too"):
        text = mutate_text(draw, text, max_ops=2)
    return text.encode("utf-8", "surrogatepass")


def _forged_npy(shape: tuple[int, ...], dtype: str = "<i8") -> bytes:
    """An .npy member whose header declares ``shape`` but holds 8 bytes."""
    header = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {shape!r}, }}"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(8)


def _check_declared_sizes_for_harness(blob: bytes) -> None:
    """Refuse (before numpy allocates) an archive a forged header made."""
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        for member in archive.infolist():
            with archive.open(member) as handle:
                np.lib.format.read_magic(handle)
                shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
            if int(np.prod(shape, dtype=object)) * dtype.itemsize > member.file_size:
                raise ValueError("forged")


def _npz(arrays: dict[str, Any], compressed: bool) -> bytes:
    out = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(out, **arrays)
    return out.getvalue()


def _array_variant(draw: st.DataObject, array: Any) -> Any:
    how = draw.draw(
        st.sampled_from(
            ["short", "empty", "float", "int32", "2d", "0d", "negative", "extreme", "object"]
        ),
        label="array variant",
    )
    # A variant of a variant: what an earlier mutation made 0-d or 2-d is
    # flattened first, so that every variant applies to any array.
    array = np.asarray(array).reshape(-1)
    if how == "short":
        return array[: draw.draw(st.integers(0, max(0, len(array) - 1)), label="length")]
    if how == "empty":
        return array[:0]
    if how == "float" and array.dtype.kind in "iuf":
        return array.astype(np.float64)
    if how == "int32" and array.dtype.kind in "iuf":
        return array.astype(np.int32)
    if how == "2d":
        return array[: len(array) // 2 * 2].reshape(2, -1)
    if how == "0d":
        return np.array(array[0] if len(array) else 0, dtype=array.dtype)
    if how == "negative" and array.dtype.kind == "i":
        return -np.abs(array) - 1
    if how == "extreme" and array.dtype.kind in "iu":
        info = np.iinfo(array.dtype)
        return np.full_like(array, draw.draw(st.sampled_from([info.max, info.min, 0])))
    if how == "object":
        return np.array([None] * len(array), dtype=object)
    return array


CODES = [
    [],
    ["x"],
    ["ok"],
    ["", "ok"],
    ["ok", "timeout", "UNAVAILABLE"],
    ["ok"] * 300,
    [1, 2],
    [["ok"]],
]


def _mutate_npz(draw: st.DataObject, blob: bytes) -> bytes:
    try:
        _check_declared_sizes_for_harness(blob)
        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except Exception:  # mutated before beyond reading: mutate its bytes again
        return mutate_bytes(draw, blob)
    op = draw.draw(
        st.sampled_from(["array", "codes", "codes-0d", "drop", "extra", "forged", "bytes"]),
        label="npz op",
    )
    if not arrays:
        return mutate_bytes(draw, blob)
    name = draw.draw(st.sampled_from(sorted(arrays)), label="array")
    if op == "array":
        arrays[name] = _array_variant(draw, arrays[name])
    elif op == "codes":
        arrays["codes"] = np.array(draw.draw(st.sampled_from(CODES), label="codes"))
    elif op == "codes-0d":
        arrays["codes"] = np.array("ok")
    elif op == "drop":
        arrays.pop(name)
    elif op == "extra":
        arrays["junk"] = np.zeros(3)
    elif op == "forged":
        shape = draw.draw(
            st.sampled_from([(2**40,), (2**62,), (3000, 3000, 3000), (-1,), (1, 2**61)]),
            label="declared shape",
        )
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as archive:
            for key, value in arrays.items():
                if key == name:
                    archive.writestr(f"{key}.npy", _forged_npy(shape))
                else:
                    member = io.BytesIO()
                    np.save(member, value)
                    archive.writestr(f"{key}.npy", member.getvalue())
        return out.getvalue()
    packed = _npz(arrays, draw.draw(st.booleans(), label="compressed"))
    if op == "bytes":
        packed = mutate_bytes(draw, packed)
    return packed


SPECIALS = [
    Special("dir"),
    Special("fifo"),
    Special("symlink", "/dev/zero"),
    Special("symlink", "/dev/urandom"),
    Special("symlink", "loop"),
    Special("symlink", "nowhere"),
]


def _file_system_op(draw: st.DataObject, tree: Tree, rel: str) -> Tree:
    """Something other than changed content: a file gone, a special file, a
    stray file, a database's directory gone, or something where rendering writes."""
    how = draw.draw(
        st.sampled_from(["delete", "special", "stray", "no-db", "in the way"]), label="fs"
    )
    if how == "delete":
        del tree[rel]
    elif how == "special":
        special = draw.draw(st.sampled_from(SPECIALS), label="special")
        if special.target == "loop":
            special = Special("symlink", Path(rel).name)
        tree[rel] = special
    elif how == "stray":
        index = draw.draw(st.sampled_from(["7", "0007", "99999999999999999999", "٣"]))
        tree[f"etcd-v3.5/server-{index}-metrics.csv"] = draw.draw(
            st.sampled_from([BASE[CSV_FILES[-1]], b"", b"x\n1\n"]), label="stray"
        )
    elif how == "no-db":
        db = draw.draw(st.sampled_from(["etcd-v3.5", "etcd-v3.6"]), label="db")
        tree = {k: v for k, v in tree.items() if not k.startswith(db + "/")}
    else:  # a file where the charts go, a directory where a file goes
        where = draw.draw(
            st.sampled_from(["charts", ".README.md.tmp", "README.md", "summary.txt"]),
            label="in the way",
        )
        tree[where] = b"x" if where == "charts" else Special("dir")
    return tree


def _content_op(draw: st.DataObject, rel: str, content: bytes) -> bytes:
    if rel.endswith(".json"):
        return _mutate_json(draw, content)
    if rel.endswith(".yaml"):
        return _mutate_yaml(draw, content)
    if rel.endswith(".csv") and "/" in rel:
        return _mutate_csv(draw, content)
    if rel.endswith(".npz"):
        return _mutate_npz(draw, content)
    return content  # summary.txt and summary.csv are only written


def make_tree(draw: st.DataObject) -> Tree:
    seeds = sorted(p for p in CORPUS.iterdir() if p.is_dir()) if CORPUS.exists() else []
    use_seed = seeds and rarely(draw, "from corpus", 5)
    tree: Tree = overlay(draw.draw(st.sampled_from(seeds), label="seed")) if use_seed else {**BASE}
    for _ in range(draw.draw(st.integers(1, 3), label="file ops")):
        rel = draw.draw(st.sampled_from(sorted(tree)), label="file")
        content = tree[rel]
        if rarely(draw, "file system", 4):
            tree = _file_system_op(draw, tree, rel)
        elif isinstance(content, bytes):
            tree[rel] = _content_op(draw, rel, content)
    return tree


# ---------------------------------------------------------------------- properties


@contextlib.contextmanager
def hang_guard(seconds: int = HANG_S) -> Iterator[None]:
    """A reader that blocks (a FIFO, a device) fails the example instead of
    hanging the harness."""

    def alarm(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still reading after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Opened:
    """Every file opened while active (Python's 'open' audit event)."""

    active: list[str] | None = None
    installed = False

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if cls.active is not None and event == "open" and isinstance(args[0], str | Path):
            cls.active.append(os.path.normpath(os.path.abspath(args[0])))

    @classmethod
    @contextlib.contextmanager
    def recording(cls) -> Iterator[list[str]]:
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True
        cls.active = []
        try:
            yield cls.active
        finally:
            cls.active = None


#: where Python and its libraries read from while a reader runs (lazy imports,
#: time zones, numpy's and pandas' look at the CPU quota)
PYTHON_DIRS = tuple(
    os.path.normpath(p) + os.sep
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, "/usr/share/zoneinfo", "/sys", "/proc"}
)


def inside(path: Path, root: Path) -> bool:
    normal = os.path.normpath(os.path.abspath(path))
    return normal == str(root) or normal.startswith(str(root) + os.sep)


def check_reader(root: Path, tree: Tree) -> None:
    """ResultsDir.load(): ResultsError naming a file inside ``root``, or data the
    analysis can use; nothing outside ``root`` opened; no hang."""
    with hang_guard(), Opened.recording() as opened:
        try:
            results = ResultsDir(root).load()
        except ResultsError as exc:
            assert exc.exit_code == 2
            assert inside(exc.path, root), f"names {exc.path}, outside {root}: {exc}"
            assert str(exc).startswith(str(exc.path)), exc
            assert "\n" not in str(exc), exc
            results = None
        if results is not None:
            analyze(results)
    strays = [p for p in opened if not inside(Path(p), root) and not p.startswith(PYTHON_DIRS)]
    assert not strays, f"opened outside the results directory: {strays}"


def check_pieces(draw: st.DataObject, root: Path) -> None:
    """The readers one by one, on content the directory walk may never reach."""
    path = root / "piece"
    with hang_guard():
        value = draw.draw(hostile_values(KEYS), label="json value")
        try:
            assert isinstance(upgrade(value, path), dict)
        except ResultsError as exc:
            assert exc.path == path
        what = draw.draw(st.sampled_from(["csv", "npz"]), label="piece")
        if what == "csv":
            content = _mutate_csv(draw, BASE[draw.draw(st.sampled_from(CSV_FILES))])
            path.write_bytes(content)
            columns = draw.draw(st.sampled_from([SERVER_COLUMNS, CLIENT_COLUMNS]), label="cols")
            try:
                read_metrics(path, columns)
            except ResultsError as exc:
                assert exc.path == path
        else:
            path.write_bytes(_mutate_npz(draw, BASE[NPZ_FILES[0]]))
            try:
                records = Records.load(path)
            except ResultsError as exc:
                assert exc.path == path
            else:
                records.counts()


def _fresh(base: Path) -> Path:
    """An empty results directory, next to a copy of the fixture's database
    data ("outside") that an id such as '../outside/etcd-v3.5' would reach."""
    outside = base / "outside"
    if not outside.exists():
        shutil.copytree(FIXTURE, outside)
    root = base / "run"
    if root.exists() or root.is_symlink():
        shutil.rmtree(root)
    root.mkdir()
    return root.resolve()


def readers_example(base: Path) -> Callable[[st.DataObject], None]:
    def check(draw: st.DataObject) -> None:
        root = _fresh(base)
        tree = make_tree(draw)
        write_tree(root, tree)
        check_reader(root, tree)
        check_pieces(draw, root)

    return check


def analyze_cli_example(base: Path, run_cli: Any) -> Callable[[st.DataObject], None]:
    def check(draw: st.DataObject) -> None:
        root = _fresh(base)
        write_tree(root, make_tree(draw))
        with hang_guard(4 * HANG_S):
            result = run_cli("analyze", str(root))
        assert "Traceback" not in result.err
        assert result.code in (0, 2), result.err
        if result.code == 2:
            assert result.err.startswith(f"dbtester: error: {root}"), result.err

    return check


@pytest.mark.parametrize(
    "case",
    sorted(p for p in CORPUS.iterdir() if p.is_dir()) if CORPUS.exists() else [],
    ids=lambda p: p.name,
)
def test_seed_corpus(tmp_path: Path, run_cli: Any, case: Path) -> None:
    root = _fresh(tmp_path)
    tree = overlay(case)
    write_tree(root, tree)
    check_reader(root, tree)
    with hang_guard(4 * HANG_S):
        result = run_cli("analyze", str(root))
    assert "Traceback" not in result.err
    assert result.code in (0, 2), result.err


def test_fuzz_results_readers(tmp_path: Path) -> None:
    fuzz("results readers", st.data(), readers_example(tmp_path), budget(0.5))


def test_fuzz_analyze_command(
    tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command on hostile directories: its readers, the analysis, the
    table, README, result.json and Parquet. The SVG charts and report.html
    cost seconds an example, so here they are not drawn: the seed corpus
    (test_seed_corpus) draws them for every hostile case in it, and
    tests/unit/test_report_html.py tests the report on hostile figures."""
    import dbtester.report.charts
    import dbtester.report.interactive

    # render() imports these when it draws: patch them where they live
    monkeypatch.setattr(dbtester.report.charts, "render_charts", lambda *args, **kwargs: None)
    monkeypatch.setattr(
        dbtester.report.interactive, "render_html_report", lambda *args, **kwargs: ""
    )
    fuzz("dbtester analyze", st.data(), analyze_cli_example(tmp_path, run_cli), budget(0.5))
