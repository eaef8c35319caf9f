"""Continuation tokens: the token type, issuing, and the one constant-time check of a presented token.

A token is a JSON-safe mapping ``{"kind": "functional_workflow", "version": "1", "token": <secret>}``.
The secret is 256 bits from :func:`secrets.token_urlsafe`. Reading a presented token never raises
anything but :class:`~agent_framework_functional.ContinuationAuthorityError`, whatever object it is
handed, and runs in time bounded by the expected secret length (a 1 MB string is rejected by its
length). Every comparison of a secret goes through :func:`matches`: one ``hmac.compare_digest``
against the expected secret, or against one decoy when nothing is pending, so timing does not tell
whether a continuation exists.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal, cast

from agent_framework import ContinuationToken, WorkflowEvent

from ._errors import ContinuationAuthorityError
from ._store import DEFAULT_TTL_SECONDS as DEFAULT_SPENT_SECONDS

TOKEN_KIND: Literal["functional_workflow"] = "functional_workflow"
TOKEN_VERSION: Literal["1"] = "1"
_SECRET_BYTES = 32  # 256 bits
_SECRET_LENGTH = len(secrets.token_urlsafe(_SECRET_BYTES))
# Compared against when nothing is pending, so a probe cannot time "is anything pending".
_DECOY_SECRET = secrets.token_urlsafe(_SECRET_BYTES)
# The earlier requests of a continuation that resumed nothing: shared, read-only, never copied.
_NO_REQUESTS: Mapping[str, WorkflowEvent[Any]] = MappingProxyType({})


class FunctionalWorkflowContinuationToken(ContinuationToken):
    """Continuation token of a paused functional workflow run (extends core's ``ContinuationToken``).

    Treat it as opaque: store it (it survives ``json.dumps``/``json.loads``) and hand it back to the
    same workflow instance (``run(responses=..., continuation_token=token)``) or agent. It is
    single use: it is spent right before the resumed code runs, and every pause issues a new one.
    Extra keys are allowed and ignored, so later versions may add fields.

    Attributes:
        kind: Always ``"functional_workflow"``.
        version: Token format version, ``"1"``.
        token: URL-safe random text carrying 256 bits of entropy; the secret itself.
    """

    kind: Literal["functional_workflow"]
    version: Literal["1"]
    token: str


class Continuation:
    """The pending continuation of one workflow instance (internal).

    Slotted and built without copies: one pause keeps one of these per instance, so its size is the
    package's memory per paused continuation.

    Attributes:
        secret: The current token's secret (URL-safe ASCII text; the token carries the same string).
        pending_requests: Request id -> ``request_info`` event of the pause (owned, not a copy).
        earlier_requests: Requests of earlier pauses of the same run chain (already answered); a
            resume passes their answers again (core replays from the top), so they are checked too.
            A shared empty read-only mapping when there are none.
        reserved: True while an accepted run resumes it (before it is spent or handed back).
        issued_at: When it was issued, seconds since the epoch (telemetry: time from pause to resume).
    """

    __slots__ = ("earlier_requests", "issued_at", "pending_requests", "reserved", "secret")

    def __init__(
        self,
        secret: str,
        pending_requests: dict[str, WorkflowEvent[Any]],
        earlier_requests: Mapping[str, WorkflowEvent[Any]] = _NO_REQUESTS,
    ) -> None:
        self.secret = secret
        self.pending_requests = pending_requests
        self.earlier_requests = earlier_requests
        self.reserved = False
        self.issued_at = time.time()

    def known_requests(self) -> dict[str, WorkflowEvent[Any]]:
        """Every request of the run chain up to this pause: earlier ones, then the pending ones.

        Read-only for the caller: without earlier requests this is ``pending_requests`` itself.
        """
        if not self.earlier_requests:
            return self.pending_requests
        return {**self.earlier_requests, **self.pending_requests}

    def token(self) -> FunctionalWorkflowContinuationToken:
        """Return the JSON-safe token mapping for this continuation (a new dict sharing the secret string)."""
        return {"kind": TOKEN_KIND, "version": TOKEN_VERSION, "token": self.secret}


def issue_continuation(
    pending_requests: Mapping[str, WorkflowEvent[Any]],
    earlier_requests: Mapping[str, WorkflowEvent[Any]] | None = None,
) -> Continuation:
    """Create a continuation with a fresh 256-bit secret for the given pending (and earlier) requests.

    A ``dict`` of pending requests is kept as it is, not copied: the caller hands it over (a run's
    requests are final once core saved the pause). Any other mapping is copied.
    """
    pending: dict[str, WorkflowEvent[Any]] = (
        pending_requests if isinstance(pending_requests, dict) else dict(pending_requests)
    )
    earlier: Mapping[str, WorkflowEvent[Any]] = _NO_REQUESTS
    if earlier_requests:
        kept = dict(earlier_requests)
        for request_id in pending:  # usually one: cheaper than filtering every earlier request
            kept.pop(request_id, None)
        if kept:
            earlier = kept
    return Continuation(secrets.token_urlsafe(_SECRET_BYTES), pending, earlier)


def presented_secret(presented: object) -> bytes | None:
    """Return the ASCII secret of a well-shaped token, or None when its shape is wrong in any way.

    Never raises, whatever object it is handed (a hostile ``__class__``, ``__getitem__`` or
    ``__eq__`` gives None).
    """
    try:
        # isinstance() is inside the guard too: it consults the object's (overridable) __class__.
        if type(presented) is not dict and not isinstance(presented, Mapping):
            return None
        mapping = cast("Mapping[Any, Any]", presented)
        kind = mapping.get("kind")
        version = mapping.get("version")
        value = mapping.get("token")
    except Exception:  # hostile __class__/__getitem__/__eq__/__hash__: same fixed error, nothing leaks
        return None
    if type(kind) is not str or type(version) is not str or type(value) is not str:
        return None
    if kind != TOKEN_KIND or version != TOKEN_VERSION:
        return None
    if len(value) != _SECRET_LENGTH or not value.isascii():  # also rejects unpaired surrogates
        return None
    return value.encode("ascii")


def matches(presented: object, continuation: Continuation | None) -> bool:
    """Return True when ``presented`` carries the secret of ``continuation`` (constant-time compare).

    The only secret comparison in the package: with no continuation it compares against a decoy, so
    the time taken does not reveal whether anything is pending.
    """
    secret = presented_secret(presented)
    # The same work whether or not anything is pending: pick the text, then encode it.
    expected = (continuation.secret if continuation is not None else _DECOY_SECRET).encode("ascii")
    equal = hmac.compare_digest(secret if secret is not None else b"", expected)
    return equal and secret is not None and continuation is not None


def verify_token(presented: object, continuation: Continuation | None) -> Continuation:
    """Check ``presented`` against the unreserved pending continuation.

    Args:
        presented: Whatever the caller passed as ``continuation_token``.
        continuation: The instance's pending continuation, or None.

    Returns:
        The continuation the token authorises.

    Raises:
        ContinuationAuthorityError: When nothing unreserved is pending, or the token is missing,
            malformed or wrong. Always the same message.
    """
    candidate = continuation if continuation is not None and not continuation.reserved else None
    if not matches(presented, candidate):
        raise ContinuationAuthorityError()
    assert candidate is not None
    return candidate


def hash_secret(secret: str | bytes) -> str:
    """Return the hex sha256 of a token secret (its ASCII text): the only form in which a store sees a token."""
    return hashlib.sha256(secret.encode("ascii") if isinstance(secret, str) else secret).hexdigest()


def continuation_token_hash(token: Mapping[str, Any]) -> str:
    """Return the hash under which a :class:`ContinuationStore` records ``token``.

    Hosts use it to inspect a pause, for example to find the checkpoint of a token whose resume
    crashed after its claim: ``record = await store.get(continuation_token_hash(token))`` and then
    ``await wf.run(checkpoint_id=record.checkpoint_id, responses=...)``.

    Args:
        token: A continuation token mapping as returned by a paused run.

    Returns:
        The hex sha256 of the token's secret.

    Raises:
        ContinuationAuthorityError: If ``token`` is not a well-shaped continuation token.
    """
    secret = presented_secret(token)
    if secret is None:
        raise ContinuationAuthorityError()
    return hash_secret(secret)


# ---------------------------------------------------------------------------------------------- spent tokens

SPENT_MEMORY = 10_000
"""How many spent or abandoned tokens this process remembers at most (16-byte sha256 prefixes, ~0.2 KB each)."""

_DIGEST_BYTES = 16
# keep_for (seconds) -> digest -> when it is forgotten (time.time()). One ordered dict per duration, so
# each is in expiry order and expired notes go from its front; a process has a handful of durations at most.
_spent: dict[float, OrderedDict[bytes, float]] = {}


def _digest(secret: bytes) -> bytes:
    return hashlib.sha256(secret).digest()[:_DIGEST_BYTES]


def remember_spent(secret: str, keep_for: float = DEFAULT_SPENT_SECONDS) -> None:
    """Note that the token with ``secret`` was spent or abandoned here, for ``keep_for`` seconds.

    ``keep_for`` is the pause TTL of the instance that held it: a copy of the conversation that still
    carries the token (a host's session entry, written at the pause) expires with that TTL too. Notes go
    when their time has passed, and the oldest ones past :data:`SPENT_MEMORY`.
    """
    now = time.time()
    digest = _digest(secret.encode("ascii"))
    notes = _spent.get(keep_for)
    if notes is None:
        notes = _spent[keep_for] = OrderedDict()
    notes[digest] = now + keep_for
    notes.move_to_end(digest)
    _forget(now)


def _forget(now: float) -> None:
    """Drop the notes whose time has passed, then the oldest ones past :data:`SPENT_MEMORY`."""
    for keep_for, notes in list(_spent.items()):
        while notes and next(iter(notes.values())) <= now:
            notes.popitem(last=False)
        if not notes:
            del _spent[keep_for]
    excess = sum(len(notes) for notes in _spent.values()) - SPENT_MEMORY
    while excess > 0:
        # The note made longest ago: the front note whose (forget time - duration) is smallest.
        keep_for = min(_spent, key=lambda k: next(iter(_spent[k].values())) - k)
        notes = _spent[keep_for]
        notes.popitem(last=False)
        if not notes:
            del _spent[keep_for]
        excess -= 1


def spent_notes() -> int:
    """How many spent tokens this process remembers now (notes past their time not counted)."""
    _forget(time.time())
    return sum(len(notes) for notes in _spent.values())


def known_spent(presented: object) -> bool:
    """True when ``presented`` is a token this process spent or abandoned (and still remembers)."""
    secret = presented_secret(presented)
    if secret is None or not _spent:
        return False
    digest = _digest(secret)
    now = time.time()
    return any(notes.get(digest, now) > now for notes in _spent.values())
