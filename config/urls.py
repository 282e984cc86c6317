from django.contrib import admin
from django.urls import include, path
from django.utils.translation import gettext_lazy as _
from django.views.decorators.common import no_append_slash
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from config import health
from identity.forms import AdminLoginForm

admin.site.site_header = "Canon"
admin.site.site_title = "Canon"
admin.site.index_title = _("Knowledge bases")
# Canon has no public site: the admin is its front page, so no "View site" link that leads
# nowhere; the bare host goes to the admin.
admin.site.site_url = None
# Sign-in: a button per identity provider configured, failed sign-ins rate limited and audited
# (identity/).
admin.site.login_form = AdminLoginForm
admin.site.login_template = "identity/login.html"
# A permission refusal in the admin is an admin page naming the permission and the role with it.
handler403 = "console.admin.refusals.permission_denied"
# An unknown admin address is an admin page with a way home (Django's plain page elsewhere).
handler404 = "console.admin.refusals.page_not_found"

# Errors under /api/ are JSON in both DEBUG modes: retrieval.api.errors.ApiErrorsMiddleware.
urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False), name="root"),
    path("admin/", admin.site.urls),
    # The admin header's language switcher posts here (`set_language`: Django's cookie).
    path("i18n/", include("django.conf.urls.i18n")),
    # Sign-in through the company's identity provider: OIDC, SAML (identity/urls.py).
    path("identity/", include("identity.urls")),
    path("api/v1/", include("retrieval.api.urls")),
    path("api/v1/", include("sources.api.urls")),
    path("api/v1/", include("evaluation.api.urls")),
    # Shapes other tools speak: Dify's External Knowledge API, OpenAI's vector-store search.
    path("api/", include("retrieval.compat.urls")),
    path("api/schema/", no_append_slash(SpectacularAPIView.as_view()), name="api-schema"),
    path(
        "api/docs/",
        no_append_slash(SpectacularSwaggerView.as_view(url_name="api-schema")),
        name="api-docs",
    ),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
]
