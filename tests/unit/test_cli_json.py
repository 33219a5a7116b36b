"""``--json`` on validate, compare and history: real output of each command,
from real results directories (made from the v1 fixture, as the trials and
history tests make theirs; no database runs), validated against the JSON
Schema shipped in ``dbtester/schemas/``. Dropping any field a script relies on
fails the schema, and errors keep their exit codes and go to stderr."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dbtester.cli import main
from dbtester.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUN_FAILED
from dbtester.jsonout import JSON_VERSION
from dbtester.schemas import COMMANDS, load_schema
from tests.conftest import CONFIGS, ROOT
from tests.support.data import IDS, derived_runs, make_trials

V1 = ROOT / "tests" / "fixtures" / "results-v1"


def dbtester(*args: str) -> tuple[int, str, str]:
    """``dbtester ARGS`` through the real entry point: exit code, stdout, stderr
    (usable from module-scoped fixtures, unlike the run_cli fixture)."""
    out, err = io.StringIO(), io.StringIO()
    code = EXIT_OK
    with (
        pytest.MonkeyPatch.context() as patch,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        patch.setattr(sys, "argv", ["dbtester", *args])
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def check(document: dict[str, Any]) -> None:
    """``document`` is valid against the schema of its command."""
    schema = load_schema(document["command"])
    jsonschema.Draft202012Validator(schema).validate(document)


def parsed(out: str) -> dict[str, Any]:
    # strict: a NaN would make the document unreadable for most JSON readers
    document: dict[str, Any] = json.loads(out, parse_constant=pytest.fail)
    return document


# ------------------------------------------------------------------ the documents


@pytest.fixture(scope="module")
def validated() -> dict[str, Any]:
    code, out, err = dbtester("validate", str(CONFIGS / "quickstart.yaml"), "--json")
    assert code == EXIT_OK, err
    return parsed(out)


@pytest.fixture(scope="module")
def invalid(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("invalid") / "bad.yaml"
    text = (CONFIGS / "quickstart.yaml").read_text()
    path.write_text(text.replace("requests: 20000", "requests: 0\n  speed: 3"))
    code, out, err = dbtester("validate", str(path), "--json")
    assert code == EXIT_BAD_INPUT
    assert "2 errors in test case" in err and "speed" in err  # the message, as without --json
    return parsed(out)


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """B's etcd 3.6 about 23% slower than A's: a regression, exit 1."""
    root = tmp_path_factory.mktemp("compare")
    same = {IDS[0]: [1.0, 1.02, 0.98], IDS[1]: [1.0, 1.01, 0.99]}
    a = make_trials(root / "a", same)
    b = make_trials(root / "b", {**same, IDS[1]: [1.3, 1.32, 1.28]})
    code, out, err = dbtester("compare", str(a), str(b), "--json")
    assert code == EXIT_RUN_FAILED, err
    assert "regression(s) beyond 5%" in err  # the gate's message stays on stderr
    return parsed(out)


@pytest.fixture(scope="module")
def history_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four runs a day apart from the v1 fixture, the newest 50% worse."""
    root = tmp_path_factory.mktemp("history")
    return derived_runs(V1, root, [1.0, 1.01, 0.99, 1.5], copy_files=False)


@pytest.fixture(scope="module")
def history(history_root: Path) -> dict[str, Any]:
    code, out, err = dbtester("history", str(history_root), "--check", "--json")
    assert code == EXIT_RUN_FAILED, err
    assert "regression(s) beyond 5%" in err
    return parsed(out)


@pytest.fixture
def documents(
    validated: dict[str, Any],
    invalid: dict[str, Any],
    compared: dict[str, Any],
    history: dict[str, Any],
) -> Iterator[dict[str, dict[str, Any]]]:
    # copies: a test may change them
    yield copy.deepcopy(
        {"validate": validated, "invalid": invalid, "compare": compared, "history": history}
    )


# ------------------------------------------------------------------ the tests


def test_the_schemas_are_draft_2020_12_and_ship_in_the_package() -> None:
    for command in COMMANDS:
        schema = load_schema(command)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["command"] == {"const": command}


def test_validate_json(validated: dict[str, Any]) -> None:
    check(validated)
    assert validated["dbtester_json"] == JSON_VERSION and validated["valid"] is True
    assert [(d["id"], d["kind"], d["version"], d["hosts"]) for d in validated["databases"]] == [
        ("etcd-v3.5", "etcd", "3.5.17", []),
        ("etcd-v3.6", "etcd", "3.6.8", []),
    ]
    workload = validated["workload"]
    assert (workload["type"], workload["requests"]) == ("write", 20000)
    assert workload["summary"].startswith("write 20,000 requests")


@pytest.mark.parametrize("config", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_validate_json_of_every_shipped_test_case(config: Path, run_cli: Any) -> None:
    result = run_cli("validate", str(config), "--json")
    assert result.code == EXIT_OK, result.err
    check(parsed(result.out))


def test_validate_json_names_the_hosts(tmp_path: Path, run_cli: Any) -> None:
    case = tmp_path / "cluster.yaml"
    assert run_cli("init", "--hosts", "10.0.0.1,10.0.0.2,10.0.0.3", "--out", str(case)).code == 0
    result = run_cli("validate", str(case), "--json")
    document = parsed(result.out)
    check(document)
    [database] = document["databases"]
    assert [h["address"] for h in database["hosts"]] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert database["members"] == 3


def test_validate_json_says_how_each_database_is_reached(tmp_path: Path, run_cli: Any) -> None:
    case = tmp_path / "tls.yaml"
    case.write_text(
        "title: t\nworkload: {type: write, requests: 10}\ndatabases:\n"
        '  - {id: a, kind: etcd, version: "3.6.8", endpoints: ["10.0.0.1:2379"],'
        " tls: {ca: ca.pem}, auth: {user: bench, password_env: PW}}\n"
        '  - {id: b, kind: etcd, version: "3.6.8", tls: true}\n'
    )
    document = parsed(run_cli("validate", str(case), "--json").out)
    check(document)
    reached = [(db["tls"], db["user"]) for db in document["databases"]]
    assert reached == [("files", "bench"), ("run", None)]


def test_validate_json_of_an_invalid_test_case(invalid: dict[str, Any]) -> None:
    check(invalid)
    assert invalid["valid"] is False
    assert len(invalid["problems"]) == 2
    assert all(p["line"] > 0 and p["column"] > 0 for p in invalid["problems"])  # located
    assert any("speed" in p["message"] for p in invalid["problems"])


def test_validate_json_of_a_missing_file(tmp_path: Path, run_cli: Any) -> None:
    result = run_cli("validate", str(tmp_path / "none.yaml"), "--json")
    assert result.code == EXIT_BAD_INPUT and "no such file" in result.err
    document = parsed(result.out)
    check(document)
    assert document["problems"][0]["line"] == 0


def test_compare_json(compared: dict[str, Any]) -> None:
    check(compared)
    assert compared["threshold_pct"] == 5.0 and compared["regressions"] >= 1
    by_metric = {(db["id"], m["metric"]): m for db in compared["databases"] for m in db["metrics"]}
    slower = by_metric[(IDS[1], "AVG-THROUGHPUT")]
    assert slower["verdict"] == "slower" and slower["regression"] is True
    assert slower["change_pct"] < -20 and slower["p_value"] < 0.05
    assert (slower["a"]["trials"], slower["b"]["trials"]) == (3, 3)
    steady = by_metric[(IDS[0], "AVG-THROUGHPUT")]
    assert steady["regression"] is False


def test_compare_json_without_a_regression_exits_0(tmp_path: Path, run_cli: Any) -> None:
    a = make_trials(tmp_path / "a", {IDS[0]: [1.0, 1.1]})
    result = run_cli("compare", str(a), str(a), "--json")
    assert result.code == EXIT_OK, result.err
    document = parsed(result.out)
    check(document)
    assert document["regressions"] == 0 and result.err == ""


def test_compare_json_bad_input_exits_2_on_stderr(tmp_path: Path, run_cli: Any) -> None:
    a = make_trials(tmp_path / "a", {IDS[0]: [1.0, 1.1]})
    result = run_cli("compare", str(a), str(a), "--metric", "SPEED", "--json")
    assert result.code == EXIT_BAD_INPUT and "unknown metric SPEED" in result.err
    assert result.out == ""


def test_history_json(history: dict[str, Any]) -> None:
    check(history)
    assert [r["run_id"] for r in history["runs"]] == [f"run-{k}" for k in range(4) for _ in IDS]
    first = history["runs"][0]
    assert set(first["metrics"]) == set(history["metrics"])
    assert first["metrics"]["AVG-THROUGHPUT"]["values"] == [
        first["metrics"]["AVG-THROUGHPUT"]["mean"]
    ]
    verdicts = history["check"]["verdicts"]
    assert {v["newest_run"] for v in verdicts} == {"run-3"}
    assert all(v["regression"] for v in verdicts if v["metric"] == "AVG-THROUGHPUT")
    assert history["check"]["regressions"] == sum(v["regression"] for v in verdicts)


def test_history_json_without_check(history_root: Path, tmp_path: Path, run_cli: Any) -> None:
    result = run_cli(
        "history", str(history_root), "--json", "--metric", "Latency p99", "--out", str(tmp_path)
    )
    assert result.code == EXIT_OK, result.err
    document = parsed(result.out)  # the charts' folder is named on stderr, not in it
    check(document)
    assert document["check"] is None and document["metrics"] == ["Latency p99"]
    assert "charts:" in result.err


#: fields a script relies on, by document: dropping any must fail the schema
REQUIRED = [
    *(("validate", (key,)) for key in ("dbtester_json", "command", "path", "valid", "problems")),
    *(("validate", (key,)) for key in ("title", "workload", "databases", "repeat")),
    *(("validate", ("databases", 0, key)) for key in ("id", "kind", "version", "hosts")),
    ("validate", ("workload", "summary")),
    *(("invalid", ("problems", 0, key)) for key in ("file", "line", "column", "message")),
    *(("compare", (key,)) for key in ("dbtester_json", "command", "threshold_pct", "databases")),
    ("compare", ("databases", 0, "metrics")),
    *(
        ("compare", ("databases", 1, "metrics", 0, key))
        for key in ("metric", "a", "b", "change_pct", "p_value", "verdict", "regression")
    ),
    ("compare", ("databases", 1, "metrics", 0, "a", "mean")),
    *(("history", (key,)) for key in ("dbtester_json", "command", "runs", "metrics", "check")),
    *(("history", ("runs", 0, key)) for key in ("run_id", "database", "version", "metrics")),
    ("history", ("runs", 0, "metrics", "AVG-THROUGHPUT", "mean")),
    ("history", ("check", "verdicts")),
    *(
        ("history", ("check", "verdicts", 0, key))
        for key in ("database", "metric", "change_pct", "p_value", "verdict", "regression")
    ),
]


@pytest.mark.parametrize(("name", "path"), REQUIRED, ids=str)
def test_dropping_a_required_field_fails_the_schema(
    documents: dict[str, dict[str, Any]], name: str, path: tuple[str | int, ...]
) -> None:
    document = documents[name]
    schema = load_schema(document["command"])  # before `command` itself may go
    jsonschema.Draft202012Validator(schema).validate(document)
    parent: Any = document
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(document)


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_a_number_that_is_not_finite_is_refused_at_its_line(
    value: str, tmp_path: Path, run_cli: Any
) -> None:
    """YAML's .inf and .nan are floats; no key takes one (the --json document
    could not even say it), so validate refuses them where they are written."""
    path = tmp_path / "inf.yaml"
    text = (CONFIGS / "quickstart.yaml").read_text()
    path.write_text(text.replace("connections: 10", f"connections: 10\n  rate: {value}"))
    result = run_cli("validate", str(path), "--json")
    assert result.code == EXIT_BAD_INPUT, result.err
    document = parsed(result.out)
    check(document)
    (problem,) = document["problems"]
    assert problem["line"] > 0 and "finite number" in problem["message"], problem
    assert f"{path}:{problem['line']}:" in result.err
