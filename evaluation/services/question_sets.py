"""Writing question sets and their questions: the admin's forms and upload, the API and Test
search's "this hit answers the question" all come here.

Every change of a set's questions raises its `version` in the same transaction, under a lock
on the set's row (`_locked`), so two writers never give two different sets of questions one
version. A person never names a document they may not read (the check's "unknown" keys), and
never removes one they cannot see: an edited question keeps its hidden expected documents
(`evaluation.documents.hidden_keys`) and, when it has some, its expected passage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from django.db import IntegrityError, transaction
from django.utils.translation import gettext

from evaluation.documents import hidden_keys, nameable_keys
from evaluation.models import Question, QuestionSet
from evaluation.question_files import (
    MAX_QUESTIONS,
    Checked,
    Problem,
    QuestionData,
    check,
    read_rows,
    same_question,
)
from kb.models import KnowledgeBase
from kb.selectors.metadata import DocumentReader
from kb.services.base import Actor, actor_id


class QuestionSetInvalid(ValueError):
    """A set's own field is wrong (`field` names it); the message is for the person."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class QuestionsRefused(ValueError):
    """The questions have problems and the person did not choose to write the valid ones: the
    report says what (nothing was written)."""

    def __init__(self, checked: Checked) -> None:
        super().__init__(checked.summary())
        self.checked = checked


@dataclass(frozen=True)
class Imported:
    """What an import wrote: questions added, updated (same id, new content), unchanged,
    removed (replace), rows left out for their problems, and the set's version after it."""

    added: int
    updated: int
    unchanged: int
    removed: int
    skipped: int
    version: int

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)

    def sentence(self) -> str:
        parts = [
            gettext("%(n)s added") % {"n": self.added},
            gettext("%(n)s updated") % {"n": self.updated},
        ]
        if self.removed:
            parts.append(gettext("%(n)s removed") % {"n": self.removed})
        if self.unchanged:
            parts.append(gettext("%(n)s unchanged") % {"n": self.unchanged})
        if self.skipped:
            parts.append(gettext("%(n)s rows with problems left out") % {"n": self.skipped})
        return gettext("%(parts)s; the set is at version %(version)s.") % {
            "parts": gettext(", ").join(parts),
            "version": self.version,
        }


def _locked(question_set: QuestionSet) -> QuestionSet:
    """The set's row, locked for this transaction (no key lock: its questions may still be
    read and its runs referenced)."""
    return QuestionSet.objects.select_for_update(no_key=True).get(pk=question_set.pk)


def _bump(locked: QuestionSet, actor: Actor) -> None:
    locked.version += 1
    locked.updated_by_id = actor_id(actor)
    locked.save(update_fields=["version", "updated_by", "updated_at"])


def question_set_create(
    *, kb: KnowledgeBase, name: str, description: str = "", actor: Actor = None
) -> QuestionSet:
    """A new, empty set of `kb`. Refused (QuestionSetInvalid) for an empty name or one the
    knowledge base has already."""
    name = name.strip()
    if not name:
        raise QuestionSetInvalid("name", gettext("Give the question set a name."))
    try:
        with transaction.atomic():
            return QuestionSet.objects.create(
                kb=kb,
                name=name,
                description=description.strip(),
                created_by_id=actor_id(actor),
                updated_by_id=actor_id(actor),
            )
    except IntegrityError:
        raise QuestionSetInvalid(
            "name",
            gettext("%(kb)s already has a question set named %(name)s.")
            % {"kb": kb.name, "name": repr(name)},
        ) from None


def question_set_update(
    *, question_set: QuestionSet, name: str, description: str, actor: Actor = None
) -> QuestionSet:
    """Rename or describe a set (its version stays: its questions did not change)."""
    name = name.strip()
    if not name:
        raise QuestionSetInvalid("name", gettext("Give the question set a name."))
    try:
        with transaction.atomic():
            locked = _locked(question_set)
            locked.name = name
            locked.description = description.strip()
            locked.updated_by_id = actor_id(actor)
            locked.save(update_fields=["name", "description", "updated_by", "updated_at"])
            return locked
    except IntegrityError:
        raise QuestionSetInvalid(
            "name",
            gettext("%(kb)s already has a question set named %(name)s.")
            % {"kb": question_set.kb, "name": repr(name)},
        ) from None


def questions_check(
    *, question_set: QuestionSet, raw: Sequence[tuple[str, object]], reader: DocumentReader
) -> Checked:
    """Check rows read from a file or a list (`evaluation.question_files`) against the set's
    knowledge base, as `reader` may name its documents."""
    return check(
        raw,
        known=lambda keys: nameable_keys(kb_id=question_set.kb_id, keys=keys, reader=reader),
    )


def questions_import(
    *,
    question_set: QuestionSet,
    checked: Checked,
    reader: DocumentReader,
    replace: bool = False,
    valid_only: bool = False,
    actor: Actor = None,
) -> Imported:
    """Write checked questions into the set: each row adds a question, or updates the one with
    its id; with `replace`, the set's other questions are removed. One transaction under the
    set's lock; the version rises once if anything changed. Idempotent: importing the same
    rows again changes nothing.

    Refused (QuestionsRefused, nothing written) when the check found problems, unless
    `valid_only`: then the valid rows are written and the others counted as skipped."""
    if not checked.ok and not valid_only:
        raise QuestionsRefused(checked)
    rows = checked.questions
    with transaction.atomic():
        locked = _locked(question_set)
        existing = {q.external_id: q for q in Question.objects.filter(question_set=locked)}
        incoming = {row.external_id for row in rows}
        total = len(incoming) if replace else len(set(existing) | incoming)
        if total > MAX_QUESTIONS:
            raise QuestionsRefused(
                _refusal(gettext("the set would hold %(n)s questions") % {"n": total})
            )
        hidden = _hidden(locked, [q for key, q in existing.items() if key in incoming], reader)
        added = updated = unchanged = 0
        for row in rows:
            question = existing.get(row.external_id)
            if question is None:
                _create(locked, row, actor)
                added += 1
            elif _update(question, row, hidden):
                updated += 1
            else:
                unchanged += 1
        gone = [q.pk for key, q in existing.items() if key not in incoming] if replace else []
        removed = Question.objects.filter(pk__in=gone).delete()[0] if gone else 0
        if added or updated or removed:
            _bump(locked, actor)
    return Imported(added, updated, unchanged, removed, checked.invalid, locked.version)


def _refusal(why: str) -> Checked:
    message = gettext("%(why)s; a question set holds at most %(n)s.")
    return Checked(problems=[Problem("", message % {"why": why, "n": MAX_QUESTIONS})])


def _hidden(
    question_set: QuestionSet, questions: Sequence[Question], reader: DocumentReader
) -> set[str]:
    """The expected documents of `questions` that `reader` may not see (one query)."""
    keys = {key for question in questions for key in question.expected_keys}
    return set(hidden_keys(kb_id=question_set.kb_id, keys=sorted(keys), reader=reader))


def _create(locked: QuestionSet, row: QuestionData, actor: Actor) -> Question:
    return Question.objects.create(
        question_set=locked,
        external_id=row.external_id,
        text=row.text,
        expected_keys=list(row.expected_keys),
        expected_passage=row.expected_passage,
        language=row.language,
        tag=row.tag,
        created_by_id=actor_id(actor),
    )


def _update(question: Question, row: QuestionData, hidden: set[str]) -> bool:
    """Give `question` the row's content (and id), keeping the expected documents in `hidden`
    (which its writer may not see) and then its passage, which may quote them. Saves it when
    anything changed, and says whether it did."""
    kept = [key for key in question.expected_keys if key in hidden]
    keys = list(dict.fromkeys([*row.expected_keys, *kept]))
    passage = question.expected_passage if kept else row.expected_passage
    new = (row.external_id, row.text, keys, passage, row.language, row.tag)
    old = (
        question.external_id,
        question.text,
        question.expected_keys,
        question.expected_passage,
        question.language,
        question.tag,
    )
    if new == old:
        return False
    (
        question.external_id,
        question.text,
        question.expected_keys,
        question.expected_passage,
        question.language,
        question.tag,
    ) = new
    question.save()
    return True


def _asked_already(
    question_set: QuestionSet, text: str, *, besides: Question | None = None
) -> Question | None:
    """The set's question with the same words as `text` (case and spacing aside)."""
    wanted = same_question(text)
    others = Question.objects.filter(question_set=question_set)
    if besides is not None:
        others = others.exclude(pk=besides.pk)
    return next(
        (q for q in others.only("pk", "external_id", "text") if same_question(q.text) == wanted),
        None,
    )


def question_check(
    *,
    question_set: QuestionSet,
    row: Mapping[str, object],
    reader: DocumentReader,
    question: Question | None = None,
) -> Checked:
    """One question (a new one, or `question` changed) as files write it
    (`evaluation.question_files`), checked as an imported row is and against the set's other
    questions: the same id, or the same question, is a problem. Reads only."""
    checked = questions_check(question_set=question_set, raw=read_rows([row]), reader=reader)
    if checked.ok:
        data = checked.questions[0]
        others = Question.objects.filter(question_set=question_set)
        if question is not None:
            others = others.exclude(pk=question.pk)
        if others.filter(external_id=data.external_id).exists():
            checked.problems.append(
                Problem(
                    "id",
                    gettext("the set has another question with id %(id)s")
                    % {"id": repr(data.external_id)},
                )
            )
        same = _asked_already(question_set, data.text, besides=question)
        if same is not None:
            checked.problems.append(
                Problem(
                    "question",
                    gettext("the set asks the same question already (%(id)s)") % {"id": same},
                )
            )
        if checked.problems:
            checked.rows = []
    return checked


def question_save(
    *,
    question_set: QuestionSet,
    row: Mapping[str, object],
    reader: DocumentReader,
    question: Question | None = None,
    actor: Actor = None,
) -> Question:
    """Add one question (`question` None) or change it, from a row of the fields files use;
    refused (QuestionsRefused, with the report) as `question_check` finds. A changed question
    keeps its hidden expected documents. One transaction under the set's lock; the set's
    version rises when anything changed."""
    with transaction.atomic():
        locked = _locked(question_set)
        checked = question_check(question_set=locked, row=row, reader=reader, question=question)
        if not checked.ok:
            raise QuestionsRefused(checked)
        data = checked.questions[0]
        if question is None:
            if Question.objects.filter(question_set=locked).count() >= MAX_QUESTIONS:
                raise QuestionsRefused(_refusal(gettext("the set is full")))
            saved = _create(locked, data, actor)
        else:
            saved = Question.objects.select_for_update().get(pk=question.pk, question_set=locked)
            if not _update(saved, data, _hidden(locked, [saved], reader)):
                return saved
        _bump(locked, actor)
    return saved


def question_delete(*, question: Question, actor: Actor = None) -> None:
    """Remove a question from its set (the results of earlier runs keep it as it was asked)."""
    with transaction.atomic():
        locked = _locked(question.question_set)
        deleted, _ = Question.objects.filter(pk=question.pk, question_set=locked).delete()
        if deleted:
            _bump(locked, actor)


def question_add_from_hit(
    *,
    question_set: QuestionSet,
    query: str,
    document_key: str,
    reader: DocumentReader,
    tag: str = "",
    actor: Actor = None,
) -> tuple[Question, bool]:
    """Test search's "this hit answers the question": the query becomes a question of the set
    answered by the hit's document or, when the set already asks it (the same words, case and
    spacing aside), the document joins its expected ones. Returns (question, created).
    Idempotent: the same hit twice changes nothing the second time. Refused like any question
    (QuestionsRefused): an empty or too long query, a document `reader` may not name."""
    with transaction.atomic():
        locked = _locked(question_set)
        checked = questions_check(
            question_set=locked,
            raw=read_rows([{"question": query, "expected_documents": [document_key], "tag": tag}]),
            reader=reader,
        )
        if not checked.ok:
            raise QuestionsRefused(checked)
        data = checked.questions[0]
        same = _asked_already(locked, data.text)
        if same is not None:
            same = Question.objects.select_for_update().get(pk=same.pk)
            if document_key in same.expected_keys:
                return same, False
            same.expected_keys = [*same.expected_keys, document_key]
            same.save(update_fields=["expected_keys", "updated_at"])
            _bump(locked, actor)
            return same, False
        if Question.objects.filter(question_set=locked).count() >= MAX_QUESTIONS:
            raise QuestionsRefused(_refusal(gettext("the set is full")))
        if Question.objects.filter(question_set=locked, external_id=data.external_id).exists():
            data = replace(data, external_id=f"{data.external_id}-{locked.version}")
        created = _create(locked, data, actor)
        _bump(locked, actor)
    return created, True
