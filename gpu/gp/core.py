"""Core arithmetic of GP trading-rule evaluation, written once, compiled for CPU and GPU.

Op codes (int16). A terminal's op code is its index in
`gpu.indicators.catalogue.TERMINALS`, so float
terminals are 0..16 and boolean ones 17..30; the functions follow:

| op      | code | signature            |
|---------|------|----------------------|
| AND     | 31   | bool, bool -> bool   |
| OR      | 32   | bool, bool -> bool   |
| NOT     | 33   | bool -> bool         |
| LT (<)  | 34   | float, float -> bool |
| GT (>)  | 35   | float, float -> bool |

A compiled individual is one postfix program: the buy tree's postfix, then the sell tree's,
so that after the last op the stack holds [buy, sell]. The only float-valued nodes are
terminals and they are only consumed by < and >, so in a type-correct postfix program a
float terminal always starts a triple (float, float, < or >): the interpreter evaluates the
triple at once, and its stack holds booleans only, as bits of one integer in registers
(top of stack = bit 0), never in memory. Indicator values are never combined
arithmetically, only compared, so the float32 panel gives identical decisions everywhere.
A comparison involving NaN is false; a boolean terminal is true iff its value > 0.5, so a
NaN (warming-up) boolean is false. GP operations are counted as program nodes.

Decision code of one (program, day, stock): bit 0 = buy tree true, bit 1 = sell tree true.

Money (float64, per stock, the paper's simulation; see strategies/gp/__init__.py):
signal 0/1 follows the engine's target signal; on buy&!sell with signal 0 the signal turns
1 and the most whole shares floor((cash - 1) / close) are bought when that is >= 1; on
sell&!buy with signal 1 the signal turns 0 and any shares are sold. After the last day any
shares are sold at the last close.

Costs are the paper broker's (engine.trading.broker.PaperBroker), passed as `costs` = (commission,
buy_factor, sell_factor), see `cost_tuple`: a trade fills at price x factor (slippage in
basis points against the order), the all-in buy takes floor((cash - commission) / fill)
shares, every trade pays the commission. The defaults ($1, 0 bp) are the paper's: a factor
of exactly 1.0 leaves every product as it was.

Products shares*price go through MUL_RN: plain `*` on the CPU, libdevice's `dmul_rn` on
the GPU. NVVM contracts a multiply feeding an add into one fused multiply-add by default,
which rounds once instead of twice; `dmul_rn` forbids that, so GPU money equals CPU money
bit for bit.

The plain functions below call each other by name; `gpu.twin.compile_twin` compiles them
once for numba's CPU target and once as CUDA device functions, each backend's names
bound to its own compiled functions. These functions are the single statement of the
paper's money rules: the evaluators (gp_eval, gp_bitwise) call them, and the engine's
broker is tested against them to the cent (tests/integration/test_gp_parity.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpu.indicators.catalogue import N_BOOL, N_FLOAT, N_TERMINALS
from gpu.twin import Backend, compile_twin

OP_AND = N_TERMINALS          # 31
OP_OR = N_TERMINALS + 1       # 32
OP_NOT = N_TERMINALS + 2      # 33
OP_LT = N_TERMINALS + 3       # 34
OP_GT = N_TERMINALS + 4       # 35
N_OPS = N_TERMINALS + 5       # 36
FUNCTION_NAMES: dict[int, str] = {OP_AND: "AND", OP_OR: "OR", OP_NOT: "NOT", OP_LT: "<", OP_GT: ">"}

TYPE_FLOAT = 0
TYPE_BOOL = 1

#: arity of every op code
ARITY = np.zeros(N_OPS, np.int8)
ARITY[[OP_AND, OP_OR, OP_LT, OP_GT]] = 2
ARITY[OP_NOT] = 1
#: type every op code returns
RETURN_TYPE = np.full(N_OPS, TYPE_BOOL, np.int8)
RETURN_TYPE[:N_FLOAT] = TYPE_FLOAT
#: type of every argument of a function (unused slots -1)
ARG_TYPE = np.full((N_OPS, 2), -1, np.int8)
ARG_TYPE[[OP_AND, OP_OR]] = TYPE_BOOL
ARG_TYPE[OP_NOT, 0] = TYPE_BOOL
ARG_TYPE[[OP_LT, OP_GT]] = TYPE_FLOAT

#: capacity of the interpreter's bit stack (bits of an int64); a tree of depth D needs at
#: most D + 1 slots and the finished buy tree holds one more while the sell tree runs.
STACK_SIZE = 32

CASH0 = 10_000.0      # dollars per stock at the start of a window
COMMISSION = 1.0      # dollars per trade (the default cost model)
SLIPPAGE_BPS = 0.0    # basis points against each fill (the default cost model)

CODE_BUY = 1
CODE_SELL = 2

assert N_BOOL == N_TERMINALS - N_FLOAT


# --------------------------------------------------------------------------- plain functions
#: an integer argument of the money rules: their compiled callers pass numpy int64 (one
#: specialisation each, see `simulate`), Python code may pass int
Int = int | np.integer[Any]


def mul_rn(a: float, b: float) -> float:
    """a*b rounded on its own (never fused with a following add)."""
    return a * b


def decision_code(program: Any, length: int, row: Any, stock: int) -> int:
    """Decision code (bit 0 buy, bit 1 sell) of one postfix program on row[:, stock], where
    `row` is one day of the panel: (31, n_stocks) indicator values.

    `program` must be type-correct (gp_eval checks programs before running them). Op codes
    are read as unsigned so that indexing by them needs no negative-index handling.
    """
    bits = 0
    pc = 0
    while pc < length:
        op = np.uint16(program[pc])
        if op < N_FLOAT:  # (float, float, < or >): one comparison
            a = row[op, stock]
            b = row[np.uint16(program[pc + 1]), stock]
            if program[pc + 2] == OP_LT:
                bits = (bits << 1) | (1 if a < b else 0)
            else:
                bits = (bits << 1) | (1 if a > b else 0)
            pc += 3
            continue
        if op < N_TERMINALS:
            bits = (bits << 1) | (1 if row[op, stock] > 0.5 else 0)
        elif op == OP_NOT:
            bits = bits ^ 1
        elif op == OP_AND:
            bits = ((bits >> 2) << 1) | (bits & (bits >> 1) & 1)
        else:  # OP_OR (< and > were consumed with their arguments)
            bits = ((bits >> 2) << 1) | ((bits | (bits >> 1)) & 1)
        pc += 1
    code = 0
    if bits & 2:
        code += CODE_BUY
    if bits & 1:
        code += CODE_SELL
    return code


def step_money(code: Int, signal: Int, shares: float, cash: float, price: float,
               costs: Any) -> tuple[Int, float, float]:
    """One day's trade at the close `price` (dollars) for decision `code`; `costs` as in
    `cost_tuple` (the broker's fill price: price x factor, then its all-in sizing)."""
    commission = costs[0]
    if code == CODE_BUY:
        if signal == 0:
            signal = 1
            fill = mul_rn(price, costs[1])
            n = float(math.floor((cash - commission) / fill))
            if n >= 1.0:
                cash = cash - (mul_rn(n, fill) + commission)
                shares = n
    elif code == CODE_SELL and signal == 1:
        signal = 0
        if shares > 0.0:
            cash = cash + (mul_rn(shares, mul_rn(price, costs[2])) - commission)
            shares = 0.0
    return signal, shares, cash


def liquidate(shares: float, cash: float, price: float, costs: Any) -> float:
    """Cash after selling whatever is held at `price` (end of the window)."""
    if shares > 0.0:
        cash = cash + (mul_rn(shares, mul_rn(price, costs[2])) - costs[0])
    return cash


def simulate(program: Any, length: int, panel: Any, close: Any, stock: int,
             day0: int, day1: int, costs: Any) -> float:
    """Final cash (dollars) of one program trading one stock over days [day0, day1)."""
    signal: Int = np.int64(0)  # int64 from the start: a literal 0 compiles step_money twice
    shares = 0.0
    cash = CASH0
    for day in range(day0, day1):
        code = decision_code(program, length, panel[day], stock)
        signal, shares, cash = step_money(code, signal, shares, cash, close[day, stock], costs)
    return liquidate(shares, cash, close[day1 - 1, stock], costs)


def simulate_codes(codes: Any, close: Any, stock: int, day0: int, day1: int,
                   costs: Any) -> float:
    """Final cash of trading decision codes[day - day0, stock] over days [day0, day1)."""
    signal: Int = np.int64(0)
    shares = 0.0
    cash = CASH0
    for day in range(day0, day1):
        signal, shares, cash = step_money(np.int64(codes[day - day0, stock]), signal, shares, cash,
                                          close[day, stock], costs)
    return liquidate(shares, cash, close[day1 - 1, stock], costs)


def buy_hold(close: Any, stock: int, day0: int, day1: int, costs: Any) -> float:
    """Final cash of buying at close[day0] and selling at close[day1 - 1], costs paid."""
    signal, shares, cash = step_money(np.int64(CODE_BUY), np.int64(0), 0.0, CASH0,
                                      close[day0, stock], costs)
    return liquidate(shares, cash, close[day1 - 1, stock], costs)


def cost_tuple(commission: float = COMMISSION, slippage_bps: float = SLIPPAGE_BPS
               ) -> tuple[float, float, float]:
    """(commission, buy_factor, sell_factor) for the core functions: the factors are
    computed exactly as engine.trading.broker.PaperBroker._fill_price does (1 + side x bps x 1e-4),
    so a fill price here equals the broker's bit for bit."""
    if not (math.isfinite(commission) and commission >= 0 and math.isfinite(slippage_bps)
            and 0 <= slippage_bps < 10_000):
        raise ValueError(f"commission must be a number >= 0 and slippage in [0, 10000) bp, "
                         f"got {commission} and {slippage_bps}")
    return (float(commission), 1.0 + 1 * float(slippage_bps) * 1e-4,
            1.0 + -1 * float(slippage_bps) * 1e-4)


#: the paper's cost model ($1 per trade, no slippage): every evaluator's default
DEFAULT_COSTS = cost_tuple()


# The core, compiled for both backends by gpu.twin. On the GPU `mul_rn` is libdevice's
# dmul_rn (never fused); under the CUDA simulator the plain function stands in for it.
_CORE = (mul_rn, decision_code, step_money, liquidate, simulate, simulate_codes, buy_hold)


def _cuda_overrides() -> dict[str, Any]:
    from gpu.device import cuda_simulated

    if cuda_simulated():
        return {}
    from numba.cuda import libdevice

    return {"mul_rn": libdevice.dmul_rn}


_twin = compile_twin(__name__, _CORE, dict(globals()), cuda_constants=_cuda_overrides())

#: the CPU backend (numba njit): attributes decision_code, step_money, liquidate, simulate, ...
CPU = _twin.cpu


def cuda_backend() -> Backend:
    """The CUDA device-function backend (or the simulator's, under NUMBA_ENABLE_CUDASIM)."""
    return _twin.cuda
