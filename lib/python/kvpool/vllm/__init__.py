# SPDX-License-Identifier: MIT
"""kvpool as a vLLM KV connector: one KV cache shared by every vLLM engine on a machine.

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KvpoolConnector",
        "kv_connector_module_path": "kvpool.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"socket": "/run/kvpool/kvpool.sock",
                                      "pool": "NAME", "namespace": "NS"}}'

`python3 -m kvpool.vllm pool-config --model-dir DIR` prints the pool's section for a model.
vLLM is imported only when the connector is (so that pool-config runs without it).
docs/vllm.md says what is shared with whom.
"""

from .geometry import ConfigError

__all__ = ["ConfigError", "KvpoolConnector"]


def __getattr__(name):
    # vLLM's factory reads KvpoolConnector off this module: import it (and vLLM) then.
    if name == "KvpoolConnector":
        from .connector import KvpoolConnector
        return KvpoolConnector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
