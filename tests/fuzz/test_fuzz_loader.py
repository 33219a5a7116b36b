"""Fuzz the test-case loader, both formats: ``dbtester validate FILE`` exits 0
or 2 with ``file:line:col`` problems inside the file, never a traceback, and
no input allocates much.

Inputs: structured mutations of real test cases (``configs/*.yaml``, the
original format's ``tests/fixtures/legacy/*.yaml``), text mutations of those
and of the hostile seeds in ``tests/fuzz/corpus/loader/``, and raw text/bytes.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import strategies as st

from dbtester.config import Loaded, load_test_case
from dbtester.config import legacy as legacy_format
from dbtester.config.load import load_test_case_text
from dbtester.config.model import SCHEMA_KEYS
from dbtester.databases import KINDS
from dbtester.errors import ConfigError
from tests.conftest import CONFIGS, LEGACY
from tests.fuzz.engine import budget, fuzz
from tests.fuzz.mutate import YAML_TOKENS, mutate_data, mutate_text

pytestmark = pytest.mark.fuzz

CORPUS = Path(__file__).parent / "corpus" / "loader"
#: what loading one test case may allocate at its peak (inputs here are small)
PEAK_BYTES = 64 * 1024 * 1024

REAL = sorted(CONFIGS.glob("*.yaml")) + sorted(LEGACY.glob("*.yaml"))
SEEDS = REAL + sorted(CORPUS.iterdir())
PARSED = [(p.name, yaml.safe_load(p.read_text())) for p in REAL]
TEXTS = [(p.name, p.read_bytes().decode("utf-8", "replace")) for p in SEEDS]

KEYS = sorted(
    {k for keys in SCHEMA_KEYS.values() for k in keys}
    | legacy_format.TOP_KEYS
    | legacy_format.CLIENT_KEYS
    | legacy_format.DB_KEYS
    | set(legacy_format.OPTION_KEYS)
    | legacy_format.STEP_KEYS
    | {f for kind in KINDS.values() for f in kind.flags_model.model_fields}
    | {f for kind in KINDS.values() for f in kind.client_model.model_fields}
    | {"etcd__v3_5", "zookeeper__r3_8", "consul__v1_22", "<<"}
)


def _dump(draw: st.DataObject, data: Any) -> str:
    style = draw.draw(st.sampled_from(["block", "flow", "json"]), label="style")
    if style == "json":
        try:
            return json.dumps(data)
        except (ValueError, TypeError):  # a cycle, or keys JSON cannot have
            pass
    return yaml.safe_dump(
        data,
        sort_keys=False,
        default_flow_style=style == "flow",
        allow_unicode=draw.draw(st.booleans(), label="unicode"),
    )


def make_input(draw: st.DataObject) -> bytes:
    how = draw.draw(st.sampled_from(["structured", "text", "raw", "tokens"]), label="how")
    if how == "structured":
        _name, data = draw.draw(st.sampled_from(PARSED), label="seed")
        text = _dump(draw, mutate_data(draw, data, KEYS))
        if draw.draw(st.booleans(), label="then text"):
            text = mutate_text(draw, text, max_ops=2)
    elif how == "text":
        _name, seed = draw.draw(st.sampled_from(TEXTS), label="seed")
        text = mutate_text(draw, seed)
    elif how == "tokens":
        words = st.sampled_from([*YAML_TOKENS, *KEYS, "1", "x", "a", " "])
        text = "".join(draw.draw(st.lists(words, max_size=40), label="tokens"))
    else:
        if draw.draw(st.booleans(), label="bytes"):
            return draw.draw(st.binary(max_size=300), label="raw bytes")
        text = draw.draw(st.text(max_size=300), label="raw text")
    return text.encode("utf-8", "surrogatepass")


def check_input(path: Path, content: bytes, run_cli: Any) -> None:
    """The loader's contract for one file."""
    path.write_bytes(content)
    tracemalloc.start()
    try:
        outcome: Loaded | ConfigError = load_test_case(path)
    except ConfigError as exc:
        outcome = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"loading {len(content)} bytes peaked at {peak / 1e6:.0f} MB"
    text = content.decode("utf-8", "replace")
    lines = 1 + sum(text.count(c) for c in "\n\r\x85\u2028\u2029")  # YAML's line breaks
    if isinstance(outcome, ConfigError):
        assert outcome.problems and outcome.exit_code == 2
        for problem in outcome.problems:
            assert problem.file == str(path)
            assert 0 <= problem.line <= lines + 1, (problem, lines)
            assert problem.line == 0 or problem.column >= 1, problem
            assert problem.message and "\n" not in problem.message, problem
    else:
        # what loads survives the trip through YAML that `dbtester convert` makes
        raw = yaml.safe_dump(outcome.case.to_raw(), sort_keys=False)
        assert load_test_case_text(raw, "round-trip").case == outcome.case
    result = run_cli("validate", str(path))
    assert "Traceback" not in result.err
    assert result.code == (0 if isinstance(outcome, Loaded) else 2), result.err
    if result.code == 2:
        assert result.err.startswith("dbtester: error: "), result.err
        assert result.out == ""


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.name)
def test_seed_corpus(tmp_path: Path, run_cli: Any, seed: Path) -> None:
    check_input(tmp_path / seed.name, seed.read_bytes(), run_cli)


def test_fuzz_loader(tmp_path: Path, run_cli: Any) -> None:
    path = tmp_path / "case.yaml"

    def check(draw: st.DataObject) -> None:
        check_input(path, make_input(draw), run_cli)

    fuzz("loader", st.data(), check, budget())
