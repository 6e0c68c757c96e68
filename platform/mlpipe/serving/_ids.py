"""Names on the request path: a new request's id, this worker's in segment file names, and
the characters an id or entity value may not hold."""

from __future__ import annotations

import os
import re

from mlpipe.serving._schema import PredictRequest, logged_strings

# Zero-width and bidirectional formatting characters (issue 29, item 12): invisible, or
# they reorder what follows, so an id holding one shows in a table or a report as another.
# U+200B-U+200F (zero-width space, joiners, LRM, RLM), U+202A-U+202E (embeddings,
# overrides), U+2066-U+2069 (isolates), U+FEFF (zero-width no-break space, BOM).
INVISIBLE_CHARACTERS = "\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff"
_INVISIBLE = re.compile(f"[{INVISIBLE_CHARACTERS}]")


def new_request_id() -> str:
    """An id for a request that came without one: 128 random bits as 32 hex digits (what
    ``uuid.uuid4().hex`` gives, less its six fixed bits, without building a UUID)."""
    return os.urandom(16).hex()


def worker_id() -> str:
    """This process's name in segment file names."""
    return f"w{os.getpid()}"


def invisible_character_problem(req: PredictRequest) -> tuple[str, str] | None:
    """(field, message) for a zero-width or bidirectional formatting character in the
    request id or an entity's name or string value, or None.

    Those strings are logged, routed on and shown in CLI tables and reports, where
    such a character makes one id look like another; the gateway refuses it (422).
    """
    for field, text in logged_strings(req):
        found = None if text.isascii() else _INVISIBLE.search(text)  # ASCII: the usual id
        if found is not None:
            char = f"U+{ord(found.group()):04X}"
            return field, f"{field}: invisible or bidirectional character {char} not allowed"
    return None


__all__ = ["INVISIBLE_CHARACTERS", "invisible_character_problem", "new_request_id", "worker_id"]
