"""torch.simhpu.price / price_collective (torch_simhpu/simulation/pricing.py): what a call would
cost on a part, priced and not run. Every figure is worked out by hand from ROUND,
the round-number profile of test_simulation.py."""
import pytest
import torch

from tests.device.test_simulation import MATRIX, MEMORY, ROUND, US

D = "simhpu"


def test_a_gemm_of_meta_tensors_is_priced_by_its_flops():
    a = torch.empty(4096, 4096, device="meta")
    price = torch.simhpu.price(torch.mm, a, a, profile=ROUND)
    (mm,) = price.kernels
    assert mm.op == "aten::mm.out" and mm.bound == "compute"
    flops = 2 * 4096 ** 3
    assert price.flops == flops and price.bytes == 3 * 4096 * 4096 * 4
    # (the larger of compute and memory time, plus the kernel's fixed overhead)
    assert price.seconds == pytest.approx(flops / MATRIX + 1 * US, rel=1e-9)
    assert price.by_bound()["compute"] == pytest.approx(price.seconds) and price.host_reads == 0
    assert "aten::mm.out" in str(price) and "compute" in str(price)


def test_a_memory_bound_call_is_priced_by_its_bytes():
    x = torch.empty(2 ** 24, device="meta")
    (add,) = torch.simhpu.price(torch.add, x, x, profile=ROUND).kernels
    assert add.bound == "memory"
    assert add.duration == pytest.approx(3 * 2 ** 24 * 4 / MEMORY + 1 * US, rel=1e-9)


def test_a_module_is_priced_with_its_weights_stood_in_for_and_left_as_they_were():
    torch.manual_seed(0)
    layer = torch.nn.Linear(1024, 512)
    before = layer.weight.detach().clone()
    price = torch.simhpu.price(layer, torch.randn(64, 1024), profile=ROUND)
    matrix = [k for k in price.kernels if k.work == "matrix"]
    assert sum(k.flops for k in matrix) == 2 * 64 * 1024 * 512
    assert layer.weight.device.type == "cpu" and torch.equal(layer.weight, before)


def test_the_callers_device_tensors_are_not_touched_and_host_reads_are_counted():
    x = torch.arange(4.0, device=D)

    def scale_and_read(t):
        t.mul_(100)
        return t.sum().item()

    price = torch.simhpu.price(scale_and_read, x, profile=ROUND)
    assert [k.op for k in price.kernels] == ["aten::mul.out", "aten::sum.IntList_out"]
    assert price.host_reads == 1
    torch.testing.assert_close(x.cpu(), torch.arange(4.0))  # the stand-in was scaled, not x


def test_price_refuses_inside_a_simulation_and_names_bad_input():
    with torch.simhpu.simulate(ROUND):
        with pytest.raises(RuntimeError, match=r"torch.simhpu.price: simulated time is on"):
            torch.simhpu.price(torch.mm, torch.ones(2, 2), torch.ones(2, 2), profile=ROUND)
    with pytest.raises(TypeError, match=r"torch.simhpu.price: expected a callable .* got int"):
        torch.simhpu.price(3, profile=ROUND)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        torch.simhpu.price(torch.mm, torch.ones(2, 3), torch.ones(2, 3), profile=ROUND)
    assert torch.simhpu.simulation.profile() is None  # simulated time is off again
    torch.testing.assert_close((torch.ones(2, device=D) + 1).cpu(), torch.full((2,), 2.0))


def test_a_collective_is_priced_for_its_group_on_the_profiles_nodes():
    mb64 = 64 * 2 ** 20
    inside = torch.simhpu.price_collective("all_reduce", mb64, 8, profile=ROUND)
    assert inside.nodes == 1
    assert inside.seconds == pytest.approx(2 * (7 / 8) * mb64 / (100e9 * 0.5) + 2 * 7 * 1 * US, rel=1e-12)
    assert inside.latency == pytest.approx(2 * 7 * 1 * US, rel=1e-12)  # the ring's, chosen at this size
    small = torch.simhpu.price_collective("all_reduce", 1024, 8, profile=ROUND)
    # the ring's at any size in one node: a tree there is a chain of 7 steps each way too (as NCCL builds it)
    assert small.latency == pytest.approx(2 * 7 * 1 * US, rel=1e-12)
    assert inside.bus_bandwidth == pytest.approx(2 * (7 / 8) * mb64 / inside.seconds)
    across = torch.simhpu.price_collective("all_reduce", torch.empty(mb64 // 4), 16, profile=ROUND)
    assert across.nodes == 2 and across.bytes == mb64
    # two nodes of 8: inside each node over its links, between them each rank's own link with an eighth,
    # pipelined: the slower of the two sets the time
    assert across.seconds == pytest.approx(2 * max((7 / 8) * mb64 / (100e9 * 0.5), (1 / 2) * (mb64 / 8) / (10e9 * 0.5))
                                           + 2 * (7 * US + 10 * US), rel=1e-12)
    assert across.latency == pytest.approx(2 * (7 * US + 10 * US), rel=1e-12)
    spread = torch.simhpu.price_collective("all_gather", mb64, 8, rank_stride=8, profile=ROUND)
    assert spread.nodes == 8  # one rank a node: every step crosses the network
    assert "all_reduce of" in str(inside) and "1 node(s)" in str(inside)


def test_price_collective_names_bad_input():
    for kwargs, expected in (({"collective": "all_reduce", "size": 8, "ranks": 0}, "ranks must be an int >= 1"),
                             ({"collective": "all_reduce", "size": -1, "ranks": 2}, "size must be bytes >= 0"),
                             ({"collective": "all_mix", "size": 8, "ranks": 2}, "unknown collective 'all_mix'"),
                             ({"collective": "all_reduce", "size": 8, "ranks": 2, "rank_stride": 0},
                              "rank_stride must be an int >= 1")):
        with pytest.raises(ValueError, match=f"torch.simhpu.price_collective: .*{expected}"):
            torch.simhpu.price_collective(**kwargs, profile=ROUND)


# ROUND with 4 matrix units of 128 x 128 output tiles (and memory fast enough that these GEMMs
# are compute-bound): a GEMM's time is its waves'.
UNITS = {**ROUND, "name": "round-units", "memory_bandwidth": 1e16, "matrix_units": {"count": 4, "tile": [128, 128]}}


def gemm_seconds(fn, *shapes):
    return torch.simhpu.price(fn, *(torch.empty(*s, device="meta") for s in shapes), profile=UNITS).seconds


EPILOGUE = 128 * 128 * 4 / (1e16 * 0.5 / 4)  # a unit writes its float32 tile at its share of the memory


def waves(count, k):
    """`count` waves of four 128 x 128 tiles of depth k, each running its K loop while the wave
    before it writes its outputs (the last wave's writes follow it), and the launch's 1 us."""
    return count * max(4 * 2 * 128 * 128 * k / MATRIX, EPILOGUE) + EPILOGUE + 1 * US


def one_wave(k):
    return waves(1, k)


def test_a_gemm_is_priced_by_its_waves_of_output_tiles():
    assert gemm_seconds(torch.mm, (256, 1024), (1024, 256)) == pytest.approx(one_wave(1024), rel=1e-9)  # 4 tiles
    # 6 tiles: a second wave with two of its four units idle, for 1.5x the FLOPs
    assert gemm_seconds(torch.mm, (384, 1024), (1024, 256)) == pytest.approx(waves(2, 1024), rel=1e-9)
    # a short K on a slower memory: a wave takes as long as its tiles' writes, which its K loop no
    # longer hides (a tile's float32 outputs at a quarter of 0.5 x 5.24 TB/s: 100 ns; its K loop 21 ns)
    slow = {**UNITS, "memory_bandwidth": 128 * 128 * 4 * 8 / 100e-9}
    a, b = torch.empty(512, 8, device="meta"), torch.empty(8, 256, device="meta")
    assert torch.simhpu.price(torch.mm, a, b, profile=slow).seconds == pytest.approx(
        2 * 100e-9 + 100e-9 + 1 * US, rel=1e-9)
    # a row past a tile costs a whole tile: 2 tiles, in one wave
    assert gemm_seconds(torch.mm, (129, 1024), (1024, 128)) == pytest.approx(one_wave(1024), rel=1e-9)
    assert gemm_seconds(torch.bmm, (3, 128, 512), (3, 512, 128)) == pytest.approx(one_wave(512), rel=1e-9)
    bias = torch.empty(256, device="meta")
    addmm = torch.simhpu.price(torch.addmm, bias, torch.empty(256, 64, device="meta"),
                               torch.empty(64, 256, device="meta"), profile=UNITS)
    assert addmm.seconds == pytest.approx(one_wave(64), rel=1e-9)
    # the FLOPs counted, and the fraction of peak, are the GEMM's own, not the padding's
    mm = torch.simhpu.price(torch.mm, torch.empty(129, 1024, device="meta"), torch.empty(1024, 128, device="meta"),
                            profile=UNITS)
    assert mm.flops == 2 * 129 * 128 * 1024
    assert mm.kernels[0].peak_fraction == pytest.approx(mm.flops / mm.seconds / 100e12)


def test_a_convolution_is_priced_as_its_implicit_gemm():
    conv = torch.nn.Conv2d(16, 32, 3, padding=1, bias=False)
    # an output pixel a row: 2 x 8 x 8 = 128 rows, 32 columns, depth 16 x 3 x 3: one tile, one wave
    price = torch.simhpu.price(conv, torch.empty(2, 16, 8, 8), profile=UNITS)
    (matrix,) = [k for k in price.kernels if k.work == "matrix"]
    assert matrix.duration == pytest.approx(one_wave(16 * 9), rel=1e-9)


def test_matrix_units_in_a_profile_are_checked():
    from torch_simhpu.simulation import ProfileError, load_profile
    for units, expected in (({"count": 0, "tile": [128, 128]}, "matrix_units.count"),
                            ({"count": 4, "tile": [128]}, "matrix_units.tile"),
                            ({"count": 4, "tile": [128, True]}, "matrix_units.tile"),
                            ({"tile": [128, 128]}, "matrix_units.count"),
                            ({"count": 4}, "one of 'tile'"),
                            ({"count": 4, "tile": [128, 128], "tiles": [[64, 64]]}, "one of 'tile'"),
                            ({"count": 4, "tiles": []}, "matrix_units.tiles"),
                            ({"count": 4, "tiles": [[64, 64], [0, 64]]}, "matrix_units.tiles"),
                            ({"count": 4, "tile": [128, 128], "split_k": 0}, "matrix_units.split_k")):
        with pytest.raises(ProfileError, match=expected):
            load_profile({**ROUND, "matrix_units": units})
    with pytest.raises(ProfileError, match="fabric.switch_reduction_bandwidth"):
        load_profile({**ROUND, "fabric": {**ROUND["fabric"], "switch_reduction_bandwidth": -1}})


def test_a_gemm_with_few_tiles_takes_the_tile_and_split_that_fill_the_part():
    """Eight units, two tiles to choose from: a 128 x 128 output fills one unit with the large tile, four
    with the small one; splitting K over the rest fills all eight, its float32 partial sums written and
    read back once (here through memory fast enough not to matter)."""
    eight = {**UNITS, "matrix_units": {"count": 8, "tiles": [[128, 128], [64, 64]], "split_k": 2}}
    a, b = torch.empty(128, 4096, device="meta"), torch.empty(4096, 128, device="meta")
    seconds = torch.simhpu.price(torch.mm, a, b, profile=eight).seconds
    one_unit = 8 * 2 * 128 * 128 * 4096 / MATRIX  # the whole GEMM's FLOPs at one unit's rate
    split_small_tiles = one_unit / 8 + 64 * 64 * 4 / (1e16 * 0.5 / 8)
    assert seconds == pytest.approx(split_small_tiles + 1 * US, rel=1e-9)
    only_large = {**eight, "matrix_units": {"count": 8, "tiles": [[128, 128]], "split_k": 1}}
    assert torch.simhpu.price(torch.mm, a, b, profile=only_large).seconds > 5 * seconds  # one unit of eight busy


# ROUND with attention curves: 10 TFLOP/s forward at 1,024 keys, 20 at 4,096 (5 and 10 with a causal
# mask, counting half the FLOPs), 8 backward.
ATTENTION = {**ROUND, "name": "round-attention", "memory_bandwidth": 1e16,
             "attention": {"forward": {"sequence": [1024, 4096], "flops": [10e12, 20e12],
                                       "causal_flops": [5e12, 10e12]},
                           "backward": {"sequence": [1024], "flops": [8e12]}}}
FORWARD = "aten::_scaled_dot_product_flash_attention_for_cpu"


def attention_kernels(sequence, causal, backward=False):
    def attend(q, k, v):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if backward:
            out.sum().backward()
    q = torch.empty(1, 2, sequence, 64, device="meta", requires_grad=backward)
    price = torch.simhpu.price(attend, q, q, q, profile=ATTENTION)
    return {k.op: k for k in price.kernels if k.op.startswith(FORWARD)}


def sdpa_flops(sequence):
    return 4 * 2 * sequence * sequence * 64  # flop_counter's count: QK^T and PV, the whole square


def test_attention_is_priced_by_its_own_curve_by_sequence_length():
    assert attention_kernels(1024, False)[FORWARD].duration == pytest.approx(sdpa_flops(1024) / 10e12 + US, rel=1e-9)
    # between the points by the sequence's log (2,048 halfway from 1,024 to 4,096), beyond them the nearest
    assert attention_kernels(2048, False)[FORWARD].duration == pytest.approx(sdpa_flops(2048) / 15e12 + US, rel=1e-9)
    assert attention_kernels(8192, False)[FORWARD].duration == pytest.approx(sdpa_flops(8192) / 20e12 + US, rel=1e-9)


def test_a_causal_mask_skips_half_the_work_at_its_own_rate():
    causal = attention_kernels(1024, True)[FORWARD]
    assert causal.flops == sdpa_flops(1024)  # counted whole, as flop_counter counts it
    assert causal.duration == pytest.approx(sdpa_flops(1024) / 2 / 5e12 + US, rel=1e-9)


def test_the_backward_has_its_own_curve():
    kernels = attention_kernels(1024, True, backward=True)
    backward = kernels[FORWARD + "_backward"]
    # (no causal curve given for the backward: its rate, for half the work)
    assert backward.duration == pytest.approx(backward.flops / 2 / 8e12 + US, rel=1e-9)
    assert backward.flops == 2.5 * sdpa_flops(1024)


def test_attention_curves_in_a_profile_are_checked():
    from torch_simhpu.simulation import ProfileError, load_profile
    for attention, expected in (({"sideways": {"sequence": [1], "flops": [1.0]}}, "attention.sideways"),
                                ({"forward": {"sequence": [2048, 1024], "flops": [1.0, 2.0]}},
                                 "attention.forward.sequence"),
                                ({"forward": {"sequence": [1024], "flops": [1.0, 2.0]}}, "attention.forward.flops"),
                                ({"forward": {"sequence": [1024], "flops": [0]}}, "attention.forward.flops")):
        with pytest.raises(ProfileError, match=expected):
            load_profile({**ROUND, "attention": attention})


@pytest.mark.parametrize("profile, ratio", [("h100-sxm", 1979 / 989.4), ("gaudi2", 865 / 432)])
def test_an_fp8_matmul_runs_at_the_parts_fp8_rate(profile, ratio):
    """The shipped profiles' FP8 rates (their datasheets' dense figures): an FP8 matmul is not priced
    at the default (FP32) rate, about 30 times slower on an H100; it runs at the profile's 8-bit
    efficiency where it has one. (Within 10 %: both write bfloat16 outputs, an epilogue the FP8
    rate does not speed up.)"""
    from torch_simhpu.simulation import load_profile
    efficiency = load_profile(profile)["efficiency"]
    ratio *= (efficiency["matrix_8bit"] or efficiency["matrix"]) / efficiency["matrix"]
    n = 8192
    a8 = torch.empty(n, n, device="meta", dtype=torch.float8_e4m3fn)
    b8 = torch.empty(n, n, device="meta", dtype=torch.float8_e4m3fn).t()  # (_scaled_mm's layout)
    scale = torch.empty((), device="meta")
    fp8 = torch.simhpu.price(torch._scaled_mm, a8, b8, scale, scale, out_dtype=torch.bfloat16, profile=profile)
    a16 = torch.empty(n, n, device="meta", dtype=torch.bfloat16)
    bf16 = torch.simhpu.price(torch.mm, a16, a16, profile=profile)
    assert fp8.kernels[0].bound == "compute"
    assert bf16.seconds / fp8.seconds == pytest.approx(ratio, rel=0.1)


def test_collective_protocols_trade_latency_for_bandwidth_and_the_switch_reduces():
    """Two protocols (a low-latency one at a quarter of the bandwidth, a bulk one at all of it): a
    small all_reduce takes the first, a large one the second; a switch that reduces wins once its
    latency is paid."""
    fabric = {**ROUND["fabric"], "protocols": [
        {"name": "LL", "base_latency": 1 * US, "intra_hop": 0.5 * US, "inter_hop": 2 * US, "bandwidth": 0.25},
        {"name": "Simple", "base_latency": 5 * US, "intra_hop": 2 * US, "inter_hop": 8 * US, "bandwidth": 1.0}]}
    two = {**ROUND, "name": "two-protocols", "fabric": fabric}
    small = torch.simhpu.price_collective("all_reduce", 1024, 8, profile=two)
    # the ring under LL: 7 steps each way, each the link's 1 us plus LL's 0.5
    assert small.latency == pytest.approx(1 * US + 2 * 7 * (1 + 0.5) * US, rel=1e-12)
    large = torch.simhpu.price_collective("all_reduce", 2 ** 30, 8, profile=two)
    assert large.latency == pytest.approx(5 * US + 2 * 7 * (1 + 2) * US, rel=1e-12)  # the ring under Simple
    assert large.transfer == pytest.approx(2 * (7 / 8) * 2 ** 30 / (100e9 * 0.5), rel=1e-12)
    switch = {**two, "fabric": {**fabric, "switch_reduction_bandwidth": 80e9, "switch_reduction_latency": 50 * US}}
    reduced = torch.simhpu.price_collective("all_reduce", 2 ** 30, 8, profile=switch)
    assert reduced.latency == pytest.approx(50 * US) and reduced.transfer == pytest.approx(2 ** 30 / 80e9)
    assert torch.simhpu.price_collective("all_reduce", 1024, 8, profile=switch).latency == small.latency
    from torch_simhpu.simulation import ProfileError, load_profile
    for protocol, expected in (({"base_latency": 0, "intra_hop": 0, "inter_hop": 0}, r"protocols\[0\].bandwidth"),
                               ({"base_latency": 0, "intra_hop": 0, "inter_hop": 0, "bandwidth": 2}, "in \\(0, 1\\]")):
        with pytest.raises(ProfileError, match=expected):
            load_profile({**ROUND, "fabric": {**ROUND["fabric"], "protocols": [protocol]}})


def test_a_collective_fills_its_pipeline_before_it_streams():
    """pipeline_fill: a message shorter than the pipeline's bytes moves as if twice as long, a longer
    one pays the pipeline's bytes once."""
    filled = {**ROUND, "name": "filled", "fabric": {**ROUND["fabric"], "pipeline_fill": 8e6}}
    ring_bw = 100e9 * 0.5
    for size in (2 ** 20, 2 ** 30):  # (the ring's volume: 7/8 of it, twice)
        plain = torch.simhpu.price_collective("all_reduce", size, 8, profile=ROUND)
        priced = torch.simhpu.price_collective("all_reduce", size, 8, profile=filled)
        volume = 2 * (7 / 8) * size
        assert priced.transfer == pytest.approx(plain.transfer + min(volume, 8e6) / ring_bw, rel=1e-12)
    from torch_simhpu.simulation import ProfileError, load_profile
    with pytest.raises(ProfileError, match="fabric.pipeline_fill"):
        load_profile({**ROUND, "fabric": {**ROUND["fabric"], "pipeline_fill": -1}})
