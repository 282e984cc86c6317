"""Sign-in through the identity provider, under /identity/ (config/urls.py). Each answers 404
while its provider is not configured."""

from __future__ import annotations

from django.urls import path

from identity.oidc import BackchannelLogoutView, OidcCallbackView, OidcStartView
from identity.saml import SamlAcsView, SamlLoginView, SamlLogoutView, SamlMetadataView

urlpatterns = [
    path("oidc/start/", OidcStartView.as_view(), name="identity-oidc-start"),
    path("oidc/callback/", OidcCallbackView.as_view(), name="identity-oidc-callback"),
    path(
        "oidc/backchannel-logout/",
        BackchannelLogoutView.as_view(),
        name="identity-oidc-backchannel-logout",
    ),
    path("saml/login/", SamlLoginView.as_view(), name="identity-saml-login"),
    path("saml/acs/", SamlAcsView.as_view(), name="identity-saml-acs"),
    path("saml/metadata/", SamlMetadataView.as_view(), name="identity-saml-metadata"),
    path("saml/ls/", SamlLogoutView.as_view(), name="identity-saml-ls"),
    path("saml/ls/post/", SamlLogoutView.as_view(), name="identity-saml-ls-post"),
]
