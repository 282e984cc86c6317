"""A person's browser, as a plain HTTP client with a cookie jar (httpx), walking the providers'
real pages: Canon's sign-in button, the provider's sign-in and consent forms, the answer back to
Canon. The browser tests (tests/e2e/test_identity_browser.py) walk the same pages in Chromium."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import urljoin

import httpx


def client() -> httpx.Client:
    return httpx.Client(follow_redirects=True, timeout=30)


def _form(page: httpx.Response) -> tuple[str, dict[str, str]]:
    """The first form of a page: its absolute action and its hidden inputs."""
    action = re.search(r'<form[^>]*action="([^"]*)"', page.text)
    assert action is not None, page.text[:2000]
    fields = dict(
        re.findall(r'<input[^>]*type="hidden"[^>]*name="([^"]+)"[^>]*value="([^"]*)"', page.text)
    )
    return urljoin(str(page.url), unescape(action.group(1))), {
        k: unescape(v) for k, v in fields.items()
    }


def oidc_sign_in(browser: httpx.Client, canon_url: str, login: str) -> httpx.Response:
    """Click "Sign in with ..." on Canon, sign in at the provider as `login` (its development
    form takes any password), consent if asked; the page Canon answers with at the end."""
    page = browser.get(f"{canon_url}/identity/oidc/start/", params={"next": "/admin/"})
    if 'name="login"' in page.text:
        action, fields = _form(page)
        page = browser.post(action, data={**fields, "login": login, "password": "any"})
    if 'name="prompt" value="consent"' in page.text:
        action, fields = _form(page)
        page = browser.post(action, data=fields)
    return page


def saml_sign_in(browser: httpx.Client, canon_url: str, uid: str) -> httpx.Response:
    """Click "Sign in with ..." (SAML) on Canon, sign in at the IdP as `uid`, and post its
    answer to Canon as the page's script would; the page Canon answers with at the end."""
    page = browser.get(f"{canon_url}/identity/saml/login/", params={"next": "/admin/"})
    action, fields = _form(page)
    page = browser.post(action, data={**fields, "username": uid})
    if "SAMLResponse" not in page.text:
        return page  # the IdP refused
    action, fields = _form(page)
    return browser.post(action, data=fields)


def end_provider_session(browser: httpx.Client, issuer: str) -> httpx.Response:
    """Sign out at the OpenID provider (its end-session page, confirmed)."""
    page = browser.get(f"{issuer}/session/end")
    action, fields = _form(page)
    return browser.post(action, data={**fields, "logout": "yes"})
