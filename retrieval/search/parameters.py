"""The learned fusion's parameters for one knowledge base: the ones it adopted
(`retrieval.models.FusionCalibration`, a calibration on its own questions) or, without them,
the shipped default (`fusion.model()`).

Search reads them in the snapshot its legs are read in (`engine.search`), so a search that
began before an adoption or a rollback fuses by the parameters that were adopted when its
lists were read, never by a mix."""

from __future__ import annotations

import functools
import json

from retrieval import routing
from retrieval.search import fusion
from retrieval.search.fusion import FusionModel


def adopted_parameters(*, kb_id: int) -> FusionModel | None:
    """The parameters `kb_id` adopted, read through `routing.db()` (inside `search_snapshot`,
    the search's snapshot); None: the default. Parameters of other features than search
    computes (a calibration made before the features changed) count as none, so search falls
    back on the default rather than failing."""
    with routing.db().cursor() as cursor:
        cursor.execute(
            "SELECT parameters::text FROM retrieval_fusioncalibration WHERE kb_id = %s", [kb_id]
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return _parsed(row[0])


@functools.lru_cache(maxsize=256)
def _parsed(raw: str) -> FusionModel | None:
    """A model from its stored text; cached by that text, so a search does not rebuild it."""
    try:
        return fusion.model_from(json.loads(raw), name="the adopted parameters")
    except (ValueError, KeyError, TypeError):
        return None
