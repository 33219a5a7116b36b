"""Reads start only once the data is there: on a 3-member cluster a
serializable read served by a follower that has not applied the seed yet
failed (Consul: HTTP 404 for the first 260 requests of 20,000, which failed
the run). The readiness check waits per endpoint; one that never gets the
data fails the run, named."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dbtester.errors import DbtesterError
from dbtester.load import LoadOptions, run_load, seed_key, wait_readable
from dbtester.results import DatabaseLayout
from dbtester.workloads import workload_of
from tests.standins.etcd import EtcdStandIn
from tests.support.cluster import VERSIONS, cluster, settings_for

pytestmark = pytest.mark.integration

READS = workload_of(
    type="read",
    requests=20_000,
    key_size=64,
    value_size=256,
    clients=100,
    connections=10,
    consistency="serializable",
)


@pytest.mark.parametrize("kind", ["etcd", "zookeeper", "consul"])
def test_serializable_reads_right_after_the_seed_all_succeed(
    kind: str, tmp_path: Path, installed_home
) -> None:
    home = installed_home(kind, VERSIONS[kind])
    with cluster(kind, 3, tmp_path, home) as (peers, _):
        settings = settings_for(peers, consistency="serializable")
        seed_key(kind, settings)
        wait_readable(kind, settings, READS)
        out = DatabaseLayout(tmp_path / "out")
        result = run_load(kind, settings, READS, out, LoadOptions(workers=2, progress=None))
        assert result.records.counts() == {"ok": 20_000}


def test_an_endpoint_that_never_has_the_data_is_named(tmp_path: Path, installed_home) -> None:
    home = installed_home("etcd", VERSIONS["etcd"])
    with cluster("etcd", 1, tmp_path, home) as (peers, _), EtcdStandIn() as elsewhere:
        settings = settings_for(peers, consistency="serializable")
        seed_key("etcd", settings)
        # A second endpoint that is not a member of this cluster: the key is not there.
        both = replace(settings, endpoints=(*settings.endpoints, elsewhere.endpoint))
        with pytest.raises(DbtesterError) as caught:
            wait_readable("etcd", both, READS, wait_s=1.0)
    message = str(caught.value)
    assert elsewhere.endpoint in message and "(wrong-value)" in message
    assert peers[0].address("client") not in message
    assert "never became readable within 1 s (serializable reads)" in message
