"""A SAML 2.0 identity provider for the tests: pysaml2's own IdP (`saml2.server.Server`), served
by wsgiref in its own process (`python -m tests.identity.saml_idp CONFIG`, started by
tests/identity/providers.SamlIdp). It publishes its metadata, reads Canon's (the service
provider's) when the first request comes, shows a sign-in form for an AuthnRequest received
with the HTTP-Redirect binding, and answers with a signed assertion over HTTP-POST (xmlsec1).
Its people are the JSON file the test writes: {uid: {"enabled", "attributes": {name: [...]}}};
a disabled or unknown person is refused at its form."""

from __future__ import annotations

import copy
import html
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
from saml2.config import IdPConfig
from saml2.metadata import create_metadata_string
from saml2.saml import AUTHN_PASSWORD, NAMEID_FORMAT_PERSISTENT, NameID
from saml2.server import Server


def idp_conf(config: dict[str, Any], *, with_sp: bool) -> dict[str, Any]:
    base = config["base"]
    conf: dict[str, Any] = {
        "entityid": f"{base}/idp/metadata",
        "xmlsec_binary": "/usr/bin/xmlsec1",
        "key_file": config["key_file"],
        "cert_file": config["cert_file"],
        "service": {
            "idp": {
                "name": "Canon test IdP",
                "endpoints": {
                    "single_sign_on_service": [(f"{base}/idp/sso/redirect", BINDING_HTTP_REDIRECT)]
                },
                "name_id_format": [NAMEID_FORMAT_PERSISTENT],
                "policy": {
                    "default": {"lifetime": {"minutes": 15}, "attribute_restrictions": None}
                },
            }
        },
    }
    if with_sp:
        conf["metadata"] = {"remote": [{"url": config["sp_metadata_url"]}]}
    return conf


class Idp:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self._server: Server | None = None

    @property
    def server(self) -> Server:
        if self._server is None:  # Canon's metadata can be read once Canon is configured
            conf = IdPConfig()
            conf.load(copy.deepcopy(idp_conf(self.config, with_sp=True)))
            self._server = Server(config=conf)
        return self._server

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path = environ["PATH_INFO"]
        try:
            if path == "/idp/metadata":
                conf = IdPConfig()
                conf.load(copy.deepcopy(idp_conf(self.config, with_sp=False)))
                xml = create_metadata_string(None, config=conf, sign=False)
                return self._answer(start_response, "200 OK", xml, "text/xml")
            if path == "/idp/sso/redirect":
                query = parse_qs(environ.get("QUERY_STRING", ""))
                request = query["SAMLRequest"][0]
                relay = query.get("RelayState", [""])[0]
                self.server.parse_authn_request(request, BINDING_HTTP_REDIRECT)  # checks it
                return self._answer(
                    start_response, "200 OK", _form(request, relay, ""), "text/html"
                )
            if path == "/idp/login" and environ["REQUEST_METHOD"] == "POST":
                size = int(environ.get("CONTENT_LENGTH") or 0)
                form = parse_qs(environ["wsgi.input"].read(size).decode())
                return self._login(start_response, {k: v[0] for k, v in form.items()})
        except (KeyError, ValueError) as exc:
            return self._answer(
                start_response, "400 Bad Request", f"bad request: {exc}", "text/plain"
            )
        return self._answer(start_response, "404 Not Found", "not found", "text/plain")

    def _login(self, start_response: Any, form: dict[str, str]) -> list[bytes]:
        uid = form.get("username", "")
        request, relay = form["SAMLRequest"], form.get("RelayState", "")
        users = json.loads(Path(self.config["users_file"]).read_text())
        user = users.get(uid)
        if user is None or not user.get("enabled", True):
            page = _form(request, relay, f"No such person, or disabled: {uid}")
            return self._answer(start_response, "200 OK", page, "text/html")
        authn_request = self.server.parse_authn_request(request, BINDING_HTTP_REDIRECT).message
        args = self.server.response_args(authn_request)
        response = self.server.create_authn_response(
            identity=user["attributes"],
            userid=uid,
            name_id=NameID(format=NAMEID_FORMAT_PERSISTENT, text=f"idp-person-{uid}"),
            authn={"class_ref": AUTHN_PASSWORD, "authn_auth": self.server.config.entityid},
            sign_assertion=True,
            sign_response=True,
            **args,
        )
        http = self.server.apply_binding(
            BINDING_HTTP_POST, str(response), args["destination"], relay, response=True
        )
        return self._answer(start_response, "200 OK", http["data"], "text/html")

    @staticmethod
    def _answer(start_response: Any, status: str, body: str | bytes, kind: str) -> list[bytes]:
        data = body.encode() if isinstance(body, str) else body
        start_response(
            status, [("Content-Type", f"{kind}; charset=utf-8"), ("Content-Length", str(len(data)))]
        )
        return [data]


def _form(request: str, relay: str, error: str) -> str:
    return (
        "<!DOCTYPE html><html><head><title>Test IdP</title></head><body>"
        "<h1>Test IdP: sign in</h1>"
        + (f'<p id="error">{html.escape(error)}</p>' if error else "")
        + '<form method="post" action="/idp/login">'
        '<input id="username" name="username" autofocus>'
        f'<input type="hidden" name="SAMLRequest" value="{html.escape(request)}">'
        f'<input type="hidden" name="RelayState" value="{html.escape(relay)}">'
        '<button id="sign-in" type="submit">Sign in</button></form></body></html>'
    )


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write("idp: " + format % args + "\n")


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    server = make_server("localhost", config["port"], Idp(config), handler_class=QuietHandler)
    server.serve_forever()


if __name__ == "__main__":
    main()
