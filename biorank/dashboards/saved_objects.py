"""The saved objects of ``biorank.ndjson`` and their import into OpenSearch Dashboards.

The file is package data, so an installed biorank finds it; ``docker/dashboards/biorank.ndjson`` is a link
to it, for people who import by hand (Dashboards Management → Saved objects → Import).
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from biorank.errors import BiorankError

DEFAULT_URL = "http://localhost:5601"
IMPORT_PATH = "/api/saved_objects/_import?overwrite=true"


class DashboardsUnavailable(BiorankError):
    """OpenSearch Dashboards could not be reached, or is not ready."""


class DashboardsError(BiorankError):
    """OpenSearch Dashboards answered, but refused the import or the file."""


def saved_objects_path() -> Path:
    return Path(str(resources.files("biorank") / "dashboards" / "biorank.ndjson"))


def read_saved_objects(path: Path | str | None = None) -> list[dict]:
    """The objects of an NDJSON file, in order; a line that is not JSON is refused with its number."""
    path = Path(path) if path else saved_objects_path()
    objects = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            objects.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise DashboardsError(f"{path}:{number} is not JSON ({e.msg})") from None
    return objects


@dataclass
class ImportReport:
    url: str
    imported: list[tuple[str, str, str]] = field(default_factory=list)
    """(type, id, title) of every object created or overwritten."""
    errors: list[str] = field(default_factory=list)
    dashboards: list[str] = field(default_factory=list)
    """Where each imported dashboard opens."""


def _multipart(filename: str, data: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            "Content-Type: application/ndjson\r\n\r\n").encode()
    return head + data + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def import_saved_objects(url: str = DEFAULT_URL, path: Path | str | None = None, *, user: str | None = None,
                         password: str | None = None, ca_file: str | None = None, verify: bool = True,
                         timeout: float = 30.0) -> ImportReport:
    """POST the NDJSON to Dashboards' import API, overwriting objects of the same ids."""
    path = Path(path) if path else saved_objects_path()
    objects = read_saved_objects(path)  # refuse a broken file here, with its line, not in Dashboards
    titles = {(o.get("type"), o.get("id")): o.get("attributes", {}).get("title", "") for o in objects}
    # Dashboards refuses a file whose name does not end in .ndjson, whatever it holds.
    body, content_type = _multipart(path.with_suffix(".ndjson").name, path.read_bytes())
    url = url.rstrip("/")
    headers = {"Content-Type": content_type, "osd-xsrf": "true"}
    if user:
        token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context(cafile=ca_file)
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url + IMPORT_PATH, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            answer = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        message = _message(e.read())
        if e.code == 503:
            raise DashboardsUnavailable(f"OpenSearch Dashboards at {url} is not ready ({message}); it may still be "
                                        "starting: try again in a minute") from None
        raise DashboardsError(f"OpenSearch Dashboards at {url} refused the import ({e.code}: {message})") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise DashboardsUnavailable(
            f"cannot reach OpenSearch Dashboards at {url} ({reason}); is it running? "
            "`docker compose -f docker/docker-compose.yml up -d` starts it, or give --url"
        ) from None
    except json.JSONDecodeError:
        raise DashboardsError(f"{url} did not answer as OpenSearch Dashboards does (not JSON); check --url") from None
    report = ImportReport(url)
    for result in answer.get("successResults", []):
        key = (result.get("type"), result.get("id"))
        title = result.get("meta", {}).get("title") or titles.get(key, "")
        report.imported.append((key[0], key[1], title))
        if key[0] == "dashboard":
            report.dashboards.append(f"{url}/app/dashboards#/view/{key[1]}")
    for error in answer.get("errors", []):
        kind = error.get("error", {})
        detail = kind.get("message") or ", ".join(f"{r.get('type')} {r.get('id')}" for r in kind.get("references", []))
        report.errors.append(f"{error.get('type')} {error.get('id')} ({error.get('title', '')}): "
                             f"{kind.get('type', 'error')}{': ' + detail if detail else ''}")
    if not report.imported and not report.errors and not answer.get("success"):
        raise DashboardsError(f"OpenSearch Dashboards at {url} imported nothing: {json.dumps(answer)[:300]}")
    return report


def _message(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:300] or "no message"
    return str(body.get("message") or body.get("error") or body)[:300] if isinstance(body, dict) else str(body)[:300]
