"""What every write of knowledge-base state shares: who acted, and the refusals a person reads."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

Actor = AbstractBaseUser | AnonymousUser | None


def actor_id(actor: Actor) -> int | None:
    return actor.pk if actor is not None and actor.is_authenticated else None


class InvalidUpload(ValueError):
    """An upload refused before anything was written; the message is for the uploader."""


class ActionRefused(Exception):
    """An admin action that would change nothing or act on a stale view; the message says why."""
