"""The admin's words for the refusals it shares with the upload API: the API answers in English
whatever the client's language (machines read its codes and messages), the admin in the
person's, with the same English words."""

from __future__ import annotations

from django.utils.translation import gettext


def key_unavailable_words(key: str) -> str:
    """`retrieval.api.uploads.key_unavailable`'s message, in the admin's language: the one
    answer for a key held by a document the user may not write, restricted or deleted alike."""
    return gettext(
        "The key %(key)s is taken by a document you cannot write (restricted to access groups "
        "you do not hold, or deleted and to be restored in the admin first). Use another key."
    ) % {"key": repr(key)}
