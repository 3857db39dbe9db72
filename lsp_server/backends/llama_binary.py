"""Where `scripts/build-llama-server.sh` puts llama.cpp's binaries (outside git, per user)."""

from __future__ import annotations

import os
from pathlib import Path

LLAMA_CPP_VERSION = "0.3.36"  # the llama-cpp-python sdist whose vendored llama.cpp is built


def llama_bin_dir(cache_dir: str | None = None) -> Path:
    root = Path(cache_dir or os.environ.get("SPECFILL_CACHE") or Path.home() / ".cache" / "specfill")
    return root / "llama-server" / LLAMA_CPP_VERSION / "bin"


def _binary(name: str, cache_dir: str | None) -> Path | None:
    path = llama_bin_dir(cache_dir) / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def llama_server_path(cache_dir: str | None = None) -> Path | None:
    """The built `llama-server`, or None (run `make llama-server`)."""
    return _binary("llama-server", cache_dir)


def llama_bench_path(cache_dir: str | None = None) -> Path | None:
    """The built `llama-bench` (`specfill bench llamacpp`), or None (run `make llama-server`)."""
    return _binary("llama-bench", cache_dir)


def llama_env(cache_dir: str | None = None) -> dict[str, str]:
    """Environment to run the binaries with (their shared libraries, if any, sit beside them)."""
    env = dict(os.environ)
    lib = str(llama_bin_dir(cache_dir))
    env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServerProcess:
    """A `llama-server` on 127.0.0.1 (tests, `specfill bench remote`). `with` it, or call
    `start()` / `stop()`; `url`, `slots()`, `metrics()` read its state."""

    def __init__(self, model: str | Path, draft: str | Path | None = None, *, threads: int = 2,
                 ctx: int = 4096, draft_max: int | None = 4, api_key: str | None = None,
                 port: int | None = None, log_path: str | Path | None = None,
                 binary: Path | None = None, extra: tuple[str, ...] = (),
                 tls: tuple[str, str, str] | None = None):
        self.binary = binary or llama_server_path()
        if self.binary is None:
            raise FileNotFoundError("no llama-server built: run `make llama-server`")
        self.port = port or free_port()
        # tls: (key file, certificate file, CA file that signed it) -> https on its own
        self.verify: object = tls[2] if tls else True
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.args = [str(self.binary), "-m", str(model), "--host", "127.0.0.1",
                     "--port", str(self.port), "-t", str(threads), "-c", str(ctx), "-np", "1",
                     "--no-webui", "--metrics", "--slots", *extra]
        if draft is not None:  # draft_max None: llama.cpp's own default draft length
            self.args += ["-md", str(draft), "--spec-type", "draft-simple", "-td", str(threads)]
            self.args += ["--spec-draft-n-max", str(draft_max)] if draft_max is not None else []
        if api_key:
            self.args += ["--api-key", api_key]
        if tls:
            self.args += ["--ssl-key-file", tls[0], "--ssl-cert-file", tls[1]]
        self.log_path = Path(log_path) if log_path else None
        self.process = None

    def start(self, timeout_s: float = 120.0) -> "LlamaServerProcess":
        import subprocess
        import time

        import httpx

        log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=llama_env())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.process.returncode}); see {self.log_path}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0, verify=self._verify()).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"llama-server not healthy after {timeout_s:.0f} s")

    def kill(self) -> None:
        """Die at once, as a crashed server would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        import subprocess

        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def _verify(self):
        import ssl

        return ssl.create_default_context(cafile=self.verify) if isinstance(self.verify, str) else True

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def slots(self) -> list[dict]:
        import httpx

        return httpx.get(self.url + "/slots", headers=self._headers(), timeout=5.0,
                         verify=self._verify()).json()

    def metrics(self) -> dict[str, float]:
        """The Prometheus counters (`llamacpp:` prefix dropped)."""
        import httpx

        text = httpx.get(self.url + "/metrics", headers=self._headers(), timeout=5.0,
                         verify=self._verify()).text
        out = {}
        for line in text.splitlines():
            if line.startswith("llamacpp:"):
                name, _, value = line[len("llamacpp:"):].partition(" ")
                out[name] = float(value)
        return out

    def __enter__(self) -> "LlamaServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
