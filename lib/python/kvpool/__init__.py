# SPDX-License-Identifier: MIT
"""kvpool: KV-cache memory owned by kvpoold, for Python engines.

    import kvpool
    with kvpool.Client(pool="default") as c, c.open([1, 2, 3, 4]) as seq:
        hit = seq.alloc(4, use_cache=True)
        seq.commit(4)
        print(seq.table(), c.stats()["pools"][0]["blocks_used"])

Client is one connection (libkvpool's); a Sequence one sequence on it; a
Batch runs many operations in few ring submissions; a PoolMap is the pool's
memory mapped into this process. Refusals raise kvpool.Error (an OSError) or
one of its subclasses; bad arguments raise ValueError before anything is sent.
Arrays go in as numpy arrays or torch CPU tensors (the buffer protocol or
__dlpack__) and come out as numpy arrays, bf16 as uint16 holding the bits:
torch.from_numpy(a.view(numpy.int16)).view(torch.bfloat16) reads them without a copy
(torch 2.3 and later also take torch.from_numpy(a).view(torch.bfloat16)).
"""

from ._kvpool import (
    ABI_VERSION,
    Batch,
    BatchError,
    Client,
    Disconnected,
    Error,
    KVView,
    Lookup,
    NoData,
    NoSpace,
    NotFound,
    PermissionDenied,
    PoolInfo,
    PoolMap,
    QuotaExceeded,
    Sequence,
    Timeout,
    __version__,
)

__all__ = [
    "ABI_VERSION", "Batch", "BatchError", "Client", "Disconnected", "Error", "KVView",
    "Lookup", "NoData", "NoSpace", "NotFound", "PermissionDenied", "PoolInfo", "PoolMap",
    "QuotaExceeded", "Sequence", "Timeout", "__version__",
]
