"""A loopback stand-in for the Kaggle endpoints `kaggle kernels push/status/output` and
`kaggle datasets create/version/status` call.

The real `kaggle` client (through kagglesdk) talks to http://localhost:7777/api/v1/... when
KAGGLE_API_ENVIRONMENT=TEST. This server checks the request bodies the client really sends
(camelCase JSON of kagglesdk's ApiSaveKernelRequest and friends), runs each pushed notebook
locally through papermill (its /kaggle/working folder mapped to a temp folder, the kernel
in the repository as the bootstrap cell expects) and serves its files as the kernel's
output. Bound to 127.0.0.1 only; stopped by the test.

The client names one fixed address, localhost:7777, and a fixed port would let one stand-in
run at a time: tests in parallel workers took turns, one worker idle for minutes. So each
stand-in binds a free port of its own and, while it serves, is this process's HTTP proxy
(HTTP_PROXY, which `requests` honours; NO_PROXY emptied): the client still sends every request
to http://localhost:7777, the proxy form carries that address whole, and the stand-in refuses
a request for any other (a client aimed elsewhere fails as it would against no server). The
notebooks it runs as kernels get no proxy, as on Kaggle.

Like Kaggle (../../shared/reference/sessions.md, kaggle.com/docs/notebooks):
- each version starts with an empty /kaggle/working; the kernel runs as a batch session
  (KAGGLE_KERNEL_RUN_TYPE=Batch) with /kaggle at the kernel's folder (TA_KAGGLE_ROOT);
- `kernelDataSources` ("owner/slug", kaggle-cli's `kernel_sources`) mounts that kernel's
  latest output, read-only, at /kaggle/input/notebooks/<owner>/<slug>/;
- `sessionTimeoutSeconds` ends a kernel still running after that long: ERROR, and its
  output is not kept (a version killed at the limit keeps none);
- `ListKernelSessionOutput` pages (`pageSize`, `pageToken` -> `nextPageToken`).
`session_hours` (one value per push, in order) is the session limit each pushed kernel
runs under (TA_SESSION_HOURS): a stand-in for a training longer than Kaggle's 12 h.

Datasets, like Kaggle's: a file is uploaded as a blob (`StartBlobUpload` hands out a token
and a URL the client PUTs the bytes to), then `CreateDataset` / `CreateDatasetVersion` name
the blobs by token; a folder the client uploaded as `<name>.zip` (`--dir-mode zip`) is
unpacked into `<name>/`, "the same file hierarchy after the archives are automatically
uncompressed by the backend" (kaggle-cli PR #111). `GetDatasetStatus` is 404 for a dataset
that does not exist (the client's `dataset_create_new` probes it). `datasetDataSources`
("owner/slug", kernel-metadata's `dataset_sources`) mounts the dataset's latest version,
read-only, at /kaggle/input/datasets/<owner>/<slug>/ (the current layout, sessions.md).
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock
from urllib.parse import quote, unquote, urlsplit

ROOT = Path(__file__).resolve().parents[2]
PORT = 7777  # kagglesdk's KaggleEnv.TEST endpoint: the address the client sends to
ADDRESS = f"localhost:{PORT}"
PROXY = ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")  # set while it serves
PREFIX = "/api/v1/kernels.KernelsApiService/"
DATASETS = "/api/v1/datasets.DatasetApiService/"
BLOBS = "/api/v1/blobs.BlobApiService/"
WORKING = "/kaggle/working"
PAGE = 5  # files per output page at most: small, so a run's output spans several pages


# The Kaggle API's RPC endpoints the stand-in serves -> its method of the same job.
ENDPOINTS = {"SaveKernel": "save_kernel", "GetKernelSessionStatus": "status",
             "ListKernelSessionOutput": "output", "StartBlobUpload": "start_blob_upload",
             "GetDatasetStatus": "dataset_status", "CreateDataset": "create_dataset",
             "CreateDatasetVersion": "create_dataset_version",
             "GetAcceleratorQuotaStatistics": "quota"}


class Kernel:
    def __init__(self, slug: str, workdir: Path, timeout_s: float | None = None):
        self.slug, self.workdir, self.timeout_s = slug, workdir, timeout_s
        self.proc: subprocess.Popen | None = None
        self.failure: str | None = None
        self.started = time.monotonic()

    def status(self) -> str:
        if self.proc is None:
            return "QUEUED"
        rc = self.proc.poll()
        if rc is None and self.timeout_s and time.monotonic() - self.started > self.timeout_s:
            self.proc.kill()
            self.proc.wait()
            shutil.rmtree(self.workdir / "working", ignore_errors=True)  # no output kept
            self.failure = f"the session timed out after {self.timeout_s:g} s"
            return "ERROR"
        if self.failure:
            return "ERROR"
        if rc is None:
            return "RUNNING"
        if rc != 0:
            log = (self.workdir / "papermill.log").read_text(errors="replace").strip()
            self.failure = log.splitlines()[-1] if log else f"exit {rc}"
            return "ERROR"
        return "COMPLETE"


class FakeKaggle(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path, env: dict | None = None, session_hours: list | None = None):
        super().__init__(("127.0.0.1", 0), Handler)  # a free port: see the module's text
        self.proxy = f"http://127.0.0.1:{self.server_address[1]}"
        self._as_proxy = mock.patch.dict(os.environ, {"HTTP_PROXY": self.proxy,
                                                      "http_proxy": self.proxy,
                                                      "NO_PROXY": "", "no_proxy": ""})
        self.root, self.env = Path(root), env or {}
        self.session_hours = list(session_hours or [])
        self.kernels: dict[str, Kernel] = {}
        self.blobs: dict[str, tuple[str, bytes | None]] = {}  # token -> (file name, bytes)
        self.datasets: dict[str, list[Path]] = {}  # "owner/slug" -> its versions' folders
        self.requests: list[tuple[str, dict, str]] = []  # (endpoint, body, Authorization)
        # `kaggle quota`'s answer (kagglesdk's ApiGetAcceleratorQuotaStatisticsResponse as
        # JSON: durations as "<seconds>s"); None: the service has none to give (404).
        self.accelerator_quota: dict | None = None
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self):
        self._as_proxy.start()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._as_proxy.stop()
        self.shutdown()
        self.server_close()
        for k in self.kernels.values():
            if k.proc is not None and k.proc.poll() is None:
                k.proc.kill()
                k.proc.wait()

    # The three endpoints --------------------------------------------------------------------
    def save_kernel(self, body: dict) -> tuple[int, dict]:
        for key, want in (("language", "python"), ("kernelType", "notebook")):
            if body.get(key) != want:
                return 400, {"code": 400, "message": f"{key} must be {want!r}"}
        owner, _, slug = (body.get("slug") or "").partition("/")
        if not owner or not slug or body.get("newTitle") != slug:
            return 400, {"code": 400, "message": f"bad slug/title {body.get('slug')!r}"}
        nb = json.loads(body["text"])  # the client sends the notebook as one JSON string
        if not any("injected-parameters" in c.get("metadata", {}).get("tags", [])
                   for c in nb["cells"]):
            return 400, {"code": 400, "message": "no injected-parameters cell"}
        workdir = self.root / slug
        for old in ("working", "input"):  # a new version starts empty
            if (workdir / old).exists():
                for p in (workdir / old).rglob("*"):
                    p.chmod(p.stat().st_mode | stat.S_IWUSR)
                shutil.rmtree(workdir / old)
        (workdir / "working").mkdir(parents=True)
        for source in body.get("kernelDataSources") or []:
            if source not in self.kernels:
                return 400, {"code": 400, "message": f"kernel source {source!r} not found"}
            self._mount(self.kernels[source].workdir / "working",
                        workdir / "input" / "notebooks" / source)
        for source in body.get("datasetDataSources") or []:
            if source not in self.datasets:
                return 400, {"code": 400, "message": f"dataset source {source!r} not found"}
            self._mount(self.datasets[source][-1], workdir / "input" / "datasets" / source)
        text = body["text"].replace(WORKING, str(workdir / "working"))
        (workdir / "notebook.ipynb").write_text(text)
        kernel = Kernel(slug, workdir, body.get("sessionTimeoutSeconds"))
        self.kernels[f"{owner}/{slug}"] = kernel
        env = {**{k: v for k, v in os.environ.items() if k not in PROXY}, **self.env,
               "KAGGLE_KERNEL_RUN_TYPE": "Batch", "TA_KAGGLE_ROOT": str(workdir)}
        if self.session_hours:
            limit = self.session_hours.pop(0)
            if limit:
                env["TA_SESSION_HOURS"] = repr(limit)
        with open(workdir / "papermill.log", "wb") as log:
            kernel.proc = subprocess.Popen(
                [sys.executable, "-m", "papermill", str(workdir / "notebook.ipynb"),
                 str(workdir / "executed.ipynb"), "--cwd", str(ROOT), "-k", "python3"],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        version = sum(1 for e, b, _ in self.requests if e == "SaveKernel"
                      and b.get("slug") == body["slug"])
        return 200, {"ref": f"/code/{owner}/{slug}", "url": f"http://localhost:{PORT}/code/"
                     f"{owner}/{slug}", "versionNumber": version}

    @staticmethod
    def _mount(source: Path, target: Path) -> None:
        """A kernel's latest output or a dataset's latest version, read-only, where Kaggle
        mounts it."""
        if source.is_dir():
            shutil.copytree(source, target)
        target.mkdir(parents=True, exist_ok=True)
        for p in [target, *target.rglob("*")]:
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))

    # Datasets ---------------------------------------------------------------------------------
    def start_blob_upload(self, body: dict) -> tuple[int, dict]:
        if body.get("type") != "DATASET" or not body.get("name"):
            return 400, {"code": 400, "message": f"bad blob upload {body}"}
        token = f"blob-{len(self.blobs) + 1}"
        self.blobs[token] = (body["name"], None)
        return 200, {"token": token, "createUrl": f"http://localhost:{PORT}/upload/{token}"}

    def put_blob(self, token: str, data: bytes) -> int:
        if token not in self.blobs:
            return 404
        self.blobs[token] = (self.blobs[token][0], data)
        return 200

    def quota(self, body: dict) -> tuple[int, dict]:
        if self.accelerator_quota is None:
            return 404, {"code": 404, "message": "no quota statistics"}
        return 200, self.accelerator_quota

    def dataset_status(self, body: dict) -> tuple[int, dict]:
        ref = f"{body.get('ownerSlug')}/{body.get('datasetSlug')}"
        if ref not in self.datasets:
            return 404, {"code": 404, "message": "Dataset not found"}
        return 200, {"status": "READY"}

    def _new_version(self, ref: str, files: list[dict]) -> tuple[int, dict]:
        """Unpack the named blobs into the dataset's next version folder."""
        blobs = [self.blobs.get(f.get("token")) for f in files]
        if not files or any(b is None or b[1] is None for b in blobs):
            return 400, {"code": 400, "message": "a file was not uploaded"}
        versions = self.datasets.setdefault(ref, [])
        folder = self.root / "datasets" / ref / f"v{len(versions) + 1}"
        folder.mkdir(parents=True)
        for name, data in blobs:
            if name.endswith(".zip"):  # a folder the client zipped: unpacked (PR #111)
                with zipfile.ZipFile(io.BytesIO(data)) as archive:
                    archive.extractall(folder / name[: -len(".zip")])
            else:
                (folder / name).write_bytes(data)
        versions.append(folder)
        return 200, {"ref": ref, "url": f"http://localhost:{PORT}/datasets/{ref}",
                     "status": "ok", "error": ""}

    def create_dataset(self, body: dict) -> tuple[int, dict]:
        ref = f"{body.get('ownerSlug')}/{body.get('slug')}"
        if ref in self.datasets:
            return 200, {"error": f"dataset {ref} exists"}
        if body.get("isPrivate") is not True or not body.get("licenseName"):
            return 400, {"code": 400, "message": "expected a private dataset with a license"}
        return self._new_version(ref, body.get("files") or [])

    def create_dataset_version(self, body: dict) -> tuple[int, dict]:
        ref = f"{body.get('ownerSlug')}/{body.get('datasetSlug')}"
        if ref not in self.datasets:
            return 404, {"code": 404, "message": "Dataset not found"}
        return self._new_version(ref, (body.get("body") or {}).get("files") or [])

    def _kernel(self, body: dict) -> Kernel | None:
        return self.kernels.get(f"{body.get('userName')}/{body.get('kernelSlug')}")

    def status(self, body: dict) -> tuple[int, dict]:
        kernel = self._kernel(body)
        if kernel is None:
            return 404, {"code": 404, "message": "Kernel not found"}
        status = kernel.status()
        return 200, {"status": status, **({"failureMessage": kernel.failure}
                                          if status == "ERROR" else {})}

    def output(self, body: dict) -> tuple[int, dict]:
        kernel = self._kernel(body)
        if kernel is None:
            return 404, {"code": 404, "message": "Kernel not found"}
        working = kernel.workdir / "working"
        files = [{"fileName": str(p.relative_to(working)),
                  "url": f"http://localhost:{PORT}/files/{kernel.slug}/"
                         f"{quote(str(p.relative_to(working)))}"}
                 for p in sorted(working.rglob("*")) if p.is_file()]
        start = int(body.get("pageToken") or 0)
        size = min(int(body.get("pageSize") or 20), PAGE)
        page = files[start:start + size]
        more = {"nextPageToken": str(start + size)} if start + size < len(files) else {}
        return 200, {"files": page, "log": (kernel.workdir / "papermill.log").read_text(),
                     **more}


class Handler(BaseHTTPRequestHandler):
    server: FakeKaggle

    def log_message(self, *args):  # quiet
        pass

    def parse_request(self) -> bool:
        """A proxied request names its whole URL: serve only the client's TEST address, as
        the path the handlers expect."""
        if not super().parse_request():
            return False
        url = urlsplit(self.path)
        if url.netloc != ADDRESS:  # also a request sent to the port itself, not as a proxy
            self.send_error(502, f"the stand-in serves http://{ADDRESS} only, not {self.path}")
            return False
        self.path = url.path + (f"?{url.query}" if url.query else "")
        return True

    def _send(self, code: int, payload: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        endpoint = self.path.removeprefix(PREFIX).removeprefix(DATASETS).removeprefix(BLOBS)
        auth = self.headers.get("Authorization", "")
        self.server.requests.append((endpoint, body, auth))
        user = base64.b64decode(auth.split(" ", 1)[1]).decode().split(":")[0] if \
            auth.startswith("Basic ") else None
        if not user:
            code, reply = 401, {"code": 401, "message": "Unauthenticated"}
        elif endpoint in ENDPOINTS:
            code, reply = getattr(self.server, ENDPOINTS[endpoint])(body)
        else:
            code, reply = 404, {"code": 404, "message": f"no endpoint {self.path}"}
        self._send(code, json.dumps(reply).encode())

    def do_PUT(self):  # noqa: N802  (a blob's bytes, to the URL StartBlobUpload gave)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        code = self.server.put_blob(self.path.removeprefix("/upload/"), data)
        self._send(code, b"{}")

    def do_GET(self):  # noqa: N802
        _, _, rest = self.path.partition("/files/")
        slug, _, rel = rest.partition("/")
        kernel = next((k for k in self.server.kernels.values() if k.slug == slug), None)
        path = kernel.workdir / "working" / unquote(rel) if kernel else None
        if path is None or not path.is_file():
            self._send(404, b"not found", "text/plain")
            return
        self._send(200, path.read_bytes(), "application/octet-stream")
