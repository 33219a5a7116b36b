"""Bad test cases, each with where its error must point and what it must
say: the unit test runs them through the CLI, the fault suite through a
run with agents."""

from __future__ import annotations

GOOD = """\
title: t
workload:
  type: write
  requests: 100
  clients: 10
  connections: 5
databases:
  - id: a
    kind: etcd
    version: 3.5.17
"""

# (name, YAML text, expected line:col, message fragments)
CASES: list[tuple[str, str, str, tuple[str, ...]]] = [
    (
        "unknown top key",
        GOOD + "titel: x\n",
        "11:1",
        ("unknown key 'titel'", "did you mean 'title'"),
    ),
    (
        "workload typo",
        GOOD.replace("  clients: 10", "  valeu_size: 10\n  clients: 10"),
        "5:3",
        ("unknown key 'valeu_size'", "did you mean 'value_size'"),
    ),
    (
        "database typo",
        GOOD + "    descripton: x\n",
        "11:5",
        ("unknown key 'descripton'", "did you mean 'description'"),
    ),
    (
        "etcd flag typo (the original's spelling)",
        GOOD + "    flags:\n      snap_count: 5\n",
        "12:7",
        ("unknown key 'snap_count'", "did you mean 'snapshot_count'"),
    ),
    (
        "flag of another kind",
        GOOD + "    flags:\n      tick_time: 5\n",
        "12:7",
        ("unknown key 'tick_time'", "allowed here: snapshot_count"),
    ),
    (
        "client option of another kind",
        GOOD.replace("kind: etcd", "kind: zookeeper").replace("3.5.17", "3.8.0")
        + "    client:\n      balancer: leader\n",
        "12:7",
        ("unknown key 'balancer'", "session_timeout_ms"),
    ),
    (
        "bad type",
        GOOD.replace("type: write", "type: wirte"),
        "3:9",
        ("'wirte'", "allowed: write, read, mixed, watch"),
    ),
    (
        "a repeat: auto key without repeat: auto",
        GOOD + "repeat: 3\nmax_trials: 10\n",
        "12:13",
        ("max_trials is for repeat: auto only (repeat is 3)",),
    ),
    (
        "an unknown stopping metric",
        GOOD.replace("databases:", "repeat: auto\nstopping_metrics: [THROUGHPUT]\ndatabases:")
        + "  - id: b\n    kind: etcd\n    version: 3.6.8\n",
        "8:19",
        ("unknown metric 'THROUGHPUT'", "allowed: AVG-THROUGHPUT"),
    ),
    (
        "repeat: auto with one database",
        GOOD + "repeat: auto\n",
        "1:1",
        ("repeat: auto runs trials until", "at least two databases"),
    ),
    (
        "a write-only key in a mixed workload",
        GOOD.replace("type: write", "type: mixed").replace(
            "  clients: 10", "  sequential_keys: true\n  clients: 10"
        ),
        "5:3",
        ("sequential_keys means nothing for type: mixed",),
    ),
    (
        "a mixed-only key in a write workload",
        GOOD.replace("  clients: 10", "  read_proportion: 0.5\n  clients: 10"),
        "5:3",
        ("read_proportion is for type: mixed only, not write",),
    ),
    (
        "mixed shares that do not add up to 1",
        GOOD.replace("type: write", "type: mixed").replace(
            "  clients: 10", "  read_proportion: 0.5\n  update_proportion: 0.4\n  clients: 10"
        ),
        "3:3",
        ("must add up to 1, got 0.5 + 0.4 + 0 + 0 = 0.9",),
    ),
    (
        "a mixed value too small for its tag",
        GOOD.replace("type: write", "type: mixed").replace(
            "  clients: 10", "  value_size: 16\n  clients: 10"
        ),
        "5:15",
        ("value_size must be at least 32 for type: mixed",),
    ),
    (
        "zero requests",
        GOOD.replace("requests: 100", "requests: 0"),
        "4:13",
        ("requests", "greater than 0"),
    ),
    ("negative requests", GOOD.replace("requests: 100", "requests: -5"), "4:13", ("requests",)),
    (
        "requests as string",
        GOOD.replace("requests: 100", "requests: '100'"),
        "4:13",
        ("requests: expected a whole number", "str '100'"),
    ),
    (
        "requests as float",
        GOOD.replace("requests: 100", "requests: 100.5"),
        "4:13",
        ("expected a whole number",),
    ),
    (
        "requests as 1e6 (YAML reads text)",
        GOOD.replace("requests: 100", "requests: 1e6"),
        "4:13",
        ("whole number",),
    ),
    (
        "key size zero",
        GOOD.replace("  clients: 10", "  key_size: 0\n  clients: 10"),
        "5:13",
        ("key_size", "greater than or equal to 1"),
    ),
    (
        "connections above clients",
        GOOD.replace("connections: 5", "connections: 50"),
        "3:3",
        ("connections (50) must not exceed clients (10)",),
    ),
    (
        "bool as yes string",
        GOOD.replace("  clients: 10", "  same_key: 'yes'\n  clients: 10"),
        "5:13",
        ("same_key: expected true or false",),
    ),
    (
        "bad consistency",
        GOOD.replace("  clients: 10", "  consistency: strong\n  clients: 10"),
        "5:16",
        ("'strong' is not allowed", "linearizable", "serializable"),
    ),
    (
        "negative rate",
        GOOD.replace("  clients: 10", "  rate: -1\n  clients: 10"),
        "5:9",
        ("rate", "greater than or equal to 0"),
    ),
    (
        "steps not increasing",
        GOOD.replace("  clients: 10", "  client_steps: [1, 10, 5]\n  clients: 10"),
        "5:17",
        ("client_steps must increase strictly",),
    ),
    (
        "step above clients",
        GOOD.replace("  clients: 10", "  client_steps: [1, 50]\n  clients: 10"),
        "3:3",
        ("largest client step (50) exceeds clients (10)",),
    ),
    (
        "key_size too small for the requests",
        GOOD.replace("  clients: 10", "  key_size: 2\n  clients: 10"),
        "3:3",
        ("key_size 2 holds 10 distinct keys", "fewer than requests (100)"),
    ),
    (
        "key_size too small for the requests and the warm-up",
        GOOD.replace("  clients: 10", "  key_size: 3\n  warmup_requests: 1\n  clients: 10"),
        "3:3",
        ("key_size 3 holds 100 distinct keys", "fewer than requests + warmup_requests (101)"),
    ),
    (
        "negative warm-up",
        GOOD.replace("  clients: 10", "  warmup_requests: -5\n  clients: 10"),
        "5:20",
        ("warmup_requests", "greater than or equal to 0"),
    ),
    (
        "unknown kind",
        GOOD.replace("kind: etcd", "kind: mongodb"),
        "9:11",
        ("unknown kind 'mongodb'", "etcd, zookeeper, consul"),
    ),
    ("missing kind", GOOD.replace("    kind: etcd\n", ""), "8:5", ("missing required key 'kind'",)),
    ("numeric version", GOOD.replace("3.5.17", "3.5"), "10:14", ('version: "3.5" (quoted)',)),
    (
        "version with shell metacharacters",
        GOOD.replace("3.5.17", "'3.5.17; rm -rf /'"),
        "10:14",
        ("not a version",),
    ),
    (
        "uppercase id",
        GOOD.replace("id: a", "id: Etcd"),
        "8:9",
        ("'Etcd' is not valid", "lowercase"),
    ),
    (
        "duplicate ids",
        GOOD + "  - id: a\n    kind: etcd\n    version: 3.6.8\n",
        "1:1",
        ("database id 'a' is used twice",),
    ),
    (
        "no databases",
        GOOD.split("databases:", maxsplit=1)[0] + "databases: []\n",
        "7:12",
        ("databases: must not be empty",),
    ),
    (
        "missing workload",
        "title: t\ndatabases:\n  - id: a\n    kind: etcd\n    version: 3.5.17\n",
        "1:1",
        ("missing required key 'workload'",),
    ),
    ("missing title", GOOD.replace("title: t\n", ""), "1:1", ("missing required key 'title'",)),
    ("zero members", GOOD + "    members: 0\n", "11:14", ("members", "greater than or equal to 1")),
    (
        "hosts and endpoints",
        GOOD + "    hosts: [{address: 10.0.0.2}]\n    endpoints: ['127.0.0.1:2379']\n",
        "8:5",
        ("not both",),
    ),
    ("bad endpoint", GOOD + "    endpoints: ['localhost']\n", "11:17", ("endpoints",)),
    (
        "bad agent port",
        GOOD + "    hosts: [{address: 10.0.0.2, agent_port: 70000}]\n",
        "11:45",
        ("agent_port",),
    ),
    (
        "bad balancer",
        GOOD + "    client:\n      balancer: random\n",
        "12:17",
        ("'random' is not allowed", "pick_first", "round_robin", "leader"),
    ),
    (
        "etcd election vs heartbeat",
        GOOD + "    flags:\n      heartbeat_interval_ms: 500\n      election_timeout_ms: 1000\n",
        "12:7",
        ("at least 5 x heartbeat_interval_ms",),
    ),
    (
        "zookeeper heap order",
        GOOD.replace("kind: etcd", "kind: zookeeper").replace("3.5.17", "3.8.0")
        + "    flags:\n      heap_min: 4g\n      heap_max: 1g\n",
        "12:7",
        ("heap_min (4g) exceeds heap_max (1g)",),
    ),
    (
        "bad publish scheme",
        GOOD + "publish:\n  url: ftp://x/y\n",
        "12:8",
        ("unsupported publish URL", "gs://, s3://, file://"),
    ),
    (
        "override typo",
        GOOD + "    workload:\n      clinets: 5\n",
        "12:7",
        ("unknown key 'clinets'", "did you mean 'clients'"),
    ),
    (
        "override breaks a rule",
        GOOD + "    workload:\n      connections: 20\n",
        "12:7",
        ("connections (20) must not exceed clients (10)",),
    ),
    (
        "databases not a list",
        GOOD.split("databases:", maxsplit=1)[0] + "databases: etcd\n",
        "7:12",
        ("expected a list",),
    ),
    (
        "workload a list",
        "title: t\nworkload: [1]\ndatabases: []\n",
        "2:11",
        ("workload: expected a mapping",),
    ),
    (
        "tls on a ZooKeeper older than its PEM key stores",
        GOOD.replace("kind: etcd", "kind: zookeeper").replace("3.5.17", "3.4.14")
        + "    tls: true\n",
        "11:10",
        ("ZooKeeper with TLS from 3.5.5 on", "not 3.4.14"),
    ),
    (
        "a server name for ZooKeeper, whose client checks the address",
        GOOD.replace("kind: etcd", "kind: zookeeper").replace("3.5.17", "3.8.0")
        + '    endpoints: ["10.0.0.2:2281"]\n    tls: {ca: a.pem, server_name: zk.example}\n',
        "12:10",
        ("drop server_name",),
    ),
    (
        "three kine members",
        GOOD.replace("kind: etcd", "kind: kine").replace("3.5.17", "0.17.5") + "    members: 3\n",
        "11:14",
        ("kine takes at most 1 member, not 3", "one process"),
    ),
    (
        "serializable reads on kine",
        GOOD.replace("kind: etcd", "kind: kine")
        .replace("3.5.17", "0.17.5")
        .replace("type: write", "type: read\n  consistency: serializable"),
        "4:16",
        ("consistency: kine cannot", "refuses serializable"),
    ),
    (
        "tls files for members dbtester starts",
        GOOD + "    tls: {ca: ca.pem}\n",
        "11:10",
        ("tls files are for endpoints", "write tls: true"),
    ),
    (
        "tls: true for endpoints",
        GOOD + '    endpoints: ["10.0.0.2:2379"]\n    tls: true\n',
        "12:10",
        ("for endpoints give the files",),
    ),
    (
        "a client certificate without its key",
        GOOD + '    endpoints: ["10.0.0.2:2379"]\n    tls: {ca: a.pem, cert: c.pem}\n',
        "12:10",
        ("give cert and key together",),
    ),
    (
        "tls key typo",
        GOOD + '    endpoints: ["10.0.0.2:2379"]\n    tls: {ca: a.pem, sever_name: x}\n',
        "12:22",
        ("unknown key 'sever_name'", "did you mean 'server_name'"),
    ),
    (
        "a password where Consul takes a token",
        GOOD.replace("kind: etcd", "kind: consul").replace("3.5.17", "1.22.0")
        + "    auth: {user: bench, password_env: PW}\n",
        "11:12",
        ("unknown key 'user'", "allowed here: token_env, token_file"),
    ),
    (
        "kubernetes traffic on ZooKeeper",
        GOOD.replace("type: write", "type: kubernetes")
        .replace("kind: etcd", "kind: zookeeper")
        .replace("3.5.17", "3.8.4"),
        "3:9",
        ("zookeeper cannot", "Kubernetes' storage needs etcd's API"),
    ),
    (
        "a lock load on NATS KV",
        "title: t\nworkload:\n  type: lock\n  requests: 100\ndatabases:\n"
        "  - {id: a, kind: nats, version: 2.15.2}\n",
        "3:9",
        ("nats cannot", "NATS KV has no sessions"),
    ),
    (
        "a lock TTL ZooKeeper would not keep",
        "title: t\nworkload:\n  type: lock\n  requests: 100\n  ttl: 2s\ndatabases:\n"
        "  - {id: a, kind: zookeeper, version: 3.8.4}\n",
        "5:8",
        ("ttl: zookeeper's servers here keep sessions of 4 to 40 s", "not 2 s"),
    ),
    (
        "a lock TTL under Consul's session_ttl_min",
        "title: t\nworkload:\n  type: lock\n  requests: 100\n  ttl: 5s\ndatabases:\n"
        "  - {id: a, kind: consul, version: 1.22.0}\n",
        "5:8",
        ("ttl: consul's servers here keep sessions of 10 to 86,400 s", "not 5 s"),
    ),
    (
        "a lock TTL below etcd's least",
        "title: t\nworkload:\n  type: lock\n  requests: 100\n  ttl: 1s\ndatabases:\n"
        "  - {id: a, kind: etcd, version: 3.5.17}\n",
        "5:8",
        ("ttl: etcd's servers here keep sessions of 2 to",),
    ),
    (
        "kubernetes traffic on Consul",
        GOOD.replace("type: write", "type: kubernetes")
        .replace("kind: etcd", "kind: consul")
        .replace("3.5.17", "1.22.0"),
        "3:9",
        ("consul cannot", "revisions, transactions on an object's mod_revision"),
    ),
    (
        "a value size for kubernetes objects",
        GOOD.replace("type: write", "type: kubernetes").replace(
            "  clients: 10", "  value_size: 300\n  clients: 10"
        ),
        "5:15",
        ("value_size is not used by type: kubernetes", "object_size"),
    ),
    (
        "kubernetes shares that miss 1",
        GOOD.replace("type: write", "type: kubernetes\n  update_proportion: 0.5"),
        "3:3",
        ("must add up to 1", "0.15 + 0.05 + 0.08 + 0.5 + 0.12 + 0 = 0.9"),
    ),
    (
        "a linearizability check of kubernetes traffic",
        GOOD.replace("type: write", "type: kubernetes\n  check: {model: linearizability}"),
        "4:10",
        ("check's model: linearizability does not judge type: kubernetes", "model: informer"),
    ),
    (
        "slice_s without slices",
        GOOD + "slice_s: 3s\n",
        "11:10",
        ("slice_s is for interleave: slices only",),
    ),
    (
        "slices with one database",
        GOOD + "interleave: slices\n",
        "11:13",
        ("slices alternate the load between databases", "at least two"),
    ),
    (
        "slices of a watch load",
        GOOD.replace("type: write", "type: watch\n  rate: 100")
        + "  - {id: b, kind: etcd, version: 3.6.8}\ninterleave: slices\n",
        "13:13",
        ("database a: type: watch", "interleave trials"),
    ),
    (
        "slices with faults",
        GOOD
        + "  - {id: b, kind: etcd, version: 3.6.8}\ninterleave: slices\nfaults:\n"
        + "  - {at: 1s, action: kill, member: leader}\n",
        "14:3",
        ("faults are applied to one load of a fresh cluster", "interleave trials"),
    ),
    (
        "slices with a search",
        GOOD.replace("  requests: 100\n", "")
        + "  - {id: b, kind: etcd, version: 3.6.8}\ninterleave: slices\n"
        + "search: {slo_ms: 10}\n",
        "12:9",
        ("a search probes rates on one cluster at a time",),
    ),
    (
        "slices of two databases on one host",
        GOOD.replace("    version: 3.5.17", "    version: 3.5.17\n    hosts: [{address: 10.0.0.5}]")
        + "  - {id: b, kind: etcd, version: 3.6.8, hosts: [{address: 10.0.0.5}]}\n"
        + "interleave: slices\n",
        "13:13",
        ("databases a and b both run on 10.0.0.5", "ports would collide"),
    ),
    ("top is a list", "- a\n- b\n", "1:1", ("expected a mapping of keys at the top",)),
    ("top is a scalar", "hello\n", "1:1", ("expected a mapping",)),
    ("duplicate key", GOOD + "title: again\n", "11:1", ("duplicate key 'title'",)),
    ("tab indentation", "title: t\nworkload:\n\ttype: write\n", "3:1", ("YAML syntax error",)),
    ("unclosed bracket", "title: t\ndatabases: [\n", "3:1", ("YAML syntax error",)),
    ("bad indentation", "title: t\n workload: x\n", "2:10", ("YAML syntax error",)),
    ("merge key", "base: &b {type: write}\nworkload:\n  <<: *b\n", "3:3", ("merge keys",)),
    ("non-string key", GOOD + "1: x\n", "11:1", ("keys must be strings",)),
]
