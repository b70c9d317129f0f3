"""`translate serve`: an ASGI server (Starlette, uvicorn) and a page that shows attention.

app.py holds the routes, reading.py the checks of a request's body and fields,
attention_json.py the /attention answer's JSON, batching.py the batcher that decodes requests
from many clients together, connections.py the connections that cannot starve the server
(deadlines, a cap, a quiet accept-error log), server.py the command's loading and listening,
process.py the command run in a subprocess on a free port (tests, benchmarks, screenshots),
page/ the web page.
Needs the `serve` extra: `pip install -e ".[serve]"` in a clone (Starlette, uvicorn, httpx).
"""

from translate.serve.app import ServeConfig, build_app
from translate.serve.server import load_translator, serve

__all__ = ["ServeConfig", "build_app", "load_translator", "serve"]
