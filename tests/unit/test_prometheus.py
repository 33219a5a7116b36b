"""Reading a server's gauges from its Prometheus text endpoint."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from dbtester.util.net import free_port
from dbtester.util.prometheus import gauges, read_gauges

EXPOSITION = """\
# HELP etcd_mvcc_db_total_size_in_bytes Total size of the underlying database in bytes.
# TYPE etcd_mvcc_db_total_size_in_bytes gauge
etcd_mvcc_db_total_size_in_bytes 2.4576e+06
etcd_mvcc_db_total_size_in_use_in_bytes 1.6384e+06 1732780800000
etcd_mvcc_db_total_size_in_bytes_total 9
etcd_server_has_leader{cluster="a"} 1
etcd_mvcc_db_total_size
"""


def test_gauges_are_read_by_their_exact_name() -> None:
    names = ("etcd_mvcc_db_total_size_in_bytes", "etcd_mvcc_db_total_size_in_use_in_bytes")
    found = gauges(EXPOSITION.encode(), (*names, "etcd_mvcc_db_total_size", "absent"))
    # a timestamp after the value is not the value; a longer name sharing
    # the prefix, a HELP line naming it, a line without a value: none count
    assert found == {names[0]: 2_457_600.0, names[1]: 1_638_400.0}


@pytest.fixture
def server() -> Iterator[str]:
    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = EXPOSITION.encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_read_gauges_over_http_and_its_failures_are_oserrors(server: str) -> None:
    name = "etcd_mvcc_db_total_size_in_bytes"
    assert read_gauges(f"{server}/metrics", (name,), 5.0) == {name: 2_457_600.0}
    with pytest.raises(OSError, match="404"):
        read_gauges(f"{server}/other", (name,), 5.0)
    with pytest.raises(OSError):
        read_gauges(f"http://127.0.0.1:{free_port()}/metrics", (name,), 5.0)  # nothing listens
