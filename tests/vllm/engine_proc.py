# SPDX-License-Identifier: MIT
"""One vLLM engine in a process of its own (harness.Engine with KvpoolConnector), for the
tests that need two: python engine_proc.py JSON. JSON: model_dir, kv_transfer_config,
requests [[id, prompt, max_tokens]], digest_positions. Prints, as JSON, per request what
the scheduler and the forward did, and its KV's digest and check."""
import json
import sys

import harness
from kvcheck import kv_digest, kv_is_model


def main(args):
    out = {}
    with harness.Engine(args["model_dir"], kv_transfer_config=args["kv_transfer_config"]) as e:
        for req_id, prompt, max_tokens in args["requests"]:
            e.add_request(req_id, prompt, max_tokens)
        records = e.run_until_done()
        for req_id, rec in records.items():
            out[req_id] = dict(num_external_tokens=rec.num_external_tokens,
                               computed_positions=rec.computed_positions,
                               output_tokens=rec.output_tokens,
                               digest=kv_digest(e, req_id, args["digest_positions"]),
                               kv_is_model=kv_is_model(e, req_id))
        out["counts"] = e.scheduler_connector._sched.counts
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
