"""The HTTP client every live engine client shares: one URL, no proxy, no redirects, retries, concurrency.

    >>> HttpClient("http://127.0.0.1:30000/").url
    'http://127.0.0.1:30000'
    >>> HttpClient("file:///etc/passwd")       # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    WorkbenchError: ...

The client only ever talks to the URL it is given: no proxy from the environment, and a redirect to
anywhere else is refused. Engine clients (``sglang_live.Client``, ``vllm_live.Client``) add their endpoints.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from workbench.core.errors import WorkbenchError


def check_url(url: str) -> str:
    """The server's base URL without a trailing slash; WorkbenchError unless plain http(s)://host[:port].

        >>> check_url("http://127.0.0.1:30000/")
        'http://127.0.0.1:30000'
    """
    if not isinstance(url, str) or not url.strip():
        raise WorkbenchError("--url: empty server URL (expected e.g. http://127.0.0.1:30000)")
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or parts.username or parts.password:
        raise WorkbenchError(f"--url {url!r}: expected http(s)://HOST[:PORT] of the SGLang server "
                             "(no query, fragment or credentials)")
    try:
        parts.port
    except ValueError:
        raise WorkbenchError(f"--url {url!r}: the port is not a number in 1..65535") from None
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))



class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # only the URL the user gave
        return None



OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect())



@dataclass
class HttpClient:
    """An HTTP JSON client for one server: timeouts, retries with exponential backoff, a concurrency limit.

        >>> c = HttpClient("http://127.0.0.1:30000", timeout=30, retries=2)
        >>> c.url
        'http://127.0.0.1:30000'

    Connection errors, timeouts and HTTP 5xx are retried ``retries`` times (waits ``backoff``,
    2·backoff, 4·backoff, ...); HTTP 4xx and replies that do not parse fail at once.
    """

    KIND = "HTTP"                  # the server kind named in messages ("SGLang", "vLLM")
    ARTICLE = "an"

    url: str
    timeout: float = 120.0
    retries: int = 3
    backoff: float = 0.5
    concurrency: int = 4

    def __post_init__(self):
        self.url = check_url(self.url)
        for name, lo in (("timeout", 0.0), ("backoff", 0.0)):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v >= lo or (name == "timeout" and v == 0):
                raise WorkbenchError(f"--{name} {v!r}: expected a positive number of seconds")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise WorkbenchError(f"retries {self.retries!r}: expected an integer >= 0")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise WorkbenchError(f"--concurrency {self.concurrency!r}: expected an integer >= 1")

    def request(self, path: str, payload: dict | None = None, *, raw: bool = False):
        """GET (payload None) or POST JSON to ``url + path``; the decoded JSON reply (``raw``: the body
        as text, e.g. Prometheus ``/metrics``)."""
        target = self.url + path
        data = None if payload is None else json.dumps(payload).encode()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            req = urllib.request.Request(target, data=data, method="GET" if data is None else "POST",
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
            try:
                with OPENER.open(req, timeout=self.timeout) as resp:
                    body = resp.read()
            except urllib.error.HTTPError as e:
                text = snippet(e.read() if e.fp is not None else b"")
                if 500 <= e.code < 600:
                    last = f"HTTP {e.code} {text}".rstrip()
                    continue
                raise WorkbenchError(f"{target}: HTTP {e.code} {e.reason}{': ' + text if text else ''}") from None
            except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, OSError) as e:
                reason = getattr(e, "reason", e)
                last = "timed out" if isinstance(reason, (socket.timeout, TimeoutError)) else str(reason)
                continue
            if raw:
                return body.decode("utf-8", "replace")
            try:
                return json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise WorkbenchError(f"{target}: the reply is not JSON ({getattr(e, 'msg', e)}; starts "
                                     f"{snippet(body)!r}): is this {self.ARTICLE} {self.KIND} server?") from None
        raise WorkbenchError(f"cannot reach the {self.KIND} server at {target}: {last} (after {self.retries + 1} "
                             f"tries, timeout {self.timeout:g} s; is it running and is --url right?)")

    def map(self, fn, items: list, *, progress: bool = False, desc: str = "requests") -> list:
        """``fn(item)`` for every item with at most ``concurrency`` in flight; results in input order."""
        from tqdm.auto import tqdm

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool, \
                tqdm(total=len(items), desc=desc, unit="req", disable=not progress) as bar:
            futures = [pool.submit(fn, x) for x in items]
            out = []
            try:
                for f in futures:
                    out.append(f.result())
                    bar.update(1)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        return out



def snippet(body: bytes, n: int = 120) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body)
    return " ".join(text.split())[:n]
