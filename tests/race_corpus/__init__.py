"""A corpus of stream races that public projects shipped, reported and fixed,
each written as the project had it (its source address in the first comment)
with its fix as the twin. Every module defines:

    SIDES      fragments the sanitizer's report must name: both sides of the race
    racy()     the program as shipped; returns True when its result came out right
    fixed()    the fix; returns True when its result came out right

The 2-process cases (TWO_PROCESS) take (rank, world) and run in a process group
(tests/distributed_checks.py). The device-free arithmetic of each case computes
its expected values on the CPU.
"""

SINGLE_PROCESS = [
    "apex_data_prefetcher",
    "timm_prefetch_loader",
    "torchrec_copy_stream_free",
    "torchrec_prefetch_data_dist_fence",
    "deepspeed_zero3_reduce_stream_wait",
    "fsdp_copy_in_after_reshard",
    "steptron_d2h_then_copy",
    "sglang_d2h_then_tolist",
    "pytorch_pinned_h2d_then_mutate",
    "tensorrt_llm_reused_offsets_buffer",
    "vllm_pp_reused_pinned_inputs",
]
TWO_PROCESS = [
    "opennmt_all_reduce_then_rescale",
    "anima_transpose_before_wait",
]
