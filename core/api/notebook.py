"""The notebook this kernel runs for: the origin its page is loaded from, which a
result's ``view()`` lets frame the view (core/view/app.py `Framing`).

A Jupyter server (JupyterLab, Notebook 7, classic Notebook) starts its kernels
itself and gives them its pid (``JPY_PARENT_PID``, jupyter_client's launcher);
it writes its address to ``jpserver-PID.json`` (classic Notebook:
``nbserver-PID.json``) in Jupyter's runtime folder. That address is the
notebook's origin; on this machine (localhost, 127.0.0.1, [::1], or every
interface), under each loopback name at its port, since a browser may open the
same server by either. Anything else has no origin known here, and ``view()``
shows a link and says why: a kernel started by another program (VS Code,
nbclient, a plain ``python``), or a server behind JupyterHub, whose pages come
from the hub's address, not the server's."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from tension.core.errors import ConfigError
from tension.core.view.app import frame_origin

__all__ = ["notebook_origins"]

_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
_ON_THIS_MACHINE = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::", ""})
ASK = "pass the address the notebook's page is open at: view(origin='http://localhost:8888')"


def _runtime_dir(env: Mapping[str, str]) -> str:
    """Jupyter's runtime folder, as jupyter_core tells it (a kernel's environment has it:
    ipykernel needs jupyter_client, which needs jupyter_core); without it, as jupyter_core
    would on Linux: JUPYTER_RUNTIME_DIR, else the data folder's runtime/."""
    if env.get("JUPYTER_RUNTIME_DIR"):
        return env["JUPYTER_RUNTIME_DIR"]
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:
        data = env.get("JUPYTER_DATA_DIR") or os.path.join(
            env.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "jupyter")
        return os.path.join(data, "runtime")
    return jupyter_runtime_dir()


def notebook_origins(environ: Mapping[str, str] | None = None, runtime_dir: str | None = None,
                     parent: int | None = None) -> tuple[tuple[str, ...], str]:
    """The origins of the Jupyter server that started this kernel, and ""; or ``()``
    and why none is known (a sentence that ends with what to do). The server is
    looked for by ``JPY_PARENT_PID`` and by this process's parent (`parent`; on
    Windows that variable holds a handle, not a pid)."""
    env = os.environ if environ is None else environ
    if env.get("JUPYTERHUB_SERVICE_PREFIX") or env.get("JUPYTERHUB_API_URL"):
        return (), f"behind JupyterHub the notebook's page comes from the hub's address, unknown here; {ASK}"
    given = env.get("JPY_PARENT_PID", "").strip()
    pids = list(dict.fromkeys([p for p in (given, str(os.getppid() if parent is None else parent)) if p.isdigit()]))
    if runtime_dir is None:
        runtime_dir = _runtime_dir(env)
    for name in (f"{kind}-{pid}.json" for pid in pids for kind in ("jpserver", "nbserver")):
        try:
            info = json.loads((Path(runtime_dir) / name).read_text(encoding="utf-8"))
            own = frame_origin(str(info["url"]))  # the view owns what a web origin is (core/view/app.py)
        except (OSError, ValueError, KeyError, TypeError, ConfigError):
            continue
        scheme, _, rest = own.partition("://")
        host, _, port = rest.rpartition(":")
        if not port.isdigit() or not host:
            continue  # a server at its scheme's default port: no port to name under the loopback names
        if host.strip("[]") in _ON_THIS_MACHINE or str(info.get("hostname", "")) in _ON_THIS_MACHINE:
            loopback = tuple(f"{scheme}://{h}:{port}" for h in _LOOPBACK)
            return loopback if host.strip("[]") in _ON_THIS_MACHINE else (own, *loopback), ""
        return (own,), ""
    return (), (f"no Jupyter server started this kernel (none of its parent processes {', '.join(pids)} left a "
                f"jpserver-PID.json in {runtime_dir}); {ASK}")
