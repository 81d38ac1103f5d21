"""No secret in any file under docker/: passwords, API keys and tokens reach the tool from the
environment, files mounted at run time or systemd credentials, never from a template.

The scanner flags: an assignment (``KEY=value``, ``KEY: value``) whose key names a secret and
whose value is a literal; a Kubernetes env entry ``name: PGPASSWORD`` with a literal ``value``; a
Secret with a value in ``data``/``stringData``; credentials in a URL; known token formats; and
long base64 blobs. Not secrets: references (``$VAR``, ``${VAR}``, ``$(cat FILE)``), file paths,
names of variables or Kubernetes objects (``PGPASSWORD_FILE``, ``secretKeyRef``,
``AUTOTUNE_API_KEY_ENV``) and placeholders written ``<like this>``.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

DOCKER = REPO / "docker"

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_NAMING_LAST_WORDS = {"file", "files", "name", "ref", "env", "path", "dir", "id", "names"}
_SECRET_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("auth", "token")}
# A lookahead at every word start, so `Environment=HF_TOKEN=x` yields both assignments.
_ASSIGNMENT = re.compile(
    r"""(?<![A-Za-z0-9_.-])(?=(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)["']?\s*(?:=|:(?=\s|$))[ \t]*"""
    r"""(?P<value>"[^"]*"|'[^']*'|[^\s#,;)]*))"""
)
_URL_CREDENTIALS = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@'\"]+:(?P<pw>[^/\s@'\"]+)@")
_TOKEN_FORMATS = re.compile(
    r"\bsk-[A-Za-z0-9_-]{16,}|\bhf_[A-Za-z0-9]{20,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bAKIA[0-9A-Z]{16}\b"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----|\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"
)
_BASE64_BLOB = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/]{32,}={0,2}(?![A-Za-z0-9+/=_-])")
_PLACEHOLDER = re.compile(r"^<[^<>]+>$")


def _words(identifier: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(identifier)]


def _names_a_secret(key: str) -> bool:
    """True for a key whose value would be a secret (PGPASSWORD, api_key, HF_TOKEN), false for one
    that names where a secret is (PGPASSWORD_FILE, secretKeyRef, AUTOTUNE_API_KEY_ENV)."""
    words = _words(key)
    if not words or words[-1] in _NAMING_LAST_WORDS:
        return False
    if any(p in w for w in words for p in ("password", "passwd", "passphrase")):
        return True
    if any(w in {"secret", "token", "apikey", "pwd"} or w.endswith("token") for w in words):
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))


def _is_harmless_value(raw: str) -> bool:
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1].strip()
    return (
        value.lower() in {"", "null", "~", "true", "false", "[]", "{}"}
        or value.startswith(("$", "%d/", "[", "{"))  # a reference, a systemd credential, a flow collection
        or "/" in value  # a file path
        or bool(_PLACEHOLDER.match(value))
    )


def _line_findings(line: str) -> list[str]:
    found = []
    for m in _ASSIGNMENT.finditer(line):
        if _names_a_secret(m["key"]) and not _is_harmless_value(m["value"]):
            found.append(f"{m['key']} has a literal value")
    for m in _URL_CREDENTIALS.finditer(line):
        if not _is_harmless_value(m["pw"]):
            found.append("a URL carries a password")
    if _TOKEN_FORMATS.search(line):
        found.append("a token in a known format")
    for m in _BASE64_BLOB.finditer(line):
        blob = m.group()
        if re.search(r"[a-z]", blob) and re.search(r"[A-Z]", blob) and re.search(r"\d", blob):
            found.append(f"a base64 blob ({blob[:8]}...)")
    return found


def _yaml_findings(text: str) -> list[str]:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError:
        return []
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("kind") == "Secret":
                for section in ("data", "stringData"):
                    for key, value in (node.get(section) or {}).items():
                        if not _PLACEHOLDER.match(str(value)):
                            found.append(f"Secret {section}.{key} holds a value, not a <placeholder>")
            name = node.get("name")
            literal = node.get("value")
            if isinstance(name, str) and _names_a_secret(name) and not _is_harmless_value(str(literal or "")):
                found.append(f"env {name} has a literal value")
            for key, value in node.items():
                scalar = "" if value is None or isinstance(value, dict | list) else str(value)
                if isinstance(key, str) and _names_a_secret(key) and not _is_harmless_value(scalar):
                    found.append(f"{key} has a literal value")
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for doc in docs:
        walk(doc)
    return found


def scan_text(name: str, text: str) -> list[str]:
    """Findings in one file, each 'name:line: what' (YAML structure findings without a line)."""
    findings = [
        f"{name}:{n}: {what}" for n, line in enumerate(text.splitlines(), 1) for what in _line_findings(line)
    ]
    if name.endswith((".yaml", ".yml")):
        findings += [f"{name}: {what}" for what in _yaml_findings(text)]
    return findings


def _docker_files() -> list[Path]:
    """Every file under docker/ that git would commit (a user's git-ignored docker/secrets/ is not)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "docker"],
            cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        files = [REPO / p for p in out.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in DOCKER.rglob("*") if "secrets" not in p.relative_to(DOCKER).parts]
    return sorted(p for p in files if p.is_file())


def test_no_secret_in_any_file_under_docker() -> None:
    files = _docker_files()
    assert len(files) >= 10, files  # the scan saw the templates, not an empty folder
    findings = [f for p in files for f in scan_text(str(p.relative_to(REPO)), p.read_text())]
    assert not findings, "\n".join(findings)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("env", "PGPASSWORD=hunter2\n"),
        ("sh", 'export PGPASSWORD="hunter2"\n'),
        ("env", "VLLM_API_KEY=abc123\n"),
        ("service", "Environment=HF_TOKEN=abcdefgh\n"),
        ("compose.yaml", "services:\n  db:\n    environment:\n      POSTGRES_PASSWORD: s3cret\n"),
        ("compose.yaml", "services:\n  db:\n    environment:\n      - PGPASSWORD=s3cret\n"),
        ("job.yaml", "env:\n  - name: PGPASSWORD\n    value: hunter2\n"),
        ("job.yaml", "env:\n  - name: VLLM_API_KEY\n    value: '12345'\n"),
        ("secret.yaml", "kind: Secret\nstringData:\n  pgpassword: hunter2\n"),
        ("secret.yaml", "kind: Secret\ndata:\n  pgpassword: aHVudGVyMg==\n"),
        ("job.yaml", "env:\n  - name: AUTOTUNE_STORAGE_URL\n    value: postgresql://autotune:hunter2@db/x\n"),
        ("README.md", "autotune run --api-key=sk-abcdefghijklmnopqrstuv\n"),
        ("README.md", "a blob: c2VjcmV0LXZhbHVlLXRoYXQtaXMtbG9uZy1lbm91Z2g0Mg==\n"),
        ("key.pem", "-----BEGIN RSA PRIVATE KEY-----\n"),
    ],
)
def test_the_scan_flags_a_planted_secret(name: str, text: str) -> None:
    assert scan_text(name, text), f"not flagged: {text!r}"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("env", "PGPASSWORD_FILE=/run/secrets/pg_password\n"),
        ("sh", 'export PGPASSWORD="$$(cat /run/secrets/pg_password)"\n'),
        ("env", "AUTOTUNE_API_KEY_ENV=VLLM_API_KEY\n"),
        ("service", "Environment=VLLM_API_KEY_FILE=%d/vllm-api-key\n"),
        (
            "job.yaml",
            "env:\n  - name: PGPASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: s\n        key: k\n",
        ),
        ("secret.yaml", "kind: Secret\nstringData:\n  pgpassword: '<the password>'\n"),
        (
            "job.yaml",
            "env:\n  - name: AUTOTUNE_STORAGE_URL\n    value: postgresql+psycopg://autotune@db:5432/x\n",
        ),
        ("README.md", "image: vllm/vllm-openai@sha256:" + "0123456789abcdef" * 4 + "\n"),
        ("README.md", "--max-num-batched-tokens=2048 max_tokens: 4\n"),
    ],
)
def test_the_scan_passes_references_names_and_placeholders(name: str, text: str) -> None:
    assert not scan_text(name, text)
