"""Serve a built site on 127.0.0.1 (a free port) from a thread, for the browser test and
the benchmark: ``with serve(Path("_site")) as base: ...`` (``base`` is the site's URL); and
what both ask of a page."""

import contextlib
import functools
import http.server
import threading
from pathlib import Path

#: Chromium's own refusal of every host but the local server (Playwright's routing refuses
#: them too, and lists them).
OFFLINE_FLAGS = ["--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]


#: True once the JupyterLite notebook shown has a kernel, and it is idle.
KERNEL_IDLE = """() => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session
        && w.sessionContext.session.kernel;
    return !!k && k.status === 'idle';
}"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".wasm": "application/wasm", ".mjs": "text/javascript",
                      ".js": "text/javascript", ".json": "application/json"}

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(directory: Path):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                          functools.partial(_Handler, directory=str(directory)))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join()


def refuse_other_hosts(ctx, base: str) -> list:
    """Abort every request of ``ctx`` that is not to ``base``; the list of those refused."""
    refused = []

    def route(r):
        if r.request.url.startswith(base + "/") or r.request.url.startswith("data:"):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()
    ctx.route("**/*", route)
    return refused
