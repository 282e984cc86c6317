from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class KbConfig(AppConfig):
    name = "kb"
    verbose_name = gettext_lazy("Knowledge")
