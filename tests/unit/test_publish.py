"""Publishing without a bucket: URLs, public links, the README rewrite, the key
layout, messages scrubbed of credentials, and whole uploads to a local path."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from dbtester.config import load_test_case_text
from dbtester.errors import (
    EXIT_BAD_INPUT,
    EXIT_PUBLISH_FAILED,
    ConfigError,
    PublishError,
    PublishInputError,
)
from dbtester.publish import (
    content_type,
    parse_destination,
    plan_uploads,
    public_base,
    publish,
    published_readme,
    retry_command,
    sanitize,
)
from dbtester.report.charts import STANDARD as CHARTS
from tests.support.data import make_results, tree_hashes

# --------------------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("url", "scheme", "bucket", "prefix", "root"),
    [
        (
            "gs://results/2026Q4/write-1M",
            "gs",
            "results",
            "2026Q4/write-1M",
            "results/2026Q4/write-1M",
        ),
        ("s3://my-bucket/a//b/", "s3", "my-bucket", "a/b", "my-bucket/a/b"),
        ("s3://my.bucket", "s3", "my.bucket", "", "my.bucket"),
        ("file:///srv/results/run%201", "file", "", "", "/srv/results/run 1"),
        ("file://localhost/srv/x/", "file", "", "", "/srv/x"),
        ("/srv/results/x/../y", "file", "", "", "/srv/results/y"),
    ],
)
def test_destinations(url: str, scheme: str, bucket: str, prefix: str, root: str) -> None:
    dest = parse_destination(url)
    assert (dest.scheme, dest.bucket, dest.prefix, dest.root) == (scheme, bucket, prefix, root)
    assert dest.target("charts/AVG-CPU.svg") == f"{root.rstrip('/')}/charts/AVG-CPU.svg"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ftp://x/y", "unsupported publish URL 'ftp://x/y'; use gs://, s3://, file://"),
        ("results/x", "unsupported publish URL"),
        ("gs://", "publish URL 'gs://' names no bucket: use gs://BUCKET/PREFIX"),
        ("s3:///prefix", "names no bucket"),
        ("s3://host:9000/x", "'host:9000' is not a bucket name"),
        ("gs://my bucket/x", "'my bucket' is not a bucket name"),
        ("gs://b-1/../x", "'..' are not allowed"),
        ("s3://bucket/x?versionId=3", "has a query or fragment"),
        ("file://server/share", "file:///path"),
        ("file://relative", "file:///path"),
    ],
)
def test_bad_destinations_are_bad_input(url: str, expected: str) -> None:
    with pytest.raises(PublishInputError) as caught:
        parse_destination(url)
    assert expected in str(caught.value)
    assert caught.value.exit_code == EXIT_BAD_INPUT


def test_credentials_in_the_url_are_refused_without_being_repeated() -> None:
    with pytest.raises(PublishInputError) as caught:
        parse_destination("s3://AKIAEXAMPLE:SeCrEtVaLuE@bucket/x?X-Amz-Signature=abc")
    message = str(caught.value)
    assert "carries credentials" in message and "s3://bucket/x" in message
    assert "SeCrEt" not in message and "AKIAEXAMPLE" not in message and "abc" not in message


def test_the_test_case_checks_publish_with_the_same_rules() -> None:
    base = (
        "title: t\nworkload: {type: write, requests: 5}\n"
        "databases: [{id: a, kind: etcd, version: 3.5.17}]\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_test_case_text(base + "publish: {url: 'gs://', public_url: 'ftp://cdn'}\n")
    assert "names no bucket" in str(caught.value)
    assert "must be an http:// or https:// URL" in str(caught.value)
    case = load_test_case_text(
        base + "publish: {url: 's3://b/p', public_url: 'https://cdn.example.com/r/'}\n"
    ).case
    assert case.publish is not None
    assert case.publish.public_url == "https://cdn.example.com/r"


def test_public_links() -> None:
    gs, s3, local = (parse_destination(u) for u in ("gs://b/p/q", "s3://b/p", "file:///srv/r"))
    assert public_base(gs, env={}) == "https://storage.googleapis.com/b/p/q"
    assert public_base(s3, env={}) == "https://b.s3.amazonaws.com/p"
    assert public_base(parse_destination("s3://b"), env={}) == "https://b.s3.amazonaws.com"
    assert public_base(local, env={}) is None
    # an emulator or another S3 endpoint: path style, at that endpoint
    emulator = {"STORAGE_EMULATOR_HOST": "127.0.0.1:9023"}
    assert public_base(gs, env=emulator) == "http://127.0.0.1:9023/b/p/q"
    endpoint = {"AWS_ENDPOINT_URL": "http://127.0.0.1:5000/"}
    assert public_base(s3, env=endpoint) == "http://127.0.0.1:5000/b/p"
    both = {**endpoint, "AWS_ENDPOINT_URL_S3": "https://s3.example.net"}
    assert public_base(s3, env=both) == "https://s3.example.net/b/p"
    # the override wins everywhere, file:// included
    assert public_base(local, "https://cdn.example.com/x/", env={}) == "https://cdn.example.com/x"
    assert public_base(parse_destination("gs://b/run 1"), env={}).endswith("/b/run%201")  # type: ignore[union-attr]
    with pytest.raises(PublishInputError, match="http:// or https://"):
        public_base(gs, "storage.example.com/x", env={})


# --------------------------------------------------------------------------- the README


def test_published_readme_points_every_chart_at_the_bucket(tmp_path: Path) -> None:
    text = (make_results(tmp_path / "r") / "README.md").read_text()
    base = "https://storage.googleapis.com/b/p"
    published = published_readme(text, base)
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", published)
    assert links == [f"{base}/charts/{chart.name}.svg" for chart in CHARTS]
    assert f"[details]({base}/config.yaml)" in published
    # nothing else changes, and the same input always gives the same output
    assert published.replace(f"{base}/", "") == text
    assert published_readme(text, base) == published
    assert published_readme(text, None) == text


def test_published_readme_leaves_absolute_links_code_and_outside_paths() -> None:
    text = (
        "see [etcd](https://etcd.io) and [top](#results) and [up](../other.md)\n"
        '![a](./charts/A.svg "title")\n'
        "```\n| [x](charts/in-a-table) |\n```\n"
        "[ref]: charts/B.svg\n"
    )
    out = published_readme(text, "http://h/b")
    assert "[etcd](https://etcd.io)" in out and "[top](#results)" in out
    assert "[up](../other.md)" in out
    assert '![a](http://h/b/charts/A.svg "title")' in out
    assert "| [x](charts/in-a-table) |" in out
    assert "[ref]: http://h/b/charts/B.svg" in out


# --------------------------------------------------------------------------- layout, types


def test_every_file_once_index_files_last(tmp_path: Path) -> None:
    root = make_results(tmp_path / "r")
    (root / "etcd-v3.5" / "README.md").write_text("a nested README is an ordinary file\n")
    plan = plan_uploads(root)
    keys = [u.rel for u in plan]
    assert sorted(keys) == sorted(tree_hashes(root))
    assert keys[-2:] == ["README.md", "result.json"]
    assert keys[:-2] == sorted(keys[:-2])
    assert "etcd-v3.5/client-latency.npz" in keys and "charts/AVG-CPU.svg" in keys
    assert all(u.size == (root / u.rel).stat().st_size for u in plan)


def test_content_types() -> None:
    assert content_type("charts/AVG-CPU.svg") == "image/svg+xml"
    assert content_type("README.md") == "text/markdown; charset=utf-8"
    assert content_type("db/server-0-agent.log") == "text/plain; charset=utf-8"
    assert content_type("result.json") == "application/json"
    assert content_type("db/client-latency.npz") == "application/octet-stream"


# --------------------------------------------------------------------------- messages


def test_sanitize_scrubs_credentials() -> None:
    env = {
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-marker",
        "HOME": "/root",
        "MY_TOKEN": "tok123456",
    }
    message = (
        "PUT https://user:pw@b.s3.amazonaws.com/p/x?X-Amz-Signature=deadbeef&X-Amz-Credential=AK"
        " failed; Signature=abc123 secret wJalrXUtnFEMI-marker token tok123456 home /root"
    )
    clean = sanitize(message, env)
    for secret in ("user:pw", "deadbeef", "abc123", "wJalrXUtnFEMI-marker", "tok123456", "AK"):
        assert secret not in clean
    assert "https://b.s3.amazonaws.com/p/x failed" in clean
    assert "home /root" in clean  # not every variable is a credential


def test_retry_command_is_exact_and_quoted() -> None:
    assert retry_command(Path("results/x"), "s3://b/p") == "dbtester publish results/x s3://b/p"
    assert retry_command("my results", "gs://b/p", "https://cdn/x") == (
        "dbtester publish 'my results' gs://b/p --public-url https://cdn/x"
    )


# --------------------------------------------------------------------------- to a local path


def test_publish_to_a_path_copies_the_tree_and_touches_nothing(tmp_path: Path) -> None:
    root = make_results(tmp_path / "r")
    before = tree_hashes(root)
    stream = io.StringIO()
    target = tmp_path / "site" / "run1"
    done = publish(root, f"file://{target}", progress=stream)
    assert tree_hashes(target) == before  # relative links: the README too is identical
    assert tree_hashes(root) == before
    assert done.files == len(before) and done.readme == f"{target}/README.md"
    assert done.report == ""  # this directory has no report.html
    assert stream.getvalue().startswith(f"published {len(before)} files (")
    # again: the same keys, no nested folder
    publish(root, str(target), quiet=True)
    assert tree_hashes(target) == before
    (root / "report.html").write_text("<html></html>")
    assert publish(root, str(target), quiet=True).report == f"{target}/report.html"


def test_publish_with_a_public_url_rewrites_only_the_published_readme(tmp_path: Path) -> None:
    root = make_results(tmp_path / "r")
    before = tree_hashes(root)
    target = tmp_path / "site"
    publish(root, str(target), public_url="https://cdn.example.com/run1", quiet=True)
    assert tree_hashes(root) == before
    text = (target / "README.md").read_text()
    assert "](https://cdn.example.com/run1/charts/AVG-CPU.svg)" in text
    assert text == published_readme(
        (root / "README.md").read_text(), "https://cdn.example.com/run1"
    )


def test_refuses_what_is_not_a_results_directory_or_into_itself(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        PublishInputError, match=r"not a results directory \(it has no result.json\)"
    ):
        publish(tmp_path / "empty", str(tmp_path / "out"), quiet=True)
    root = make_results(tmp_path / "r")
    before = tree_hashes(root)
    for inside in (root, root / "published"):
        with pytest.raises(PublishInputError, match="into itself"):
            publish(root, str(inside), quiet=True)
    assert tree_hashes(root) == before


def test_a_failed_upload_names_the_file_and_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dbtester.publish.upload.BACKOFF_S", 0.0)
    root = make_results(tmp_path / "r")
    before = tree_hashes(root)
    (tmp_path / "blocker").write_text("a file where a directory should be\n")
    target = tmp_path / "blocker" / "run1"
    with pytest.raises(PublishError) as caught:
        publish(root, str(target), quiet=True)
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_PUBLISH_FAILED
    first = plan_uploads(root)[0].rel
    assert f"failed at {first} (3 attempts): " in message
    assert f"0 of {len(before)} files went up" in message
    assert f"the local results in {root} are intact" in message
    assert message.endswith(f"Retry with: dbtester publish {root} {target}")
    assert tree_hashes(root) == before


# --------------------------------------------------------------------------- dbtester run


CASE = """\
title: t
workload: {type: write, requests: 5}
databases:
  - {id: a, kind: etcd, version: 3.5.17, endpoints: ["127.0.0.1:2379"]}
  - {id: b, kind: etcd, version: 3.6.8, endpoints: ["127.0.0.1:2379"]}
publish: {url: "file://TARGET"}
"""


@pytest.fixture
def fake_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`dbtester run` whose databases are replaced by a finished results directory:
    what is tested here is what the command does after the run."""
    from dbtester import control
    from dbtester.control import RunOutcome
    from dbtester.results import DatabaseRecord

    def install(failed: dict[str, str]) -> tuple[Path, Path, Path]:
        target = tmp_path / "published"
        config = tmp_path / "case.yaml"
        config.write_text(CASE.replace("TARGET", str(target)))
        out = tmp_path / "out"

        def run_case(loaded, out_dir, *, workers=None, repeat=None, charts=True):
            assert charts  # a published run draws its charts
            make_results(out_dir)
            records = tuple(
                DatabaseRecord(
                    run_id="run",
                    database={"id": db.id},
                    started_unix=0.0,
                    error=failed.get(db.id, ""),
                )
                for db in loaded.case.databases
            )
            return RunOutcome(out_dir, records, "the table\n")

        monkeypatch.setattr(control, "run_case", run_case)
        return config, out, target

    return install


def test_run_publishes_a_passed_run(fake_run, run_cli) -> None:
    config, out, target = fake_run({})
    result = run_cli("run", str(config), "--out", str(out))
    assert result.code == 0, result.err
    assert result.out == "the table\n"
    assert tree_hashes(target) == tree_hashes(out)
    assert f"README: {target}/README.md" in result.err


def test_a_run_to_publish_without_charts_is_refused_before_it_starts(fake_run, run_cli) -> None:
    config, out, target = fake_run({})
    result = run_cli("run", str(config), "--out", str(out), "--no-charts")
    assert result.code == 2, result.err
    assert "a published run carries its charts and report.html: drop --no-charts" in result.err
    assert not out.exists() and not target.exists()


def test_run_does_not_publish_a_failed_run(fake_run, run_cli) -> None:
    config, out, target = fake_run({"b": "member 0 exited"})
    result = run_cli("run", str(config), "--out", str(out))
    assert result.code == 1
    assert not target.exists()
    assert f"Not published; to publish anyway: dbtester publish {out} file://{target}" in result.err


def test_run_with_only_does_not_overwrite_the_whole_case(fake_run, run_cli) -> None:
    config, out, target = fake_run({})
    result = run_cli("run", str(config), "--out", str(out), "--only", "a")
    assert result.code == 0
    assert not target.exists()
    assert "not published (--only ran part of the test case)" in result.err


def test_run_whose_publish_fails_exits_3_with_the_results_complete(
    fake_run, run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dbtester.publish.upload.BACKOFF_S", 0.0)
    config, out, target = fake_run({})
    target.write_text("a file where the destination directory should be\n")
    result = run_cli("run", str(config), "--out", str(out))
    assert result.code == EXIT_PUBLISH_FAILED
    assert result.out == "the table\n"
    assert tree_hashes(out) == tree_hashes(make_results(tmp_path / "expected"))
    assert f"Retry with: dbtester publish {out} file://{target}" in result.err


def test_publish_command_needs_a_results_directory(run_cli, tmp_path: Path) -> None:
    result = run_cli("publish", str(tmp_path), "s3://b/p")
    assert result.code == EXIT_BAD_INPUT
    assert "is not a results directory" in result.err
    result = run_cli("publish", str(tmp_path / "missing"), "s3://b/p")
    assert result.code == EXIT_BAD_INPUT
    result = run_cli("publish", str(make_results(tmp_path / "r")), "ftp://b/p")
    assert result.code == EXIT_BAD_INPUT and "unsupported publish URL" in result.err
