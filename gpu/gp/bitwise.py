"""Bit-parallel GP evaluation: 64 trading days in one 64-bit word, comparisons shared.

The stack interpreter (`gpu.gp.evaluate`) runs every node of every program for every (stock,
day). Here the same decisions come out of far fewer machine operations:

1. *Shared comparison masks*, built once per window (`build_masks`): every GP comparison
   compares two of the 17 float terminals, and every boolean terminal is a threshold, so
   all a program can ask of one (stock, day) is one of `N_MASKS` = 17 x 17 + 14 = 303
   bits. `masks[k, w, s]` packs bit k of days `day0 + 64 w ... + 63` of stock s into one
   uint64 (bit j = day `day0 + 64 w + j`). Mask `a * 17 + b` is `terminal a < terminal b`
   (so `a > b` is mask `b * 17 + a`); mask `289 + t` is boolean terminal `17 + t` > 0.5.
   The comparisons are the interpreter's own (float32 against float32, the boolean
   threshold in float64, NaN compares false), so every bit equals the interpreter's.
2. *Linear mask programs* (`to_mask_programs`): the postfix program with each comparison
   triple (a, b, < or >) replaced by one mask load, AND/OR/NOT kept; a 98-node program
   becomes about 60 instructions, each a 64-bit word operation for 64 days at once. The
   stack holds words in local memory with its top in a register.
3. *Money on trading days only*: the paper's money rules change state only on a day where
   a flat position meets buy & !sell or a long one meets sell & !buy, so the simulation
   jumps from one such day to the next (count trailing zeros) and calls the same
   `step_money` as the interpreter (`gpu.gp.core`, the single statement of those rules) on
   those days. Final cash therefore equals the interpreter's bit for bit (tested), so
   fitness, evolution and the engine's replay parity are unchanged.

One thread per (program, stock), the stocks of a program in consecutive threads so a
warp's mask loads coalesce; the CPU twin runs the same core over programs in chunks on threads.
Both backends compile one core through `gpu.twin`.

Operation counts (`BitwiseCounts`): *credited* GP ops = linear instructions x stocks x days
(one bit of a word operation is one node evaluated for one fitness case; a comparison is
credited once per individual as its mask load, its arithmetic is shared and counted once
per window in `mask_ops`); *executed* = 64-bit word operations actually run; and the
*node-equivalent* count `gp_window.gp_ops` of the stack interpreter, for comparison.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import numpy.typing as npt
from numba import cuda, prange

from gpu import small
from gpu.device import resolve_device
from gpu.gp import core as gp_core
from gpu.gp import window as gp_window
from gpu.gp.core import CASH0, CODE_BUY, CODE_SELL, OP_AND, OP_GT, OP_NOT, STACK_SIZE, Int
from gpu.gp.window import WindowEvaluator, _check_programs, fitness_from_cash, gp_ops
from gpu.indicators.catalogue import N_FLOAT, N_TERMINALS
from gpu.small import SMALL_CELLS, uncompiled
from gpu.threads import chunk_lo, parallel_range, programs_per_chunk, run_chunks
from gpu.twin import compile_twin, cuda_kernel_cache, flush_stale_caches

F64 = npt.NDArray[np.float64]
I16 = npt.NDArray[np.int16]
I32 = npt.NDArray[np.int32]
U64 = npt.NDArray[np.uint64]
F32 = npt.NDArray[np.float32]

DAYS_PER_WORD = 64
N_COMPARE = N_FLOAT * N_FLOAT                      # 289 ordered pairs (a < b)
N_MASKS = N_COMPARE + (N_TERMINALS - N_FLOAT)      # 303
INS_NOT = N_MASKS                                   # linear op codes after the mask loads
INS_AND = N_MASKS + 1
INS_OR = N_MASKS + 2
THREADS_PER_BLOCK = 128
# the interpreter's stack plus the filler slot below the first load (see eval_word)
STACK_WORDS = STACK_SIZE + 1

# uint64 constants: numba types a mix of uint64 and int64 as float64, so the word
# arithmetic below uses these and never a plain int literal.
ZERO = np.uint64(0)
ONE = np.uint64(1)
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
SH32 = np.uint64(32)

# The money rules are gp_core's. As plain Python (the reference path of the CUDA simulator)
# these names are gp_core's plain functions; compile_twin binds each backend's compiled ones.
STEP_MONEY = gp_core.step_money
LIQUIDATE = gp_core.liquidate


# --------------------------------------------------------------------------- the core
def lt_word(panel: Any, day_start: int, n_valid: int, a: int, b: int, stock: int) -> Any:
    """Bits j < n_valid set where panel[day_start + j, a, stock] < panel[.., b, stock]."""
    word = ZERO
    bit = ONE
    for j in range(n_valid):
        if panel[day_start + j, a, stock] < panel[day_start + j, b, stock]:
            word |= bit
        bit = bit << ONE
    return word


def true_word(panel: Any, day_start: int, n_valid: int, t: int, stock: int) -> Any:
    """Bits j < n_valid set where boolean terminal t is true (value > 0.5)."""
    word = ZERO
    bit = ONE
    for j in range(n_valid):
        if panel[day_start + j, t, stock] > 0.5:
            word |= bit
        bit = bit << ONE
    return word


def mask_word(panel: Any, day0: int, day1: int, k: int, w: int, stock: int) -> Any:
    """Word w of mask k (see the module docstring) for one stock over days [day0, day1)."""
    day_start = day0 + w * DAYS_PER_WORD
    n_valid = min(DAYS_PER_WORD, day1 - day_start)
    if k < N_COMPARE:
        return lt_word(panel, day_start, n_valid, k // N_FLOAT, k % N_FLOAT, stock)
    return true_word(panel, day_start, n_valid, N_FLOAT + k - N_COMPARE, stock)


def eval_word(code: Any, length: int, masks: Any, w: int, stock: int, stack: Any
              ) -> tuple[Any, Any]:
    """(buy word, sell word) of one linear mask program on word w of one stock."""
    top = ZERO
    sp = 0  # words below the top, in stack[0..sp)
    for pc in range(length):
        op = code[pc]
        if op < N_MASKS:
            stack[sp] = top
            sp += 1
            top = masks[op, w, stock]
        elif op == INS_NOT:
            top = ~top
        elif op == INS_AND:
            sp -= 1
            top = stack[sp] & top
        else:
            sp -= 1
            top = stack[sp] | top
    # the bottom slot holds the empty-stack filler pushed by the first load
    return stack[1], top


def ctz64(m: Any) -> int:
    """Index of the lowest set bit of a non-zero uint64 (binary search: halves of 32, 16,
    8, 4, 2 bits, then the last bit)."""
    n = 0
    width = SH32
    for _ in range(5):
        if (m & ((ONE << width) - ONE)) == ZERO:
            n += int(width)
            m = m >> width
        width = width >> ONE
    if (m & ONE) == ZERO:
        n += 1
    return n


def trade_word(buy: Any, sell: Any, valid: Any, close: Any, day_start: int, stock: int,
               signal: Int, shares: float, cash: float, costs: Any) -> tuple[Int, float, float]:
    """The paper's money rules over one word of days, visiting trading days only."""
    buy_only = buy & ~sell & valid
    sell_only = sell & ~buy & valid
    while True:
        m = buy_only if signal == 0 else sell_only
        if m == ZERO:
            break
        j = ctz64(m)
        code = CODE_BUY if signal == 0 else CODE_SELL
        signal, shares, cash = STEP_MONEY(code, signal, shares, cash, close[day_start + j, stock],
                                          costs)
        low = m & (~m + ONE)          # lowest set bit
        done = low | (low - ONE)      # days up to and including day j
        buy_only = buy_only & ~done
        sell_only = sell_only & ~done
    return signal, shares, cash


def simulate_bits(code: Any, length: int, masks: Any, close: Any, stock: int, day0: int,
                  day1: int, stack: Any, costs: Any) -> float:
    """Final cash of one linear program trading one stock over [day0, day1)."""
    signal: Int = np.int64(0)  # int64 from the start: a literal 0 compiles trade_word twice
    shares = 0.0
    cash = CASH0
    n_words = (day1 - day0 + DAYS_PER_WORD - 1) // DAYS_PER_WORD
    for w in range(n_words):
        day_start = day0 + w * DAYS_PER_WORD
        n_valid = day1 - day_start
        valid = ALL if n_valid >= DAYS_PER_WORD else (ONE << np.uint64(n_valid)) - ONE
        buy, sell = eval_word(code, length, masks, w, stock, stack)
        signal, shares, cash = trade_word(buy, sell, valid, close, day_start, stock,
                                          signal, shares, cash, costs)
    return LIQUIDATE(shares, cash, close[day1 - 1, stock], costs)


_CORE = (lt_word, true_word, mask_word, eval_word, ctz64, trade_word, simulate_bits)
_cuda_money = gp_core.cuda_backend()
# the money rules are gp_core's, compiled per backend there (dmul_rn on the GPU)
_twin = compile_twin(
    __name__, _CORE, dict(globals()),
    cpu_constants={"STEP_MONEY": gp_core.CPU.step_money, "LIQUIDATE": gp_core.CPU.liquidate},
    cuda_constants={"STEP_MONEY": _cuda_money.step_money, "LIQUIDATE": _cuda_money.liquidate},
    # the evaluator's loop as one compile unit: each level numba compiles on its own and
    # links is optimised again (`_final_cash_bits_cpu` 2.0 -> 1.75 s cold, 2-core dev VM,
    # 2026-11-28); the mask helpers stay apart (`_masks_cpu` runs rarely: numpy builds small
    # windows' masks)
    cpu_inline=("eval_word", "ctz64", "trade_word", "simulate_bits"),
)
# The drivers inline gp_core's money rules and gp_window's thread mapping: flush their cache
# entries when either changes.
flush_stale_caches(__file__, [gp_core.__file__, gp_window.__file__])
_mask_word_cpu = _twin.cpu.mask_word
_simulate_cpu = _twin.cpu.simulate_bits


# --------------------------------------------------------------------------- translation
@numba.njit(cache=True, nogil=True)
def _translate(lo: int, hi: int, programs: Any, lengths: Any, out: Any,
               out_lengths: Any) -> None:
    """Programs lo..hi-1 (in parallel: `gpu.threads.parallel_range`)."""
    for i in range(lo, hi):
        pc = 0
        n = 0
        while pc < lengths[i]:
            op = programs[i, pc]
            if op < N_FLOAT:
                a = op
                b = programs[i, pc + 1]
                if programs[i, pc + 2] == OP_GT:
                    a, b = b, a
                out[i, n] = a * N_FLOAT + b
                pc += 3
            elif op < N_TERMINALS:
                out[i, n] = N_COMPARE + op - N_FLOAT
                pc += 1
            elif op == OP_NOT:
                out[i, n] = INS_NOT
                pc += 1
            elif op == OP_AND:
                out[i, n] = INS_AND
                pc += 1
            else:
                out[i, n] = INS_OR
                pc += 1
            n += 1
        out_lengths[i] = n


@numba.njit(cache=True, parallel=True)
def _translate_parallel(chunks: int, n: int, programs: Any, lengths: Any, out: Any,
                        out_lengths: Any) -> None:
    for k in prange(chunks):
        _translate(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n), programs, lengths, out,
                   out_lengths)


#: programs a process translates uncompiled (gpu.small): about 0.008 ms each interpreted,
#: 0.14-0.19 s to compile `_translate` (2-core dev VM, 2026-11-28)
TRANSLATE_BUDGET = 8_192


def expect_translations(n: int) -> None:
    """Announce `n` programs this process will translate (an evolution's evaluations): more
    than TRANSLATE_BUDGET, and `_translate` is compiled from its first call."""
    small.expect(_translate, n, TRANSLATE_BUDGET)


def to_mask_programs(programs: np.ndarray, lengths: np.ndarray) -> tuple[I16, I32]:
    """Linear mask programs (int16 codes, lengths) of type-checked postfix programs."""
    out = np.zeros(programs.shape, np.int16)
    out_lengths = np.zeros(programs.shape[0], np.int32)
    n = programs.shape[0]
    if n and uncompiled(_translate, n, TRANSLATE_BUDGET):
        small.run_plain(_translate, 0, n, programs, lengths, out, out_lengths)
    elif n:
        parallel_range(_translate, _translate_parallel, programs.shape[0], programs, lengths,
                       out, out_lengths, min_chunk=256)
    return out, out_lengths


# --------------------------------------------------------------------------- CPU drivers
@numba.njit(nogil=True, cache=True)
def _masks_cpu(lo: int, hi: int, panel: Any, day0: int, day1: int, out: Any) -> None:
    """Masks lo..hi-1 (run in chunks on threads)."""
    n_words, n_stocks = out.shape[1], out.shape[2]
    for k in range(lo, hi):
        for w in range(n_words):
            for s in range(n_stocks):
                out[k, w, s] = _mask_word_cpu(panel, day0, day1, k, w, s)


@numba.njit(nogil=True, cache=True)
def _final_cash_bits_cpu(lo: int, hi: int, code: Any, lengths: Any, masks: Any, close: Any,
                         day0: int, day1: int, costs: Any, out: Any) -> None:
    """Programs lo..hi-1's final cash per stock (run in chunks on threads)."""
    n_stocks = close.shape[1]
    stack = np.empty(STACK_WORDS, np.uint64)
    for i in range(lo, hi):
        for s in range(n_stocks):
            out[i, s] = _simulate_cpu(code[i], lengths[i], masks, close, s, day0, day1, stack,
                                      costs)


_eval_word_cpu = _twin.cpu.eval_word
_ctz64_cpu = _twin.cpu.ctz64
_MIX_A = np.uint64(0xBF58476D1CE4E5B9)
_MIX_B = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


@numba.njit(cache=True, nogil=True)
def _mix(h: Any, x: Any) -> Any:
    """splitmix64's finaliser of h ^ x: one step of the behaviour fingerprint."""
    z = (h ^ x) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _S30)) * _MIX_A
    z = (z ^ (z >> _S27)) * _MIX_B
    return z ^ (z >> _S31)


@numba.njit(nogil=True, cache=True)
def _behaviours_cpu(lo: int, hi: int, code: Any, lengths: Any, masks: Any, n_days: int,
                    out: Any) -> None:
    """out[i] = a 64-bit hash of every signal change (stock, day, direction) of program i,
    for i in lo..hi-1 (in parallel: `gpu.threads.parallel_range`)."""
    n_stocks = masks.shape[2]
    n_w = masks.shape[1]
    stack = np.empty(STACK_WORDS, np.uint64)
    for i in range(lo, hi):
        h = np.uint64(n_stocks)
        for s in range(n_stocks):
            signal = 0
            for w in range(n_w):
                n_valid = n_days - w * DAYS_PER_WORD
                valid = ALL if n_valid >= DAYS_PER_WORD else (ONE << np.uint64(n_valid)) - ONE
                buy, sell = _eval_word_cpu(code[i], lengths[i], masks, w, s, stack)
                buy_only = buy & ~sell & valid
                sell_only = sell & ~buy & valid
                while True:  # the same walk over signal changes as trade_word
                    m = buy_only if signal == 0 else sell_only
                    if m == ZERO:
                        break
                    j = _ctz64_cpu(m)
                    day = w * DAYS_PER_WORD + j
                    h = _mix(h, np.uint64((s * 4_000_000 + day) * 2 + signal))
                    signal = 1 - signal
                    low = m & (~m + ONE)
                    done = low | (low - ONE)
                    buy_only = buy_only & ~done
                    sell_only = sell_only & ~done
        out[i] = h


@numba.njit(parallel=True, cache=True)
def _behaviours_parallel(chunks: int, n: int, code: Any, lengths: Any, masks: Any, n_days: int,
                         out: Any) -> None:
    for k in prange(chunks):
        _behaviours_cpu(chunk_lo(k, chunks, n), chunk_lo(k + 1, chunks, n), code, lengths,
                        masks, n_days, out)


def behaviours(programs: np.ndarray, lengths: np.ndarray, masks: U64, n_days: int) -> U64:
    """Behaviour fingerprints (n_programs,) uint64 over a window's host `masks`
    (`build_masks`): a hash of the days on which each stock's signal turns long or flat.
    The money rules are a function of those days alone (a buy's share count depends on the
    cash the earlier trades left), so equal signal changes mean equal trades, equal daily
    portfolio values and equal daily returns; different fingerprints mean different trades
    (up to a 64-bit hash collision)."""
    programs, lengths = _check_programs(programs, lengths)
    out = np.zeros(programs.shape[0], np.uint64)
    n = programs.shape[0]
    words = n * masks.shape[1] * masks.shape[2]  # the walk's (program, word, stock) cells
    if n and uncompiled(_behaviours_cpu, words, BEHAVIOURS_BUDGET):
        code, code_lengths = to_mask_programs(programs, lengths)
        masks = np.ascontiguousarray(masks, np.uint64)
        for i in range(n):
            out[i] = behaviour_numpy(code[i], int(code_lengths[i]), masks, n_days)
    elif n:
        code, code_lengths = to_mask_programs(programs, lengths)
        # a program a chunk at least: a hall of fame asks for some 30-60 a generation, each
        # 128 stocks x 12 words in the headline (40 of them: 2.99 ms serial, 0.76 ms over
        # 16 threads on the H200's host; 1.55 and 0.82 ms on the 2-core VM, 2026-11-28)
        parallel_range(_behaviours_cpu, _behaviours_parallel, code.shape[0], code, code_lengths,
                       np.ascontiguousarray(masks, np.uint64), n_days, out, min_chunk=1)
    return out


#: (program, word, stock) cells a process fingerprints uncompiled (gpu.small): about 2.6 us
#: a cell (0.5 ms a program on a 768-day x 16-stock window), 0.3 s to compile
#: `_behaviours_cpu` (2-core dev VM, 2026-11-28): up to some 0.17 s. The small `evolve`'s
#: hall of fame asks for 209 programs (40,000 cells); the headline's batches of 256
#: programs on 128 stocks (393,000 cells a call) are compiled
BEHAVIOURS_BUDGET = 65_536
_MASK64 = (1 << 64) - 1


def behaviour_numpy(code: npt.NDArray[np.int16], length: int, masks: U64, n_days: int) -> int:
    """`_behaviours_cpu`'s fingerprint of one linear mask program, uncompiled: its words by
    numpy (`_eval_words_numpy`), the walk over signal changes and the splitmix64 hash on
    Python integers (wrapped to 64 bits, as numba's uint64)."""
    buy, sell = _eval_words_numpy(code, length, masks)
    n_w, n_stocks = masks.shape[1], masks.shape[2]
    buy_only = (buy & ~sell).tolist()
    sell_only = (sell & ~buy).tolist()
    h = n_stocks
    for s in range(n_stocks):
        signal = 0
        for w in range(n_w):
            n_valid = n_days - w * DAYS_PER_WORD
            valid = _MASK64 if n_valid >= DAYS_PER_WORD else (1 << n_valid) - 1
            pending = [buy_only[w][s] & valid, sell_only[w][s] & valid]
            while pending[signal]:
                m = pending[signal]
                j = (m & -m).bit_length() - 1  # the lowest set bit, as ctz64
                h = _mix_int(h, (s * 4_000_000 + w * DAYS_PER_WORD + j) * 2 + signal)
                done = (1 << (j + 1)) - 1  # days up to and including day j
                pending = [pending[0] & ~done, pending[1] & ~done]
                signal = 1 - signal
    return h


def _mix_int(h: int, x: int) -> int:
    """`_mix` on Python integers."""
    z = ((h ^ x) + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


# --------------------------------------------------------------------------- CUDA kernels
# Module-level kernels, so numba's disk cache keeps them across processes on a real GPU
# (the headline `evolve` otherwise spends a second or more on JIT in every run).
_mask_word_dev = _twin.cuda.mask_word
_simulate_dev = _twin.cuda.simulate_bits


@cuda.jit(cache=cuda_kernel_cache())
def _masks_kernel(panel: Any, day0: int, day1: int, out: Any) -> None:
    t = cuda.grid(1)  # type: ignore[call-arg,var-annotated]
    n_stocks = out.shape[2]
    n_words = out.shape[1]
    if t >= out.shape[0] * n_words * n_stocks:
        return
    s = t % n_stocks
    rest = t // n_stocks
    w = rest % n_words
    k = rest // n_words
    out[k, w, s] = _mask_word_dev(panel, day0, day1, k, w, s)


@cuda.jit(cache=cuda_kernel_cache())
def _final_cash_kernel(code: Any, lengths: Any, masks: Any, close: Any, day0: int, day1: int,
                       costs: Any, out: Any) -> None:
    i, s = gp_window.program_and_stock(code.shape[0], close.shape[1])
    if i >= 0:
        stack = cuda.local.array(STACK_WORDS, numba.uint64)
        out[i, s] = _simulate_dev(code[i], lengths[i], masks, close, s, day0, day1, stack,
                                  costs)


def _blocks(n_threads: int) -> int:
    return max(1, math.ceil(n_threads / THREADS_PER_BLOCK))


def n_words(n_days: int) -> int:
    return (n_days + DAYS_PER_WORD - 1) // DAYS_PER_WORD


#: cells (days x stocks) of masks a process builds with numpy (about 1 us a cell; the
#: compiled loop costs 0.6 s to compile, 2-core dev VM, 2026-11-28)
MASKS_BUDGET = 16 * SMALL_CELLS


def _host_masks(panel: F32, day0: int, day1: int) -> U64:
    """The masks on the CPU: numpy for a small window (gpu.small), else the compiled loop."""
    if uncompiled(_masks_cpu, (day1 - day0) * panel.shape[2], MASKS_BUDGET):
        return masks_numpy(panel, day0, day1)
    out = np.empty((N_MASKS, n_words(day1 - day0), panel.shape[2]), np.uint64)
    run_chunks(_masks_cpu, out.shape[0], panel, day0, day1, out, min_chunk=1)
    return out


def masks_numpy(panel: F32, day0: int, day1: int) -> U64:
    """`_masks_cpu`'s masks by numpy: the same comparisons (float32 against float32, the
    boolean threshold 0.5, exact in float32; NaN compares false), packed 64 days a word
    with bit j = day day0 + 64 w + j (little-endian bytes of little-endian bit order)."""
    days, n_stocks = day1 - day0, panel.shape[2]
    words = n_words(days)
    p = panel[day0:day1]
    floats = p[:, :N_FLOAT, :]
    bits = np.zeros((words * DAYS_PER_WORD, N_MASKS, n_stocks), np.bool_)
    bits[:days, :N_COMPARE] = (floats[:, :, None, :] < floats[:, None, :, :]).reshape(
        days, N_COMPARE, n_stocks)  # mask a * 17 + b: terminal a < terminal b
    bits[:days, N_COMPARE:] = p[:, N_FLOAT:N_TERMINALS, :] > 0.5
    by_word = bits.reshape(words, DAYS_PER_WORD, N_MASKS, n_stocks).transpose(2, 0, 3, 1)
    packed = np.packbits(by_word, axis=-1, bitorder="little")  # (masks, words, stocks, 8)
    return np.ascontiguousarray(packed).view("<u8")[..., 0].astype(np.uint64)


def codes_numpy(programs: np.ndarray, lengths: np.ndarray, panel: F32, day0: int, day1: int
                ) -> npt.NDArray[np.int8]:
    """Decision codes (n_programs, day1 - day0, n_stocks), bit 0 buy and bit 1 sell, as
    `gpu.gp.evaluate.decision_codes` gives them, without compiling (gpu.small): numpy's
    masks, each linear mask program run on all words and stocks at once (`eval_word`'s
    steps on arrays), the words unpacked to days. For a few programs on a small window."""
    programs, lengths = _check_programs(programs, lengths)
    n, days, n_stocks = programs.shape[0], day1 - day0, panel.shape[2]
    masks = masks_numpy(panel, day0, day1)
    code = np.zeros(programs.shape, np.int16)
    code_lengths = np.zeros(n, np.int32)
    _translate.py_func(0, n, programs, lengths, code, code_lengths)  # a loop, interpreted
    day_bit = np.arange(DAYS_PER_WORD, dtype=np.uint64)[None, :, None]
    out = np.empty((n, days, n_stocks), np.int8)
    for i in range(n):
        buy, sell = _eval_words_numpy(code[i], int(code_lengths[i]), masks)
        buy_days = ((buy[:, None, :] >> day_bit) & ONE).reshape(-1, n_stocks)[:days]
        sell_days = ((sell[:, None, :] >> day_bit) & ONE).reshape(-1, n_stocks)[:days]
        out[i] = (buy_days * CODE_BUY + sell_days * CODE_SELL).astype(np.int8)
    return out


def _eval_words_numpy(code: npt.NDArray[np.int16], length: int, masks: U64
                      ) -> tuple[U64, U64]:
    """`eval_word` of one linear program on every (word, stock) at once: (buy, sell)."""
    top = np.zeros(masks.shape[1:], np.uint64)
    stack: list[U64] = []
    for op in code[:length].tolist():
        if op < N_MASKS:
            stack.append(top)
            top = masks[op]
        elif op == INS_NOT:
            top = ~top
        elif op == INS_AND:
            top = stack.pop() & top
        else:
            top = stack.pop() | top
    return stack[1], top  # under the buy tree's value: the empty-stack filler


def build_masks(panel: np.ndarray, day0: int, day1: int, device: str = "cpu") -> U64:
    """The shared comparison masks (N_MASKS, n_words, n_stocks) of a window, on the host."""
    panel = np.ascontiguousarray(panel, np.float32)
    shape = (N_MASKS, n_words(day1 - day0), panel.shape[2])
    if resolve_device(device, "GP masks") == "cpu":
        return _host_masks(panel, day0, day1)
    d_out = cuda.device_array(shape, np.uint64)
    _masks_kernel[_blocks(d_out.size), THREADS_PER_BLOCK](cuda.to_device(panel), day0, day1, d_out)
    return np.asarray(d_out.copy_to_host())


def host_behaviours(window: WindowEvaluator, programs: np.ndarray, lengths: np.ndarray
                    ) -> U64:
    """Behaviour fingerprints (n,) of programs over an evaluator's window (`behaviours`:
    equal fingerprints, equal daily returns), on the host whatever the device: a hall of
    fame asks for a few per generation. The window's host masks are built once and kept
    on it."""
    masks = getattr(window, "_host_masks", None)
    if masks is None:
        masks = build_masks(window.panel, window.day0, window.day1, "cpu")
        window._host_masks = masks  # type: ignore[attr-defined]
    return behaviours(programs, lengths, masks, window.n_days)


@dataclass
class _Pipeline:
    """Buffers of `BitwiseEvaluator.parts_fitness`: one stream, pinned host rows (linear
    programs, their lengths, the cash) and their device twins."""

    stream: Any
    code: Any
    lengths: Any
    out: Any
    d_code: Any
    d_lengths: Any
    d_out: Any


@dataclass
class BitwiseCounts:
    """Operation counts of one evaluation (see the module docstring)."""

    credited: int       # linear instructions x stocks x days (each bit one GP op)
    executed: int       # 64-bit word operations run
    node_equivalent: int  # the stack interpreter's count for the same programs


class BitwiseEvaluator(WindowEvaluator):
    """Evaluates populations over one window with shared masks; drop-in for the interpreter.

    Same interface as `gpu.gp.evaluate.PopulationEvaluator` (`final_cash`, `fitness`, `bh_cash`,
    `last_seconds`, `last_ops`); `last_ops` is the credited count, `last_counts` all three,
    `mask_seconds` / `mask_ops` the one-off shared work of building the masks.
    """

    def __init__(self, panel: F64 | np.ndarray, close: np.ndarray, day0: int, day1: int,
                 device: str = "auto",
                 costs: tuple[float, float, float] = gp_core.DEFAULT_COSTS) -> None:
        super().__init__(panel, close, day0, day1, device, costs)
        panel_c, close_c = self.panel, self.close
        self.last_counts = BitwiseCounts(0, 0, 0)
        shape = (N_MASKS, n_words(self.n_days), self.n_stocks)
        self.mask_ops = N_MASKS * self.n_stocks * self.n_days
        self._h_out: Any = None
        self._d_out: Any = None
        self._cash: F64 | None = None
        self._pipe: _Pipeline | None = None
        t0 = time.perf_counter()
        if self.device == "cpu":
            self._masks: Any = _host_masks(panel_c, day0, day1)
            self._close: Any = close_c
        else:
            self._masks = cuda.device_array(shape, np.uint64)
            _masks_kernel[_blocks(self._masks.size), THREADS_PER_BLOCK](
                cuda.to_device(panel_c), day0, day1, self._masks)
            self._close = cuda.to_device(close_c)
            cuda.synchronize()
        self.mask_seconds = time.perf_counter() - t0
        # compile (or load) the evaluation kernel now, so timings of real work exclude the JIT
        warm = np.array([[N_TERMINALS - 1, N_TERMINALS - 1]], np.int16)
        self.final_cash(warm, np.full(1, 2, np.int32))

    def behaviours(self, programs: np.ndarray, lengths: np.ndarray) -> U64:
        return host_behaviours(self, programs, lengths)

    def population_fitness(self, programs: np.ndarray, lengths: np.ndarray) -> F64:
        """Fitness straight from the cash where the evaluation left it (the pinned host
        buffer on CUDA, the evaluator's own array on the CPU): no copy of 25,000 x 128
        doubles and no fresh temporaries per generation."""
        return fitness_from_cash(self._evaluate(programs, lengths), self.bh_cash)

    def parts_fitness(self, parts: Iterable[tuple[np.ndarray, np.ndarray]], total: int
                      ) -> F64:
        """See WindowEvaluator.parts_fitness. On CUDA each part goes up through pinned
        buffers on one stream, its kernel and its cash copy queued behind, before the next
        part is asked for: the host never waits for the GPU until the last part is queued.
        `last_seconds` runs from the first part's launch to the end of the last copy (the
        GPU's busy span, breeding of the later parts included)."""
        if self.device == "cpu":
            return super().parts_fitness(parts, total)
        buf: _Pipeline | None = None
        row = instructions = node_ops = 0
        t_first: float | None = None
        try:
            for programs, lengths in parts:
                programs, lengths = _check_programs(programs, lengths)
                n = programs.shape[0]
                if n == 0:
                    continue
                if buf is None:  # sized at the first part (no kernel of this call queued yet)
                    buf = self._pipeline_buffers(total, programs.shape[1])
                if row + n > total or programs.shape[1] > buf.code.shape[1]:
                    raise ValueError(f"parts exceed the {total} programs of width "
                                     f"{buf.code.shape[1]} announced")
                code, code_lengths = to_mask_programs(programs, lengths)
                rows = slice(row, row + n)
                buf.code[rows, : code.shape[1]] = code
                buf.lengths[rows] = code_lengths
                if t_first is None:
                    t_first = time.perf_counter()
                buf.d_code[rows].copy_to_device(buf.code[rows], stream=buf.stream)
                buf.d_lengths[rows].copy_to_device(buf.lengths[rows], stream=buf.stream)
                _final_cash_kernel[_blocks(n * self.n_stocks), THREADS_PER_BLOCK, buf.stream](
                    buf.d_code[rows], buf.d_lengths[rows], self._masks, self._close, self.day0,
                    self.day1, self.costs, buf.d_out[rows])
                buf.d_out[rows].copy_to_host(buf.out[rows], stream=buf.stream)
                row += n
                instructions += int(code_lengths.astype(np.int64).sum())
                node_ops += gp_ops(lengths, self.n_stocks, self.n_days)
        except BaseException:
            # no copy of this call may still be in flight into the buffers the next call
            # reuses; the error raised here is the one the caller sees
            if buf is not None:
                with contextlib.suppress(Exception):
                    buf.stream.synchronize()
            raise
        if buf is not None:
            buf.stream.synchronize()
        if row != total:
            raise ValueError(f"parts hold {row} programs, {total} announced")
        if buf is None:
            return np.empty(0, np.float64)
        self.last_seconds = time.perf_counter() - t_first if t_first is not None else 0.0
        self._count(instructions, node_ops)
        return fitness_from_cash(buf.out[:total], self.bh_cash)

    def _pipeline_buffers(self, total: int, width: int) -> _Pipeline:
        """Pinned host and device buffers for `total` programs of `width` op codes, kept for
        later generations (the previous call's copies have all finished)."""
        pipe = self._pipe
        if pipe is None or pipe.code.shape[0] < total or pipe.code.shape[1] < width:
            rows = max(total, 1)
            code = cuda.pinned_array((rows, width), np.int16)
            code[:] = 0
            pipe = self._pipe = _Pipeline(
                stream=cuda.stream(), code=code,
                lengths=cuda.pinned_array(rows, np.int32),
                out=cuda.pinned_array((rows, self.n_stocks), np.float64),
                d_code=cuda.to_device(code), d_lengths=cuda.device_array(rows, np.int32),
                d_out=cuda.device_array((rows, self.n_stocks), np.float64))
        return pipe

    def _count(self, instructions: int, node_ops: int) -> None:
        self.last_counts = BitwiseCounts(
            credited=instructions * self.n_stocks * self.n_days,
            executed=instructions * self.n_stocks * n_words(self.n_days),
            node_equivalent=node_ops,
        )
        self.last_ops = self.last_counts.credited

    def final_cash(self, programs: np.ndarray, lengths: np.ndarray,
                   out: np.ndarray | None = None) -> F64:
        cash = self._evaluate(programs, lengths)
        if out is None:
            return cash.copy()
        out[...] = cash
        return out

    def _evaluate(self, programs: np.ndarray, lengths: np.ndarray) -> F64:
        """Final cash (n, n_stocks) in a buffer the evaluator reuses (valid until its next
        call); sets last_seconds and the operation counts."""
        programs, lengths = _check_programs(programs, lengths)
        n = programs.shape[0]
        t0 = time.perf_counter()
        if n == 0:
            return np.empty((0, self.n_stocks), np.float64)
        code, code_lengths = to_mask_programs(programs, lengths)
        if self._cash is None or self._cash.shape[0] < n:
            self._cash = np.empty((n, self.n_stocks), np.float64)
        if self.device == "cpu":
            out = self._cash[:n]
            run_chunks(_final_cash_bits_cpu, n, code, code_lengths, self._masks, self._close,
                       self.day0, self.day1, self.costs, out,
                       min_chunk=programs_per_chunk(self.n_days * self.n_stocks))
        else:
            # only the used columns travel; the cash comes back through a reused pinned
            # buffer (a pageable copy of 25,000 x 128 doubles costs several ms)
            code = np.ascontiguousarray(code[:, : max(1, int(code_lengths.max()))])
            if self._h_out is None or self._h_out.shape[0] < n:
                self._h_out = cuda.pinned_array((n, self.n_stocks), np.float64)
                self._d_out = cuda.device_array((n, self.n_stocks), np.float64)
            d_out = self._d_out[:n]
            _final_cash_kernel[_blocks(n * self.n_stocks), THREADS_PER_BLOCK](
                cuda.to_device(code), cuda.to_device(code_lengths), self._masks, self._close,
                self.day0, self.day1, self.costs, d_out)
            out = self._h_out[:n]
            d_out.copy_to_host(out)
        self.last_seconds = time.perf_counter() - t0
        self._count(int(code_lengths.astype(np.int64).sum()),
                    gp_ops(lengths, self.n_stocks, self.n_days))
        return np.asarray(out)
