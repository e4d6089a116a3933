# SPDX-License-Identifier: MIT
"""A kvpool connection that comes back, and what a failure is: nothing kvpool does ever
raises into vLLM. A daemon that is away, dies or restarts costs hits, never a request."""

import errno
import logging
import time

from .geometry import ConfigError, connect

logger = logging.getLogger("vllm.kvpool")  # vLLM configures its "vllm" logger

# The daemon is not there (yet, or any more): retry later, with back-off.
_AWAY = {errno.ENOENT, errno.ECONNREFUSED, errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN,
         errno.ETIMEDOUT, errno.EAGAIN}
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 30.0
LOG_EVERY = 60.0


def first_failure(e):
    """The failed operation's own error of a kvpool.BatchError (its first), else e."""
    import kvpool

    if isinstance(e, kvpool.BatchError):
        return next((x for x in e.results or () if isinstance(x, Exception)), e)
    return e


def cause_of(e):
    """A kvpool.Error's cause, as the counts name it."""
    import kvpool

    e = first_failure(e)
    if isinstance(e, kvpool.Timeout):
        return "timeout"
    if isinstance(e, kvpool.Disconnected) or e.errno in _AWAY:
        return "daemon_away"
    if isinstance(e, kvpool.QuotaExceeded):  # a NoSpace too: first
        return "quota"
    if isinstance(e, kvpool.NoSpace):
        return "pool_full"
    return "refused"


def lost_connection(cause):
    """Whether the connection is gone after such a failure (a timeout leaves it unknown)."""
    return cause in ("daemon_away", "timeout")


class Failures:
    """Counts by cause, and a log line per cause at most once a minute."""

    def __init__(self, counts):
        self.counts = counts
        self.logged = {}
        self.unlogged = {}

    def note(self, cause, what):
        self.counts[cause] = self.counts.get(cause, 0) + 1
        now = time.monotonic()
        if now - self.logged.get(cause, -LOG_EVERY) >= LOG_EVERY:
            more = self.unlogged.pop(cause, 0)
            logger.warning("kvpool: %s%s", what,
                           f" ({more} more of these since the last line)" if more else "")
            self.logged[cause] = now
        else:
            self.unlogged[cause] = self.unlogged.get(cause, 0) + 1


class Interval:
    """What a cumulative counts dict gained since the last take()."""

    def __init__(self, counts):
        self.counts = counts
        self.taken = {}

    def take(self):
        delta = {k: v - self.taken.get(k, 0) for k, v in self.counts.items()
                 if v != self.taken.get(k, 0)}
        self.taken = dict(self.counts)
        return delta


class Link:
    """The connection to kvpoold for one side of the connector. check(client) runs at every
    (re)connect (the geometry): its ConfigError refuses at start, and after start keeps the
    link down (logged) until the pool is right again."""

    def __init__(self, extra, check, failures, defer_close=False):
        """defer_close: a dropped connection goes to .retired, for the owner to close once
        nothing it allocated is in use (close_retired), instead of at once."""
        self.extra, self.check, self.failures = extra, check, failures
        self.defer_close = defer_close
        self.retired = {}  # connects count -> the dropped client
        self.client = None
        self.connects = 0
        self.backoff = BACKOFF_FIRST
        self.next_try = 0.0

    def start(self):
        """The first connection: a daemon away is waited for; a refusal is vLLM's error."""
        try:
            self._connect()
        except ConfigError as e:
            if not self._away(e):
                raise
            self._down("daemon_away", f"kvpoold not reached at start: {e}; serving without "
                                      "hits, retrying")

    def get(self):
        """The client, or None while the daemon is away (tried again when the back-off ends)."""
        import kvpool

        if self.client is None and time.monotonic() >= self.next_try:
            try:
                self._connect()
                logger.warning("kvpool: connected to pool '%s'", self.extra.get("pool"))
            except (ConfigError, kvpool.Error) as e:
                self._down("daemon_away" if self._away(e) else "refused",
                           f"cannot reconnect: {e}")
        return self.client

    def failed(self, e, what):
        """A kvpool call failed: counted, logged, and the link dropped if the connection went."""
        e = first_failure(e)
        cause = cause_of(e)
        if lost_connection(cause) and self.client is None:
            # Already down: counted, but one back-off per outage, not one per failed call.
            self.failures.note(cause, f"{what}: {e}")
        elif lost_connection(cause):
            self._down(cause, f"{what}: {e}; serving without hits until kvpoold is back")
            # A restarted daemon is there at once: the first try now, the back-off after it.
            self.next_try = time.monotonic()
        else:
            self.failures.note(cause, f"{what}: {e}")
        return cause

    def _connect(self):
        client = connect(self.extra)
        try:
            self.check(client)
        except Exception:
            client.close()
            raise
        self.client = client
        self.connects += 1
        self.backoff = BACKOFF_FIRST

    @staticmethod
    def _away(e):
        return e.errno in _AWAY

    def _down(self, cause, what):
        self.failures.note(cause, what)
        if self.client is not None and self.defer_close:
            self.retired[self.connects] = self.client
        elif self.client is not None:
            self._close(self.client)
        self.client = None
        self.next_try = time.monotonic() + self.backoff
        self.backoff = min(2 * self.backoff, BACKOFF_MAX)

    @staticmethod
    def _close(client):
        try:
            client.close()
        except Exception:  # a dead daemon's client: nothing more to undo
            pass

    def close_retired(self, keep=()):
        """Closes the dropped connections but those whose connects count is in keep."""
        for connects in [c for c in self.retired if c not in keep]:
            self._close(self.retired.pop(connects))

    def close(self):
        self.close_retired()
        if self.client is not None:
            self.client.close()
            self.client = None
