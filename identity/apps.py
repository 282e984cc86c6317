from django.apps import AppConfig
from django.utils.translation import gettext_lazy


class IdentityConfig(AppConfig):
    name = "identity"
    label = "identity"
    verbose_name = gettext_lazy("Sign-in")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        from identity import checks  # noqa: F401 (registers the system checks)
        from identity.services import signed_out_here

        # Django's own logout view (the admin's "Log out") offers no other hook: the session's
        # provider tokens are dropped and the sign-out recorded.
        user_logged_out.connect(signed_out_here, dispatch_uid="identity.signed_out_here")
