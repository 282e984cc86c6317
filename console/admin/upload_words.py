"""The admin's words for the refusals it shares with the upload API: the API answers in English
whatever the client's language (machines read its codes and messages), the admin in the
person's, with the same English words."""

from __future__ import annotations

from django.utils.translation import gettext

from kb.failures import reason_words
from kb.uploads import UploadRejected


def key_unavailable_words(key: str) -> str:
    """`retrieval.api.uploads.key_unavailable`'s message, in the admin's language: the one
    answer for a key held by a document the user may not write, restricted or deleted alike."""
    return gettext(
        "The key %(key)s is taken by a document you cannot write (restricted to access groups "
        "you do not hold, or deleted and to be restored in the admin first). Use another key."
    ) % {"key": repr(key)}


def upload_refusal_words(refusal: UploadRejected) -> str:
    """Why `kb.uploads.upload_accept` refused a file, in the admin's language: its declared
    reason worded again (an extractor's for the file's type, the upload's own for its size or
    the file store), after the file's name where the English names it first; a refusal
    without one, in its English."""
    if refusal.reason is None:
        return str(refusal)
    why = reason_words(refusal.reason.code, refusal.reason.values, fallback=str(refusal))
    if not refusal.file_name or why == str(refusal):
        return why
    return gettext("%(file)s: %(why)s") % {"file": refusal.file_name, "why": why}
