"""The admin index's landing panel (templates/admin/index.html): for a user whose tenant has
exactly one knowledge base, that knowledge base's home summary and latest timeline entries;
with several, a link to each one's home with its work queues (`console.admin.work_queues`)."""

from __future__ import annotations

from typing import Any

from django import template

from console.admin.kb_home import home_summary, landing_knowledge_bases
from console.admin.work_queues import landing_queues, may_see_held

register = template.Library()

LANDING_TIMELINE = 5


@register.inclusion_tag("admin/kb/knowledgebase/_landing.html", takes_context=True)
def kb_landing(context: dict[str, Any]) -> dict[str, Any]:
    request = context.get("request")
    if request is None:
        return {"knowledge_bases": []}
    kbs = landing_knowledge_bases(request)
    if len(kbs) != 1:
        # each with its work queues, so nothing waiting goes unnoticed behind the list
        return {
            "knowledge_bases": kbs,
            "rows": landing_queues(request, kbs),
            "show_held": may_see_held(request),
        }
    return {
        "knowledge_bases": kbs,
        "single": True,
        **home_summary(request, kbs[0], timeline_size=LANDING_TIMELINE),
    }
