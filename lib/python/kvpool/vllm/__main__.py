# SPDX-License-Identifier: MIT
"""python3 -m kvpool.vllm pool-config --model-dir DIR [--block-size 16] [--blocks N]
[--name NAME] [--namespace NS]: the kvpool.conf section of a pool for that model."""

import argparse
import sys

from .geometry import ConfigError, from_model_dir, pool_section

DESCRIPTION = """\
pool-config prints the [pool.NAME] section of kvpool.conf(5) for a pool that holds
the KV cache of the model whose config.json is in --model-dir, as vLLM lays it out:
the model's KV heads, head size and dtype, layout=layer, restricted to --namespace
(a vLLM worker maps the pool, and only a pool restricted to one namespace is mapped),
and one group per KV cache group vLLM forms: one full group of every layer for most
models; for a hybrid model (layer_types, or sliding_window_pattern, in config.json:
Gemma 2 and 3, gpt-oss), its groups of sliding-window (swa:W) and full layers as
vLLM's hybrid KV cache manager forms them, as many layers per group. Add it to
kvpoold's config file and reload (systemctl reload kvpoold), or pass the same keys
to kvctl pool create. --block-size must be vLLM's (--block-size of vllm serve; 16 by
default)."""


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m kvpool.vllm",
                                     description="kvpool for vLLM: helpers.")
    sub = parser.add_subparsers(dest="command", required=True)
    pc = sub.add_parser("pool-config", description=DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        help="print the kvpool.conf section of a pool for a model")
    pc.add_argument("--model-dir", required=True, metavar="DIR",
                    help="the model's directory (its config.json is read)")
    pc.add_argument("--block-size", type=int, default=16, metavar="N",
                    help="tokens per block: vLLM's --block-size (default 16)")
    pc.add_argument("--blocks", type=int, default=16384, metavar="N",
                    help="blocks in the pool (default 16384)")
    pc.add_argument("--name", default="vllm", help="the pool's name (default vllm)")
    pc.add_argument("--namespace", default="vllm",
                    help="the namespace the pool is restricted to (default vllm)")
    args = parser.parse_args(argv)
    if args.block_size <= 0 or args.blocks <= 1:
        parser.error("--block-size must be positive and --blocks at least 2")
    try:
        geo = from_model_dir(args.model_dir, args.block_size)
    except ConfigError as e:
        print(f"pool-config: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(pool_section(geo, args.name, args.namespace, args.blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
