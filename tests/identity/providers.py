"""Real identity providers as processes of the tests, the way the other real servers are started
(tests/s3server.py, tests/mcp/conftest.py): an OpenID provider (panva's oidc-provider on the
machine's Node.js, installed from the npm registry into .data/test-tools once) and a SAML
identity provider (pysaml2's own IdP, tests/identity/saml_idp.py, signing with xmlsec1).

The tests hold the providers' signing keys (they generate them), so they can also write the
tokens no provider would issue: signed with a key the provider never published, with `alg:
none`, for another issuer."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from identity import jwks
from tests.production_support import free_port

ROOT = Path(__file__).resolve().parents[2]
OIDC_PROVIDER_VERSION = "9.13.3"
TOOLS = ROOT / ".data" / "test-tools"
CLIENT_ID = "canon"
CLIENT_SECRET = "canon-test-client-secret-0123456789abcdef"  # a test provider's client
API_AUDIENCE = "https://canon.test/api"
OTHER_AUDIENCE = "https://elsewhere.test/api"
SHORT_LIVED = "urn:canon:short-lived"  # a resource whose tokens are Canon's but live 1 s
MCP_RESOURCE = "https://canon.test/mcp"


def rsa_jwk(kid: str) -> tuple[dict[str, Any], rsa.RSAPrivateKey]:
    """A new RSA signing key as a private JWK (with its kid) and as a key object."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key))
    jwk.update(kid=kid, alg="RS256", use="sig")
    return jwk, key


def oidc_provider_package() -> Path:
    """oidc-provider installed with npm into .data/test-tools (once; xdist workers wait for
    each other on a lock file). Skips when Node.js is not installed."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are needed to run the OpenID provider")
    home = TOOLS / f"oidc-provider-{OIDC_PROVIDER_VERSION}"
    marker = home / "node_modules" / "oidc-provider" / "package.json"
    TOOLS.mkdir(parents=True, exist_ok=True)
    with (TOOLS / ".oidc-provider.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            staging = TOOLS / f".staging-{uuid.uuid4().hex}"
            staging.mkdir()
            (staging / "package.json").write_text('{"private": true, "type": "module"}')
            done = subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    f"oidc-provider@{OIDC_PROVIDER_VERSION}",
                ],
                cwd=staging,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                shutil.rmtree(staging, ignore_errors=True)
                raise RuntimeError(f"npm install oidc-provider failed:\n{done.stderr[-2000:]}")
            shutil.rmtree(home, ignore_errors=True)
            staging.rename(home)
    return home


class OidcProvider:
    """panva's oidc-provider on a free port of 127.0.0.1 (its own host for cookies: Canon's live
    server is `localhost`), with Canon as a confidential client (code flow with PKCE, refresh
    tokens, back-channel logout), two service clients for the client-credentials grant, and the
    resources whose JWT access tokens Canon accepts or must refuse."""

    def __init__(self, workdir: Path, *, canon_url: str) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        package = oidc_provider_package()
        link = workdir / "node_modules"
        if not link.exists():
            link.symlink_to(package / "node_modules")
        shutil.copy(Path(__file__).with_name("oidc_provider.mjs"), workdir / "provider.mjs")
        (workdir / "package.json").write_text('{"private": true, "type": "module"}')
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.canon_url = canon_url.rstrip("/")
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.jwks: list[dict[str, Any]] = []
        self.rotations = 0
        self.accounts: dict[str, dict[str, Any]] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.current_kid = self._new_key()
        self.start()

    def _new_key(self) -> str:
        kid = f"key-{self.rotations}-{uuid.uuid4().hex[:6]}"
        jwk, key = rsa_jwk(kid)
        self.keys[kid] = key
        self.jwks = [jwk]  # the provider publishes and signs with this key only
        return kid

    def config(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "port": self.port,
            "jwks": {"keys": self.jwks},
            "clients": [
                {
                    "client_id": CLIENT_ID,
                    "client_secret": CLIENT_SECRET,
                    "redirect_uris": [f"{self.canon_url}/identity/oidc/callback/"],
                    "post_logout_redirect_uris": [f"{self.canon_url}/admin/login/"],
                    "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"],
                    "token_endpoint_auth_method": "client_secret_basic",
                    "backchannel_logout_uri": f"{self.canon_url}/identity/oidc/backchannel-logout/",
                    "backchannel_logout_session_required": True,
                },
                {
                    "client_id": "agent-finance",
                    "client_secret": "agent-finance-secret-0123456789",
                    "grant_types": ["client_credentials"],
                    "response_types": [],
                    "token_endpoint_auth_method": "client_secret_basic",
                    "groups": ["canon-agents-finance"],
                },
                {
                    "client_id": "agent-nobody",
                    "client_secret": "agent-nobody-secret-0123456789",
                    "grant_types": ["client_credentials"],
                    "response_types": [],
                    "token_endpoint_auth_method": "client_secret_basic",
                    "groups": ["not-mapped-anywhere"],
                },
            ],
            "resources": {
                API_AUDIENCE: {"scope": "search", "audience": API_AUDIENCE, "accessTokenTTL": 300},
                MCP_RESOURCE: {"scope": "search", "audience": MCP_RESOURCE, "accessTokenTTL": 300},
                OTHER_AUDIENCE: {
                    "scope": "search",
                    "audience": OTHER_AUDIENCE,
                    "accessTokenTTL": 300,
                },
                SHORT_LIVED: {"scope": "search", "audience": API_AUDIENCE, "accessTokenTTL": 1},
            },
        }

    def start(self) -> None:
        config = self.workdir / "config.json"
        config.write_text(json.dumps(self.config()))
        log = self.workdir / "provider.log"
        self.proc = subprocess.Popen(
            ["node", "provider.mjs", str(config)],
            cwd=self.workdir,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=1)
                if answer.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the OpenID provider did not start:\n{self.log()}")
            time.sleep(0.1)
        for sub, account in self.accounts.items():  # a restart forgets them: say them again
            self._put_account(sub, account)

    def log(self) -> str:
        path = self.workdir / "provider.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def rotate_keys(self) -> tuple[str, str]:
        """The provider's key rotation: it restarts publishing and signing with a new key only
        (sessions and tokens it issued before are forgotten: a key rotation is not what is
        tested through them). Returns the old and the new key ids."""
        old = self.current_kid
        self.rotations += 1
        self.stop()
        self.current_kid = self._new_key()
        self.start()
        return old, self.current_kid

    def set_account(self, sub: str, *, enabled: bool = True, **claims: Any) -> None:
        """A person at the provider (sign in with `sub` as the login), or a change to one:
        their claims, or disabled."""
        self.accounts[sub] = {"claims": claims, "enabled": enabled}
        self._put_account(sub, self.accounts[sub])

    def _put_account(self, sub: str, account: dict[str, Any]) -> None:
        httpx.put(
            f"{self.issuer}/_control/accounts/{sub}", json=account, timeout=5
        ).raise_for_status()

    def service_token(self, client_id: str = "agent-finance", resource: str = API_AUDIENCE) -> str:
        """An access token of the client-credentials grant, as a service gets one: a JWT for
        `resource`, carrying the client's groups."""
        secret = {
            "agent-finance": "agent-finance-secret-0123456789",
            "agent-nobody": "agent-nobody-secret-0123456789",
        }[client_id]
        answer = httpx.post(
            f"{self.issuer}/token",
            data={"grant_type": "client_credentials", "resource": resource, "scope": "search"},
            auth=(client_id, secret),
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()["access_token"])

    def forge(
        self,
        *,
        kid: str | None = None,
        key: rsa.RSAPrivateKey | None = None,
        alg: str = "RS256",
        **claims: Any,
    ) -> str:
        """A token the provider did not issue, written with one of its keys (its current one by
        default) or another: for the refusals a real provider cannot be made to produce."""
        now = int(time.time())
        payload = {
            "iss": self.issuer,
            "aud": API_AUDIENCE,
            "sub": "forged",
            "iat": now,
            "exp": now + 300,
            "groups": ["canon-agents-finance"],
            **claims,
        }
        kid = kid or self.current_kid
        if alg == "none":
            return jwt.encode(payload, "", algorithm="none", headers={"kid": kid})
        return jwt.encode(payload, key or self.keys[kid], algorithm=alg, headers={"kid": kid})


def oidc_settings(settings: Any, provider: OidcProvider) -> None:
    """Canon pointed at `provider` for sign-in and for access tokens."""
    jwks.forget()
    settings.OIDC_ISSUER = settings.OAUTH_ISSUER = provider.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_NAME = "Acme ID"
    settings.OIDC_ENABLED = True
    settings.OAUTH_AUDIENCE = API_AUDIENCE
    settings.OAUTH_TOKENS_ENABLED = True
    settings.AUTHENTICATION_BACKENDS = [
        "identity.backends.LocalPasswordBackend",
        "identity.oidc.OidcBackend",
    ]


def self_signed(tmp: Path, name: str) -> tuple[Path, Path]:
    """A key and a self-signed certificate (PEM files) for a SAML party."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = tmp / f"{name}.key", tmp / f"{name}.crt"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


class SamlIdp:
    """pysaml2's own IdP (`saml2.server.Server`) in its own process (tests/identity/saml_idp.py)
    on `localhost` (the same site as Canon's live server, as the assertion consumer's cookie
    needs on plain HTTP), signing its assertions with xmlsec1. Its people are a JSON file the
    test writes (`set_user`)."""

    def __init__(self, workdir: Path, *, canon_url: str) -> None:
        if shutil.which("xmlsec1") is None:
            pytest.skip("SAML needs Debian's xmlsec1 (make test installs it)")
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.port = free_port()
        self.base = f"http://localhost:{self.port}"
        self.metadata_url = f"{self.base}/idp/metadata"
        self.users_path = workdir / "users.json"
        self.users: dict[str, dict[str, Any]] = {}
        self.users_path.write_text("{}")
        key, cert = self_signed(workdir, "idp")
        config = {
            "base": self.base,
            "port": self.port,
            "key_file": str(key),
            "cert_file": str(cert),
            "sp_metadata_url": f"{canon_url.rstrip('/')}/identity/saml/metadata/",
            "users_file": str(self.users_path),
        }
        (workdir / "idp.json").write_text(json.dumps(config))
        log = workdir / "idp.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.identity.saml_idp", str(workdir / "idp.json")],
            cwd=ROOT,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.metadata_url, timeout=1).status_code == 200:
                    break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the SAML IdP did not start:\n{self.log()}")
            time.sleep(0.1)

    def set_user(self, uid: str, *, enabled: bool = True, **attributes: list[str]) -> None:
        self.users[uid] = {"enabled": enabled, "attributes": {"uid": [uid], **attributes}}
        self.users_path.write_text(json.dumps(self.users))

    def log(self) -> str:
        path = self.workdir / "idp.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@contextlib.contextmanager
def running(provider: OidcProvider | SamlIdp) -> Iterator[Any]:
    try:
        yield provider
    finally:
        provider.stop()
