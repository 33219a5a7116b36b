"""`check:` in a test case: its defaults, and what it may not say, refused
at its line."""

from __future__ import annotations

import pytest
import yaml

from dbtester.config.load import load_test_case_text
from dbtester.util.keys import MAX_CHECKED
from tests.unit.problems import problems_of

CASE = """\
title: t
workload:
  type: write
  requests: 100
  check: {clients: 4}
databases:
  - {id: a, kind: etcd, version: 3.5.17}
"""


def test_defaults_and_round_trip() -> None:
    workload = load_test_case_text(CASE, "case.yaml").case.workload
    assert workload.check is not None
    assert (workload.check.clients, workload.check.keys) == (4, 8)
    assert (workload.check.model, workload.check.on_violation) == ("linearizability", "fail")
    assert workload.check.describe() == (
        "4 checked clients on 8 keys held to linearizability (a violation fails the run)"
    )
    assert workload.as_raw()["check"]["clients"] == 4
    plain = CASE.replace("  check: {clients: 4}\n", "")
    assert "check" not in load_test_case_text(plain, "case.yaml").case.workload.as_raw()


@pytest.mark.parametrize(
    ("check", "words"),
    [
        ("{model: serializability}", "linearizability"),
        ("{clients: 0}", "greater than or equal to 1"),
        (f"{{keys: {MAX_CHECKED + 1}}}", f"less than or equal to {MAX_CHECKED}"),
        ("{on_violation: ignore}", "allowed: 'fail', 'report'"),
        ("{client: 4}", "client"),
    ],
)
def test_what_check_may_not_say(check: str, words: str) -> None:
    problems = problems_of(CASE.replace("{clients: 4}", check))
    assert any(p.startswith("5:") and words in p for p in problems), problems


WATCH = CASE.replace("type: write", "type: watch").replace(
    "  requests: 100\n", "  requests: 100\n  rate: 50\n"
)


def test_a_watch_load_takes_the_watch_model() -> None:
    problems = problems_of(WATCH)
    assert any("check with type: watch takes model: watch" in p for p in problems), problems
    text = WATCH.replace("{clients: 4}", "{model: watch, on_violation: report}")
    check = load_test_case_text(text, "case.yaml").case.workload.check
    assert check is not None and not check.runs_clients
    assert (check.model, check.on_violation) == ("watch", "report")
    assert check.describe() == (
        "every watcher held to the watch guarantees (a violation is reported)"
    )
    # written back (the results' config.yaml) without the checked clients'
    # keys, which model: watch refuses: it loads again
    case = load_test_case_text(text, "case.yaml").case
    raw = case.to_raw()
    assert raw["workload"]["check"] == {"model": "watch", "on_violation": "report"}
    again = load_test_case_text(yaml.safe_dump(raw), "again.yaml").case
    assert again.workload.check == check


@pytest.mark.parametrize(
    ("case", "check", "words"),
    [
        (WATCH, "{model: watch, clients: 4}", "clients set the checked clients"),
        (WATCH, "{model: watch, keys: 2, clients: 2}", "clients and keys set"),
        (CASE, "{model: watch}", "use model: linearizability"),
    ],
)
def test_the_watch_model_only_where_it_means_something(case: str, check: str, words: str) -> None:
    problems = problems_of(case.replace("{clients: 4}", check))
    assert any(words in p for p in problems), problems


KUBERNETES = CASE.replace("type: write", "type: kubernetes\n  informers: 2")


def test_a_kubernetes_load_takes_the_informer_model() -> None:
    text = KUBERNETES.replace("{clients: 4}", "{model: informer, on_violation: report}")
    workload = load_test_case_text(text, "case.yaml").case.workload
    check = workload.check
    assert check is not None and not check.runs_clients
    assert workload.judged_by == check
    assert check.describe() == (
        "every informer's copy held to a fresh list at the end, its events to revision"
        " order (a violation is reported)"
    )
    raw = load_test_case_text(text, "case.yaml").case.to_raw()
    assert raw["workload"]["check"] == {"model": "informer", "on_violation": "report"}
    assert load_test_case_text(yaml.safe_dump(raw), "again.yaml").case.workload.check == check


def test_informers_are_judged_unasked_and_fail_the_run() -> None:
    plain = KUBERNETES.replace("  check: {clients: 4}\n", "")
    workload = load_test_case_text(plain, "case.yaml").case.workload
    assert workload.check is None
    judged = workload.judged_by
    assert judged is not None and (judged.model, judged.on_violation) == ("informer", "fail")
    assert "check" not in workload.as_raw()
    none = plain.replace("  informers: 2\n", "")
    assert load_test_case_text(none, "case.yaml").case.workload.judged_by is None


@pytest.mark.parametrize(
    ("case", "check", "words"),
    [
        (KUBERNETES, "{model: informer, clients: 4}", "model: informer judges the informers"),
        (KUBERNETES, "{model: watch}", "use model: informer"),
        (KUBERNETES.replace("  informers: 2\n", ""), "{model: informer}", "set informers: N"),
        (WATCH, "{model: informer}", "type: watch takes model: watch"),
        (CASE, "{model: informer}", "use model: linearizability"),
    ],
)
def test_the_informer_model_only_where_there_are_informers(
    case: str, check: str, words: str
) -> None:
    problems = problems_of(case.replace("{clients: 4}", check))
    assert any(words in p for p in problems), problems
