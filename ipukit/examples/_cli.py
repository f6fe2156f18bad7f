"""What the command lines share: a parser, argparse types, checks, cost report, ``run``.

``Parser`` (one-line errors, unknown options named), ``run`` (IpuError -> one line and
exit 2), ``check_fits`` (say what sizes would need before allocating) and the argparse
types serve every example and tutorial CLI; the rest serves the sharded tools.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

from .. import backend, cost
from ..errors import IpuError, OutOfMemoryError
from ..parallel.sharded import CollectiveLog

#: The most IPUs the sharded tools emulate (a Bow Pod1024; every shard is emulated).
MAX_IPUS = 1024


class Parser(argparse.ArgumentParser):
    """``argparse`` whose errors are one line (no usage block) and which names an unknown
    option instead of reading its value as the next positional argument."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def parse_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        for tok in args:
            if tok == "--":
                break
            opt = tok.split("=", 1)[0]
            if opt.startswith("-") and not _is_number(opt) and not any(
                    o.startswith(opt) for o in self._option_string_actions):
                known = sorted(o for o in self._option_string_actions if o.startswith("--"))
                self.error(f"unrecognized option {opt} (options: {', '.join(known)})")
        return super().parse_args(args, namespace)


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        try:
            f = float(text)  # 1e9 is a whole number too
        except ValueError:
            f = math.nan
        if not (math.isfinite(f) and f.is_integer()):
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        value = int(f)
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} must be at least {low}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
    return value


def ipu_count(text: str) -> int:
    """An argparse type: 1..MAX_IPUS IPUs."""
    value = positive_int(text)
    if value > MAX_IPUS:
        raise argparse.ArgumentTypeError(
            f"{value:,} IPUs: the tool emulates every shard, up to {MAX_IPUS:,} IPUs (a "
            "Bow Pod1024)")
    return value


def human(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:,.0f} {unit}" if unit == "B" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1024
    return ""


def host_memory() -> int:
    """Bytes of RAM of this machine (a large default where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def check_fits(what: str, target, per_ipu: int = 0, host: int = 0) -> None:
    """Before allocating: OutOfMemoryError if ``per_ipu`` bytes exceed one IPU's memory on
    ``target``, IpuError if ``host`` bytes exceed half this machine's RAM."""
    cap = target.bytes_per_ipu
    if per_ipu > cap:
        raise OutOfMemoryError(
            f"{what} would need {per_ipu:,} B ({human(per_ipu)}) per IPU, but an "
            f"{target.version} IPU has {cap:,} B ({human(cap)}) of tile memory "
            f"({target.tiles_per_ipu:,} tiles x {target.bytes_per_tile:,} B); use smaller "
            "sizes or more IPUs"
        )
    ram = host_memory()
    if host > ram // 2:
        raise IpuError(
            f"{what} would need {host:,} B ({human(host)}) of host memory for its data and "
            f"the NumPy reference, and this machine has {ram:,} B ({human(ram)}); use "
            "smaller sizes"
        )


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ipus", type=ipu_count, default=2, help="IPUs to shard over")
    parser.add_argument("--fp16", action="store_true", help="run in half precision")
    parser.add_argument("--no-checks", action="store_true", help="skip the NumPy reference")


def close(what: str, ours, reference, rtol: float, atol: float) -> bool:
    """``np.allclose``; on a mismatch print the largest absolute error and return False."""
    ours = np.asarray(backend.to_numpy(ours), dtype=np.float64)
    if np.allclose(ours, reference, rtol=rtol, atol=atol):
        return True
    error = np.max(np.abs(ours - reference))
    print(f"{what} does not match the reference: max abs error {error:.3g} "
          f"(rtol {rtol:g}, atol {atol:g})")
    return False


def print_collectives(log: CollectiveLog) -> None:
    """One line per collective: what it moved per IPU and what it cost."""
    target = log.target
    print(f"Collectives over IPU-Links ({log.num_shards} IPUs, {target.version}, "
          f"{target.clock_hz / 1e9:.2f} GHz, global sync {target.global_sync_cycles} cycles, "
          f"ring step {cost.ring_step_cycles(target)} cycles):")
    first = [r for r in log.records if r.ipu == log.ipus[0]]
    for rec in first:
        sent = ", ".join(f"{r.bytes:,}" for r in log.records if r.start == rec.start)
        print(f"  {rec.kind:<15} {rec.label:<20} {rec.duration:>9,} cycles, "
              f"bytes sent per IPU [{sent}]")
    print(f"  total {log.cycles():,} cycles ({target.cycles_to_us(log.cycles()):.2f} us)")


def run(main_body, argv, parser: argparse.ArgumentParser) -> int:
    """Parse, run ``main_body(args)``; an IpuError becomes a one-line message and exit 2."""
    args = parser.parse_args(argv)
    try:
        return main_body(args)
    except IpuError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
