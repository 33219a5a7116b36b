"""NATS with JetStream: its key-value store (KV), one bucket replicated on
the members, as users choose it for a lighter store with watches and
compare-and-set.

The members form a NATS cluster (routes between every pair) with JetStream
on; before the load, dbtester makes the bucket ``dbtester`` with one replica
on each member (JetStream's most is 5). A KV key is a subject token path:
the load's key ``k0000012`` is stored as ``k.0000012``, its first character a
token of its own, so that the load's keys, the checked clients' and the
pre-filled ones can each be counted or watched by subject (``k.>``), as
etcd's are by prefix. The load engine speaks NATS itself; this module's own
calls (the bucket, the pre-fill, the count) go through nats-py, and the
leader is read from each member's monitoring port.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field, field_validator

from dbtester.databases.base import (
    KUBERNETES_NEEDS,
    PLAIN,
    Access,
    DatabaseKind,
    EventCall,
    EventFailed,
    LaunchPlan,
    LoadSettings,
    MemberSpec,
    Options,
    Peer,
    reported_version,
    transfer_ends,
)
from dbtester.errors import DbtesterError
from dbtester.install import GoBuild, Installed, Source, SourceUnavailable, go_proxy_versions
from dbtester.util.keys import PREFIX, prefill_batches, prefill_key

__all__ = ["BUCKET", "Nats", "NatsClient", "NatsFlags", "kv_key"]

MODULE = "github.com/nats-io/nats-server/v2"
#: the KV bucket the load writes, and the JetStream stream behind it
BUCKET = "dbtester"
STREAM = f"KV_{BUCKET}"
#: JetStream replicates a stream on at most this many servers
MOST_REPLICAS = 5
#: pre-filled puts in flight at once (each waits for its stream's ack)
PREFILL_IN_FLIGHT = 256
#: how long a new bucket may take before every member's puts reach its stream
BUCKET_READY_S = 30.0
#: the readiness probes' keys are this token and a member's index
PROBE_PREFIX = "r"

_T = TypeVar("_T")


def kv_key(key: str) -> str:
    """The KV key that holds dbtester's ``key``: its first character a token
    of its own (``k0000012`` -> ``k.0000012``), which the load engine does too."""
    return f"{key[:1]}.{key[1:]}"


def _subject(key: str) -> str:
    return f"$KV.{BUCKET}.{key}"


class NatsFlags(Options):
    """nats-server settings; unset means its default."""

    sync_interval: str | None = Field(
        None,
        description="jetstream.sync_interval: how often JetStream syncs its files to disk,"
        " a duration like 100ms, 10s or 2m (NATS's default: 2m); always: an fsync for every"
        " write, as etcd does",
    )

    @field_validator("sync_interval")
    @classmethod
    def _always_or_a_duration(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"always|[1-9][0-9]*(ms|s|m|h)", value):
            raise ValueError(
                f"sync_interval must be always, or a duration such as 100ms, 10s or 2m;"
                f" not {value!r}"
            )
        return value


class NatsClient(Options):
    """The KV bucket dbtester makes before the load."""

    replicas: int | None = Field(
        None,
        ge=1,
        le=MOST_REPLICAS,
        description="Copies of the bucket (default: one on each member; JetStream's most is 5)",
    )
    history: int = Field(1, ge=1, le=64, description="Values kept per key")
    storage: Literal["file", "memory"] = Field("file", description="Where the bucket's stream is")
    allow_direct: bool = Field(
        True,
        description="Direct gets: any replica answers a read (consistency: serializable reads"
        " with them; linearizable ones go through the stream's leader either way)",
    )


class Nats(DatabaseKind):
    name: ClassVar[str] = "nats"
    # client = NATS clients; cluster = routes between servers; monitor = HTTP
    default_ports: ClassVar[Mapping[str, int]] = {"client": 4222, "cluster": 6222, "monitor": 8222}
    flags_model = NatsFlags
    client_model = NatsClient
    protocol: ClassVar[str] = "nats"
    not_found: ClassVar[str] = "key-not-found"
    cannot: ClassVar[Mapping[str, str]] = {
        "kubernetes": KUBERNETES_NEEDS,
        "locks": "NATS KV has no sessions: a lock held by a client that died would never be freed",
    }
    watches: ClassVar[bool] = True
    watch_note: ClassVar[str] = (
        "each watcher is a KV watch of the load's keys (an ordered JetStream consumer"
        " on their subjects, pushed to the watcher's connection)"
    )
    max_members: ClassVar[int | None] = MOST_REPLICAS
    members_note: ClassVar[str] = "a JetStream stream has at most 5 replicas, one per member"
    events: ClassVar[frozenset[str]] = frozenset({"transfer_leader"})
    event_notes: ClassVar[Mapping[str, str]] = {
        "compact": "a KV bucket keeps `history` values per key and drops older ones as it"
        " writes: there is nothing to compact",
        "defrag": "JetStream's files need no defragment",
        "snapshot": "not yet for nats (JetStream's stream backup)",
        "upgrade": "not yet for nats",
    }

    def cannot_with(self, client: Options) -> Mapping[str, str]:
        assert isinstance(client, NatsClient)
        if client.allow_direct:
            return self.cannot
        return {
            **self.cannot,
            "serializable": "serializable reads are direct gets, and the bucket is made"
            " without them (client: allow_direct: false)",
        }

    def run_event(self, event: str, call: EventCall) -> str:
        # the one event it runs (events)
        return _transfer_leader(call)

    def default_description(self, version: str) -> str:
        return f"NATS v{version} (JetStream KV)"

    def launch(self, installed: Installed, member: MemberSpec) -> LaunchPlan:
        flags = member.flags
        assert isinstance(flags, NatsFlags)
        me = member.me
        jetstream: dict[str, Any] = {"store_dir": str(member.data_dir)}
        if flags.sync_interval is not None:
            jetstream["sync_interval"] = flags.sync_interval
        # nats-server reads JSON as its configuration format's subset
        config: dict[str, Any] = {
            "server_name": me.name,
            "host": me.host,
            "port": me.ports["client"],
            "http": me.address("monitor"),
            "jetstream": jetstream,
        }
        if len(member.peers) > 1:
            config["cluster"] = {
                "name": member.cluster_token,
                "host": me.host,
                "port": me.ports["cluster"],
                "routes": [
                    f"nats-route://{p.address('cluster')}" for p in member.peers if p is not me
                ],
            }
        path = member.member_dir / "nats.json"
        argv = [str(installed.path("nats-server")), "--config", str(path)]
        return LaunchPlan(argv, {path: json.dumps(config, indent=2) + "\n"})

    def setup_note(self, flags: Options, client: Options, members: int) -> str | None:
        assert isinstance(flags, NatsFlags) and isinstance(client, NatsClient)
        if flags.sync_interval == "always":
            synced = "at every write (sync_interval: always)"
        else:
            every = flags.sync_interval or "2m, NATS's default"
            synced = f"every {every}, not at each write (sync_interval: always does)"
        return (
            f"JetStream synced its files to disk {synced}; the bucket kept"
            f" {_copies(_replicas(client, members))} in {client.storage} storage"
        )

    def engine_target(self, settings: LoadSettings) -> dict[str, Any]:
        # The engine needs only the bucket; the rest made it (prepare).
        return {
            "protocol": self.protocol,
            "endpoints": list(settings.endpoints),
            "options": {"bucket": BUCKET},
        }

    def prepare(self, settings: LoadSettings) -> str | None:
        client = NatsClient.model_validate(dict(settings.client))
        replicas = _replicas(client, len(settings.endpoints))
        if replicas > len(settings.endpoints):
            raise DbtesterError(
                f"nats: a bucket of {replicas} replicas needs as many members, and there are"
                f" {len(settings.endpoints)}"
            )
        _run(settings, lambda js: _make_bucket(js, client, replicas))
        # A new bucket's stream takes writes once it has a leader and each
        # server knows where to send them; before that a put has no
        # responders, and the load's first writes would fail.
        for member, endpoint in enumerate(settings.endpoints):
            alone = replace(settings, endpoints=(endpoint,))
            _run(alone, functools.partial(_until_writable, member=member))
        made = f"{_copies(replicas)}, {client.storage} storage, history {client.history}"
        return f"bucket {BUCKET}: {made}"

    def serving(self, peer: Peer, timeout: float = 1.0, access: Access = PLAIN) -> bool:
        """/healthz answers 200 once the server serves and its JetStream is
        current (a cluster's meta leader known)."""
        return _monitor(peer, "/healthz", timeout) is not None

    def leader(
        self, peers: Sequence[Peer], timeout: float = 2.0, access: Access = PLAIN
    ) -> int | None:
        """The bucket's stream leader (it orders every write), or while there
        is no bucket yet JetStream's meta leader; any member that answers
        its monitoring port's /jsz names them."""
        names = {peer.name: index for index, peer in enumerate(peers)}
        for peer in peers:
            jsz = _jsz(peer, timeout)
            if jsz is None:
                continue
            leader = _stream_leader(jsz) or jsz.get("meta_cluster", {}).get("leader")
            return names.get(leader) if isinstance(leader, str) else None
        return None

    def count_keys(self, settings: LoadSettings, prefix: bytes = PREFIX) -> int:
        self._only_load_keys(prefix)
        return _run(settings, lambda js: _count(js, f"{PREFIX.decode()}.>"))

    def prefill(
        self, settings: LoadSettings, count: int, value_size: int, advance: Callable[[int], None]
    ) -> None:
        value = b"p" * value_size
        _run(settings, lambda js: _prefill(js, count, value, advance))

    def install_sources(self, version: str) -> list[Source]:
        return [
            GoBuild(
                module=MODULE,
                version=f"v{version}",
                package=MODULE,
                binary="nats-server",
                expected_minutes=2.0,
            )
        ]

    def released_versions(self) -> list[str]:
        return go_proxy_versions(MODULE)

    def verify_install(self, entry: Mapping[str, str], version: str) -> None:
        have = reported_version([entry["nats-server"], "--version"], r"nats-server: v(\S+)")
        if have != version:
            raise SourceUnavailable(f"the binary reports nats-server {have}, not {version}")


def _run(settings: LoadSettings, work: Callable[[Any], Awaitable[_T]]) -> _T:
    """``work`` with a JetStream context on the database, in an event loop
    of its own; a NATS failure as a DbtesterError."""
    timeout = max(settings.timeout_s, 5.0)
    try:
        return _on_client(settings.endpoints, timeout, lambda c: work(c.jetstream(timeout=timeout)))
    except _failures() as exc:
        raise DbtesterError(f"nats at {', '.join(settings.endpoints)}: {_said(exc)}") from None


def _said(exc: BaseException) -> str:
    """A NATS failure in words: a JetStream refusal's description and codes
    (its repr says only its class)."""
    import nats.js.errors

    if isinstance(exc, nats.js.errors.APIError) and exc.description:
        return f"{exc.description} (JetStream {exc.code}, error {exc.err_code})"
    return repr(exc)


def _failures() -> tuple[type[BaseException], ...]:
    """What a NATS call may raise when the database fails it."""
    import nats.errors

    return (nats.errors.Error, OSError, TimeoutError)


def _on_client(
    endpoints: Sequence[str], timeout: float, work: Callable[[Any], Awaitable[_T]]
) -> _T:
    """``work`` with a NATS client of the servers at ``endpoints``, in an
    event loop of its own."""
    import nats

    async def connected() -> _T:
        client = await nats.connect(
            servers=[f"nats://{endpoint}" for endpoint in endpoints],
            connect_timeout=max(timeout, 2.0),
            allow_reconnect=True,
            max_reconnect_attempts=10,
        )
        try:
            return await work(client)
        finally:
            await client.close()

    return asyncio.run(connected())


def _transfer_leader(call: EventCall) -> str:
    """The bucket's stream leader steps down for the member asked for
    (JetStream's stream step-down with that server preferred, nats-server
    2.11 on)."""
    leader, target = transfer_ends(call)
    endpoints = [peer.address("client") for peer in call.peers]
    subject = f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}"
    body = json.dumps({"placement": {"preferred": call.peers[target].name}}).encode()

    async def step_down(client: Any) -> Any:
        reply = await client.request(subject, body, timeout=call.timeout_s)
        return json.loads(reply.data)

    refused: tuple[type[BaseException], ...] = (*_failures(), ValueError)
    try:
        answer = _on_client(endpoints, call.timeout_s, step_down)
    except refused as exc:
        raise EventFailed(f"stream leader step-down: {exc!r}") from None
    if not isinstance(answer, dict) or not answer.get("success"):
        said = answer.get("error") if isinstance(answer, dict) else answer
        raise EventFailed(f"stream leader step-down refused: {said}")
    return f"member {leader} to member {target}"


async def _make_bucket(js: Any, client: NatsClient, replicas: int) -> None:
    from nats.js.api import KeyValueConfig, StorageType

    storage = StorageType.FILE if client.storage == "file" else StorageType.MEMORY
    config = KeyValueConfig(
        bucket=BUCKET,
        history=client.history,
        replicas=replicas,
        storage=storage,
        direct=client.allow_direct,
    )
    # The same bucket again (another trial on a cluster of its own, or a
    # cluster given by endpoints) is accepted as it is; another config fails.
    await _until_made(lambda: js.create_key_value(config))


#: JetStream's error code for a stream name in use with another config: asking
#: again cannot help
_OTHER_CONFIG = 10058


async def _until_made(make: Callable[[], Awaitable[object]], pause_s: float = 0.25) -> None:
    """``make()`` asked again while JetStream refuses it: just after its meta
    leader is elected, a cluster may refuse a stream that it accepts a
    moment later (a refusal seen in CI). A bucket of another config is
    refused at once."""
    import nats.js.errors

    def settling(exc: BaseException) -> bool:
        return isinstance(exc, nats.js.errors.APIError) and exc.err_code != _OTHER_CONFIG

    await _asked_until_done(make, again=settling, pause_s=pause_s)


async def _until_writable(js: Any, member: int) -> None:
    """Put a probe (key ``r.<member>``, a token no count or watch of the
    load's keys sees) through ``js``'s one member until the stream
    acknowledges it."""
    import nats.errors

    subject = _subject(f"{PROBE_PREFIX}.{member}")

    def unanswered(exc: BaseException) -> bool:
        return isinstance(exc, (nats.errors.Error, TimeoutError))

    await _asked_until_done(
        lambda: js.publish(subject, b"", timeout=1.0), again=unanswered, pause_s=0.1
    )


async def _asked_until_done(
    ask: Callable[[], Awaitable[object]],
    *,
    again: Callable[[BaseException], bool],
    pause_s: float,
) -> None:
    """``ask()`` until it succeeds, every ``pause_s``, while what it raises
    is worth asking ``again`` for and BUCKET_READY_S have not passed; then
    its last failure is raised."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BUCKET_READY_S
    while True:
        try:
            await ask()
            return
        except Exception as exc:
            if not again(exc) or loop.time() > deadline:
                raise
            await asyncio.sleep(pause_s)


async def _count(js: Any, subjects: str) -> int:
    """The keys under ``subjects``: an ephemeral consumer that would deliver
    the last message of each subject counts them for us (num_pending)."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    config = ConsumerConfig(
        filter_subject=_subject(subjects),
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=AckPolicy.NONE,
        headers_only=True,
        mem_storage=True,
        num_replicas=1,
        inactive_threshold=30.0,
    )
    info = await js.add_consumer(STREAM, config)
    try:
        return int(info.num_pending or 0)
    finally:
        await js.delete_consumer(STREAM, info.name)


async def _prefill(js: Any, count: int, value: bytes, advance: Callable[[int], None]) -> None:
    for batch in prefill_batches(count, len(value), PREFILL_IN_FLIGHT):
        await asyncio.gather(*(js.publish(_subject(kv_key(prefill_key(n))), value) for n in batch))
        advance(len(batch))


def _replicas(client: NatsClient, members: int) -> int:
    """The bucket's copies: the client's, else one per member up to JetStream's most."""
    return client.replicas or min(members, MOST_REPLICAS)


def _copies(replicas: int) -> str:
    return f"{replicas} replica{'s' if replicas != 1 else ''}"


def _monitor(peer: Peer, path: str, timeout: float) -> bytes | None:
    """What ``peer``'s monitoring port answers at ``path`` with status 200;
    None when it answers otherwise or not at all."""
    url = f"http://{peer.address('monitor')}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return bytes(reply.read()) if reply.status == 200 else None
    except (OSError, ValueError):  # an HTTPError is an OSError
        return None


def _jsz(peer: Peer, timeout: float) -> dict[str, Any] | None:
    """``peer``'s JetStream report with its streams; None when it does not answer."""
    answer = _monitor(peer, "/jsz?accounts=true&streams=true", timeout)
    try:
        found = json.loads(answer) if answer is not None else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _stream_leader(jsz: Mapping[str, Any]) -> str | None:
    for account in jsz.get("account_details") or ():
        for stream in account.get("stream_detail") or ():
            if stream.get("name") == STREAM:
                leader = (stream.get("cluster") or {}).get("leader")
                return str(leader) if leader else None
    return None
