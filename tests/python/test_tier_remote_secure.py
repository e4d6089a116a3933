# SPDX-License-Identifier: MIT
"""The cluster tier's security (docs/tiers.md, "The cluster tier"): who kvpoold is to the
cluster (tier_remote_auth_file: an ACL user of its own, the file readable by root and the
daemon only), how KV travels (rediss:// with tier_remote_ca_file; redis:// to a host not
loopback only with tier_remote_insecure) and whose values it serves (tier_remote_key_file:
values tagged (HMAC-SHA256), a value without its tag refused)."""

import hashlib
import hmac
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

import kvpool
from conftest import DAEMON
from daemon_proc import Daemon
from kv_helpers import LAYERS, written
from redis_cluster import ADMIN_NAME, Cluster
from test_tier_remote import hits_whole, kvctl, remote_of
from test_tier_remote_ha import (HEAD, NO_TAG, block_keys, daemon_at, log_of, prompts,
                                 two_daemons, write_all)

# What the cluster tier needs of Redis, and only its own keys: kvpool logs in as this user.
# (GETEX: a read renews the key's TTL.)
RULES = ("~kvpool:* +get +getex +set +exists +asking +cluster|info +cluster|slots +scan "
         "+unlink +ping")
REFUSED_NONE = dict(header=0, geometry=0, checksum=0, missing=0, late=0, tag=0)
NOBODY = 65534
DOWN = "redis://127.0.0.1:1"  # no cluster there: creation does not wait on one


@pytest.fixture
def acl_cluster(tmp_path):
    c = Cluster(tmp_path, acl=[("kvpool", "kvpool-pw", RULES),
                               ("noset", "noset-pw", RULES + " -set")])
    yield c
    c.stop()


@pytest.fixture
def tls_cluster(tmp_path):
    c = Cluster(tmp_path, tls=True)
    yield c
    c.stop()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.stop()


def secret(path, content, mode=0o600):
    """A file of the daemon's (root's) with content (str or bytes), of mode."""
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    path.chmod(mode)
    return str(path)


def setfacl(*args):
    if not shutil.which("setfacl"):
        pytest.skip("no setfacl (apt-get install acl)")
    subprocess.run(["setfacl", *args], check=True)


def names(reason, key, path):
    """Whether reason starts with `key: path`, a long path's head elided ("...its tail")."""
    if not reason.startswith(key + ": "):
        return False
    rest = reason[len(key) + 2:]
    if rest.startswith(path + ":"):
        return True
    tail = rest[3:].split(": ", 1)[0] if rest.startswith("...") else ""
    return len(tail) >= 8 and path.endswith(tail)


def create(admin, keys):
    """A pool of the tests' geometry with the cluster tier's keys (refused: kvpool.Error)."""
    return admin.create_pool("r", 17, 4, [("full", 0)], kv_heads=2, head_dim=8, dtype="f32",
                             layers_per_group=2, keys=keys + "\ntier_remote_timeout_ms = 1000\n")


def refusal(tmp_path, keys):
    """The reason a daemon of no pool gives for refusing a pool of keys."""
    tmp_path.mkdir(exist_ok=True)
    d = Daemon(tmp_path, "", DAEMON)
    try:
        with d.client(admin=True) as a:
            with pytest.raises(kvpool.Error) as ei:
                create(a, keys)
            return ei.value.reason
    finally:
        d.stop()


def accepted(tmp_path, keys, env=None):
    tmp_path.mkdir(exist_ok=True)
    d = Daemon(tmp_path, "", DAEMON, env=env)
    try:
        with d.client(admin=True) as a:
            create(a, keys)
    finally:
        d.stop()


def users_connected(cluster):
    """The ACL users of the clients the masters have now: this helper's own and replication
    links aside (kvpoold keeps a connection a master)."""
    users = set()
    for port in cluster.masters():
        with cluster.resp(port) as c:
            for line in c.call("CLIENT", "LIST").decode().splitlines():
                f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
                if f["name"] != ADMIN_NAME and "S" not in f["flags"]:
                    users.add(f["user"])
    return users


# ---- tier_remote_auth_file ----

def test_an_acl_user_of_its_own_shares_the_cluster_between_two_daemons(tmp_path, acl_cluster):
    auth = secret(tmp_path / "auth", "kvpool kvpool-pw\n")
    pools = [("full", "full", "tier_remote_auth_file = " + auth)]
    one, two = two_daemons(tmp_path, acl_cluster.url, pools)
    rng = np.random.default_rng(80)
    prompt = prompts(1)[0]
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            a, data = written(c1, prompt, rng)
            admin1.pool_sync("full")
            assert remote_of(admin1, "full")["sent"] == 4
        with two.client(pool="full") as c2, two.client(admin=True) as admin2:
            with c2.open(prompt) as b:
                assert b.lookup() == 16
                assert b.alloc(1, use_cache=True) == 16, str(remote_of(admin2, "full"))
                k, v = b.read_kv(0, 0, 0, 16)
                assert np.array_equal(k, data[0, 0][0][:16])
        assert users_connected(acl_cluster) == {"kvpool"}
        # A purge too (SCAN, UNLINK) as the user.
        assert kvctl(one, "pool", "purge-remote", "full").strip() == \
            "pool full: 4 keys purged from the cluster tier"
        assert acl_cluster.keys() == []
    finally:
        one.stop()
        two.stop()


@pytest.mark.parametrize("case", ["0644", "0604", "0640", "acl-user", "acl-group"])
def test_an_auth_file_another_can_read_is_refused(tmp_path, case):
    path = secret(tmp_path / "auth", "kvpool kvpool-pw\n", 0o600)
    if case.startswith("0"):
        os.chmod(path, int(case, 8))
    elif case == "acl-user":
        setfacl("-m", "u:%d:r" % NOBODY, path)
    else:
        setfacl("-m", "g:%d:r" % NOBODY, path)
    reason = refusal(tmp_path, "tier_remote = %s\ntier_remote_auth_file = %s" % (DOWN, path))
    assert names(reason, "tier_remote_auth_file", path), reason
    assert "readable by" in reason, reason
    if case == "acl-user":
        assert str(NOBODY) in reason, reason


def test_a_credential_as_systemd_loads_it_is_accepted(tmp_path, acl_cluster):
    # LoadCredential=: 0400, the service's user granted read by an ACL entry (root here).
    creds = tmp_path / "credentials"
    creds.mkdir()
    path = secret(creds / "kvpool-auth", "kvpool kvpool-pw\n", 0o400)
    setfacl("-m", "u:0:r", path)
    accepted(tmp_path / "abs", "tier_remote = %s\ntier_remote_auth_file = %s"
             % (acl_cluster.url, path))
    # A relative path: $CREDENTIALS_DIRECTORY's.
    env = dict(os.environ, CREDENTIALS_DIRECTORY=str(creds))
    d = daemon_at(tmp_path / "rel", acl_cluster.url,
                  [("full", "full", "tier_remote_auth_file = kvpool-auth")], env=env)
    try:
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            write_all(c, admin, "full", prompts(1), np.random.default_rng(81))
            assert remote_of(admin, "full")["sent"] == 4
        assert users_connected(acl_cluster) == {"kvpool"}
    finally:
        d.stop()


def test_a_wrong_password_refuses_the_pool(tmp_path, acl_cluster):
    path = secret(tmp_path / "auth", "kvpool not-its-password\n")
    reason = refusal(tmp_path, "tier_remote = %s\ntier_remote_auth_file = %s"
                     % (acl_cluster.url, path))
    assert names(reason, "tier_remote_auth_file", path), reason
    assert "WRONGPASS" in reason, reason


def test_a_user_without_set_fails_its_sends_and_says_so_once(tmp_path, acl_cluster):
    auth = secret(tmp_path / "auth", "noset noset-pw\n")
    d = daemon_at(tmp_path / "d", acl_cluster.url,
                  [("full", "full", "tier_remote_auth_file = " + auth)])
    try:
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            write_all(c, admin, "full", prompts(2), np.random.default_rng(82))
            r = remote_of(admin, "full")
            assert (r["sent"], r["send_errors"]) == (0, 8), str(r)
        assert acl_cluster.keys() == []
        log = log_of(d)
        said = [line for line in log.splitlines()
                if "pool full: remote tier: 127.0.0.1:" in line and " refused SET (NOPERM" in line]
        assert len(said) == 1, log
    finally:
        d.stop()


def test_a_rotated_password_is_read_again_at_sighup(tmp_path, acl_cluster):
    """The auth file is read again at SIGHUP and the connections made again with it: the old
    password gone from the cluster, sends fail until the reload, then go out."""
    auth = tmp_path / "auth"
    secret(auth, "kvpool kvpool-pw\n")
    d = daemon_at(tmp_path / "d", acl_cluster.url,
                  [("full", "full", "tier_remote_auth_file = %s" % auth)])
    rng = np.random.default_rng(84)
    ps = prompts(3)
    try:
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            write_all(c, admin, "full", ps[:1], rng)
            assert remote_of(admin, "full")["sent"] == 4
            # The cluster's password changes, every connection of the user's dropped.
            for port in acl_cluster.ports:
                with acl_cluster.resp(port) as r:
                    r.call("ACL", "SETUSER", "kvpool", "resetpass", ">kvpool-pw2")
                    r.call("CLIENT", "KILL", "USER", "kvpool")
            write_all(c, admin, "full", ps[1:2], rng)
            r = remote_of(admin, "full")
            assert r["sent"] == 4 and r["skipped"] == 4, str(r)
            secret(auth, "kvpool kvpool-pw2\n")
            d.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while "the cluster tier's password changed" not in log_of(d):
                assert time.monotonic() < deadline, log_of(d)
                time.sleep(0.05)
            # Reconnected after its back-off, with the new password.
            deadline = time.monotonic() + 10
            while remote_of(admin, "full")["sent"] < 8:
                assert time.monotonic() < deadline, str(remote_of(admin, "full"))
                write_all(c, admin, "full", ps[2:], rng)
                time.sleep(0.2)
        assert "kvpool-pw" not in log_of(d), "a password in the log"
    finally:
        d.stop()


# ---- TLS ----

def test_over_tls_a_prompt_committed_on_one_daemon_is_hit_on_another(tmp_path, tls_cluster):
    assert tls_cluster.url.startswith("rediss://")
    ca = "tier_remote_ca_file = " + tls_cluster.ca_file
    one = daemon_at(tmp_path / "a", tls_cluster.url, [("full", "full", ca)])
    # The other with a client certificate too (the nodes check one that is given).
    two = daemon_at(tmp_path / "b", tls_cluster.url, [("full", "full", "\n".join([
        ca, "tier_remote_cert_file = " + tls_cluster.client_cert,
        "tier_remote_cert_key_file = " + tls_cluster.client_key]))])
    rng = np.random.default_rng(83)
    prompt = prompts(1)[0]
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            a, data = written(c1, prompt, rng)
            admin1.pool_sync("full")
            assert remote_of(admin1, "full")["sent"] == 4
        assert len(tls_cluster.keys()) == 4
        with two.client(pool="full") as c2, two.client(admin=True) as admin2:
            hits_whole(c2, prompt, data)
            r = remote_of(admin2, "full")
            assert r["promoted"] == 4 and r["refused"] == REFUSED_NONE, str(r)
    finally:
        one.stop()
        two.stop()


def test_a_cluster_whose_certificate_the_ca_does_not_sign_refuses_the_pool(tmp_path,
                                                                           tls_cluster):
    reason = refusal(tmp_path, "tier_remote = %s\ntier_remote_ca_file = %s"
                     % (tls_cluster.url, tls_cluster.other_ca_file))
    assert reason.startswith("tier_remote_ca_file: "), reason
    assert "verif" in reason, reason


@pytest.mark.parametrize("url,insecure,ok", [
    ("redis://10.1.2.3:6379", False, False),
    ("redis://127.0.0.1:1,10.1.2.3:6379", False, False),  # any seed
    ("redis://10.1.2.3:6379", True, True),
    ("redis://localhost:1", False, True),
    ("redis://127.0.0.2:1", False, True),                 # 127.0.0.0/8
])
def test_plain_redis_to_a_host_not_loopback_only_when_insecure(tmp_path, url, insecure, ok):
    keys = "tier_remote = " + url + ("\ntier_remote_insecure = yes" if insecure else "")
    if ok:
        accepted(tmp_path, keys)
        return
    reason = refusal(tmp_path, keys)
    assert reason.startswith("tier_remote: ") and "tier_remote_insecure" in reason, reason


# ---- tier_remote_key_file ----

def tag_of(key, redis_key, value):
    """A value's tag: HMAC-SHA256 keyed with the key file's bytes over the value's Redis key,
    its header with the tag zero, and its data (daemon/tier/remote.h): a value moved to
    another key is refused too."""
    head = bytearray(value[:HEAD.size])
    head[HEAD.size - 32:] = NO_TAG
    return hmac.new(key, bytes(redis_key) + bytes(head) + bytes(value[HEAD.size:]),
                    hashlib.sha256).digest()


def test_two_daemons_sharing_a_key_file_hit_and_every_value_is_tagged(tmp_path, cluster):
    key = os.urandom(32)
    path = secret(tmp_path / "tag.key", key)
    one, two = two_daemons(tmp_path, cluster.url, [("full", "full",
                                                    "tier_remote_key_file = " + path)])
    rng = np.random.default_rng(84)
    prompt = prompts(1)[0]
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            a, data = written(c1, prompt, rng)
            admin1.pool_sync("full")
        for k in block_keys(cluster, [data])[0]:
            v = cluster.get(k)
            magic, version, geo, total, n, tag = HEAD.unpack_from(v)
            assert (magic, version, n + HEAD.size) == (b"KVPR", 2, len(v))
            assert tag == tag_of(key, k, v)
        with two.client(pool="full") as c2, two.client(admin=True) as admin2:
            with c2.open(prompt) as b:
                assert b.alloc(1, use_cache=True) == 16
                k, v = b.read_kv(0, LAYERS - 1, 0, 16)
                assert np.array_equal(v, data[0, LAYERS - 1][1][:16])
            r = remote_of(admin2, "full")
            assert r["promoted"] == 4 and r["refused"] == REFUSED_NONE, str(r)
    finally:
        one.stop()
        two.stop()


@pytest.mark.parametrize("kind", ["zero", "flipped", "moved", "other-key"])
def test_a_value_without_its_tag_is_refused_and_cuts_the_hit_before_it(tmp_path, cluster,
                                                                         kind):
    path = secret(tmp_path / "tag.key", os.urandom(32))
    other = secret(tmp_path / "other.key", os.urandom(32))
    one = daemon_at(tmp_path / "a", cluster.url, [("full", "full",
                                                   "tier_remote_key_file = " + path)])
    two = daemon_at(tmp_path / "b", cluster.url, [("full", "full", "tier_remote_key_file = " +
                                                   (other if kind == "other-key" else path))])
    rng = np.random.default_rng(85)
    prompt = prompts(1)[0]
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            a, data = written(c1, prompt, rng)
            admin1.pool_sync("full")
        keys = block_keys(cluster, [data])[0]
        value = bytearray(cluster.get(keys[2]))
        at = HEAD.size - 32
        if kind == "zero":
            value[at:HEAD.size] = NO_TAG  # its checksum still good: no tag at all
        elif kind == "flipped":
            value[at + 5] ^= 0x10
        elif kind == "moved":
            value = bytearray(cluster.get(keys[3]))  # sound, tagged, another key's
        cluster.set(keys[2], bytes(value))
        want = 0 if kind == "other-key" else 8  # cut before the first refused block
        with two.client(pool="full") as c2, two.client(admin=True) as admin2:
            with c2.open(prompt) as b:
                got = b.alloc(1, use_cache=True)
                assert got == want, str(remote_of(admin2, "full"))
                for layer in range(LAYERS if want else 0):
                    k, v = b.read_kv(0, layer, 0, want)
                    assert np.array_equal(k, data[0, layer][0][:want])
            r = remote_of(admin2, "full")
            # The first refused value cuts the hit; another key refuses them all, however many
            # of them a read's chunk brought.
            if kind == "other-key":
                assert r["refused"] == dict(REFUSED_NONE, tag=r["refused"]["tag"]), str(r)
                assert 1 <= r["refused"]["tag"] <= 4, str(r)
            else:
                assert r["refused"] == dict(REFUSED_NONE, tag=1), str(r)
            assert r["promoted"] == want // 4
    finally:
        one.stop()
        two.stop()


@pytest.mark.parametrize("size,ok", [(16, False), (31, False), (32, True), (64, True),
                                     (65, False)])
def test_a_key_file_holds_32_to_64_bytes(tmp_path, size, ok):
    path = secret(tmp_path / "tag.key", os.urandom(size))
    keys = "tier_remote = %s\ntier_remote_key_file = %s" % (DOWN, path)
    if ok:
        accepted(tmp_path, keys)
        return
    reason = refusal(tmp_path, keys)
    assert names(reason, "tier_remote_key_file", path), reason
    assert "32 to 64 bytes" in reason, reason


def test_a_key_file_another_can_read_is_refused(tmp_path):
    path = secret(tmp_path / "tag.key", os.urandom(32), 0o644)
    reason = refusal(tmp_path, "tier_remote = %s\ntier_remote_key_file = %s" % (DOWN, path))
    assert names(reason, "tier_remote_key_file", path), reason
    assert "readable by" in reason, reason
