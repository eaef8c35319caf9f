"""Continuation tokens: the token type, issuing, the one constant-time check, and the tokens spent here.

Reading a presented token never raises anything but ``ContinuationAuthorityError``, whatever object it
is. Every secret comparison is :func:`matches` (a decoy when nothing is pending: AGENTS.md invariant 3).
"""

from __future__ import annotations

import base64
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

    Opaque, JSON-safe, single use (spent right before resumed code runs); extra keys are ignored.

    Attributes:
        kind: Always ``"functional_workflow"``.
        version: Token format version, ``"1"``.
        token: URL-safe random text carrying 256 bits of entropy; the secret itself.
    """

    kind: Literal["functional_workflow"]
    version: Literal["1"]
    token: str


class Continuation:
    """The pending continuation of one instance; ``reserved``: an accepted run resumes it (not yet spent)."""

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
        """Every request of the run chain up to this pause, earlier first (read-only)."""
        if not self.earlier_requests:
            return self.pending_requests
        return {**self.earlier_requests, **self.pending_requests}

    def token(self) -> FunctionalWorkflowContinuationToken:
        """The JSON-safe token mapping of this continuation."""
        return {"kind": TOKEN_KIND, "version": TOKEN_VERSION, "token": self.secret}


def issue_continuation(
    pending_requests: Mapping[str, WorkflowEvent[Any]],
    earlier_requests: Mapping[str, WorkflowEvent[Any]] | None = None,
) -> Continuation:
    """A continuation with a fresh 256-bit secret; a ``dict`` of pending requests is taken over, not copied."""
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
    """The ASCII secret of a well-formed token, else None; never raises, even on hostile objects."""
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
    """True when ``presented`` carries the secret of ``continuation``; constant time, a decoy when None."""
    secret = presented_secret(presented)
    # The same work whether or not anything is pending: pick the text, then encode it.
    expected = (continuation.secret if continuation is not None else _DECOY_SECRET).encode("ascii")
    equal = hmac.compare_digest(secret if secret is not None else b"", expected)
    return equal and secret is not None and continuation is not None


def verify_token(presented: object, continuation: Continuation | None) -> Continuation:
    """``continuation`` when it is unreserved and ``presented`` is its token, else ``ContinuationAuthorityError``."""
    candidate = continuation if continuation is not None and not continuation.reserved else None
    if not matches(presented, candidate):
        raise ContinuationAuthorityError()
    assert candidate is not None
    return candidate


def hash_secret(secret: str | bytes) -> str:
    """The hex sha256 of a token secret: the only form in which a store sees a token."""
    return hashlib.sha256(secret.encode("ascii") if isinstance(secret, str) else secret).hexdigest()


_REQUEST_TAG_DOMAIN = b"agent_framework_functional request id\x00"


def request_tag(secret: str | bytes | None) -> str | None:
    """The tag of a pause's published request ids: a domain-separated hash of the secret (None for no secret)."""
    if secret is None:
        return None
    raw = secret.encode("ascii") if isinstance(secret, str) else secret
    return base64.urlsafe_b64encode(hashlib.sha256(_REQUEST_TAG_DOMAIN + raw).digest()[:12]).decode("ascii")


def continuation_token_hash(token: Mapping[str, Any]) -> str:
    """The hash (hex sha256 of the secret) under which a :class:`ContinuationStore` records ``token``.

    Hosts use it to find a pause's record, for example the checkpoint of a resume that crashed after its claim.

    Raises:
        ContinuationAuthorityError: ``token`` is not a well-formed continuation token.
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


def remember_spent(secret: str, keep_for: float) -> None:
    """Note that the token with ``secret`` was spent or abandoned here, for ``keep_for`` (the pause TTL) seconds."""
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


def forget_spent() -> int:
    """Drop the notes whose time has passed now (a host's sweep task); returns how many went."""
    before = sum(len(notes) for notes in _spent.values())
    return before - spent_notes()


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
