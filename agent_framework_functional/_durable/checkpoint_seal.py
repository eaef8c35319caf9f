"""CheckpointSealer: authenticate (HMAC-SHA256) and optionally encrypt (AES-GCM) checkpoint bodies.

A sealed body is ``afs1:<alg>:<key id>:<tag>:<payload>``, alg ``hs256`` (payload: the body) or ``a256gcm``
(``base64url(nonce + ciphertext)``); the tag, an HMAC over all but the tag plus the caller's ``context``, is
checked in constant time before anything is decrypted or decoded.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from agent_framework import WorkflowCheckpointException

logger = logging.getLogger("agent_framework_functional")

_VERSION = b"afs1"
_MAC_ONLY = b"hs256"
_ENCRYPTED = b"a256gcm"
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_HEADER_LIMIT = 160  # version, alg, key id (<= 64) and tag (43) with separators fit well within this
_NONCE_BYTES = 12
MIN_KEY_BYTES = 32  # 256 bits

_warned: set[str] = set()


def warn_unsealed(owner: str) -> None:
    """Log once per process and storage class that its checkpoint bodies are neither authenticated nor encrypted."""
    if owner in _warned:
        return
    _warned.add(owner)
    logger.warning(
        "%s has no CheckpointSealer: checkpoint bodies are not authenticated, so whoever can write them can make "
        "workers decode (and with pickle, run) what they planted. Pass sealer=CheckpointSealer(...) with a "
        "secret key: https://agent-framework-functional.github.io/agent-framework-functional/production/#seal-the-checkpoints",
        owner,
    )


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def _unb64(data: bytes) -> bytes:
    return base64.urlsafe_b64decode(data + b"=" * (-len(data) % 4))


def _refuse(why: str) -> WorkflowCheckpointException:
    return WorkflowCheckpointException(f"Checkpoint body refused: {why}. It was not decoded.")


def _derived_keys(key_id: object, key: object) -> tuple[bytes, tuple[bytes, bytes]]:
    """One host key, checked: its id as bytes, and the MAC and AES-256-GCM keys derived from it."""
    if not isinstance(key_id, str) or _KEY_ID.fullmatch(key_id) is None:
        raise ValueError("Key ids are 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-'.")
    if not isinstance(key, bytes):
        raise TypeError(f"Key {key_id!r} must be bytes (for example base64-decoded from your secret store).")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"Key {key_id!r} is shorter than {MIN_KEY_BYTES} bytes; use secrets.token_bytes(32).")
    return key_id.encode("ascii"), (_derive(key, b"mac"), _derive(key, b"aes-256-gcm"))


def _derive(key: bytes, label: bytes) -> bytes:
    return hmac.new(key, b"agent-framework-functional checkpoint " + label, hashlib.sha256).digest()


class CheckpointSealer:
    """Seal checkpoint bodies with the host's keys: HMAC-SHA256 always, AES-256-GCM on request.

    One key signs (``signing_key_id``); every key in ``keys`` verifies. To rotate, add the new key, make
    it the signing key, and drop the old one once no checkpoint sealed with it is needed. It stops bodies
    being planted, altered or moved to another id, not deleted or replayed (SECURITY.md "Checkpoint keys").

    Args:
        keys: Key id (1-64 of ``A-Z a-z 0-9 . _ -``) -> secret key (``bytes``, at least 32 bytes:
            ``secrets.token_bytes(32)`` kept in your secret store).

    Keyword Args:
        signing_key_id: The key that seals new bodies; may be omitted when ``keys`` has one key.
        encrypt: Also encrypt new bodies (AES-256-GCM, the ``crypto`` extra); bodies open either way.

    Raises:
        ValueError: No keys, a bad key id, a key shorter than 32 bytes, or ``signing_key_id``
            missing (several keys) or not in ``keys``.
        TypeError: ``keys`` is not a mapping (a list of pairs, say), or a key is not ``bytes``.
        ImportError: ``encrypt=True`` without the ``cryptography`` package.
    """

    __slots__ = ("_aead", "_keys", "_signing_id")

    def __init__(self, keys: Mapping[str, bytes], *, signing_key_id: str | None = None, encrypt: bool = False) -> None:
        if not isinstance(keys, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                f"CheckpointSealer takes a mapping of key id -> key, not {type(keys).__name__}: "
                "CheckpointSealer({'key-id': secrets.token_bytes(32)})."
            )
        if not keys:
            raise ValueError("CheckpointSealer needs at least one key: {'key-id': secrets.token_bytes(32)}.")
        self._keys = dict(_derived_keys(key_id, key) for key_id, key in keys.items())
        if signing_key_id is None:
            if len(keys) != 1:
                raise ValueError("With several keys, name the one that seals new bodies: signing_key_id=...")
            signing_key_id = next(iter(keys))
        if signing_key_id not in keys:
            raise ValueError("signing_key_id must be one of the ids in keys.")
        self._signing_id = signing_key_id.encode("ascii")
        self._aead: Any = _aesgcm_class() if encrypt else None

    @property
    def signing_key_id(self) -> str:
        """The id of the key that seals new bodies."""
        return self._signing_id.decode("ascii")

    @property
    def key_ids(self) -> frozenset[str]:
        """The ids of every key that opens bodies."""
        return frozenset(key_id.decode("ascii") for key_id in self._keys)

    @property
    def encrypts(self) -> bool:
        """True when new bodies are encrypted as well as authenticated."""
        return self._aead is not None

    def seal(self, body: bytes, *, context: bytes = b"") -> bytes:
        """Return ``body`` sealed with the signing key (encrypted with ``encrypt``), to open with ``context`` only."""
        mac_key, enc_key = self._keys[self._signing_id]
        if self._aead is not None:
            nonce = os.urandom(_NONCE_BYTES)
            ciphertext = self._aead(enc_key).encrypt(nonce, body, self._signing_id + b"\x00" + context)
            alg, payload = _ENCRYPTED, _b64(nonce + ciphertext)
        else:
            alg, payload = _MAC_ONLY, body
        tag = _b64(_tag(mac_key, alg, self._signing_id, context, payload))
        return b":".join((_VERSION, alg, self._signing_id, tag, payload))

    def open(self, sealed: bytes, *, context: bytes = b"") -> bytes:
        """Check ``sealed`` (what :meth:`seal` returned, with the same ``context``); return its body, decrypted.

        Raises:
            WorkflowCheckpointException: The body is not sealed, names an unknown key, its tag does
                not match (altered, planted, or moved from another id), or it does not decrypt.
        """
        parts = sealed[:_HEADER_LIMIT].split(b":", 4)
        if len(parts) != 5 or parts[0] != _VERSION:
            raise _refuse("it is not sealed (a CheckpointSealer is configured, so every body must be)")
        _, alg, key_id, tag, _rest = parts
        keys = self._keys.get(key_id)
        if keys is None:
            raise _refuse("it names a key id this sealer does not hold (add the key to keys=...)")
        payload = sealed[len(_VERSION) + len(alg) + len(key_id) + len(tag) + 4 :]
        if alg not in (_MAC_ONLY, _ENCRYPTED):
            raise _refuse("unknown sealing algorithm")
        mac_key, enc_key = keys
        try:
            presented = _unb64(tag)
        except ValueError:
            presented = b""
        if not hmac.compare_digest(presented, _tag(mac_key, alg, key_id, context, payload)):
            raise _refuse(
                "its authentication tag does not match (altered, planted, saved under another id, or sealed with "
                "another key under the same key id: give every worker the same keys)"
            )
        if alg == _MAC_ONLY:
            return payload
        aead = self._aead or _aesgcm_class()
        try:
            raw = _unb64(payload)
            return aead(enc_key).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], key_id + b"\x00" + context)
        except Exception as exc:
            raise _refuse("it does not decrypt") from exc


def is_sealed(body: bytes) -> bool:
    """True when ``body`` starts like a sealed body (says nothing about whether it is genuine)."""
    return body.startswith(_VERSION + b":")


def chunk_context(segment: str, index: int) -> bytes:
    """The sealing context of a step-cache chunk (its segment id and index: chunks cannot be swapped or moved)."""
    return b"afs-chunk\x00" + segment.encode("utf-8") + b"\x00" + str(index).encode("ascii")


def open_chunk(segment: str, index: int, raw: bytes, sealer: CheckpointSealer | None) -> str:
    """One stored chunk as text: opened first with a sealer (bound to its segment and index), then decoded."""
    if sealer is not None:
        raw = sealer.open(raw, context=chunk_context(segment, index))  # before any parsing
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkflowCheckpointException(f"A chunk of segment {segment} is not UTF-8; not loaded.") from exc


def _tag(mac_key: bytes, alg: bytes, key_id: bytes, context: bytes, payload: bytes) -> bytes:
    mac = hmac.new(mac_key, digestmod=hashlib.sha256)
    for part in (_VERSION, alg, key_id, context):
        mac.update(len(part).to_bytes(4, "big"))
        mac.update(part)
    mac.update(payload)
    return mac.digest()


def _aesgcm_class() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Encrypting checkpoints needs the 'cryptography' package: pip install 'agent-framework-functional[crypto]'."
        ) from exc
    return AESGCM
