# SPDX-License-Identifier: MIT
"""docs/vllm.md's commands for vLLM's CPU build are the ones the tests and the demo run: the
server's is servers.py's (which test_serve.py, the demo and bench/vllm_serve.py start), the
bench's options are bench/vllm_serve.py's, the demo is a make target."""
import json
import os
import re
import shlex
import subprocess
import sys

from conftest import ROOT
import servers

DOC = os.path.join(ROOT, "docs", "vllm.md")


def section(title):
    text = open(DOC).read()
    start = text.index("\n## " + title + "\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def blocks(text):
    return re.findall(r"```\n(.*?)```", text, re.S)


def test_the_server_command_is_the_one_the_tests_run():
    (cmd,) = [b for b in blocks(section("On vLLM's CPU build")) if "api_server" in b]
    words = shlex.split(cmd.replace("\\\n", " "))
    env = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))
    argv = [w for w in words if not re.match(r"^[A-Z_]+=", w)]
    assert env == {k: servers.ENV[k] for k in env}
    assert set(env) == {"VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND"}
    want = servers.command(".venv-cpu/bin/python", "DIR", "PORT",
                           servers.kvpool_transfer("SOCKET", "llama", "team"))
    i = argv.index("--kv-transfer-config")
    assert json.loads(argv[i + 1]) == json.loads(want[i + 1])
    assert argv[:i + 1] == want[:i + 1] and len(argv) == len(want)


def test_the_demo_and_the_bench_as_the_docs_name_them():
    text = section("On vLLM's CPU build")
    assert "make demo-vllm" in text
    make = open(os.path.join(ROOT, "Makefile")).read()
    assert re.search(r"^demo-vllm:.*\n(\t.*\n)*\ttools/demo-vllm\.sh", make, re.M)
    figures = section("Figures")
    (bench,) = [b for b in blocks(figures) if "vllm_serve.py" in b]
    words = shlex.split(bench)
    assert words[:2] == [".venv-cpu/bin/python", "bench/vllm_serve.py"]
    helptext = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "vllm_serve.py"),
                               "--help"], capture_output=True, text=True, check=True).stdout
    for w in words[2:]:
        if w.startswith("--"):
            assert w.split("=")[0] in helptext, w
