"""Bearer tokens: 401 without or with an unknown token, 403 without the scope, hashed storage."""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
import sys

from api_helpers import running_api

from director.api.auth import TokenStore, add_token


async def test_routes_need_a_token_with_the_right_scope(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, body = await api.get("/api/v1/status", token=None)
        assert status == 401
        assert "missing bearer token" in body["error"]

        status, body = await api.get("/api/v1/status", token="not-a-token")
        assert (status, body["error"]) == (401, "unknown token")

        status, body = await api.get("/api/v1/status", token=None,
                                     headers={"Authorization": f"Basic {api.admin}"})
        assert status == 401

        status, body = await api.post("/api/v1/regions/eu-west/drain", token="read")
        assert status == 403
        assert body["error"] == "token 'reader' lacks the 'admin' scope"

        status, body = await api.get("/api/v1/status", token="read")
        assert status == 200 and body["policy"]["zone"] == "infer.example.com"

        status, body = await api.post("/api/v1/regions/eu-west/undrain", token="admin")
        assert status == 200, body
        status, body = await api.get("/api/v1/policy", token="admin")  # admin implies read
        assert status == 200


async def test_public_routes_need_no_token(tmp_path, valkey, prefix):
    async with running_api(tmp_path, valkey.url, prefix) as api:
        status, health = await api.get("/healthz", token=None)
        assert status == 200 and health["ok"] is True and health["policy"]["version"] == 1
        status, text = await api.get("/metrics", token=None)
        assert status == 200 and "director_api_requests_total" in text
        assert "director_state_reachable 1.0" in text
        status, page = await api.get("/", token=None)
        assert status == 200 and "<table id=\"regions\">" in page
        status, schema = await api.get("/openapi.json", token=None)
        assert status == 200 and "/api/v1/policy" in schema["paths"]
        status, docs = await api.get("/docs", token=None)
        assert status == 200 and "swagger" in docs.lower()
        assert "/docs/assets/swagger-ui-bundle.js" in docs and "https://" not in docs
        assert '"validatorUrl": null' in docs  # no badge from swagger.io
        status, script = await api.get("/docs/assets/swagger-ui-bundle.js", token=None)
        assert status == 200 and "SwaggerUIBundle" in script
        assert (await api.get("/redoc", token=None))[0] == 404  # its bundle needs a CDN


def test_tokens_are_stored_hashed_and_owner_only(tmp_path):
    path = tmp_path / "tokens.json"
    admin = add_token(path, "admin", "admin")
    reader = add_token(path, "ci", "read")
    text = path.read_text()
    assert admin not in text and reader not in text
    assert hashlib.sha256(admin.encode()).hexdigest() in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    entries = json.loads(text)["tokens"]
    assert [(e["name"], e["scopes"]) for e in entries] == [
        ("admin", ["read", "admin"]), ("ci", ["read"])]
    store = TokenStore(path)
    assert store.authenticate(admin).name == "admin"
    assert store.authenticate(reader).scopes == frozenset({"read"})
    assert store.authenticate(reader + "x") is None


def test_a_token_added_while_serving_is_accepted(tmp_path):
    path = tmp_path / "tokens.json"
    add_token(path, "admin", "admin")
    store = TokenStore(path)
    late = add_token(path, "late", "read")
    assert store.authenticate(late).name == "late"


def test_token_command_prints_the_token_once_and_stores_its_hash(tmp_path):
    path = tmp_path / "run" / "tokens.json"
    done = subprocess.run(
        [sys.executable, "-m", "director", "api", "token", "--tokens", str(path),
         "--name", "ops", "--scope", "admin"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert len(token) >= 40
    assert token not in path.read_text()
    assert TokenStore(path).authenticate(token).scopes == frozenset({"read", "admin"})

    bad = subprocess.run(
        [sys.executable, "-m", "director", "api", "token", "--tokens", str(path),
         "--name", "x", "--scope", "root"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "scope: expected one of read, admin" in bad.stderr
