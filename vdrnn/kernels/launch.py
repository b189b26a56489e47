"""How the fused recurrences are launched: the grid and split-K shape (:class:`Plan`), the padded units the kernels
run (:class:`Units`), and W_hh packed for them (:func:`pack_weight`). Shared by the LSTM's and the GRU's kernels."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from vdrnn.dropout.masks import WeightMask

SM_COUNT: dict[int, int] = {}
SMEM: dict[int, int] = {}
CAPABILITY: dict[int, tuple[int, int]] = {}

# Block shapes, overridable through the environment for tuning without editing the code.
# BLOCK_H: hidden units per program (the smallest tile a tensor-core product takes is 16);
# BLOCK_K: width of one slice of the reduction; PROGRAMS_PER_SM: how finely the reduction is split
# across programs (split-K: vdrnn.kernels).
BLOCK_H = int(os.environ.get("VDRNN_FUSED_BLOCK_H", "16"))
# The LSTM's forward kernel can run one gate per program; its plans do so for batches of at most ONE_GATE_MAX_ROWS
# rows, over the widest of ONE_GATE_BLOCKS units whose K splits at most MAX_ONE_GATE_SPLIT ways (see Plan). The
# backward kernels' programs always multiply one gate; at such batches their block of units is chosen the same way.
ONE_GATE_MAX_ROWS = 32
ONE_GATE_BLOCKS = (32, 16)
MAX_ONE_GATE_SPLIT = 2
BLOCK_K = int(os.environ.get("VDRNN_FUSED_BLOCK_K", "64"))
NUM_WARPS = int(os.environ.get("VDRNN_FUSED_WARPS", "4"))
NUM_STAGES = int(os.environ.get("VDRNN_FUSED_STAGES", "3"))
PROGRAMS_PER_SM = float(os.environ.get("VDRNN_FUSED_PROGRAMS_PER_SM", "3"))
# The kernels run H units as H rounded up to a multiple of this (see Units); 1 runs them as they are.
UNIT_MULTIPLE = int(os.environ.get("VDRNN_FUSED_UNIT_MULTIPLE", "16"))
# Programmatic dependent launch of the step kernels on GPUs that have it (compute capability 9.0, Hopper, and later):
# 0 launches each step only once the step before has finished, as on older GPUs (see Plan.gdc).
DEPENDENT_LAUNCH = os.environ.get("VDRNN_FUSED_DEPENDENT_LAUNCH", "1") != "0"
# Tiles of its W_hh slice each program loads before waiting for the step before (W_hh is written by none): "F,B" for the
# forward (0 or 1) and the backward (0 to 2).
PREFETCH_F, PREFETCH_B = (int(n) for n in os.environ.get("VDRNN_FUSED_PREFETCH_W", "0,1").split(","))
MIN_BLOCK_K_F = 32  # the narrowest K slice the forward narrows to for occupancy (see Plan)
FORCE_SPLIT: tuple[int, int] | None = None  # (forward splits, backward splits per gate); for tests



def cuda_index(device: torch.device) -> int:
    """The CUDA device's index, the current device's for a bare ``cuda``: the key of the per-device caches here."""
    return device.index if device.index is not None else torch.cuda.current_device()


def sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # the interpreter: any number does
    index = cuda_index(device)
    if index not in SM_COUNT:
        SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return SM_COUNT[index]


def dependent_launch(device: torch.device) -> bool:
    """Can step t+1's kernel be launched while step t's runs (programmatic dependent launch, Hopper and later)?"""
    if device.type != "cuda" or not DEPENDENT_LAUNCH:
        return False  # the interpreter runs one launch after the other anyway
    index = cuda_index(device)
    if index not in CAPABILITY:
        CAPABILITY[index] = torch.cuda.get_device_capability(index)
    return CAPABILITY[index][0] >= 9


def smem_limit(device: torch.device) -> int:
    """Bytes of shared memory one program may use: 227 KB on an H100 or H200 (the limit Triton checks)."""
    if device.type != "cuda":
        return 1 << 30  # the interpreter: no limit
    index = cuda_index(device)
    if index not in SMEM:
        from triton.runtime import driver

        SMEM[index] = driver.active.utils.get_device_properties(index)["max_shared_mem"]
    return SMEM[index]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Plan:
    """Grid and split-K shape for one (batch, hidden, device): ~PROGRAMS_PER_SM programs per SM.

    At batch 20 there are only H / BLOCK_H blocks of output (41 at H=650): without splitting the
    reduction most SMs would idle while a few stream all of W_hh through long loops. ``gates``,
    ``operands`` (1, or one masked copy of h per gate for untied masks) and ``op_bytes`` (the size of the
    stored operands' dtype, ``stored_dtype``) say how much shared memory a stage of the forward loop takes;
    ``one_gate_kernel``, that the forward kernel can run one gate per program (the LSTM's), which the plan then
    decides.

    ``gdc``: the step kernels are launched as programmatic dependents (:func:`dependent_launch`): each step's
    programs are scheduled while the step before still runs, do the loads that no step writes (x_proj, the biases,
    the masks), and wait there for the step before to finish (``triton_parts.after_previous_step``): the gap between
    two dependent launches, and those loads, are hidden behind the step before.
    """

    def __init__(self, batch: int, hidden: int, device: torch.device, gates: int = 4, operands: int = 1,
                 op_bytes: int = 4, one_gate_kernel: bool = False):
        self.hidden = hidden
        self.gdc = dependent_launch(device)
        self.block_b = min(64, max(16, 1 << (batch - 1).bit_length()))
        self.n_b = cdiv(batch, self.block_b)
        target = PROGRAMS_PER_SM * sm_count(device)
        # The forward's programs: each multiplies all the gates of BLOCK_H units, or, where the kernel can
        # (``one_gate_kernel``: the LSTM's), one gate, the last of a block's programs to arrive running the cell.
        # One gate a program is the faster at training batches; at MC evaluation's wide batches (64-row blocks) the
        # four gates' shared operand tile counts for more, hence the row limit. Wider blocks of units read each
        # gate's operand fewer times but leave fewer blocks, so K splits more ways and the last program sums more
        # partial tiles: the widest block whose K splits at most MAX_ONE_GATE_SPLIT ways (docs/speed.md).
        self.one_gate = one_gate_kernel and self.block_b <= ONE_GATE_MAX_ROWS
        self.gate_programs = gates if self.one_gate else 1
        blocks = ONE_GATE_BLOCKS if self.one_gate else (BLOCK_H,)
        self.block_h_f, want_f = block_of_units(blocks, hidden, self.gate_programs * self.n_b, target)
        self.n_j_f = cdiv(hidden, self.block_h_f)
        # The backward's programs multiply one gate's dgates into a block of units over a K chunk; the same choice of
        # block at batches of at most ONE_GATE_MAX_ROWS rows (32 units at 1500, 16 at 650); wider batches keep BLOCK_H.
        blocks = ONE_GATE_BLOCKS if self.block_b <= ONE_GATE_MAX_ROWS else (BLOCK_H,)
        self.block_h_b, want_b = block_of_units(blocks, hidden, 4 * self.n_b, target)
        self.n_j_b = cdiv(hidden, self.block_h_b)
        if FORCE_SPLIT is not None:
            want_f, want_b = FORCE_SPLIT
        tiles = cdiv(hidden, BLOCK_K)
        per_b = cdiv(tiles, min(want_b, tiles))  # K tiles per program
        self.ks, self.chunk_b = cdiv(tiles, per_b), per_b * BLOCK_K
        self.stages_b = max(1, min(NUM_STAGES, per_b))
        # The forward's K slice: BLOCK_K, or narrower where its pipeline would leave room for fewer than
        # PROGRAMS_PER_SM programs on an SM. A stage holds the operand tile(s) [BLOCK_B, K slice] and the gates' W
        # tiles [K slice, BLOCK_H]: the GRU's untied fp32 masks at 1500 units take 36 KB a stage at 64 wide, so three
        # stages would leave two programs per SM.
        smem = smem_limit(device)
        self.block_k_f = BLOCK_K
        while True:
            stage = self._plan_forward(want_f, gates, operands, op_bytes, smem)
            if self.stages_f * stage * PROGRAMS_PER_SM <= smem or self.block_k_f <= MIN_BLOCK_K_F:
                break
            self.block_k_f //= 2
        # Columns of the packed W: whole chunks for the forward, whole blocks of units for the backward.
        self.w_cols = max(self.split_f * self.chunk_f, self.n_j_b * self.block_h_b)
        # The forward's grid: (unit blocks, gate programs x K chunks, batch blocks); every program of a block of units
        # arrives at its counter.
        self.grid_f = (self.n_j_f, self.gate_programs * self.split_f, self.n_b)
        # Do a block's forward programs hand partial sums to the last of them (K split, or one gate a program)? Then
        # the forward needs a workspace and arrival counters.
        self.hand_off_f = self.grid_f[1] > 1

    def _plan_forward(self, want_f: int, gates: int, operands: int, op_bytes: int, smem: int) -> int:
        """The forward's split, chunk and pipeline depth for its K slice ``block_k_f``; returns a stage's bytes."""
        tiles = cdiv(self.hidden, self.block_k_f)
        per_f = cdiv(tiles, min(want_f, tiles))  # K slices per program
        self.split_f, self.chunk_f = cdiv(tiles, per_f), per_f * self.block_k_f
        # Software-pipelining depth: no deeper than the loop is long (deeper only costs shared memory, hence fewer
        # programs resident per SM), and none for a forward loop of one or two K slices, too short to repay the
        # pipeline's prologue.
        stages = 1 if per_f <= 2 else min(NUM_STAGES, per_f)
        # ... and no deeper than shared memory holds. Untied fp32 at BLOCK_B 64 (MC evaluation's wide batches) takes
        # 80 KB a stage at 64 wide, and three overflow an H100's 227 KB.
        if self.one_gate:  # one operand tile and one gate's W tile
            stage = (self.block_b + self.block_h_f) * self.block_k_f * op_bytes
        else:
            stage = (operands * self.block_b + gates * BLOCK_H) * self.block_k_f * op_bytes
        self.stages_f = max(1, min(stages, smem // stage))
        return stage


def block_of_units(blocks: tuple[int, ...], hidden: int, programs_per_block: int, target: float) -> tuple[int, int]:
    """The widest of ``blocks`` (widest first) whose K need split at most MAX_ONE_GATE_SPLIT ways for ``target``
    programs, where each block of units takes ``programs_per_block`` programs per K chunk (the last of ``blocks`` if
    none does), and how many ways that is."""
    for block in blocks:
        # Rounded down: at most ``target`` programs. To the nearest, AWD's 1152 units got 16-unit blocks with K
        # whole, 288 programs each reading all of h_{t-1} for 16 units; 32-unit blocks with K split two ways read it
        # half as often and run its steps faster (docs/speed.md). 656 and 1504 units get the same plans either way.
        splits = max(1, int(target / (programs_per_block * cdiv(hidden, block))))
        if splits <= MAX_ONE_GATE_SPLIT:
            break
    return block, splits


def untied(zh: torch.Tensor | None) -> bool:
    """Is the recurrent mask one per gate ([B, G, H], untied), rather than shared by the gates ([B, H])?"""
    return zh is not None and zh.dim() == 3


def plan_for(x_proj: torch.Tensor, hidden: int, zh: torch.Tensor | None, stored: torch.dtype, gates: int,
              one_gate_kernel: bool = False) -> Plan:
    """The plan of a layer's T steps: x_proj [T, B, gates, H], the recurrent mask zh ([B, G, H] when untied), the
    forward's operands in ``stored`` (``stored_dtype``); ``one_gate_kernel`` for a forward kernel that can run one gate
    per program (the LSTM's)."""
    operands = gates if untied(zh) else 1
    return Plan(x_proj.shape[1], hidden, x_proj.device, gates, operands, stored.itemsize, one_gate_kernel)


def pack_weight(w_hh: torch.Tensor, dtype: torch.dtype, plan: Plan, mask: WeightMask | None = None) -> torch.Tensor:
    """W_hh [G*H, H] in ``dtype`` (``stored_dtype``'s) as [G*HP, w_cols]: each gate's rows zero-padded to the plan's
    HP units (:class:`Units`) and every row to ``plan.w_cols`` columns; dropped by ``mask`` where given (AWD's weight
    drop, W_hh * M / (1-p)).

    Aligned rows give full-width loads, and the zero tail lets the kernels read whole blocks of a row without masking
    the columns. The mask is applied as W_hh is written in ``dtype``: the dropped W_hh is never stored in fp32.
    """
    rows, hidden = w_hh.shape
    gates = rows // hidden
    w_hh = w_hh.detach()
    if plan.w_cols == hidden and plan.hidden == hidden:
        if mask is None:  # no copy where W_hh is stored in its own dtype already
            return w_hh.to(dtype).contiguous()
        return mask.apply(w_hh, out=torch.empty(rows, hidden, device=w_hh.device, dtype=dtype))
    out = torch.empty(gates, plan.hidden, plan.w_cols, device=w_hh.device, dtype=dtype)
    live = out[:, :hidden, :hidden]
    if mask is None:
        live.copy_(w_hh.view(gates, hidden, hidden))
    else:
        mask.apply(w_hh.view(gates, hidden, hidden), out=live)
    # Only the tails: zeroing all of it first would write W_hh's size twice.
    out[:, :hidden, hidden:].zero_()
    out[:, hidden:].zero_()
    return out.view(gates * plan.hidden, plan.w_cols)


class Units:
    """A layer's H units as the kernels run them: HP, H rounded up to a multiple of ``UNIT_MULTIPLE`` (16).

    Why: with HP a multiple of 16 every block of units is whole and every row of the kernels' buffers starts on a
    16-value boundary, so the loads are full width (the paper's 1500 units run as 1504).

    The extra units are dead. Their weights in and out, inputs, biases and initial state are zeros, so each of their
    gate pre-activations is 0, c stays f*0 + i*tanh(0) = 0 and h = o*tanh(0) = 0 at every step (the GRU's: h = z*0 +
    (1-z)*tanh(0) = 0). A zero h adds nothing to any product, and their gradients are zero in the same way. Inputs are
    zero-padded on the way in and results sliced on the way out: callers see H units.
    """

    def __init__(self, hidden: int):
        self.hidden = hidden
        self.padded = cdiv(hidden, UNIT_MULTIPLE) * UNIT_MULTIPLE

    def pad(self, t: torch.Tensor | None, gates: int = 1) -> torch.Tensor | None:
        """[..., gates*H] -> [..., gates*HP], each gate's H values followed by zeros."""
        if t is None or self.padded == self.hidden:
            return t
        return torch.nn.functional.pad(t.unflatten(-1, (gates, self.hidden)), (0, self.padded - self.hidden)).flatten(-2)

    def padded_grad(self, grad: torch.Tensor | None, like: torch.Tensor, writable: bool = False) -> torch.Tensor:
        """An output's gradient [..., H] as the kernels read it: [..., HP] contiguous, in ``like``'s shape and fp32
        for None (an output autograd left unmaterialized, its gradient zero). ``writable``: a tensor of its own, which
        the kernels may overwrite (never the caller's gradient)."""
        if grad is None:
            return torch.zeros(like.shape, device=like.device, dtype=torch.float32)
        padded = self.pad(grad.float() if writable else grad).contiguous()
        return padded.clone() if writable and padded.data_ptr() == grad.data_ptr() else padded

    def unpad(self, t: torch.Tensor, gates: int = 1) -> torch.Tensor:
        """[..., gates*HP] -> [..., gates*H]: the live units of each gate."""
        if self.padded == self.hidden:
            return t
        return t.unflatten(-1, (gates, self.padded))[..., :self.hidden].flatten(-2)

    def unpad_weight(self, w: torch.Tensor, gates: int, mask: WeightMask | None = None) -> torch.Tensor:
        """[gates*HP, HP] -> [gates*H, H]: each gate's rows and the columns of the live units, times weight drop's
        ``mask`` [gates*H, H] where given (its dropped entries get no gradient): one pass, the product reading the live
        units in place."""
        live = w.view(gates, self.padded, self.padded)[:, :self.hidden, :self.hidden]
        if mask is None:
            return live.reshape(gates * self.hidden, self.hidden)
        out = torch.empty(gates * self.hidden, self.hidden, device=w.device, dtype=w.dtype)
        mask.apply(live, out=out.view(gates, self.hidden, self.hidden))
        return out
